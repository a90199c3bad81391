"""CPU quotas for a local cluster's domains: the work on a domain's node (its jobs' workers, the
profiler's tasks) runs in a cgroup of its own, limited to its accelerators' share of this
machine's cores, so an "accelerator" (a logical CPU of Ray's) runs at the same speed whether the
other domains are busy or idle, as a real accelerator does, and step times can be predicted.
The node's Ray daemons stay outside it: they would take a share that varies with what the
cluster does (a quarter of a domain's quota during a Ray Train run), as a real accelerator's
host does not; the workers join the group themselves (`join`), named by their node's
environment. cgroup v2 (`cpu.max`) or v1
(`cpu.cfs_quota_us`), whichever the machine mounts.

The quota is enforced every 10 ms: a step of a job is a few times that, so it runs at its share
throughout, not at full speed until the share of a longer period is spent and then not at all
(at 100 ms, steps shorter than the period had a median a quarter of their mean). A domain's
group also weighs 8x a plain process, so it gets its share first when the head and the clients
are busy."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
ENV = "XDS_CGROUP_PROCS"  # set on a domain's node: its group's `cgroup.procs`
PERIOD_US = 10_000
WEIGHT = 8  # against a plain process's 1


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def _folder(name: str) -> Path:
    return ROOT / name if _v2() else ROOT / "cpu" / name


def available() -> bool:
    """Whether this machine lets us make CPU cgroups (root, a cpu controller mounted)."""
    parent = ROOT if _v2() else ROOT / "cpu"
    return (
        os.geteuid() == 0
        and os.access(parent, os.W_OK)
        and (
            "cpu" in (ROOT / "cgroup.subtree_control").read_text().split()
            if _v2()
            else (parent / "cpu.cfs_quota_us").exists()
        )
    )


def create(name: str, cores: float) -> Path:
    """A cgroup `name` limited to `cores` CPUs; its `cgroup.procs` file."""
    folder = _folder(name)
    folder.mkdir(exist_ok=True)
    quota = max(int(cores * PERIOD_US), 1000)
    if _v2():
        (folder / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        (folder / "cpu.weight").write_text(str(100 * WEIGHT))
    else:
        (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (folder / "cpu.cfs_quota_us").write_text(str(quota))
        (folder / "cpu.shares").write_text(str(1024 * WEIGHT))
    return folder / "cgroup.procs"


def cores(name: str) -> float:
    """The CPUs group `name` may use now (a test slows a domain by setting fewer: `create`)."""
    folder = _folder(name)
    if _v2():
        quota, period = (folder / "cpu.max").read_text().split()
        return int(quota) / int(period)
    return int((folder / "cpu.cfs_quota_us").read_text()) / int(
        (folder / "cpu.cfs_period_us").read_text()
    )


def join() -> None:
    """Move this process (every thread of it) into its node's group, where it has one."""
    procs = os.environ.get(ENV)
    if procs:
        Path(procs).write_text(str(os.getpid()))


def remove(name: str) -> None:
    """Remove the cgroup once its processes are gone (a busy one stays; nothing to undo)."""
    with contextlib.suppress(OSError):
        _folder(name).rmdir()
