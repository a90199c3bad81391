"""Shared fixtures: the repository's scenarios, and the shared measurement data when present."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from xdscheduler.ray_cluster import free_port, start_local

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"
# The API token of every app the tests serve; set before Ray starts so that its workers (the
# controllers that call the apps) have it too.
API_TOKEN = os.environ.setdefault("XDS_API_TOKEN", "tests-" + secrets.token_hex(12))
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def pytest_configure(config):
    """Every Ray this test run starts (the shared cluster, `xds serve`, a notebook's Tune) keeps
    its session folders (logs, sockets) in a folder of the run's own, removed at its end: Ray's
    default, /tmp/ray, keeps every session's for good. Made in the run's first process, before
    the xdist workers start, so that they and their subprocesses inherit it; short, as Ray's
    socket paths live under it."""
    if "RAY_TMPDIR" not in os.environ:
        config.own_ray_tmpdir = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="xds-tests-")
    # A run started in the background of a script (`pytest &`) ignores Ctrl-C, and so would
    # every process it starts: the tests that press Ctrl-C on `xds` need it as a terminal
    # sends it to a command in the foreground.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config):
    if own := getattr(config, "own_ray_tmpdir", None):
        shutil.rmtree(own, ignore_errors=True)


def shared_data_dir() -> Path | None:
    """The folder of public measurements beside the repository, if this checkout has it."""
    env = os.environ.get("XDS_DATA_DIR")
    for candidate in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data"]:
        if candidate.is_dir():
            return candidate
    return None


# Test tiers (docs/getting-started.md, "Tests"): each test not marked `slow` is `unit`,
# `integration` or `live`, by what it needs; a slow one is `integration` or `live` where it
# needs Ray, and `slow` alone where it does not. A marker written on a test wins.
TIERS = ("unit", "integration", "live")
LIVE_FIXTURES = {"cluster", "existing_cluster"}  # test_live's: namespaces, labelled Ray nodes
RAY_FIXTURES = {"ray_session", "serve_port"}  # the shared local Ray, Serve on it
# What a test's fixtures do not show: a Ray of its own (`ray start`, `xds serve`, a notebook's
# Tune: the in-process guard below cannot see a subprocess's Ray), or the host's cgroups.
BY_NAME = {
    "test_job_submit.py": "integration",
    "test_notebook.py": "integration",
    "test_serving.py::test_xds_serve_serves_until_stopped": "integration",
    "test_live.py::test_a_cpu_quota_holds_a_process_that_joins_it_to_its_share": "live",
}
# No Ray, but each took over 0.8 CPU-seconds here (a whole study, a backtest, model fitting,
# a training run, the docs build): integration, so that the unit tier stays under a minute.
BY_NAME |= dict.fromkeys(
    [
        "test_billing.py",  # most of it reads one whole study, run once for the module
        "test_calibration.py::test_a_constant_the_runs_say_nothing_of_stays_where_it_was",
        "test_calibration.py::test_fitting_recovers_the_constants_that_made_the_measurements",
        "test_calibration.py::test_the_planner_plans_with_a_profile",
        "test_calibration.py::test_the_shipped_profiles_are_what_calibrate_computes",
        "test_cli.py::test_off_a_terminal_a_study_logs_its_progress_with_the_time",
        "test_compare.py::test_a_saved_comparison_is_written_again_against_another_baseline",
        "test_compute_index.py::test_index_ratios_predict_throughput_ratios_within_10_percent",
        "test_csv_inputs.py::test_a_bad_sibling_is_left_out_of_the_pool_with_a_warning",
        "test_csv_inputs.py::test_any_mutated_csv_is_read_cleanly",
        "test_csv_inputs.py::test_the_pool_goes_on_with_the_good_siblings",
        "test_docs.py::test_the_site_builds_strictly",
        "test_forecast.py::test_forecaster_intervals_cover_on_synthetic_data",
        "test_forecast.py::test_occupancy_blends_the_direct_models_of_shorter_horizons_fitting_each_once",
        "test_forecast.py::test_intervals_widen_on_a_lively_day",
        "test_forecast.py::test_backtest_cli_on_synthetic_csv",
        "test_forecast.py::test_pooled_siblings_are_cut_at_the_test_start",
        "test_forecast.py::test_plot_writes_png",
        "test_forecast.py::test_shifted_phases_diagnostic_reuses_the_model_and_moves_the_windows",
        "test_forecast_service.py::test_pure_forecast_with_known_jobs",
        "test_forecast_service.py::test_served_forecast_fits_the_model_the_controller_fits_in_process",
        "test_forecast_service.py::test_online_model_refits_daily_and_when_time_goes_back",
        "test_hostile_inputs.py::test_any_mutated_scenario_is_checked_cleanly",
        "test_layer_profiles.py::test_layer_timer_times_transformers_own_gpt2_modules",
        "test_layers.py::test_importing_the_pure_layers_loads_none_of_it",
        "test_layers.py::test_no_module_outside_the_engine_writes_engine_or_job_state",
        "test_live.py::test_the_small_gpt_learns_the_corpus",
        "test_live.py::test_the_shipped_local_profile_is_what_calibrate_computes",
        "test_monitor.py::test_the_report_shows_each_policy_graph_and_the_jobs_by_domain",
        "test_parity.py::test_a_faulty_study_reports_what_it_did_before",
        "test_parity.py::test_swings_and_relocations_play_out_as_before",
        "test_phases.py::test_recognition_accuracy_on_held_out_curves",
        "test_recovery.py::test_faulty_run_reports_faults",
        "test_rl.py::test_study_reward_is_the_decisions_advantage_over_the_planners_in_a_rollout",
        "test_rl.py::test_building_the_encoder_leaves_nothing_in_the_temp_folder",
        "test_study_folder.py::test_a_finished_study_is_kept_unless_forced",
        "test_study_folder.py::test_resume_needs_a_journal_and_takes_nothing_else",
        "test_tenancy.py::test_three_tenant_study_reports_every_tenant",
        "test_sharing.py::test_fgd_beats_best_fit_on_the_openb_trace",
        "test_forecast.py::test_helios_occupancy_meets_accuracy",
        "test_forecast.py::test_venus_arrivals_beat_persistence_and_lucid",
        "test_http_api.py",
        "test_hostile_inputs.py::test_a_study_with_a_drain_limit_off_the_sampling_grid_ends",
        "test_hostile_inputs.py::test_every_commands_arguments_are_parsed_cleanly",
        "test_hostile_inputs.py::test_share_bench_refuses_pods_that_ask_for_no_gpus",
        "test_hostile_files.py::test_ctrl_c_on_a_study_is_one_line_and_exit_130",
        "test_hostile_files.py::test_a_readme_is_read_bounded",
        "test_live_control.py::test_a_silent_domain_whose_raylet_answers_is_suspected_not_found_down",
        "test_live_control.py::test_a_domain_whose_raylet_is_gone_is_found_down_within_a_second",
        "test_live_control.py::test_both_shipped_trainings_learn_through_the_plan_api",
        "test_truth.py::test_every_policy_of_a_study_meets_the_same_truth",
    ],
    "integration",
)


def tier(item: pytest.Item) -> str | None:
    """The tier a test belongs to, from the fixtures it uses (directly or through others) and
    where it is."""
    used = set(item.fixturenames)
    named = BY_NAME.get(f"{item.path.name}::{item.originalname}", BY_NAME.get(item.path.name))
    if used & LIVE_FIXTURES or named == "live":
        return "live"
    if used & RAY_FIXTURES or named == "integration":
        return "integration"
    return None if item.get_closest_marker("slow") else "unit"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if not any(item.get_closest_marker(t) for t in TIERS) and (found := tier(item)):
            item.add_marker(found)
        # `-n 2 --dist loadgroup` (pyproject's addopts): the live tests run one after another
        # on one worker, on the cluster they share; each other module on one worker, so that
        # its module-wide fixtures (a whole study, a Ray app) run once
        live = item.get_closest_marker("live") is not None
        item.add_marker(pytest.mark.xdist_group("live" if live else item.path.name))
    # the live tests first: they take longest, and their domains' CPU shares are what they
    # wait on, not the machine, so the other worker runs the rest beside them; of the rest the
    # longest modules first, so that the last to run, when the live worker joins in, are short
    items.sort(key=run_order)


# The modules that took longest beside the live tests (a full run here, slowest first)
LONGEST = (
    "test_serving.py",
    "test_forecast.py",
    "test_notebook.py",
    "test_parity.py",
    "test_job_submit.py",
    "test_study_folder.py",
    "test_hostile_inputs.py",
    "test_monitor.py",
)


def run_order(item: pytest.Item) -> tuple[bool, int]:
    name = item.path.name
    rank = LONGEST.index(name) if name in LONGEST else len(LONGEST)
    return item.get_closest_marker("live") is None, rank


@pytest.fixture(autouse=True)
def unit_tests_start_no_ray(request, monkeypatch):
    """A unit test fails if it starts Ray (`ray.init`, which Serve, Tune and `ray.get` call
    too): it belongs in the integration tier. Under `pytest -m unit` nothing else started Ray,
    so every way in goes through here."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    import ray

    def refuse(*args, **kwargs):
        pytest.fail(
            f"{request.node.nodeid} is a unit test and started Ray: give it the "
            "ray_session fixture (integration tier)",
            pytrace=False,
        )

    monkeypatch.setattr(ray, "init", refuse)
    was = ray.is_initialized()
    yield
    assert was or not ray.is_initialized(), "a unit test left Ray running"


@pytest.fixture
def xds_log(caplog, monkeypatch):
    """caplog for the package's own loggers: once `xds` has run in this process
    (`cli._logging`), they no longer propagate to the root logger, where caplog listens."""
    import logging

    monkeypatch.setattr(logging.getLogger("xdscheduler"), "propagate", True)
    return caplog


@contextlib.contextmanager
def catalog_kept():
    """This process's accelerator catalog as it was, after the block: reading a catalog
    registers its entries, and the tests after it would see them."""
    from xdscheduler import catalog

    tables = (catalog.ACCELERATORS, catalog._ACCELERATOR_KEYS)
    known = [dict(t) for t in tables]
    try:
        yield
    finally:
        for table, was in zip(tables, known, strict=True):
            table.clear()
            table.update(was)


@pytest.fixture
def default_scenario_path() -> Path:
    return SCENARIOS / "five_domains.yaml"


@pytest.fixture
def data_dir() -> Path:
    found = shared_data_dir()
    if found is None:
        pytest.skip("shared measurement data not present (set XDS_DATA_DIR to its folder)")
    return found


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray cluster for every test that needs actors."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        start_local(object_store_memory=256 * 2**20)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def serve_port(ray_session) -> int:
    """Serve's HTTP proxy on a free port of 127.0.0.1, shared by the tests' apps (never 8000:
    a server the user runs there must not take the tests' traffic)."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()


def small_scenario(hours_of_jobs: bool = True):
    """Three domains, fast links between two, a slow one to the third, a light workload
    (scenarios/three_domains.yaml; `hours_of_jobs=False`: its listed job alone)."""
    import yaml

    from xdscheduler.scenario import parse_scenario

    doc = yaml.safe_load((SCENARIOS / "three_domains.yaml").read_text())
    if not hours_of_jobs:
        del doc["workload"]
    return parse_scenario(doc)


def giant_among_smaller_jobs():
    """48 + 112 A100 over 200 Gbit/s at $0.02/GB; a 70B giant, and a job of less work (8B).
    Alone, the giant's best plan by R is a pipeline that sends 137 GB a step (~$149/h, R's cost
    against its own accelerators' bill); among jobs of less work its WAN bill weighs against a
    typical job's (`study_weights`), and DiLoCo (2.8 GB a step) wins."""
    from xdscheduler import catalog
    from xdscheduler.planner.search import JobSpec
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.scenario import parse_scenario

    view = ClusterView.from_scenario(
        parse_scenario(
            {
                "name": "a100s",
                "domains": [
                    {
                        "name": n,
                        "location": {"city": n},
                        "intra_domain_gbps": 400,
                        "nodes": [{"accelerator": "A100-80GB", "count": c}],
                    }
                    for n, c in (("east", 6), ("west", 14))
                ],
                "links": [
                    {
                        "a": "east",
                        "b": "west",
                        "bandwidth_gbps": 200,
                        "rtt_ms": 100,
                        "price_per_gb": 0.02,
                    }
                ],
            }
        )
    )
    giant = JobSpec("giant", catalog.model("llama2-70b"), 1024, 4096, 128, 512, tokens=5e9)
    arch = catalog.model("llama3-8b")
    small = JobSpec("small", arch, 512, arch.seq_len, 8, 8, tokens=1e10)
    return view, giant, small


def with_flags(argv: list[str], change: list[str]) -> list[str]:
    """`argv` with each `--flag value` pair of `change` set: replaced where present, else added."""
    argv = list(argv)
    for flag, value in zip(change[::2], change[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def gloo_ranks(argv_of, ranks: int, env: dict) -> list[str]:
    """`ranks` processes of one gloo group (`argv_of(rank)`: the arguments after Python's), in
    the repository root on loopback: their standard outputs, once every one exited 0."""
    procs = [
        subprocess.Popen(
            [sys.executable, *argv_of(rank)],
            cwd=REPO,
            env={**env, "GLOO_SOCKET_IFNAME": "lo"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(ranks)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * ranks, [err[-2000:] for _, err in outs]
    return [out for out, _ in outs]
