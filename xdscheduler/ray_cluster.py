"""Joining a Ray cluster: the one at an address, the one a `ray job submit` runs in, or a local
one started here."""

from __future__ import annotations

import os
import signal
import socket
import threading

from xdscheduler.errors import UserError

# Serve's controller kills its HTTP proxy when it is not ready within 5 s, and `serve.start`
# then fails: on a busy machine a worker process alone takes longer to start. A Ray started
# here (and its processes) waits this long instead, unless the environment says otherwise.
PATIENT_SERVE = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60"}


def patient_serve() -> dict[str, str]:
    """`PATIENT_SERVE`, each value as the environment sets it where it does."""
    return {name: os.environ.get(name, value) for name, value in PATIENT_SERVE.items()}


def connect(address: str | None) -> None:
    """Use the Ray cluster at `address`, the one a `ray job submit` runs in, or a local one."""
    import ray

    if address:
        check_address(address)
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    handler = signal.getsignal(signal.SIGTERM)
    if address:
        ray.init(address=address, log_to_driver=False)
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False)
    else:
        start_local()
    _keep_sigterm(handler)


def _keep_sigterm(handler) -> None:
    """`ray.init` puts a handler of its own under SIGTERM (a stack dump, then the process
    dies): where the command made SIGTERM a Ctrl-C (`xds serve`), give that back."""
    if (
        handler is signal.default_int_handler
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGTERM, handler)


def start_local(**options) -> None:
    """Start a Ray of two CPUs for this machine alone: every port it opens (GCS, raylet, workers,
    agents, metrics) listens on 127.0.0.1 only, and Ray's token authentication stays as Ray sets
    it (on by default in 2.60)."""
    import ray
    from ray._private import ray_constants

    # Ray turns a loopback node address into the machine's own unless it runs as a
    # single-machine cluster (its mode on macOS and Windows). Its processes read the switch from
    # the environment; this driver read it when ray was imported, hence the constant too.
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.update(patient_serve())
    try:
        ray.init(
            address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, **options
        )
    except Exception as err:  # Ray raises a bare Exception when its node does not come up
        if "timed out during startup" not in str(err):
            raise
        raise UserError(
            "Ray's local node did not start in time (the machine may be too busy, or "
            f"{os.environ.get('RAY_TMPDIR', '/tmp')} full): try again, or give an "
            "--address of a running cluster where the command takes one"
        ) from None


def starts_local(address: str | None) -> bool:
    """Whether `connect(address)` would start a Ray of its own here."""
    import ray

    return not (address or ray.is_initialized() or os.environ.get("RAY_ADDRESS"))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port of `host` that nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """Refuse an address nothing answers at (UserError): `ray.init` would wait on it without
    end."""
    if address in ("auto", "local"):
        return
    host, _, port = address.split("://")[-1].rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(
            f"Ray address {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379), 'auto' or 'local'"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise UserError(f"no Ray cluster answers at {address}: {err.strerror or err}") from None
