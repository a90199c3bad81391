"""Shared fixtures: the repository's scenarios, and the shared measurement data when present."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from xdscheduler.ray_cluster import free_port, start_local

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"
# The API token of every app the tests serve; set before Ray starts so that its workers (the
# controllers that call the apps) have it too.
API_TOKEN = os.environ.setdefault("XDS_API_TOKEN", "tests-" + secrets.token_hex(12))
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def shared_data_dir() -> Path | None:
    """The folder of public measurements beside the repository, if this checkout has it."""
    env = os.environ.get("XDS_DATA_DIR")
    for candidate in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data"]:
        if candidate.is_dir():
            return candidate
    return None


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
    """Three domains, fast links between two, a slow one to the third, a light workload."""
    from xdscheduler.scenario import parse_scenario

    doc = {
        "name": "three_domains", "seed": 3,
        "domains": [
            {"name": n, "location": {"city": n}, "nodes": [{"accelerator": a, "count": c}],
             "intra_domain_gbps": 400}
            for n, a, c in (("east", "H100-SXM", 16), ("west", "H100-SXM", 16),
                            ("north", "A100-80GB", 8))],
        "links": [
            {"a": "east", "b": "west", "bandwidth_gbps": 10, "rtt_ms": 20, "price_per_gb": 0.02},
            {"a": "east", "b": "north", "bandwidth_gbps": 2, "rtt_ms": 40, "price_per_gb": 0.05},
            {"a": "west", "b": "north", "bandwidth_gbps": 2, "rtt_ms": 45, "price_per_gb": 0.05},
        ],
        "jobs": [{"name": "big", "model": "llama2-13b", "global_batch": 256, "tokens": 2e9,
                  "gpus": {"min": 32, "max": 256}}],
    }
    if hours_of_jobs:
        doc["workload"] = {"load": 0.8}
    return parse_scenario(doc)


def giant_among_smaller_jobs():
    """48 + 112 A100 over 100 Gbit/s at $0.02/GB; a 70B giant, and a job of less work (8B).
    Alone, the giant's best plan by R is a pipeline that sends 137 GB a step (~$156/h, R's cost
    against its own accelerators' bill); among jobs of less work its WAN bill weighs against a
    typical job's (`study_weights`), and DiLoCo (2.8 GB a step) wins."""
    from xdscheduler import catalog
    from xdscheduler.planner.search import JobSpec
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.scenario import parse_scenario

    view = ClusterView.from_scenario(parse_scenario({
        "name": "a100s", "domains": [
            {"name": n, "location": {"city": n}, "intra_domain_gbps": 400,
             "nodes": [{"accelerator": "A100-80GB", "count": c}]}
            for n, c in (("east", 6), ("west", 14))],
        "links": [{"a": "east", "b": "west", "bandwidth_gbps": 100, "rtt_ms": 100,
                   "price_per_gb": 0.02}]}))
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
