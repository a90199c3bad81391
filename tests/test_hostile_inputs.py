"""Bad input, as a hostile tester gives it: every scenario file and argument either works or is
refused in one line on standard error with exit status 2, within bounded time; never a
traceback. Fixed cases from the reports, then property-based mutations (hypothesis)."""

from __future__ import annotations

import copy
import json
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SCENARIOS, catalog_kept
from xdscheduler.cli import main
from xdscheduler.live.profile import RUN_COLUMNS
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
    assert time.monotonic() - started < 120  # a hang, not a speed bound


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
    refused(
        capsys,
        "run",
        str(path),
        "--local",
        "--out",
        str(tmp_path / "out"),
        says="jobs (at most 20,000)",
    )
    assert time.monotonic() - started < 120  # a hang, not a speed bound


ARGS = [
    (["run", "--hours", "nan"], "--hours"),
    (["run", "--hours", "inf"], "--hours"),
    (["run", "--hours", "1e9"], "--hours"),
    (["run", "--faults", "nan"], "--faults"),
    (["run", "--faults", "1e6"], "--faults"),
    (["run", "--seed", "-1"], "--seed"),
    (["run", "--policies", ",,,"], "polic"),
    (["plan", "--weights", "nan,0,0"], "--weights"),
    (["plan", "--top", "-1"], "--top"),
    (["index", "--model", "llama2-7b", "--gpus", "0"], "--gpus"),
    (["serve", "--port", "70000"], "--port"),
    (
        [
            "estimate",
            "--gpu",
            "H100-SXM",
            "--model",
            "llama2-7b",
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq",
            "-1",
        ],
        "--seq",
    ),
    (["run", "--speed", "-3"], "--speed"),
    (["faults", "bench", "--seed", "x"], "--seed"),
]


@pytest.mark.parametrize("argv, names", ARGS)
def test_a_bad_argument_is_one_line_naming_it(capsys, tmp_path, argv, names):
    refused(capsys, *argv, says=names)


# ------------------------------------------------------------------ property-based

FIXTURES = HealthCheck.function_scoped_fixture  # capsys and tmp_path are reused on purpose
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


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
    assert code == 0 or err.strip().splitlines()[-1].startswith("xds: error:"), err
    if code == 0:  # accepted: it must plan in bounded time
        code, err = check(capsys, "plan", str(path), "--top", "1")
        assert code in (0, 2) and "Traceback" not in err, err
    assert time.monotonic() - started < 120  # a hang, not a speed bound


FLAG_VALUES = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "-1", "0", "1e9", "1e308", "", ",,,", "x", "1", "0.5", "70000"]
    ),
    st.text(max_size=6),
)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(
    command=st.sampled_from(
        [
            ["run", "--local", "--policies", "planner"],
            ["plan"],
            ["index", "--model", "llama2-7b"],
            ["estimate", "--gpu", "H100-SXM", "--model", "llama2-7b", "--global-batch", "8"],
        ]
    ),
    flag=st.sampled_from(
        [
            "--hours",
            "--seed",
            "--faults",
            "--top",
            "--gpus",
            "--seq",
            "--weights",
            "--speed",
            "--tp",
            "--diloco",
        ]
    ),
    value=FLAG_VALUES,
)
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


# ------------------------------------------------------------------ the cases of issue 36


def xds(*argv, timeout: float = 120, memory: int = 2 << 30):
    """`xds ARGV` in a process of its own, with a timeout and bounded memory: a case that
    hung or read without bound fails here instead of holding the suite."""
    import os
    import resource
    import subprocess
    import sys

    from tests.conftest import REPO

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    try:
        return subprocess.run(
            [sys.executable, "-m", "xdscheduler.cli", *map(str, argv)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limit,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"xds {' '.join(map(str, argv))} ran past {timeout:g} s")


def test_plan_refuses_weights_that_are_all_zero(capsys):
    refused(capsys, "plan", "--weights", "0,0,0", says="every weight is 0")
    assert check(capsys, "plan", "--weights", "0,0,1", "--top", "0")[0] == 0


@pytest.mark.parametrize("mark", ["\u200f", "\u200b", "\u202e", "\x1b[31m", "\t", "\u2028"])
def test_an_invisible_character_in_a_name_is_refused_not_stripped(capsys, tmp_path, mark):
    refused(
        capsys,
        "estimate",
        "--gpu",
        f"H100{mark}-SXM",
        "--model",
        "llama2-7b",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        says="invisible or control character",
    )
    refused(
        capsys,
        "index",
        "--model",
        "llama2-7b",
        "--gpu",
        f"{mark}H100-SXM",
        says="invisible or control character",
    )
    import yaml

    doc = mutated(["domains", 0, "nodes", 0, "accelerator"], f"H100{mark}-SXM")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    refused(capsys, "scenario", "check", str(tmp_path / "s.yaml"), says="invisible")


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--address", "127.0.0.1:9"),
        ("--serve-url", "http://127.0.0.1:9"),
        ("--policy-path", "trained"),
    ],
)
def test_run_refuses_an_option_it_would_ignore(capsys, tmp_path, flag, value):
    refused(
        capsys,
        "run",
        "--local",
        "--policies",
        "planner",
        "--hours",
        "0.25",
        "--out",
        str(tmp_path / "out"),
        flag,
        value,
        says=flag,
    )
    assert not (tmp_path / "out" / "study.json").exists()


