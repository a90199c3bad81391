"""The 1F1B pipeline schedules whose waits the step-time model counts, as the programs each
stage runs, and an event simulation of those programs.

Two ways of moving a micro-batch's activations and gradients between stages:

- `blocking` (DeepSpeed's pipeline engine): every send and receive is its own blocking call, in
  a lock-step order that pairs each stage's calls with its neighbours'.
- `batched` (Megatron's schedule without interleaving): after a forward pass a stage sends its
  activations on and receives the gradients back in one exchange, both directions at once, and
  after a backward pass the same with the stage before; it waits for the exchange before it
  computes on, since the next pass needs what it receives.

`Pipeline.simulated_s` times the programs with compute of fixed length and transfers that
start when both ends have reached them (the sender's data cannot outrun the receiver, as with a
message larger than the transport's buffers); each direction of a link carries one transfer at
a time. It is the reference the model's closed forms are checked against (tests), beside
`Pipeline.modelled_s`, and the programs are what a measured run executes
(`benchmarks.pipeline_sends`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from xdscheduler.costmodel.exchanges import PipelineExchanges

Style = Literal["blocking", "batched"]
STYLES: tuple[Style, ...] = ("blocking", "batched")


@dataclass(frozen=True)
class Compute:
    forward: bool
    micro_batch: int


@dataclass(frozen=True)
class Exchange:
    """Transfers a stage starts together and waits for together: stages it sends to, and
    stages it receives from."""

    send: tuple[int, ...] = ()
    recv: tuple[int, ...] = ()


Op = Compute | Exchange


def program(style: Style, stage: int, stages: int, micro_batches: int) -> list[Op]:
    """What `stage` of `stages` runs for one step of `micro_batches`, in order."""
    if not 0 <= stage < stages or micro_batches < 1:
        raise ValueError(f"stage {stage} of {stages}, {micro_batches} micro-batches")
    if style == "blocking":
        return _lock_step(stage, stages, micro_batches)
    if style == "batched":
        return _one_f_one_b(stage, stages, micro_batches)
    raise ValueError(f"unknown schedule {style!r}; known: {', '.join(STYLES)}")


def _lock_step(s: int, stages: int, micro_batches: int) -> list[Op]:
    """DeepSpeed's train schedule: 2(m + p - 1) slots; a stage computes forward in the slots of
    its own parity and backward in the others. A forward slot first sends the gradients of the
    slot before back and receives this slot's activations; a backward slot receives this slot's
    gradients and then sends on the activations of the slot before."""

    def slot(t: int) -> tuple[int | None, bool]:
        forward = (t - s) % 2 == 0
        mb = (t - s) // 2 if forward else (t + s + 1 - 2 * stages) // 2
        return (mb if t >= 0 and 0 <= mb < micro_batches else None), forward

    ops: list[Op] = []
    first, last = s == 0, s == stages - 1
    for t in range(2 * (micro_batches + stages - 1)):
        (mb, forward), (before, _) = slot(t), slot(t - 1)
        if forward and not first:
            ops += [Exchange(send=(s - 1,))] if before is not None else []
            ops += [Exchange(recv=(s - 1,))] if mb is not None else []
        if not forward and not last:
            ops += [Exchange(recv=(s + 1,))] if mb is not None else []
            ops += [Exchange(send=(s + 1,))] if before is not None else []
        if mb is not None:
            ops.append(Compute(forward, mb))
    return ops


def _one_f_one_b(s: int, stages: int, micro_batches: int) -> list[Op]:
    """Megatron's 1F1B without interleaving: `stages - s - 1` forward passes to fill the
    pipeline, then one forward and one backward pass a micro-batch, then the backward passes
    left."""
    prev = (s - 1,) if s > 0 else ()
    nxt = (s + 1,) if s < stages - 1 else ()
    warm = min(stages - s - 1, micro_batches)
    ops: list[Op] = []

    def exchange(send: tuple[int, ...], recv: tuple[int, ...]) -> None:
        if send or recv:
            ops.append(Exchange(send, recv))

    for mb in range(warm):
        exchange((), prev)
        ops.append(Compute(True, mb))
        exchange(nxt, ())
    if warm < micro_batches:
        exchange((), prev)
    for i, mb in enumerate(range(warm, micro_batches)):
        ops.append(Compute(True, mb))
        exchange(nxt, nxt)
        ops.append(Compute(False, i))
        exchange(prev, () if mb == micro_batches - 1 else prev)
    for i in range(micro_batches - warm, micro_batches):
        exchange((), nxt)
        ops.append(Compute(False, i))
        exchange(prev, ())
    return ops


@dataclass(frozen=True)
class Pipeline:
    """One step of a pipeline of uniform stages: its schedule, a stage's forward and backward
    pass, and `transfer_s[i]`, one micro-batch's activations (or gradients) between stages i
    and i + 1 (one number: every link)."""

    style: Style
    stages: int
    micro_batches: int
    forward_s: float
    backward_s: float
    transfer_s: float | Sequence[float]

    @property
    def links(self) -> list[float]:
        t, n = self.transfer_s, self.stages - 1
        links = [float(t)] * n if isinstance(t, int | float) else [float(x) for x in t]
        if len(links) != n:
            raise ValueError(f"{len(links)} link times for {self.stages} stages")
        return links

    def simulated_s(self) -> float:
        """Seconds from the first stage's start to the last stage's end, running the
        programs."""
        programs = [
            program(self.style, s, self.stages, self.micro_batches) for s in range(self.stages)
        ]
        return _Run(programs, self.links, self.forward_s, self.backward_s).step_s()

    def modelled_s(self, placed: bool = True, domains: Sequence[int] = ()) -> float:
        """What the step-time model gives it: the compute and bubble and
        `exchanges.PipelineExchanges`. `domains`: the stages each domain holds, the links
        between them the WAN crossings; without, the slowest link is a crossing where it is
        slower than the others (a stage beside it waits on a fast link on its other side).
        Told (`placed`) what the planner tells it: each crossing's time and the links after
        each."""
        links = self.links
        if domains:
            ends = set(np.cumsum(domains)[:-1] - 1)
            cross = [x for i, x in enumerate(links) if i in ends]
            inside = [x for i, x in enumerate(links) if i not in ends]
        else:
            cross, inside = [max(links, default=0.0)], links
        slowest, intra = max(cross, default=0.0), min(inside, default=0.0)
        crossings = len(cross) if domains else int(slowest > intra)
        lone = any(domains[k] == 1 for k in range(1, len(domains) - 1))
        t_mb, m = self.forward_s + self.backward_s, self.micro_batches
        exposed, _ = PipelineExchanges(
            np.array(self.stages),
            np.array(1),
            m,
            np.array(crossings),
            wan_s=slowest,
            intra_s=intra,
            t_mb=t_mb,
            overlap=self.style == "batched",
            fwd_s=self.forward_s,
            after=self._after(crossings, domains) if placed else -1,
            crossing_s=np.array(cross) if placed and domains else None,
            between=int(lone) if domains else 1,
        ).wait()
        return (m + self.stages - 1) * t_mb + float(exposed)

    def _after(self, crossings: int, domains: Sequence[int]) -> int | np.ndarray:
        """The links after each crossing of the domains' pipeline; without domains, after
        its one crossing (-1: not one crossing, or it is not the only slow link)."""
        if domains:
            return np.cumsum(domains[::-1])[::-1][1:] - 1.0
        if crossings != 1:
            return -1
        links = self.links
        slowest, intra = max(links), min(links)
        one_slow = links.count(slowest) == 1 and links.count(intra) == len(links) - 1
        return len(links) - 1 - links.index(slowest) if one_slow else -1


class _Run:
    """Each stage advances as far as its next exchange allows; a transfer is the k-th send from
    a stage to a neighbour matched with the neighbour's k-th receive from it."""

    def __init__(self, programs: list[list[Op]], links: list[float], fwd: float, bwd: float):
        self.programs, self.links, self.fwd, self.bwd = programs, links, fwd, bwd
        n = len(programs)
        self.pc, self.clock = [0] * n, [0.0] * n
        self.count: dict[tuple[int, int, str], int] = {}
        self.posted: dict[tuple[int, int, int], dict[str, float]] = {}
        self.free: dict[tuple[int, int], float] = {}  # a link direction's next free moment
        self.waiting: list[list[tuple[int, int, int]] | None] = [None] * n

    def step_s(self) -> float:
        # the stage furthest behind moves first, so a link serves transfers in time order
        stages = range(len(self.pc))
        while any(self._advance(s) for s in sorted(stages, key=self.clock.__getitem__)):
            pass
        stuck = [s for s, ops in enumerate(self.programs) if self.pc[s] < len(ops)]
        if stuck:
            raise RuntimeError(f"the schedule deadlocks at stages {stuck}")
        return max(self.clock)

    def _advance(self, s: int) -> bool:
        ops = self.programs[s]
        if self.pc[s] >= len(ops):
            return False
        op = ops[self.pc[s]]
        if isinstance(op, Compute):
            self.clock[s] += self.fwd if op.forward else self.bwd
            self.pc[s] += 1
            return True
        if self.waiting[s] is None:
            self.waiting[s] = [self._post(s, d, "send") for d in op.send] + [
                self._post(s, d, "recv") for d in op.recv
            ]
        ends = [self._end(key) for key in self.waiting[s] or []]
        if any(e is None for e in ends):
            return False
        self.clock[s] = max([self.clock[s], *(e for e in ends if e is not None)])
        self.pc[s] += 1
        self.waiting[s] = None
        return True

    def _post(self, s: int, peer: int, side: str) -> tuple[int, int, int]:
        src, dst = (s, peer) if side == "send" else (peer, s)
        k = self.count.get((src, dst, side), 0)
        self.count[src, dst, side] = k + 1
        self.posted.setdefault((src, dst, k), {})[side] = self.clock[s]
        return (src, dst, k)

    def _end(self, key: tuple[int, int, int]) -> float | None:
        seen = self.posted[key]
        if "end" not in seen:
            if "send" not in seen or "recv" not in seen:
                return None
            src, dst = key[0], key[1]
            start = max(seen["send"], seen["recv"], self.free.get((src, dst), 0.0))
            seen["end"] = self.free[src, dst] = start + self.links[min(src, dst)]
        return seen["end"]
