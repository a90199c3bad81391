"""Measure the WAN of a live cluster: for every link, in each direction, a Ray task on a node of
one domain sends to an actor on a node of the other for a few seconds over TCP between the
nodes' addresses, the path a job's gloo or NCCL traffic takes."""

from __future__ import annotations

import socket
import time

import ray

from xdscheduler.live.state import DOMAIN_LABEL
from xdscheduler.network.dynamics import base_matrices
from xdscheduler.scenario import Scenario

CHUNK = 1 << 18


@ray.remote(num_cpus=0)
class Receiver:
    """Listens on its node's address; counts what one sender sends."""

    def listen(self) -> tuple[str, int]:
        self.sock = socket.socket()
        self.sock.bind((ray.util.get_node_ip_address(), 0))
        self.sock.listen(1)
        return self.sock.getsockname()

    def receive(self) -> tuple[int, float]:
        """Bytes received and the seconds between the first and the last of them."""
        conn, _ = self.sock.accept()
        n, first, last = 0, None, 0.0
        with conn:
            while chunk := conn.recv(CHUNK):
                last = time.perf_counter()
                first = first or last
                n += len(chunk)
        self.sock.close()
        return n, (last - first) if first else 0.0


@ray.remote(num_cpus=0)
def send(address: tuple[str, int], seconds: float) -> int:
    buf, sent = b"\0" * CHUNK, 0
    host, port = address
    with socket.create_connection((host, port), timeout=30) as s:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            s.sendall(buf)
            sent += len(buf)
    return sent


def measure(src: str, dst: str, seconds: float) -> float:
    """Gbit/s from domain `src` to domain `dst`."""
    at = {n: {"label_selector": {DOMAIN_LABEL: n}} for n in (src, dst)}
    rx = Receiver.options(**at[dst]).remote()  # type: ignore[attr-defined]  # a Ray actor class
    address = ray.get(rx.listen.remote(), timeout=120)
    got = rx.receive.remote()
    ray.get(send.options(**at[src]).remote(address, seconds), timeout=120 + seconds)
    n, span = ray.get(got, timeout=60)
    ray.kill(rx)
    return n * 8 / span / 1e9 if span > 0 else 0.0


def probe_links(scn: Scenario, seconds: float = 2.0, say=None) -> list[dict]:
    """One record per link and direction: configured and measured Gbit/s; `say(line)` hears
    each as it is measured."""
    bw, _, _ = base_matrices(scn)
    names = [d.name for d in scn.domains]
    pairs = [(link, a, b) for link in scn.links for a, b in ((link.a, link.b), (link.b, link.a))]
    rows = []
    for k, (link, a, b) in enumerate(pairs, 1):
        configured = float(bw[names.index(a), names.index(b)])
        rows.append(
            {
                "link": f"{link.a}-{link.b}",
                "src": a,
                "dst": b,
                "configured_gbps": configured,
                "measured_gbps": round(measure(a, b, seconds), 4),
            }
        )
        if say:
            say(
                f"[{k}/{len(pairs)}] {a} -> {b}: {rows[-1]['measured_gbps']:.3f} of "
                f"{configured:.3f} Gbit/s"
            )
    return rows