@pytest.mark.parametrize("loads", ["nan", "inf", "0.6,nan", "-inf,1", "1e308", "0"])
def test_compare_refuses_bad_loads_before_any_work(capsys, tmp_path, loads):
    refused(
        capsys, "compare", "--local", "--loads", loads, "--out", str(tmp_path / "c"), says="--loads"
    )
    assert not (tmp_path / "c").exists()


def share_files(tmp_path, pods: str):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,256000,8,V100M32\n" for i in range(4))
    )
    trace = tmp_path / "pods.csv"
    trace.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + pods)
    return [
        "share",
        "bench",
        "--nodes",
        nodes,
        "--trace",
        trace,
        "--seeds",
        "1",
        "--workers",
        "1",
        "--until",
        "1.0",
        "--packers",
        "random,best-fit",
        "--out",
        tmp_path / "share",
    ]


def test_share_bench_refuses_pods_that_ask_for_no_gpus(tmp_path):
    done = xds(*share_files(tmp_path, "".join(f"p{i},1000,1000,0,0\n" for i in range(20))))
    assert done.returncode == 2 and "asks for 0 GPUs" in done.stderr, done.stderr[-2000:]


# rows that make no sense, each from a valid row of the shipped file: (change, column named)
NONSENSE = [
    ({"value": "nan"}, "value"),
    ({"value": "inf"}, "value"),
    ({"value": "0"}, "value"),
    ({"value": "-5"}, "value"),
    ({"gpu_count": "0"}, "gpu_count"),
    ({"global_batch": "1.5"}, "global_batch"),
    ({"micro_batch": "1e9"}, "micro_batch"),
    ({"micro_batch": "4096"}, "micro_batch"),
    ({"kv_heads": "7"}, "kv_heads"),
    ({"heads": "0"}, "heads"),
    ({"tp": "0"}, "tp"),
    ({"seq": "inf"}, "seq"),
    ({"layers": "-2"}, "layers"),
]


def runs_csv(path, change: dict | None = None, rows: int = 6) -> None:
    import csv

    from tests.conftest import REPO

    with open(REPO / "benchmarks" / "published_runs.csv", newline="") as f:
        published = list(csv.DictReader(f))
    good = [r for r in published if "nemo" in r["source"].lower() and r["layers"]][:rows]
    if change is not None:
        good.append({**good[0], **change})
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, list(published[0]))
        out.writeheader()
        out.writerows(good)


@pytest.mark.parametrize("change, column", NONSENSE)
def test_calibrate_refuses_a_row_that_makes_no_sense(capsys, tmp_path, change, column):
    runs_csv(tmp_path / "runs.csv", change)
    refused(
        capsys,
        "calibrate",
        str(tmp_path / "runs.csv"),
        "--stack",
        "megatron-core",
        "--out",
        str(tmp_path / "p.yaml"),
        says=column,
    )
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.slow
def test_the_documented_maximum_fault_scale_runs_to_a_report(capsys, tmp_path):
    out = tmp_path / "out"
    code, err = check(
        capsys,
        "run",
        "--local",
        "--policies",
        "planner",
        "--hours",
        "3",
        "--seed",
        "7",
        "--faults",
        "1000",
        "--out",
        str(out),
    )
    assert code == 0, err[-2000:]
    assert json.loads((out / "report.json").read_text())["faults"]["rates"] == "published × 1000"


