"""`xds run` submitted as a Ray job to a cluster started with `ray start --head`."""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.test_ray_cluster import beyond_loopback
from xdscheduler.ray_cluster import free_port


@pytest.fixture
def head(tmp_path):
    """A head node of our own, in its own process group so that we stop exactly it."""
    gcs, dash, agent, agent_grpc, runtime_env = (free_port() for _ in range(5))
    # A temp folder of its own: `ray start` leaves a pointer to the cluster it started
    # (ray_current_cluster) in TMPDIR/ray, where a later `serve run` would follow it to a
    # cluster long gone. (Short: Ray's socket paths live under it.)
    own_tmp = tempfile.mkdtemp(prefix="xds-ray-")
    pointer = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    # The recipe of docs/operations.md: token authentication with a token of this cluster's own
    # (in the environment, not the user's ~/.ray), every port on 127.0.0.1.
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TMPDIR": own_tmp,
        "RAY_TMPDIR": own_tmp,  # over the test run's own (conftest)
    }
    ray_bin = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--port={gcs}",
            "--num-cpus=2",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash}",
            # Ports of our own: another local cluster (the test session's, with Serve) may hold
            # the default agent ports, and then no job agent would ever start here.
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}",
            "--disable-usage-stats",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{dash}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ok = (
            subprocess.run(
                [str(ray_bin), "job", "list", "--address", address], env=env, capture_output=True
            ).returncode
            == 0
        )
        if ok:
            break
        time.sleep(1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the Ray head did not come up within 60 s")
    yield address, env, ray_bin, proc.pid
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    shutil.rmtree(own_tmp, ignore_errors=True)
    # (another test's cluster may rewrite the pointer meanwhile: only ours must not be there)
    left = pointer.read_text() if pointer.exists() else ""
    assert not left.endswith(f":{gcs}"), "the shared ray_current_cluster pointer names our head"


@pytest.mark.slow
def test_xds_run_through_ray_job_submit(head, tmp_path):
    address, env, ray_bin, head_pid = head
    assert not beyond_loopback(head_pid), "the head listens beyond 127.0.0.1"
    for token in ("0" * 64, ""):  # a wrong token, and none
        refused = subprocess.run(
            [str(ray_bin), "job", "list", "--address", address],
            env={**env, "RAY_AUTH_TOKEN": token},
            capture_output=True,
            text=True,
        )
        assert refused.returncode != 0, f"the job API answered a client with token {token!r}"
        assert "token" in (refused.stdout + refused.stderr).lower(), refused.stderr[-500:]
    out = tmp_path / "study"
    for _ in range(6):  # the head's job agent may still be starting on a busy machine
        run = subprocess.run(
            [
                str(ray_bin),
                "job",
                "submit",
                "--address",
                address,
                "--",
                "xds",
                "run",
                "--hours",
                "1",
                "--policies",
                "fifo-single-domain,planner",
                "--out",
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if "No available agent" not in run.stderr + run.stdout:
            break
        time.sleep(5)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["runtime"] == "ray"
    assert set(report["policies"]) == {"fifo-single-domain", "planner"}
