"""Joining a Ray cluster: the one at an address, the one a `ray job submit` runs in, or a local
one started here."""

from __future__ import annotations

import os


def connect(address: str | None) -> None:
    """Use the Ray cluster at `address`, the one a `ray job submit` runs in, or a local one."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        ray.init(address=address, log_to_driver=False)
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
