import json
import re
import subprocess
import sys

import pytest

from xdscheduler.cli import main

from .conftest import SCENARIOS, with_flags


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_catalog_json_lists_required_accelerators_and_models(capsys):
    code, out, _ = run(capsys, "catalog", "--json")
    data = json.loads(out)
    names = {a["name"] for a in data["accelerators"]}
    assert code == 0 and {"H100-SXM", "A100-80GB", "H20", "MI300X", "Ascend-910B"} <= names
    assert {"gpt3-175b", "llama2-70b", "llama3.1-405b"} <= {m["name"] for m in data["models"]}


ESTIMATE = [
    "estimate",
    "--gpu",
    "a100-80gb",
    "--model",
    "gpt3-175b",
    "--seq",
    "2048",
    "--gpus",
    "1024",
    "--tp",
    "8",
    "--pp",
    "16",
    "--global-batch",
    "1536",
    "--micro-batch",
    "1",
    "--recompute",
    "full",
    "--json",
]


def test_estimate_json_contract(capsys):
    code, out, _ = run(capsys, *ESTIMATE)
    data = json.loads(out)
    assert code == 0
    for key in (
        "step_time_s",
        "tokens_per_s_per_gpu",
        "model_tflops_per_gpu",
        "mfu",
        "memory_gib_per_gpu",
        "fits",
        "breakdown_s",
    ):
        assert key in data
    assert data["plan"]["dp"] == 8 and data["fits"] is True
    assert 0.2 < data["mfu"] < 0.7
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"])


def test_estimate_explicit_architecture(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "--gpu",
        "H100-SXM",
        "--layers",
        "32",
        "--hidden",
        "4096",
        "--ffn-hidden",
        "11008",
        "--heads",
        "32",
        "--vocab",
        "32000",
        "--seq",
        "4096",
        "--gpus",
        "8",
        "--global-batch",
        "128",
        "--json",
    )
    assert code == 0 and json.loads(out)["params_b"] == pytest.approx(6.74, rel=0.01)


@pytest.mark.parametrize(
    "change,message",
    [
        (["--tp", "3"], "not divisible by TP×PP×CP"),
        (["--gpus", "960", "--tp", "5", "--pp", "2"], "TP 5 does not divide the 96"),
        (["--pp", "128"], "PP 128 is more stages than the 96 layers"),
        (["--vp", "5"], "VP 5 does not divide the 6 layers of the heaviest"),
        (["--micro-batch", "5"], "does not divide the 192 samples of the busiest"),
        (["--dtype", "fp8"], "no FP8"),
        (["--gpu", "V100"], "V100-SXM2-32GB has no BF16 tensor cores"),
        (["--gpu", "TPU9"], "unknown accelerator"),
    ],
)
def test_estimate_rejects_invalid_plans_with_status_2(capsys, change, message):
    code, out, err = run(capsys, *with_flags(ESTIMATE, change))
    assert code == 2 and out == "" and message in err


def test_estimate_takes_uneven_stages_and_replicas(capsys):
    """Llama 3.1 405B as Megatron runs it (126 layers over PP 16 × VP 4), and a global batch
    that 7 replicas do not divide."""
    code, out, _ = run(
        capsys,
        "estimate",
        "--gpu",
        "H100-SXM",
        "--model",
        "llama3.1-405b",
        "--gpus",
        "1024",
        "--tp",
        "8",
        "--pp",
        "16",
        "--vp",
        "4",
        "--global-batch",
        "512",
        "--micro-batch",
        "1",
        "--json",
    )
    plan = json.loads(out)["plan"]
    assert code == 0 and plan["layers_per_stage"] == {"heaviest": 8, "last": 7}
    code, out, _ = run(capsys, *with_flags(ESTIMATE, ["--gpus", "896", "--global-batch", "1000"]))
    assert code == 0 and json.loads(out)["plan"]["micro_batches"] == 143  # ceil(1000 / 7)


