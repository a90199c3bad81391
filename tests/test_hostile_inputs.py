"""Bad input, as a hostile tester gives it: every scenario file and argument either works or is
refused in one line on standard error with exit status 2, within bounded time; never a
traceback. Fixed cases from the reports, then property-based mutations (hypothesis)."""

from __future__ import annotations

import copy
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SCENARIOS
from xdscheduler.cli import main
from xdscheduler.yamlfile import read_yaml

BASE = read_yaml(SCENARIOS / "five_domains.yaml")


def check(capsys, *argv) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as stop:  # argparse
        code = stop.code
    err = capsys.readouterr().err
    return code, err


def refused(capsys, *argv, says: str = "") -> str:
    code, err = check(capsys, *argv)
    assert code == 2, (argv, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert says in err, err
    return err


FILES = {
    "binary": b"\x00\x01\x02name: x\n",
    "utf16": "name: x\n".encode("utf-16"),
    "latin1": "name: caf\xe9\n".encode("latin-1"),
    "deep": ("a: " + "[" * 6000 + "]" * 6000).encode(),
    "aliases": ("base: &b [1]\n" + "".join(f"k{i}: *b\n" for i in range(500))).encode(),
    "duplicate": b"name: a\nname: b\n",
    "huge": b"# " + b"x" * (2 << 20) + b"\n",
    "not yaml": b"name: [unclosed\n",
    "a list": b"- 1\n- 2\n",
}


@pytest.mark.parametrize("name", list(FILES))
def test_a_malformed_scenario_file_is_one_clean_line(capsys, tmp_path, name):
    path = tmp_path / "s.yaml"
    path.write_bytes(FILES[name])
    started = time.monotonic()
    refused(capsys, "scenario", "check", str(path))
    assert time.monotonic() - started < 5


def test_devices_and_folders_are_not_read(capsys, tmp_path):
    refused(capsys, "scenario", "check", "/dev/zero", says="not a regular file")
    refused(capsys, "scenario", "check", str(tmp_path), says="a folder")
    refused(capsys, "scenario", "check", str(tmp_path / "none.yaml"), says="missing")


def mutated(path: list, value) -> dict:
    doc = copy.deepcopy(BASE)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


# (where, value, what the message names)
FIELDS = [
    (["domains", 0, "nodes", 0, "count"], 1e18, "count"),
    (["domains", 0, "nodes", 0, "count"], True, "count"),
    (["domains", 0, "nodes", 0, "count"], 1_000_000, "count"),
    (["domains", 0, "nodes", 0, "gpus_per_node"], 1e9, "gpus_per_node"),
    (["jobs", 0, "tokens"], float("inf"), "tokens"),
    (["jobs", 0, "tokens"], float("nan"), "finite"),
    (["jobs", 0, "arrival_s"], float("inf"), "arrival_s"),
    (["domains", 0, "price_per_gpu_hour"], float("inf"), "price_per_gpu_hour"),
    (["links", 0, "bandwidth_gbps"], float("inf"), "bandwidth_gbps"),
    (["weights", "cost"], float("inf"), "cost"),
    (["seed"], -1, "seed"),
    (["jobs", 5, "architecture", "layers"], 1e18, "layers"),
    (["jobs", 0, "seq_len"], 1e12, "seq_len"),
    (["jobs", 0, "global_batch"], "512", "global_batch"),
    (["name"], 7, "name"),
]


@pytest.mark.parametrize("where, value, names", FIELDS)
def test_an_impossible_value_is_refused_naming_its_field(capsys, tmp_path, where, value, names):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mutated(where, value)))
    refused(capsys, "scenario", "check", str(path), says=names)


def test_a_study_too_large_to_run_is_refused_before_it_is_generated(capsys, tmp_path):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mutated(["domains", 0, "nodes", 0, "count"], 100_000)))
    started = time.monotonic()
    refused(capsys, "scenario", "check", str(path), says="jobs (at most 20,000)")
    refused(capsys, "run", str(path), "--local", "--out",
            str(tmp_path / "out"), says="jobs (at most 20,000)")
    assert time.monotonic() - started < 10


ARGS = [
    (["run", "--hours", "nan"], "--hours"), (["run", "--hours", "inf"], "--hours"),
    (["run", "--hours", "1e9"], "--hours"), (["run", "--faults", "nan"], "--faults"),
    (["run", "--faults", "1e6"], "--faults"), (["run", "--seed", "-1"], "--seed"),
    (["run", "--policies", ",,,"], "polic"), (["plan", "--weights", "nan,0,0"], "--weights"),
    (["plan", "--top", "-1"], "--top"), (["index", "--model", "llama2-7b", "--gpus", "0"],
                                         "--gpus"),
    (["serve", "--port", "70000"], "--port"),
    (["estimate", "--gpu", "H100-SXM", "--model", "llama2-7b", "--gpus", "8",
      "--global-batch", "8", "--seq", "-1"], "--seq"),
    (["run", "--speed", "-3"], "--speed"), (["faults", "bench", "--seed", "x"], "--seed"),
]


@pytest.mark.parametrize("argv, names", ARGS)
def test_a_bad_argument_is_one_line_naming_it(capsys, tmp_path, argv, names):
    refused(capsys, *argv, says=names)


# ------------------------------------------------------------------ property-based

FIXTURES = HealthCheck.function_scoped_fixture  # capsys and tmp_path are reused on purpose
HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(),
                                                         max_size=2))


def paths(node, prefix=()):
    """Every path to a leaf or a container of the document."""
    yield list(prefix)
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, (*prefix, i))


PATHS = [p for p in paths(BASE) if p]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(where=st.sampled_from(PATHS), value=HOSTILE)
def test_any_mutated_scenario_is_checked_cleanly(capsys, tmp_path, where, value):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mutated(where, value)))
    started = time.monotonic()
    code, err = check(capsys, "scenario", "check", str(path))
    assert code in (0, 2) and "Traceback" not in err, err
    assert code == 0 or len(err.strip().splitlines()) == 1, err
    if code == 0:  # accepted: it must plan in bounded time
        code, err = check(capsys, "plan", str(path), "--top", "1")
        assert code in (0, 2) and "Traceback" not in err, err
    assert time.monotonic() - started < 30


FLAG_VALUES = st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e9", "1e308", "",
                                         ",,,", "x", "1", "0.5", "70000"]),
                        st.text(max_size=6))


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(command=st.sampled_from([
    ["run", "--local", "--policies", "planner"], ["plan"], ["index", "--model", "llama2-7b"],
    ["estimate", "--gpu", "H100-SXM", "--model", "llama2-7b", "--global-batch", "8"]]),
    flag=st.sampled_from(["--hours", "--seed", "--faults", "--top", "--gpus", "--seq",
                          "--weights", "--speed", "--tp", "--diloco"]),
    value=FLAG_VALUES)
def test_any_argument_value_is_parsed_cleanly(capsys, tmp_path, command, flag, value):
    argv = [*command, flag, value]
    if command[0] == "run":
        argv += ["--out", str(tmp_path / "o"), "--force"]
        argv += ["--hours", "0.05"] if flag != "--hours" else []
    if command[0] == "estimate" and flag != "--gpus":
        argv += ["--gpus", "8"]
    code, err = check(capsys, *argv)
    assert code in (0, 2) and "Traceback" not in err, (argv, err)
    assert code == 0 or len(err.strip().splitlines()) == 1, (argv, err)
