"""A local cluster for the live benchmarks: `xds up` of the local scenario with its own state
file, its commands run as a user runs them (in processes of their own), and `xds down` at the
end whatever happened. An interrupt lets the command under way stop what it started (`xds up`
stops its nodes on one; killed, it would leave them running with no state file)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "local_three_domains.yaml"
PROFILE = REPO / "scenarios" / "profiles" / "local-cpu-plain-dp.yaml"  # the shipped plain-dp fit


def run(cmd: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """`cmd` in the repository root, its output captured; on an interrupt it is asked to stop
    (SIGINT) and waited for, not killed."""
    with subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


class LocalCluster:
    """The cluster recorded in `state_path`, reached with `xds` commands."""

    def __init__(self, state_path: Path):
        self.state_path = state_path
        self.env = {**os.environ, "XDS_CLUSTER": str(state_path)}
        for var in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE"):
            self.env.pop(var, None)  # this cluster's own, from its state file

    def xds(self, *args: str, timeout: float = 600) -> str:
        """`xds ARGS` on this cluster: its standard output; RuntimeError when it fails."""
        done = run([sys.executable, "-m", "xdscheduler", *args], self.env, timeout)
        if done.returncode:
            raise RuntimeError(f"xds {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def state(self) -> dict:
        return json.loads(self.state_path.read_text())

    @classmethod
    @contextlib.contextmanager
    def up(cls, state_path: Path, *options: str) -> Iterator[LocalCluster]:
        """`xds up` of the local scenario (with `options`), recorded at `state_path`; `xds
        down` when the block ends, however it ends."""
        cluster = cls(state_path)
        cluster.xds("up", str(SCENARIO), *options, timeout=900)
        try:
            yield cluster
        finally:
            cluster.xds("down", timeout=300)


def maybe_up(state: Path, start: bool, *options: str) -> contextlib.AbstractContextManager:
    """A local cluster started at `state` for the block (`start`), or the one already
    recorded there."""
    return LocalCluster.up(state, *options) if start else contextlib.nullcontext()
