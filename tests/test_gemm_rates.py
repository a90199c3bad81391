"""benchmarks/gemm_rates.py: measured GEMM rates per precision against a catalog entry."""

import pytest

from benchmarks.gemm_rates import PRECISIONS, main


def test_every_precision_is_measured_against_the_named_entry(capsys):
    assert (
        main(["--device", "cpu", "--sizes", "64", "--seconds", "0.01", "--accelerator", "H100"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("against H100-SXM")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[3:-1]}
    assert set(rows) == {*PRECISIONS, "copy"}
    for name in PRECISIONS:
        if rows[name][2] == "not":  # a precision this CPU's torch lacks
            continue
        measured, rated, share = (float(x.replace(",", "")) for x in rows[name][2:5])
        assert measured > 0 and share == pytest.approx(measured / rated, rel=0.02)
    assert "76.6% of rated" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "cpu", "--sizes", "4k"], "--sizes '4k': give sizes like 4096,8192"),
        (["--device", "cpu", "--seconds", "0"], "--seconds 0: give 0.01 to 60"),
        (["--device", "cpu", "--accelerator", "H1000"], "unknown accelerator 'H1000'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