def test_a_study_with_a_drain_limit_off_the_sampling_grid_ends(tmp_path):
    done = xds(
        "run", "--local", "--policies", "planner", "--hours", "0.2", "--out", tmp_path / "out"
    )
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------ every command, fuzzed


def command_lines(tmp_path) -> dict[str, tuple[list, list[str]]]:
    """Every command, with arguments that bound its work whatever value a flag is given (a
    short study, one seed, an input that is missing where valid values would start a cluster
    or a training), and the flags fuzzed."""
    runs_csv(tmp_path / "runs.csv")
    (tmp_path / "series.csv").write_text(
        "time,active\n"
        + "".join(
            f"2020-01-{1 + i // 144:02d} {(i % 144) // 6:02d}:{(i % 6) * 10:02d}:00,{40 + i % 9}\n"
            for i in range(144 * 3)
        )
    )
    share = share_files(tmp_path, "".join(f"p{i},1000,1000,1,500\n" for i in range(30)))
    none = str(tmp_path / "none.yaml")
    return {
        "run": (
            [
                "run",
                "--local",
                "--policies",
                "planner",
                "--hours",
                "0.05",
                "--out",
                tmp_path / "o",
                "--force",
            ],
            ["--hours", "--seed", "--faults", "--dashboard", "--speed", "--policies"],
        ),
        "plan": (
            ["plan"],
            ["--top", "--diloco", "--budget", "--min-throughput", "--weights", "--job"],
        ),
        "estimate": (
            [
                "estimate",
                "--gpu",
                "H100-SXM",
                "--model",
                "llama2-7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
            ],
            [
                "--gpus",
                "--tp",
                "--pp",
                "--cp",
                "--vp",
                "--micro-batch",
                "--seq",
                "--gpu",
                "--model",
            ],
        ),
        "index": (["index", "--model", "llama2-7b"], ["--gpus", "--gpu", "--reference"]),
        "compare": (
            [
                "compare",
                SCENARIOS / "five_domains.yaml",
                "--local",
                "--policies",
                "planner,planner-single-domain",
                "--seeds",
                "1",
                "--loads",
                "0.5",
                "--hours",
                "0.05",
                "--out",
                tmp_path / "c",
            ],
            ["--hours", "--seeds", "--loads", "--baseline", "--arrivals"],
        ),
        "faults": (["faults", "bench", "--n", "20"], ["--seed", "--loss"]),
        "share": (share, ["--seeds", "--until", "--workers", "--packers"]),
        "calibrate": (
            [
                "calibrate",
                tmp_path / "runs.csv",
                "--stack",
                "megatron-core",
                "--out",
                tmp_path / "p.yaml",
                "--force",
            ],
            ["--hold-out", "--stack"],
        ),
        "forecast": (
            ["forecast", "backtest", tmp_path / "series.csv"],
            ["--horizon", "--seed", "--target"],
        ),
        "train": (
            ["train", "--config", none, "--out", tmp_path / "train"],
            ["--samples", "--iterations", "--states"],
        ),
        "serve": (["serve", none], ["--port", "--policy-path"]),
        "up": (
            ["up", none, "--state", tmp_path / "state.json"],
            ["--http-port", "--policy", "--wait"],
        ),
        "links": (["links", "probe", "--state", tmp_path / "none.json"], ["--seconds"]),
        "bill": (["bill", tmp_path / "nostudy", "--tenant", "x"], ["--from", "--to", "--csv"]),
        "scenario": (
            [
                "scenario",
                "from-measurements",
                "--regions",
                "aws:us-east-1",
                "--out",
                tmp_path / "s.yaml",
                "--data",
                tmp_path / "nodata",
            ],
            ["--nodes", "--accelerator", "--regions"],
        ),
    }


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(
    command=st.sampled_from(
        [
            "run",
            "plan",
            "estimate",
            "index",
            "compare",
            "faults",
            "share",
            "calibrate",
            "forecast",
            "train",
            "serve",
            "up",
            "links",
            "bill",
            "scenario",
        ]
    ),
    which=st.integers(0, 10),
    value=FLAG_VALUES,
)
def test_every_commands_arguments_are_parsed_cleanly(capsys, tmp_path, command, which, value):
    base, flags = command_lines(tmp_path)[command]
    flag = flags[which % len(flags)]
    argv = [str(w) for w in base]
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    code, err = check(capsys, *argv)
    assert code in (0, 2) and "Traceback" not in err, (argv, err)
    assert code == 0 or err.strip().splitlines()[-1].startswith("xds: error:"), (argv, err)


