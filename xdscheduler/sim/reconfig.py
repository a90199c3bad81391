"""What moving a running job to a new plan costs, and how much a swing and its re-plan dipped it.

Make-before-break (the engine's default): when a trigger fires the job keeps training on its
current plan while the new one is prepared alongside — accelerators it does not hold yet are
taken, and the communicators of the new plan are built on every accelerator it will use.
Then, at a step boundary, it pauses once: the training state is re-laid onto the new plan
(over the domain's fabric where the domain keeps part of the job, over the WAN for layers a
domain did not hold), and training resumes. Only when the new accelerators cannot be taken
alongside does it fall back to checkpoint-and-restart.

Where the costs come from:

- Training state: 14 bytes per parameter (bf16 weights, fp32 master weights and two Adam
  moments; ZeRO, Rajbhandari et al. SC'20 §3), `CHECKPOINT_BYTES_PER_PARAM`. Gradients are
  rebuilt by the next step and are not moved.
- The state cannot be streamed ahead of the switch: every step rewrites all of it, and over
  a 1-10 Gbit/s link the per-step change (the whole gradient) cannot be forwarded in time
  either, so it moves while the job is paused (stop-and-copy). Inside a domain it is an
  all-to-all over the scale-out fabric in which each accelerator sends its old slice and
  receives its new one (weights split by TP×PP, optimizer state also by DP×CP under ZeRO),
  at its NIC's bus bandwidth under NCCL (`collective_efficiency`, nccl-tests), as in
  Oobleck's (Jang et al. SOSP'23) copy of missing layers from other replicas and Tenplex's
  (Wagenländer et al. SOSP'24) re-partition of the state tensors; across domains at the
  link's goodput (`wan_efficiency`), one copy of the layers a domain lacks from the
  fastest-linked domain that holds the layers.
- The switch happens at an iteration boundary, where 1F1B pipelines drain anyway (ReCycle,
  Gandhi et al. SOSP'24, and Oobleck re-route at iteration boundaries), so no step is lost to
  draining; a barrier over the new placement costs a round trip of its slowest link.
- Communicators: built during preparation (NCCL allows several per device). MegaScale
  (Jiang et al. NSDI'24 §3.5) brought process-group initialisation on 2,048 GPUs to under
  5 s; we charge that for any size, `COMM_INIT_S`.
- New accelerators come from idle nodes whose worker processes are already up (the domain
  actors keep them), so taking them costs only the communicator build above.
- The fallback is the old restart (`RESTART_S`: save, reschedule, load, warm up) plus the
  WAN transfer a move across domains needs as well.

A swing record follows each triggered re-plan from the trigger until the job is back at the
target rate for good. Definitions (rates in tokens/s, times in simulated seconds):

- reference: the job's rate before the change that fired the trigger;
- swing rate: the old plan's rate under the new conditions (what the swing alone costs);
- target: min(the new plan's rate, 90% of the reference);
- recovery_s: from the trigger until the job trains at ≥ target with no switch pending;
- dip: 1 − (tokens trained from the trigger until recovery) / (reference × recovery_s);
- swing_dip: 1 − swing rate / reference, the part of the dip the swing causes on its own;
  the rest (dip − swing_dip) is what the adjustment costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from xdscheduler.costmodel.constants import DEFAULT as CALIB
from xdscheduler.faults.checkpointing import CHECKPOINT_BYTES_PER_PARAM
from xdscheduler.planner.policies import Placement
from xdscheduler.planner.space import PIPELINE
from xdscheduler.planner.view import ClusterView

COMM_INIT_S = 5.0  # MegaScale: process groups of 2,048 GPUs initialised in under 5 s
RESTART_S = 300.0  # the old way of moving a job: save, reschedule, load and warm up again
MAKE_BEFORE_BREAK, RESTART = "make-before-break", "restart"
CAUSES = ("load", "rtt", "bandwidth", "grow")  # what fired a re-plan
SWING_CAUSES = ("load", "rtt")  # load swings ≥ 20% and RTT rises ≥ 50%
Spans = dict[int, list[tuple[float, float]]]  # domain -> shares of the layers it holds


@dataclass(frozen=True)
class SwitchCost:
    """Seconds and bytes of moving one job from one placement to another."""

    prepare_s: float  # the job trains on its old plan meanwhile
    pause_s: float  # nothing trains
    wan_gb: float  # state sent across domains
    fabric_gb: float  # state re-laid inside domains
    alongside: bool  # the new accelerators could be taken next to the old ones


@dataclass
class Swing:
    """One triggered re-plan, from the trigger until the job is back at its target rate."""

    job: str
    cause: str
    how: str  # make-before-break | restart | fallback | kept (the plan stayed)
    start_s: float
    reference: float
    swing_rate: float
    new_rate: float
    done0: float  # tokens trained at the trigger
    prepare_s: float = 0.0
    pause_s: float = 0.0
    wan_gb: float = 0.0  # state sent across domains at the switch (0: re-laid in place)
    end_s: float | None = None  # when it recovered; None while open
    tokens: float = 0.0  # trained from the trigger until then
    aborted: bool = False  # the job finished, or a fault took it, first

    @property
    def target(self) -> float:
        return min(self.new_rate, 0.9 * self.reference)

    @property
    def recovery_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    @property
    def dip(self) -> float | None:
        span = self.recovery_s
        if not span or self.reference <= 0:
            return None
        return 1.0 - self.tokens / (self.reference * span)

    @property
    def swing_dip(self) -> float:
        return 1.0 - self.swing_rate / self.reference if self.reference > 0 else 0.0


def layer_spans(p: Placement) -> Spans:
    """The layers each domain holds: all of them, but a pipeline's stages are split among its
    domains in proportion to their accelerators (stages are alike)."""
    if p.kind != PIPELINE:
        return {d: [(0.0, 1.0)] for d in p.domains}
    edges = np.concatenate([[0], np.cumsum(p.gpus)]) / max(p.total_gpus, 1)
    return {d: [(float(edges[i]), float(edges[i + 1]))] for i, d in enumerate(p.domains)}


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]):
    """Interval set a without b."""
    out = list(a)
    for lo, hi in b:
        out = [piece for x, y in out for piece in ((x, min(y, lo)), (max(x, hi), y))
               if piece[1] - piece[0] > 1e-12]
    return out


def _meet(a: list[tuple[float, float]], b: list[tuple[float, float]]):
    return [(max(x, u), min(y, v)) for x, y in a for u, v in b if min(y, v) - max(x, u) > 1e-12]


def _length(a: list[tuple[float, float]]) -> float:
    return sum(y - x for x, y in a)


def wan_bytes(old: Placement, new: Placement, view: ClusterView) -> dict[tuple[int, int], float]:
    """Share of the state (0-1 of one model copy) each link (from, to) carries: the layers a
    domain of the new placement lacks, from the best-linked old domain holding them."""
    before, after = layer_spans(old), layer_spans(new)
    bw = view.bandwidth_gbps
    flows: dict[tuple[int, int], float] = {}
    for d, want in after.items():
        missing = _minus(want, before.get(d, []))
        for s in sorted((s for s in before if s != d and bw[s, d] > 0), key=lambda s: -bw[s, d]):
            got = _meet(missing, before[s])
            if got:
                flows[(s, d)] = flows.get((s, d), 0.0) + _length(got)
                missing = _minus(missing, got)
        if missing:  # no link reaches what this domain lacks
            flows[(-1, d)] = math.inf
    return flows


def switch_cost(old: Placement, new: Placement, params: float, view: ClusterView) -> SwitchCost:
    """Preparation and pause of moving a job from `old` to `new` under the view's links."""
    state = params * CHECKPOINT_BYTES_PER_PARAM
    flows = wan_bytes(old, new, view)
    wan_s = max((share * state / (view.bandwidth_gbps[s, d] * 1e9 / 8 * CALIB.wan_efficiency)
                 if s >= 0 else math.inf for (s, d), share in flows.items()), default=0.0)
    # Re-laid inside a domain the job keeps: an all-to-all in which every accelerator sends
    # its old slice and receives its new one, at its NIC's bus bandwidth.
    kept = [d for d in new.domains if d in old.taken]
    per_gpu = max(slice_bytes(old, params), slice_bytes(new, params))
    fabric_s = max((per_gpu / (view.domains[d].scaleout_gbps * 1e9 / 8
                               * CALIB.collective_efficiency) for d in kept), default=0.0)
    fabric = sum(per_gpu * new.taken[d] for d in kept)
    rtt = max((view.rtt_ms[a, b] for a in new.domains for b in new.domains if a != b),
              default=0.0)
    extra = new_accelerators(old, new)
    alongside = all(n <= view.domains[d].available for d, n in extra.items())
    return SwitchCost(COMM_INIT_S, max(wan_s, fabric_s) + rtt / 1e3,
                      sum(flows.values()) * state / 1e9, fabric / 1e9, alongside)


