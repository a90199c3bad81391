"""The WAN of a local cluster: one network namespace per domain, joined by a bridge, with every
link between two domains shaped by a token bucket to the scenario's bandwidth, per direction.

Each domain's namespace has one interface (`eth0`) on a private /24 shared with the bridge in
the host's namespace, where the Ray head lives. Traffic from domain i to domain j leaves i's
`eth0` through an HTB class of the link's rate (i -> j); traffic to the head is not shaped (the
control plane is not the WAN). `netem` is not needed: RTTs are not emulated, bandwidth is.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from xdscheduler.errors import UserError

# A link's bandwidth is what a job's bytes get (goodput); the bucket counts frames on the wire.
# A full TCP segment carries 1448 bytes (MTU 1500 less IP, TCP and timestamp headers) in a
# 1514-byte Ethernet frame, so the bucket runs that much faster than the link.
WIRE_PER_PAYLOAD = 1514 / 1448
UNSHAPED_MBIT = 100_000  # the head's control traffic: as fast as the machine moves it
# HTB's default quantum (rate / r2q) is too large for fast classes; a fixed quantum of a few
# MTUs keeps the classes fair without the kernel's warning.
QUANTUM_BYTES = 60_000
LINK_CLASS_BASE = 100  # the HTB class of link i -> j is 1:(LINK_CLASS_BASE + j)
NETNS_DIR = "/run/netns"  # where `ip netns add` mounts each namespace
# A fabric none of whose namespaces holds a process is a leftover once it is this old: one being
# built holds its processes within seconds (a cluster's nodes start right after its fabric).
STALE_AFTER_S = 300.0
_OURS = re.compile(r"xds([0-9a-f]{4})-")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fabric:
    """The names and addresses of one local WAN; `tag` (4 hex digits) is in every name, so
    several fabrics (a user's and a test's) live side by side."""

    tag: str
    subnet: str  # the first three octets, e.g. "10.203.7"
    domains: tuple[str, ...]
    rates_mbit: tuple[tuple[float, ...], ...]  # [i][j]: i -> j; 0 on the diagonal

    @classmethod
    def plan(cls, names: list[str], bandwidth_gbps: np.ndarray, tag: str, subnet: str) -> Fabric:
        """The fabric of domains `names` with `bandwidth_gbps[i, j]` from i to j; every pair
        must have a link (a pair without one would be a partition, which no cluster is)."""
        k = len(names)
        if k > 200:
            raise UserError(f"{k} domains; a local cluster has at most 200 (one /24)")
        for i in range(k):
            for j in range(i + 1, k):
                if bandwidth_gbps[i, j] <= 0 or bandwidth_gbps[j, i] <= 0:
                    raise UserError(
                        f"no link between {names[i]!r} and {names[j]!r}: a local "
                        "cluster shapes every pair of domains; add one to links:"
                    )
        rates = tuple(
            tuple(
                float(bandwidth_gbps[i, j]) * 1000 * WIRE_PER_PAYLOAD if i != j else 0.0
                for j in range(k)
            )
            for i in range(k)
        )
        return cls(tag, subnet, tuple(names), rates)

    @property
    def bridge(self) -> str:
        return f"xdsbr{self.tag}"

    @property
    def head_ip(self) -> str:
        return f"{self.subnet}.1"

    def ip(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def namespace(self, i: int) -> str:
        return f"xds{self.tag}-{self.domains[i]}"

    def host_end(self, i: int) -> str:
        return f"xdsv{self.tag}{i}"  # at most 15 characters (Linux's limit)

    def up_commands(self) -> list[list[str]]:
        """`ip` and `tc` commands that build the fabric, in order."""
        cmds = [
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.head_ip}/24", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ]
        for i in range(len(self.domains)):
            ns, host = self.namespace(i), self.host_end(i)
            cmds += [
                ["ip", "netns", "add", ns],
                ["ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns],
                ["ip", "link", "set", host, "master", self.bridge, "up"],
                ["ip", "-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0"],
                ["ip", "-n", ns, "link", "set", "eth0", "up"],
                ["ip", "-n", ns, "link", "set", "lo", "up"],
                *self.shaping_commands(i),
            ]
        return cmds

    def shaping_commands(self, i: int) -> list[list[str]]:
        """HTB on domain i's way out: one class per link i -> j, unshaped to the head."""
        tc = self._tc(i)
        cmds = [
            [*tc, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"],
            [
                *tc,
                "class",
                "add",
                "dev",
                "eth0",
                "parent",
                "1:",
                "classid",
                "1:1",
                "htb",
                "rate",
                f"{UNSHAPED_MBIT}mbit",
                "quantum",
                str(QUANTUM_BYTES),
            ],
        ]
        for j, rate in enumerate(self.rates_mbit[i]):
            if j == i:
                continue
            cmds += [
                self._link_class("add", i, j, rate),
                [
                    *tc,
                    "filter",
                    "add",
                    "dev",
                    "eth0",
                    "parent",
                    "1:",
                    "protocol",
                    "ip",
                    "prio",
                    "1",
                    "u32",
                    "match",
                    "ip",
                    "dst",
                    f"{self.ip(j)}/32",
                    "flowid",
                    f"1:{LINK_CLASS_BASE + j}",
                ],
            ]
        return cmds

    def rate_command(self, src: str, dst: str, gbps: float) -> list[str]:
        """The command that reshapes the link from `src` to `dst` to `gbps` of goodput, as the
        WAN's bandwidth swings (the flows on it keep going, at the new rate)."""
        for name in (src, dst):
            if name not in self.domains:
                raise UserError(
                    f"no domain {name!r} in this cluster; its domains: {', '.join(self.domains)}"
                )
        if src == dst:
            raise UserError(f"{src} -> {dst}: a link joins two different domains")
        if not 0.0001 <= gbps <= 100:
            raise UserError(f"{gbps:g} Gbit/s: give 0.0001 to 100")
        return self._link_class(
            "change",
            self.domains.index(src),
            self.domains.index(dst),
            gbps * 1000 * WIRE_PER_PAYLOAD,
        )

    def _tc(self, i: int) -> list[str]:
        """`tc` in domain i's namespace."""
        return ["ip", "netns", "exec", self.namespace(i), "tc"]

    def _link_class(self, verb: str, i: int, j: int, rate_mbit: float) -> list[str]:
        return [
            *self._tc(i),
            "class",
            verb,
            "dev",
            "eth0",
            "parent",
            "1:",
            "classid",
            f"1:{LINK_CLASS_BASE + j}",
            "htb",
            "rate",
            f"{rate_mbit:.3f}mbit",
            "ceil",
            f"{rate_mbit:.3f}mbit",
            "quantum",
            str(QUANTUM_BYTES),
        ]

    def down_commands(self) -> list[list[str]]:
        """Commands that remove what `up_commands` built (a namespace takes its veth along)."""
        return [
            *(["ip", "netns", "del", self.namespace(i)] for i in range(len(self.domains))),
            ["ip", "link", "del", self.bridge],
        ]


def new_tag() -> tuple[str, str]:
    """A fresh fabric's tag (4 hex digits) and the private /24 it draws from it (first three
    octets), so fabrics side by side rarely share one."""
    tag = secrets.token_hex(2)
    return tag, f"10.{200 + int(tag[0], 16) % 50}.{int(tag[1:], 16) % 250}"


def build(fabric: Fabric) -> None:
    """Create the fabric, first removing those of dead clusters (`sweep_stale`); on any
    failure remove what was made and say which command failed."""
    check_tools()
    sweep_stale()
    for cmd in fabric.up_commands():
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            teardown(fabric)
            raise UserError(
                f"could not build the local WAN: `{' '.join(cmd)}` said "
                f"{done.stderr.strip() or done.returncode}"
            )


def teardown(fabric: Fabric) -> list[str]:
    """Remove the fabric, as much of it as exists; the commands that found nothing to remove."""
    missing = []
    for cmd in fabric.down_commands():
        if subprocess.run(cmd, capture_output=True).returncode:
            missing.append(" ".join(cmd))
    return missing


def sweep_stale(min_age_s: float = STALE_AFTER_S, only: set[str] | None = None) -> list[str]:
    """Remove the fabrics of clusters that died without `xds down` (a killed test, a lost
    machine): every namespace of the fabric older than `min_age_s` and empty of processes.
    Their bridges and subnets would otherwise stay, and a later cluster could draw the same
    subnet. `only`: these tags alone. The tags of the fabrics removed."""
    spaces: dict[str, list[str]] = defaultdict(list)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.strip() else ""
        if (m := _OURS.match(name)) and (only is None or m.group(1) in only):
            spaces[m.group(1)].append(name)
    swept = [
        tag for tag, names in sorted(spaces.items()) if all(_stale(n, min_age_s) for n in names)
    ]
    for tag in swept:
        for ns in spaces[tag]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"xdsbr{tag}"], capture_output=True)
        log.info("removed the leftover local WAN %s (%s)", tag, ", ".join(spaces[tag]))
    return swept


def _stale(ns: str, min_age_s: float) -> bool:
    """Older than `min_age_s` and without a process."""
    try:
        age = time.time() - os.stat(os.path.join(NETNS_DIR, ns)).st_mtime
    except OSError:
        return False
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return age >= min_age_s and pids.returncode == 0 and not pids.stdout.strip()


def check_tools() -> None:
    """Namespaces, veth pairs and tc need root, iproute2 and nsenter: say so plainly when
    absent."""
    import os

    if os.geteuid() != 0:
        raise UserError(
            "a local cluster builds network namespaces and shapes links with tc: "
            "run it as root (or attach to a running cluster with --address)"
        )
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            raise UserError(f"`{tool}` ({package}) is not installed; a local cluster needs it")


def available() -> str | None:
    """None when a local fabric can be built here, else why not (for tests to skip on)."""
    try:
        check_tools()
    except UserError as err:
        return str(err)
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True)
    return None if probe.returncode == 0 else "network namespaces are not available here"