CELL = st.one_of(
    st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "-1",
            "0",
            "1.5",
            "1e9",
            "1e308",
            "",
            "x",
            "7",
            "3",
            "%",
            "1,2",
            '"',
            "\u200f",
        ]
    ),
    st.text(max_size=8),
)


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(
    column=st.sampled_from(RUN_COLUMNS),
    cell=CELL,
)
def test_any_runs_csv_is_calibrated_or_refused_cleanly(capsys, tmp_path, column, cell):
    """A runs CSV with one cell of one row changed: a profile of finite constants, or one line
    naming the row; never a profile fitted on a row that makes no sense."""
    import yaml

    runs_csv(tmp_path / "runs.csv", {column: cell})
    out = tmp_path / "p.yaml"
    code, err = check(
        capsys,
        "calibrate",
        str(tmp_path / "runs.csv"),
        "--stack",
        "megatron-core",
        "--out",
        str(out),
        "--force",
    )
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 0:
        constants = yaml.safe_load(out.read_text())["constants"]
        assert all(math.isfinite(v) for v in constants.values())
    else:
        assert err.strip().splitlines()[-1].startswith("xds: error:"), err


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(
    column=st.sampled_from(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"]),
    row=st.integers(0, 29),
    cell=CELL,
)
def test_any_pod_list_is_benched_or_refused_cleanly(capsys, tmp_path, column, row, cell):
    rows = [
        dict(name=f"p{i}", cpu_milli=1000, memory_mib=1000, num_gpu=1, gpu_milli=500)
        for i in range(30)
    ]
    rows[row][column] = cell
    import csv
    import io

    text = io.StringIO()
    out = csv.DictWriter(text, list(rows[0]))
    out.writerows(rows)
    code, err = check(capsys, *map(str, share_files(tmp_path, text.getvalue())))
    assert code in (0, 2) and "Traceback" not in err, err
    assert code == 0 or err.strip().splitlines()[-1].startswith("xds: error:"), err


YAML_INPUTS = {  # command line reading the file, and a valid document of it
    "job": (
        ["submit", "{file}", "--state", "{tmp}/none.json"],
        {
            "name": "gpt-small",
            "model": {"layers": 2, "hidden": 128, "heads": 4, "vocab": 512, "seq": 64},
            "global_batch": 16,
            "steps": 60,
            "workers": {"min": 1, "max": 2},
            "checkpoint_every": 10,
        },
    ),
    "catalog": (
        ["catalog", "--accelerators", "{file}"],
        {
            "accelerators": [
                {
                    "name": "X1",
                    "vendor": "x",
                    "bf16_tflops": 100,
                    "memory_gib": 80,
                    "memory_gbs": 2000,
                    "scaleup_gbs": 400,
                    "scaleout_gbps": 200,
                    "gpus_per_node": 8,
                    "power_w": 700,
                    "source": "test",
                }
            ]
        },
    ),
    "training config": (
        [
            "train",
            "--config",
            "{file}",
            "--samples",
            "1",
            "--iterations",
            "1",
            "--address",
            "127.0.0.1:9",
            "--out",
            "{tmp}/train",
        ],
        {"iterations": 1, "seed": 0, "env": {"scenario": "random"}},
    ),
}


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[FIXTURES])
@given(kind=st.sampled_from(list(YAML_INPUTS)), which=st.integers(0, 50), value=HOSTILE)
def test_any_mutated_yaml_input_is_read_cleanly(capsys, tmp_path, kind, which, value):
    """Job files, accelerator catalogs and training configs with one node changed: used, or
    refused in one line (a training config is refused at the Ray address it would start on)."""
    import yaml

    argv, doc = YAML_INPUTS[kind]
    doc = copy.deepcopy(doc)
    where = [p for p in paths(doc) if p]
    node, path = doc, where[which % len(where)]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (tmp_path / "in.yaml").write_text(yaml.safe_dump(doc))
    with catalog_kept():  # per example: hypothesis runs them all in one test
        code, err = check(
            capsys, *[w.format(file=tmp_path / "in.yaml", tmp=tmp_path) for w in argv]
        )
    assert code in (0, 2) and "Traceback" not in err, err
    assert code == 0 or err.strip().splitlines()[-1].startswith("xds: error:"), err