def slice_bytes(p: Placement, params: float) -> float:
    """Training state one accelerator holds: weights split by TP and PP (and by DP×CP under
    ZeRO-3), Adam's fp32 state split by TP and PP and by DP×CP under ZeRO ≥ 1."""
    plan = p.plan
    shard = plan.dp * plan.cp
    weights = 2.0 / (shard if plan.zero >= 3 else 1)
    optimizer = (CHECKPOINT_BYTES_PER_PARAM - 2.0) / (shard if plan.zero >= 1 else 1)
    return params / (plan.tp * plan.pp) * (weights + optimizer)


def new_accelerators(old: Placement, new: Placement) -> dict[int, int]:
    """Accelerators the new placement needs beyond what the job holds, by domain."""
    held = old.taken
    return {d: n - held.get(d, 0) for d, n in new.taken.items() if n > held.get(d, 0)}


def _stats(moved: list[Swing]) -> dict:
    closed = [s for s in moved if s.end_s is not None and s.dip is not None]
    dip = np.array([s.dip for s in closed])
    rec = np.array([s.recovery_s for s in closed])

    def pct(x: np.ndarray, q: float) -> float | None:
        return float(np.percentile(x, q)) if x.size else None

    return {"count": len(moved), "recovered": len(closed),
            "dip_p50": pct(dip, 50), "dip_p99": pct(dip, 99), "dip_max": pct(dip, 100),
            # what the swing alone costs over the same windows; the rest is the adjustment
            "swing_dip_p50": pct(np.array([s.swing_dip for s in closed]), 50),
            "recovery_s_p50": pct(rec, 50), "recovery_s_p99": pct(rec, 99),
            "recovery_s_max": pct(rec, 100)}


def summary(records: list[Swing], causes: tuple[str, ...] = SWING_CAUSES) -> dict:
    """The report's `swings` block: the re-plans the given causes fired that moved the job,
    overall and split by whether state crossed the WAN at the switch."""
    moved = [s for s in records if s.cause in causes and s.how != "kept"]
    return {
        "causes": list(causes),
        **_stats(moved),
        "kept_plan": sum(s.cause in causes and s.how == "kept" for s in records),
        "fallbacks_to_restart": sum(s.how in ("fallback", RESTART) for s in moved),
        "in_place": _stats([s for s in moved if s.wan_gb == 0]),
        "across_domains": _stats([s for s in moved if s.wan_gb > 0]),
    }
