"""Telling a slow domain from a dead one.

The controller pings every domain's agent every tick. A fixed rule ("four pings missed and it is
down") declared a healthy domain down on a busy machine (its last heartbeat 3.2 s old) and
stripped it of its jobs. Here a domain is first *suspected*, by a phi-accrual detector over the
arrival of its answers (`faults.heartbeat`, as Cassandra and Akka use: the longer and more
irregular a domain's answers have been, the longer a silence it is granted), or at once when
its agent answers with an error or is dead. A suspicion is then checked by a second path that
does not go through the agent: the GCS's view of the domain's nodes and a TCP handshake with
each alive node's raylet (the kernel answers it however busy the node's processes are; a
raylet that is gone refuses it at once). Only a suspicion the second path confirms makes the
domain down; one it refutes is journalled and cleared when the agent answers again.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from xdscheduler.faults.heartbeat import PHI_THRESHOLD, PhiAccrual
from xdscheduler.live.state import DOMAIN_LABEL

CONFIRM_TIMEOUT_S = 2.0  # a raylet whose port does not take a handshake by then does not answer
# A silence phi finds unlikely is suspected only once it is this long (Akka's "acceptable
# heartbeat pause"): pings 0.2 s apart that answered within milliseconds made phi cross its
# threshold after half a second of a busy machine, a suspicion (and a check) every few seconds
ACCEPTABLE_PAUSE_S = 1.0
RECHECK_S = 2.0  # a suspicion the second path refuted is checked again this often


@dataclass
class Suspicion:
    since: float
    why: str
    checked_at: float = 0.0  # when its last second-path check ended
    evidence: str | None = None  # what the last check found (alive)


def second_path(
    domain: str, nodes: list[dict], timeout_s: float = CONFIRM_TIMEOUT_S
) -> tuple[bool, str]:
    """Whether `domain` is dead as seen without its agent, and the evidence. `nodes`: the
    cluster's nodes as `ray.nodes()` gives them."""
    mine = [n for n in nodes if n.get("Labels", {}).get(DOMAIN_LABEL) == domain]
    alive = [n for n in mine if n["Alive"]]
    if not alive:
        return True, f"the GCS has no alive node of {domain} ({len(mine)} known)"
    refused = []
    for n in alive:
        where = (n["NodeManagerAddress"], n["NodeManagerPort"])
        try:
            socket.create_connection(where, timeout=timeout_s).close()
            return False, f"the raylet at {where[0]}:{where[1]} takes a handshake"
        except OSError as err:
            refused.append(f"{where[0]}:{where[1]} ({type(err).__name__})")
    return True, f"no raylet of {domain} takes a handshake: {', '.join(refused)}"


class DomainHealth:
    """Suspicions and verdicts for every domain of a live cluster; `events` says what changed."""

    def __init__(self, names: list[str], period_s: float, nodes, threshold: float = PHI_THRESHOLD):
        """`nodes()`: the cluster's nodes now (`ray.nodes`), asked on a thread of its own."""
        self.names, self.nodes = names, nodes
        self.phi = PhiAccrual(names, period_s, threshold=threshold)
        self.heard_at: dict[str, float] = {}  # domain -> its agent's last answer
        self.suspects: dict[str, Suspicion] = {}
        self.down: dict[str, float] = {}  # domain -> when it was confirmed down
        self.checks: dict[str, Future] = {}  # second-path checks under way
        self.pool = ThreadPoolExecutor(
            max_workers=max(len(names), 1), thread_name_prefix="second-path"
        )
        self.events: list[tuple[str, dict]] = []  # (kind, record) since the last `take`

    def heard(self, domain: str, now: float) -> None:
        """Its agent answered a ping."""
        self.phi.heartbeat(domain, now)
        silent_s = now - self.heard_at.get(domain, now)
        self.heard_at[domain] = now
        if domain in self.down:
            del self.down[domain]
            self.suspects.pop(domain, None)
            self.events.append(("domain_up", {"domain": domain, "silent_s": silent_s}))
        elif domain in self.suspects:  # a check under way is moot: it answered
            s = self.suspects.pop(domain)
            self.events.append(
                (
                    "domain_cleared",
                    {
                        "domain": domain,
                        "suspected_s": now - s.since,
                        "silent_s": silent_s,
                        "why": s.why,
                        "evidence": s.evidence,
                    },
                )
            )

    def failed(self, domain: str, why: str, now: float) -> None:
        """Its agent answered with an error, or is dead: suspected at once."""
        self._suspect(domain, why, now)

    def judge(self, now: float) -> list[str]:
        """Suspect the domains whose silence phi finds unlikely, check every suspicion by the
        second path, and give the domains found down by it now."""
        phi = self.phi.phi(now)
        for i, n in enumerate(self.names):
            if (
                n in self.heard_at
                and phi[i] >= self.phi.threshold
                and now - self.heard_at[n] >= ACCEPTABLE_PAUSE_S
            ):
                self._suspect(
                    n, f"phi {phi[i]:.1f} after {now - self.heard_at[n]:.2f} s of silence", now
                )
        lost = []
        for n, check in list(self.checks.items()):
            if not check.done():
                continue
            del self.checks[n]
            s = self.suspects.get(n)
            dead, evidence = (
                check.result()
                if check.exception() is None
                else (False, f"the check failed: {check.exception()}")
            )
            if s is None or n in self.down:
                continue
            s.checked_at, s.evidence = time.time(), evidence
            if dead:
                self.down[n] = now
                self.events.append(
                    (
                        "domain_down",
                        {
                            "domain": n,
                            "why": s.why,
                            "evidence": evidence,
                            "suspected_at": s.since,
                            "last_heartbeat": self.heard_at.get(n),
                        },
                    )
                )
                lost.append(n)
        for n, s in self.suspects.items():
            if n not in self.checks and n not in self.down and now - s.checked_at >= RECHECK_S:
                self.checks[n] = self.pool.submit(self._second_path, n)
        return lost

    def _second_path(self, domain: str) -> tuple[bool, str]:
        """`second_path` on the nodes as they are when the pool runs it."""
        return second_path(domain, self.nodes())

    def suspected_for(self, domain: str, now: float) -> float:
        """How long the domain has been suspected and not found down (0: it is not)."""
        s = self.suspects.get(domain)
        return 0.0 if s is None or domain in self.down else now - s.since

    def take(self) -> list[tuple[str, dict]]:
        out, self.events = self.events, []
        return out

    def _suspect(self, domain: str, why: str, now: float) -> None:
        if domain in self.suspects or domain in self.down:
            return
        self.suspects[domain] = Suspicion(now, why)
        self.events.append(
            (
                "domain_suspect",
                {"domain": domain, "why": why, "last_heartbeat": self.heard_at.get(domain)},
            )
        )