def test_estimate_that_does_not_fit_says_why(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "--gpu",
        "A100-40GB",
        "--model",
        "llama2-70b",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["fits"] is False and "GiB" in data["reason"]


def test_plan_json_contract(capsys, default_scenario_path):
    code, out, _ = run(capsys, "plan", str(default_scenario_path), "--top", "2", "--json")
    data = json.loads(out)
    assert code == 0
    for key in (
        "dp",
        "tp",
        "pp",
        "cp",
        "micro_batch",
        "zero",
        "recompute",
        "stage_to_domain",
        "gpus_per_domain",
    ):
        assert key in data["plan"]
    for key in (
        "predicted_step_time_s",
        "cross_domain_gb_per_step",
        "decision_ms",
        "alternatives",
        "explanation",
    ):
        assert key in data
    assert len(data["alternatives"]) == 2 and data["decision_ms"] > 0  # its speed: bench_planner
    assert data["cost_per_hour"] > 0


def test_plan_within_a_budget(capsys, default_scenario_path):
    code, out, _ = run(capsys, "plan", str(default_scenario_path), "--json")
    budget = json.loads(out)["cost_per_hour"] / 3
    code, out, _ = run(
        capsys, "plan", str(default_scenario_path), "--budget", str(budget), "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["cost_per_hour"] <= budget
    assert all(a["cost_per_hour"] <= budget for a in data["alternatives"])
    code, _, err = run(capsys, "plan", str(default_scenario_path), "--budget", "0.01")
    assert code == 2 and "no plan meets a budget of $0.01/h" in err


def test_plan_rejects_bad_weights_and_jobs(capsys, default_scenario_path):
    code, _, err = run(capsys, "plan", str(default_scenario_path), "--weights", "1,2")
    assert code == 2 and "--weights takes 3" in err
    code, _, err = run(capsys, "plan", str(default_scenario_path), "--job", "nope")
    assert code == 2 and "no job 'nope'" in err


def test_index_json(capsys):
    code, out, _ = run(capsys, "index", "--model", "llama2-13b", "--gpu", "H100,A100", "--json")
    data = json.loads(out)
    assert code == 0 and data["accelerators"]["H100-SXM"]["index"] == pytest.approx(1.0)
    assert 0.25 < data["accelerators"]["A100-80GB"]["index"] < 0.5


def test_run_schema_describes_report_json_with_units_in_the_names(capsys):
    code, out, _ = run(capsys, "run", "--schema")
    schema = json.loads(out)
    fields = schema["$defs"]["PolicyReport"]["properties"]
    assert code == 0 and schema["title"] == "Report"
    assert {"mean_jct_s", "cross_domain_gb", "cross_domain_cost_usd", "objective"} <= set(fields)
    assert "wan_cost_usd" in schema["$defs"]["Relocations"]["properties"]


def test_an_unknown_policy_names_the_known_ones(capsys):
    code, _, err = run(capsys, "run", "--local", "--policies", "planner,fifo")
    assert (
        code == 2
        and "unknown policies fifo (did you mean 'fifo-single-domain'?); known: fifo-single-domain"
        in err
    )


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("xds ")


def command_paths(parser, path=()):
    """Every command and sub-command of `parser`, as the words a user types."""
    import argparse

    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_paths(sub, (*path, name))


def test_every_commands_help_prints(capsys):
    """argparse formats each help text with %: a bare % in one ("95% CIs") made `xds --help`
    end in a traceback."""
    from xdscheduler.cli import build_parser

    paths = list(command_paths(build_parser()))
    assert len(paths) > 20
    for path in paths:
        assert main([*path, "--help"]) == 0, path
        assert capsys.readouterr().out.startswith("usage: xds"), path


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["run", "--local", "--policies", "planer"], "did you mean 'planner'?"),
        (["index", "--model", "lama2-7b"], "did you mean 'llama2-7b'?"),
        (["plan", "--job", "llama2-70b"], "did you mean 'llama2-70b-pretrain'?"),
        (["serve", "--detach"], "--detach leaves the app on a Ray cluster"),
    ],
)
def test_a_typo_gets_a_suggestion_and_a_wrong_combination_a_reason(capsys, tmp_path, argv, hint):
    assert main(argv + (["--out", str(tmp_path / "o")] if argv[0] == "run" else [])) == 2
    err = capsys.readouterr().err
    assert hint in err and len(err.strip().splitlines()) == 1


