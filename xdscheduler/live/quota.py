"""CPU quotas for a local cluster's domains: each domain's node runs in a cgroup of its own,
limited to its accelerators' share of this machine's cores, so an "accelerator" (a logical CPU
of Ray's) runs at the same speed whether the other domains are busy or idle, as a real
accelerator does, and step times can be predicted. cgroup v2 (`cpu.max`) or v1
(`cpu.cfs_quota_us`), whichever the machine mounts."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def _folder(name: str) -> Path:
    return ROOT / name if _v2() else ROOT / "cpu" / name


def available() -> bool:
    """Whether this machine lets us make CPU cgroups (root, a cpu controller mounted)."""
    parent = ROOT if _v2() else ROOT / "cpu"
    return os.geteuid() == 0 and os.access(parent, os.W_OK) and (
        "cpu" in (ROOT / "cgroup.subtree_control").read_text().split() if _v2()
        else (parent / "cpu.cfs_quota_us").exists())


def create(name: str, cores: float) -> Path:
    """A cgroup `name` limited to `cores` CPUs; its `cgroup.procs` file."""
    folder = _folder(name)
    folder.mkdir(exist_ok=True)
    quota = max(int(cores * PERIOD_US), 1000)
    if _v2():
        (folder / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    else:
        (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (folder / "cpu.cfs_quota_us").write_text(str(quota))
    return folder / "cgroup.procs"


def entering(procs: Path, cmd: list[str]) -> list[str]:
    """`cmd`, run by a shell that first moves itself into the cgroup (its children follow)."""
    return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *cmd]


def remove(name: str) -> None:
    """Remove the cgroup once its processes are gone (a busy one stays; nothing to undo)."""
    with contextlib.suppress(OSError):
        _folder(name).rmdir()
