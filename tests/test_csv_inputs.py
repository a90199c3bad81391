"""The CSVs of `xds forecast backtest|plot` and `xds phases` as a hostile tester gives them: each
either reads correctly or is refused in one line on standard error with exit status 2, naming
the file, row and column, within bounded time; never a traceback. Fixed cases from the reports,
then property-based mutations (hypothesis)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_forecast import synthetic
from tests.test_hostile_inputs import check, refused
from xdscheduler.cli import main
from xdscheduler.forecast import phases, series

DAYS_11 = 11 * 144  # rows of a 10-min trace long enough for a backtest (under a second)


def trace(path: Path, rows: int = 60, seed: int = 0) -> Path:
    """A Helios-like occupancy CSV at a 10-min step (by default 60 rows: it loads, and is too
    short for a backtest)."""
    synthetic(days=rows // 144 + 1, seed=seed, step_min=10)[:rows].to_csv(path, index=False)
    return path


def loss_curve(path: Path, loss: np.ndarray) -> Path:
    pd.DataFrame({"step": np.arange(len(loss)) * 10, "loss": loss}).to_csv(path, index=False)
    return path


def put(path: Path, row: int, col: int, value: str) -> Path:
    """`path` with the cell of data row `row` (from 1; 0: the header), column `col` (from 0)
    replaced."""
    lines = path.read_text().splitlines()
    cells = lines[row].split(",")
    cells[col % len(cells)] = value
    lines[row] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    return path


def backtest(path: Path, *more: str) -> list[str]:
    return ["forecast", "backtest", str(path), "--no-pool", *more]


# ------------------------------------------------------------------ the reported cases


@pytest.mark.parametrize("command", ["backtest", "plot"])
def test_a_far_year_is_refused_before_resampling(capsys, tmp_path, command):
    path = put(trace(tmp_path / "s.csv"), 60, 0, "2200-01-01 00:00:00")
    argv = (
        backtest(path)
        if command == "backtest"
        else ["forecast", "plot", str(path), "--out", str(tmp_path / "w.png")]
    )
    started = time.monotonic()
    err = refused(capsys, *argv, says="at most 1,000,000 are read")
    assert "(row 60)" in err and "10-min step" in err
    assert time.monotonic() - started < 120  # a hang, not a speed bound (was 169 s, 12 GB)


@pytest.mark.parametrize(
    "value",
    [
        "1700-01-01 00:00:00",
        "1500-06-01 00:00:00",
        "2300-01-01 00:00:00",
        "yesterday",
        "1588291200",
        "",
    ],
)
def test_a_time_outside_the_years_read_names_its_row(capsys, tmp_path, value):
    path = put(trace(tmp_path / "s.csv"), 5, 0, value)
    err = refused(capsys, *backtest(path), says=f"{path}, row 5, column 'time'")
    assert "a date and time from 1970 to 2200 written like row 1 (2020-05-01 00:00:00)" in err


@pytest.mark.parametrize("written", ["%d/%m/%Y %H:%M", "%m/%d/%Y %H:%M", "%d.%m.%Y %H:%M"])
def test_day_first_and_month_first_dates_read_as_the_times_they_are(tmp_path, written):
    """01/05/2020 is 1 May written day first and 5 January month first: the reading that fits
    the whole column wins (before, day first read month first until day 13, then was refused,
    and a trace that starts on day 1 of a month jumped a month a day)."""
    from xdscheduler.forecast.csvfile import timestamps

    iso = pd.read_csv(trace(tmp_path / "s.csv", rows=3 * 144))  # 1-3 May 2020, every 10 min
    t = pd.to_datetime(iso["time"])
    other = iso.assign(time=t.dt.strftime(written))
    read = timestamps(other, "time", "s.csv")
    assert (read == pd.DatetimeIndex(t)).all()


def test_a_long_column_is_read_day_first_where_only_a_row_the_sample_skips_shows_it():
    """A long column chooses its reading on a sample of rows; a row the sample skipped that
    only the other reading can read (day 13, written day first) still decides it."""
    from xdscheduler.forecast import csvfile
    from xdscheduler.forecast.csvfile import timestamps

    n = 2 * csvfile.SAMPLE_ROWS + 1  # the sample: every second row, so row n - 1 is skipped
    t = pd.Series(pd.Timestamp("2020-05-05") + pd.to_timedelta(4 * np.arange(n), unit="s"))
    t.iloc[n - 2] = pd.Timestamp("2020-05-13")  # a row of index n - 2: odd, not sampled
    text = pd.DataFrame({"time": t.dt.strftime("%d/%m/%Y %H:%M:%S")})
    read = timestamps(text, "time", "s.csv")
    assert read[n - 2] == pd.Timestamp("2020-05-13")
    assert (read == pd.DatetimeIndex(t)).all()


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "1e308", "1e10", "abc", ""])
def test_a_bad_demand_value_names_its_row_and_column(capsys, tmp_path, value):
    path = put(trace(tmp_path / "s.csv"), 7, 1, value)
    err = refused(capsys, *backtest(path), says=f"{path}, row 7, column 'running_gpu_num'")
    assert "a finite number from 0 to 1,000,000,000" in err
    assert (repr(value) if value else "an empty cell") in err


@pytest.mark.parametrize(
    "value, says",
    [
        ("inf", "a finite number above 0"),
        ("0", "a finite number above 0"),
        ("-2.5", "a finite number above 0"),
        ("", "an empty cell"),
    ],
)
def test_a_bad_loss_names_its_row_and_column(capsys, tmp_path, value, says):
    path = put(loss_curve(tmp_path / "l.csv", phases.generate(1, steps=200)[0]), 9, 1, value)
    err = refused(capsys, "phases", str(path), says=f"{path}, row 9, column 'loss'")
    assert says in err


def test_a_bad_sibling_is_left_out_of_the_pool_with_a_warning(capsys, tmp_path):
    good = trace(tmp_path / "vcA.csv", DAYS_11, seed=1)
    put(trace(tmp_path / "vcB.csv", DAYS_11, seed=3), 3, 2, "inf")
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")  # another kind of CSV: left out quietly
    assert main(["forecast", "backtest", str(good), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["pooled_with"] == []
    warned = captured.err.strip().splitlines()
    assert len(warned) == 1 and "Traceback" not in captured.err, captured.err
    assert "not pooled" in warned[0] and "vcB.csv, row 3, column 'pending_gpu_num'" in warned[0]
    # Only the file named on the command line is fatal.
    refused(capsys, *backtest(tmp_path / "vcB.csv"), says="'inf'")


def test_the_pool_goes_on_with_the_good_siblings(capsys, tmp_path):
    good = trace(tmp_path / "vcA.csv", DAYS_11, seed=1)
    trace(tmp_path / "vcC.csv", DAYS_11, seed=2)
    put(trace(tmp_path / "vcB.csv", DAYS_11, seed=3), 3, 0, "2200-01-01 00:00:00")
    assert main(["forecast", "backtest", str(good), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["pooled_with"] == ["vcC"]
    assert "vcB.csv" in captured.err and "at most 1,000,000" in captured.err


def test_siblings_the_model_cannot_train_on_are_named_with_why(capsys, tmp_path):
    """Pooled are the siblings trained on: one of another step, or with at most 3 days before
    the test window, is listed apart with the reason (both were listed as pooled)."""
    good = trace(tmp_path / "vcA.csv", DAYS_11, seed=1)
    trace(tmp_path / "vcC.csv", DAYS_11, seed=2)
    synthetic(days=9, seed=4, step_min=5).to_csv(tmp_path / "vcF.csv", index=False)
    late = synthetic(days=11, seed=5, step_min=10)
    late.assign(time=late.time + pd.Timedelta("7D")).to_csv(tmp_path / "vcL.csv", index=False)
    assert main(["forecast", "backtest", str(good), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pooled_with"] == ["vcC"]
    first = late.time[0] + pd.Timedelta("7D")
    before = (pd.Timestamp(out["test_start"]) - first) / pd.Timedelta("1D")
    assert out["not_pooled"] == {
        "vcF": "a 5-min step, not 10",
        "vcL": f"{before:.1f} days before {out['test_start']}, not over 3",
    }
    assert main(["forecast", "backtest", str(good)]) == 0
    assert "not pooled: vcF (a 5-min step, not 10)" in capsys.readouterr().out


FILES = {
    "empty": (b"", "empty"),
    "header only": (b"step,loss\n", "no data rows"),
    "too few rows": (
        b"step,loss\n" + b"".join(b"%d,%f\n" % (i, 3 - i / 100) for i in range(20)),
        "20 steps",
    ),
    "binary": (b"\x00\x01step,loss\n", "binary"),
    "latin-1": ("step,loss\n1,caf\xe9\n".encode("latin-1"), "not UTF-8"),
    "no loss": (b"step,value\n1,2\n", "needs a 'loss' column"),
    "loss twice": (b"loss,loss\n1,2\n", "appears twice"),
    "ragged": (b"step,loss\n1,2\n3,4,5\n", "row 2: 3 fields where the header has 2"),
    "open quote": (b'step,loss\n1,"2\n', "line 2: not a readable CSV"),
}


@pytest.mark.parametrize("name", list(FILES))
def test_a_loss_file_that_is_not_a_loss_curve_is_one_clean_line(capsys, tmp_path, name):
    data, says = FILES[name]
    path = tmp_path / "l.csv"
    path.write_bytes(data)
    refused(capsys, "phases", str(path), says=says)


@pytest.mark.parametrize("command", [["phases"], ["forecast", "backtest"]])
def test_devices_folders_and_huge_files_are_not_read(capsys, tmp_path, command):
    refused(capsys, *command, "/dev/zero", says="not a regular file")
    refused(capsys, *command, str(tmp_path), says="a folder")
    refused(capsys, *command, str(tmp_path / "none.csv"), says="no such file")
    huge = tmp_path / "huge.csv"
    with huge.open("wb") as f:
        f.truncate(65 << 20)  # sparse: its size is what is checked, before any byte is read
    refused(capsys, *command, str(huge), says="at most 67,108,864 are read")


def test_the_columns_a_trace_needs_are_named(capsys, tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("time,foo\n2020-05-01 00:00:00,1\n")
    err = refused(capsys, *backtest(path), says="needs columns")
    assert "('time', 'active')" in err and "found 'time', 'foo'" in err


def test_a_step_longer_than_a_day_is_refused(capsys, tmp_path):
    path = tmp_path / "s.csv"
    days = pd.date_range("2020-01-01", periods=10, freq="2D")
    pd.DataFrame({"time": days, "active": 1}).to_csv(path, index=False)
    refused(capsys, *backtest(path), says="steps of 1 to 1440 min are read")


# ------------------------------------------------------------------ correct results


def test_unsorted_and_repeated_times_are_sorted_and_averaged(tmp_path):
    tidy = series.load(trace(tmp_path / "tidy.csv"), "occupancy")
    df = pd.read_csv(tmp_path / "tidy.csv")
    shuffled = df.sample(frac=1.0, random_state=0)
    twice = df.iloc[[4]].assign(running_gpu_num=df.running_gpu_num.iloc[4] + 10)
    pd.concat([shuffled, twice]).to_csv(tmp_path / "messy.csv", index=False)
    messy = series.load(tmp_path / "messy.csv", "occupancy")
    assert messy.index.equals(tidy.index)
    assert messy.values[4] == tidy.values[4] + 5  # the two rows of one time averaged
    assert np.delete(messy.values, 4).tolist() == np.delete(tidy.values, 4).tolist()


def test_times_with_an_offset_are_read_as_utc_and_a_mixed_format_is_named(capsys, tmp_path):
    path = trace(tmp_path / "s.csv")
    df = pd.read_csv(path)
    utc = pd.to_datetime(df.time)
    df.assign(time=(utc + pd.Timedelta(hours=2)).dt.strftime("%Y-%m-%dT%H:%M:%S+02:00")).to_csv(
        tmp_path / "tz.csv", index=False
    )
    assert series.load(tmp_path / "tz.csv", "occupancy").index.equals(pd.DatetimeIndex(utc))
    put(path, 4, 0, "2020-05-01")
    refused(
        capsys,
        *backtest(path),
        says="row 4, column 'time': '2020-05-01' is not a date and "
        "time from 1970 to 2200 written like row 1 (2020-05-01 00:00:00)",
    )


@pytest.mark.parametrize(
    "export",
    [
        lambda header, rows: [header.replace(",", ";"), *(r.replace(",", ";") for r in rows)],
        lambda header, rows: [header.upper().replace(",", ", "), *rows],
        lambda header, rows: (
            [" , ".join(w.replace("_", " ").title() for w in header.split(",")), *rows]
        ),
        lambda header, rows: [header, *(r + "," for r in rows)],  # a trailing comma on rows
    ],
    ids=["semicolons", "upper-case header", "spaced title-case header", "row commas"],
)
def test_a_trace_exported_by_another_tool_reads_as_the_original(tmp_path, export):
    tidy = series.load(trace(tmp_path / "tidy.csv"), "occupancy")
    header, *rows = (tmp_path / "tidy.csv").read_text().splitlines()
    (tmp_path / "other.csv").write_text("\n".join(export(header, rows)) + "\n")
    other = series.load(tmp_path / "other.csv", "occupancy")
    assert other.index.equals(tidy.index) and other.values.tolist() == tidy.values.tolist()


def test_header_names_equal_but_for_case_are_refused_as_twice(capsys, tmp_path):
    path = trace(tmp_path / "s.csv")
    header, *rows = path.read_text().splitlines()
    path.write_text("\n".join([header + ",Time", *(r + ",x" for r in rows)]) + "\n")
    refused(capsys, *backtest(path), says="column 'time' appears twice in the header")


def test_unsorted_steps_of_a_loss_curve_are_sorted(capsys, tmp_path):
    loss = phases.generate(2, steps=300)[0]
    sorted_path = loss_curve(tmp_path / "a.csv", loss)
    main(["phases", str(sorted_path), "--json"])
    expected = json.loads(capsys.readouterr().out)
    df = pd.read_csv(sorted_path).sample(frac=1.0, random_state=1)
    df.to_csv(tmp_path / "b.csv", index=False)
    assert main(["phases", str(tmp_path / "b.csv"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected


def _segments(capsys, path: Path) -> list[str]:
    assert main(["phases", str(path), "--json"]) == 0
    return [s["phase"] for s in json.loads(capsys.readouterr().out)["segments"]]


@pytest.mark.parametrize("noise", [0.001, 0.05])
def test_a_flat_loss_is_labelled_flat(capsys, tmp_path, noise):
    rng = np.random.default_rng(3)
    loss = 2.0 * np.exp(rng.normal(0, noise, 3000))
    assert _segments(capsys, loss_curve(tmp_path / "l.csv", loss)) == ["flat: no progress"]
    const = loss_curve(tmp_path / "c.csv", np.full(100, 2.5))
    assert _segments(capsys, const) == ["flat: no progress"]


@pytest.mark.parametrize("noise", [0.001, 0.05])
def test_a_rising_loss_is_labelled_diverging(capsys, tmp_path, noise):
    rng = np.random.default_rng(4)
    loss = np.linspace(2.0, 3.0, 3000) * np.exp(rng.normal(0, noise, 3000))
    assert _segments(capsys, loss_curve(tmp_path / "l.csv", loss)) == ["diverging: loss rising"]


def test_the_trend_is_judged_against_the_curves_own_noise(capsys, tmp_path):
    """The same 2% rise: clear on a quiet curve, lost in the noise of a lively one."""
    rise = np.linspace(2.0, 2.04, 2000)
    for noise, label in ((0.001, "diverging: loss rising"), (0.05, "flat: no progress")):
        loss = rise * np.exp(np.random.default_rng(5).normal(0, noise, 2000))
        assert _segments(capsys, loss_curve(tmp_path / "l.csv", loss)) == [label]
    # and a converging curve still has its three phases
    assert _segments(capsys, loss_curve(tmp_path / "g.csv", phases.generate(5100)[0])) == list(
        phases.PHASES
    )


# ------------------------------------------------------------------ property-based

FIXTURES = HealthCheck.function_scoped_fixture  # capsys and tmp_path are reused on purpose
JUNK = st.one_of(
    st.sampled_from(
        [
            "inf",
            "-inf",
            "nan",
            "-1",
            "0",
            "1e308",
            "1e9",
            "",
            "abc",
            '"',
            "1,2",
            "2200-01-01 00:00:00",
            "1700-01-01 00:00:00",
            "2020-05-01",
            "1e-300",
            "1.5",
        ]
    ),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
        max_size=6,
    ),
)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(
    kind=st.sampled_from(["trace", "loss"]),
    cells=st.lists(st.tuples(st.integers(0, 120), st.integers(0, 2), JUNK), min_size=1, max_size=3),
)
def test_any_mutated_csv_is_read_cleanly(capsys, tmp_path, kind, cells):
    if kind == "trace":
        path, argv = trace(tmp_path / "s.csv"), backtest(tmp_path / "s.csv")
    else:
        path = loss_curve(tmp_path / "l.csv", phases.generate(6, steps=120)[0])
        argv = ["phases", str(path)]
    rows = len(path.read_text().splitlines())
    for row, col, value in cells:
        put(path, row % rows, col, value)
    started = time.monotonic()
    code, err = check(capsys, *argv)
    assert code in (0, 2) and "Traceback" not in err, err
    assert code == 0 or len(err.strip().splitlines()) == 1, err
    assert time.monotonic() - started < 120  # a hang, not a speed bound