def test_off_a_terminal_a_study_logs_its_progress_with_the_time(capsys, tmp_path):
    code = main(
        ["run", "--local", "--policies", "planner", "--hours", "2", "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "xdscheduler.runtime.study: planner:" in x]
    assert code == 0 and lines, err
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", lines[0])
    assert "jobs done at" in lines[-1]


def test_live_and_study_commands_are_grouped_and_keep_their_old_names():
    """`xds live jobs` and `xds study run` run what `xds jobs` and `xds run` run (the old names
    stay for one release); `xds live jobs` takes the fast path over HTTP like `xds jobs`."""
    from xdscheduler.cli import GROUPS, build_parser

    parser = build_parser()
    grouped = {
        "study": ["run", "compare", "bill", "tenants", "bench"],
        "live": ["up", "down", "jobs", "submit", "logs", "cancel", "domains", "links", "profile"],
    }
    assert set(GROUPS) == set(grouped)
    for group, names in grouped.items():
        for name in names:
            extra = {
                "bill": ["STUDY", "--tenant", "t"],
                "logs": ["j"],
                "cancel": ["j"],
                "submit": ["j.yaml"],
                "up": ["s.yaml"],
                "links": ["probe"],
                "bench": ["job"],
            }.get(name, [])
            new = parser.parse_args([group, name, *extra])
            old = parser.parse_args([name, *extra])
            assert new.fn is old.fn and new.fn is not None, (group, name)


def test_the_grouped_http_commands_answer_without_the_whole_package(tmp_path):
    """`xds live jobs` goes through the entry point's fast path, as `xds jobs` does: a missing
    state file is said in one line without importing the CLI of the studies."""
    code = (
        "import sys; from xdscheduler.entry import main; rc = main(sys.argv[1:]); "
        "assert 'xdscheduler.cli' not in sys.modules; sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "live", "jobs", "--state", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"xds: error: no cluster recorded at {tmp_path / 'none.json'}: start one with `xds up "
        "SCENARIO` (or set XDS_CLUSTER to its state file)"
    ]


def test_up_waits_for_nodes_only_on_a_cluster_it_attaches_to(capsys, tmp_path):
    state = tmp_path / "state.json"
    scenario = SCENARIOS / "local_three_domains.yaml"
    code, _, err = run(capsys, "up", str(scenario), "--wait", "60", "--state", str(state))
    assert code == 2 and "--wait is for --address" in err
    assert not state.exists()


@pytest.mark.parametrize(
    ("slower", "extra", "message"),
    [
        ("west", (), "--slower takes DOMAIN=FACTOR, a factor from 1 to 100 (e.g. west=2); "),
        ("west=0.5", (), "a factor from 1 to 100"),
        ("west=fast", (), "a factor from 1 to 100"),
        ("mars=2", (), "--slower names mars, not a domain of the scenario (its domains: east, "),
        ("west=2", ("--address", "127.0.0.1:1"), "a cluster attached to (--address) runs at"),
    ],
)
def test_up_slows_only_a_domain_of_a_cluster_it_starts(capsys, tmp_path, slower, extra, message):
    """`xds up --slower DOMAIN=FACTOR`: a factor from 1 to 100, for one of the scenario's
    domains, on a cluster started here; anything else is one line, and nothing starts."""
    state = tmp_path / "state.json"
    scenario = SCENARIOS / "local_three_domains.yaml"
    code, _, err = run(
        capsys, "up", str(scenario), "--slower", slower, *extra, "--state", str(state)
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not state.exists()


def test_a_ctrl_c_outside_the_commands_work_is_one_line_or_its_status(tmp_path):
    """A Ctrl-C that lands while libraries tear down (here: a slow exit hook the command's
    work added, as Ray's shutdown is) ends `xds` at once with the command's own status, with
    no traceback from the hook it cut short; one while Python finalizes after the hooks (here:
    an object whose finalizer sends it) is ignored, where it killed the process by the signal;
    one while the command's modules load is one line and exit 130."""
    cases = {  # the command, its exit status and what it says
        "teardown": (
            "atexit.register(lambda: (os.kill(os.getpid(), 2), time.sleep(60))) and 3",
            3,
            "",
        ),
        "finalizing": ("globals().setdefault('late', Late()) and 3", 3, ""),
        "imports": ("os.kill(os.getpid(), 2)", 130, "xds: interrupted\n"),
    }
    for moment, (command, status, said) in cases.items():
        (tmp_path / f"ctrl_c_{moment}.py").write_text(
            "import atexit, os, time\n"
            "from xdscheduler import entry\n"
            "class Late:\n"
            "    def __del__(self):\n"
            "        os.kill(os.getpid(), 2)\n"
            f"entry.main = lambda argv=None: {command}\n"
            "entry.console()\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", f"ctrl_c_{moment}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert (done.returncode, done.stderr) == (status, said), (moment, done.stderr)


def test_a_ctrl_c_inside_code_made_by_exec_still_exits_130_under_python_m(tmp_path):
    """A Ctrl-C that lands in code run by `exec` of a string (as a dataclass's methods are
    made) leaves CPython's mark of an unhandled interrupt though `xds` handled it; under
    `python -m` the process died of SIGINT (-2) instead of exiting 130."""
    (tmp_path / "interrupted_in_exec.py").write_text(
        "from xdscheduler import entry\n"
        "def interrupted(argv=None):\n"
        "    exec('raise KeyboardInterrupt')\n"
        "entry.main = interrupted\n"
        "entry.console()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "interrupted_in_exec"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (130, "xds: interrupted\n"), done.stderr
