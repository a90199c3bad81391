"""What `xds up` records of a live cluster (the state file), and the names every part of the
live plane agrees on. No Ray here: a client reads it before it joins a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from xdscheduler.errors import UserError
from xdscheduler.live.client import default_state_path, recorded  # noqa: F401  (re-exported)
from xdscheduler.ray_cluster import patient_serve
from xdscheduler.schema import Strict
from xdscheduler.textfile import write_atomic

DOMAIN_LABEL = "xds.domain"
HEAD_LABEL = "xds.role"
NAMESPACE = "xds-live"  # the Ray namespace of the controller and the domain actors
LivePolicy = Literal["planner", "ppo"]  # what decides where a live cluster's jobs run


# psutil gives a process's start as the boot time, which Linux recomputes on every read in whole
# seconds (the clock now less the uptime), plus its start since boot: the same process reads a
# second apart from one call to the next now and then. Within 1 s, `down` once took one of its
# own nodes for a stranger and left it running.
START_TIME_TOLERANCE_S = 2.0


class Started(Strict):
    pid: int
    role: str  # head | node
    domain: str | None = None
    cgroup: str | None = None  # the CPU cgroup it runs in (removed by down)
    started_at: float | None = None  # its start time (psutil's): a reused pid is not it

    @classmethod
    def of(cls, proc, **fields) -> Started:
        import psutil

        return cls(pid=proc.pid, started_at=psutil.Process(proc.pid).create_time(), **fields)

    def ours(self) -> bool:
        """Whether the process is still the one `up` started: its start time where recorded,
        and a Ray command line; never what a reused pid or an edited state file names."""
        import psutil

        try:
            proc = psutil.Process(self.pid)
            same = (
                self.started_at is None
                or abs(proc.create_time() - self.started_at) < START_TIME_TOLERANCE_S
            )
            return same and "ray" in " ".join(proc.cmdline())
        except psutil.Error:
            return False


class ClusterState(Strict):
    """What a client needs to reach the cluster, and what `down` must stop."""

    scenario: str  # the scenario file (absolute path)
    address: str  # the GCS, HOST:PORT
    dashboard: str | None = None  # http://HOST:PORT, for `ray job submit`
    token: str | None = None  # Ray's token of this cluster (None: the environment's)
    attached: bool = False  # True: someone else's cluster; down stops nothing
    temp_dir: str | None = None
    processes: list[Started] = Field(default_factory=list)
    tag: str | None = None
    subnet: str | None = None
    domains: dict[str, str] = Field(default_factory=dict)  # name -> node IP (local clusters)
    storage: str = ""  # where jobs checkpoint and the controller keeps its journal
    profile: str | None = None  # the plain-dp profile jobs are planned with (None: the defaults)
    policy: LivePolicy = "planner"  # what decides where jobs run
    api: str | None = None  # http://HOST:PORT of the policy app and the jobs API
    api_token: str | None = None  # what their requests carry (Authorization: Bearer)
    # a local cluster's domains held to 1/factor of their share of the cores (`xds up --slower`)
    slower: dict[str, float] = Field(default_factory=dict)

    def fabric(self, scn):
        """The network `xds up` built for the scenario `scn` (`live.fabric.Fabric`)."""
        from xdscheduler.live import fabric as fab
        from xdscheduler.network.dynamics import base_matrices

        bw, _, _ = base_matrices(scn)
        return fab.Fabric.plan([d.name for d in scn.domains], bw, self.tag, self.subnet)

    def environment(self) -> dict[str, str]:
        """Variables a Ray client of this cluster needs."""
        # no scheduler events or log dedup notes on a client's standard output (--json); and a
        # cluster of several nodes, whatever a single-machine Ray of this process's parent set
        env = {
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_SCHEDULER_EVENTS": "0",
            "RAY_DEDUP_LOGS": "0",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
            **patient_serve(),
        }
        if self.token:
            env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}
        if self.dashboard:
            # Ray's state API (Ray Train's placement-group cleaner among its users) finds this
            # cluster's dashboard here; without it, it reads Ray's default temp folder, which
            # names another cluster or none (see live.training.trainer_env)
            env["RAY_API_SERVER_ADDRESS"] = self.dashboard
        return env


def save(state: ClusterState, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, state.model_dump_json(indent=2))
    path.chmod(0o600)  # it holds the cluster's token


def load(path: Path) -> ClusterState:
    try:
        return ClusterState.model_validate_json(recorded(path))
    except ValueError as err:
        raise UserError(f"{path} is not a cluster state file: {str(err).splitlines()[0]}") from None
