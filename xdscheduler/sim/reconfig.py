"""What moving a running job to a new plan costs, and how much a swing and its re-plan dipped it.

Make-before-break (the engine's default): when a trigger fires the job keeps training on its
current plan while the new one is prepared alongside — accelerators it does not hold yet are
taken, and the communicators of the new plan are built on every accelerator it will use.
Then, at a step boundary, it pauses once while the weights are re-laid onto the new plan, and
training resumes while the optimizer state follows. Only when the new accelerators cannot be
taken alongside does it fall back to checkpoint-and-restart.

Where the costs come from:

- Training state: 14 bytes per parameter (bf16 weights, fp32 master weights and two Adam
  moments; ZeRO, Rajbhandari et al. SC'20 §3), `CHECKPOINT_BYTES_PER_PARAM`. Gradients are
  rebuilt by the next step and are not moved.
- Only the bf16 weights (2 B/param, `WEIGHT_BYTES_PER_PARAM`) must be in the new layout before
  the first forward pass: forward and backward read nothing else. The fp32 master weights and
  the moments (12 B/param) are read only by the optimizer step at the end of the first step on
  the new plan, so they stream while that step computes, as ZeRO-Offload (Ren et al. ATC'21
  §4) and ZeRO-Infinity (Rajbhandari et al. SC'21 §6) overlap optimizer-state movement with
  forward and backward. The stream gets the seconds of that step in which its accelerators'
  NICs carry none of the step's own traffic (`Estimate.stream_window_s`: the step less its optimizer
  and its DP, PP and outer-sync communication, hidden or not); what does not arrive by then
  delays the optimizer step, and counts as pause.
- None of it can be streamed ahead of the switch: every step rewrites all of it, and over a
  1-10 Gbit/s link the per-step change (the whole gradient) cannot be forwarded in time
  either, so it moves at the switch (stop-and-copy, less the overlap above).
- Inside a domain the job keeps, and between the pools of one data centre (its own network,
  every node pair at a node's rate), the re-layout runs node by node (`relayout_s`). What a node's
  accelerators hold, under Megatron's rank order (TP innermost, then CP and DP, PP outermost),
  is sent or received once per node, striped over all of the node's NICs (NCCL's channels, one
  per NIC, and PXN, which sends through another GPU's NIC over NVLink: NCCL 2.12 release
  notes); where the node's accelerators hold copies of it (DP or CP replicas of the weights)
  each accelerator then takes its slice from the node over the scale-up fabric (NVLink, HCCS:
  the view's `scaleup_gbs`), as NCCL's broadcast and hierarchical collectives do. Optimizer
  state sharded by ZeRO is one distinct shard per accelerator, over its own NIC. Both at bus
  bandwidth under NCCL (`collective_efficiency`, nccl-tests), the larger of the old and the
  new layout (each node sends what it held and receives what it will hold); charged as if no
  node kept any of its part (an upper bound). This is the re-partition of Oobleck (Jang et al.
  SOSP'23, copy of missing layers from other replicas) and Tenplex (Wagenländer et al. SOSP'24,
  re-partition of the state tensors).
- Across the WAN: the link's goodput (`wan_efficiency`), one copy of the layers a domain lacks
  from the fastest-linked domain that holds them. Such a move is a relocation, decided apart
  from the adjustment (below).
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

Adjustments and relocations. When a trigger fires, the job adjusts at once to the best plan on the
domains it holds and the other pools of their data centres (a make-before-break switch, no state
over the WAN). Moving to other data centres is a separate decision, a `Relocation`, that must pay
for all it costs: its `charge_s` is the job's finish time plus the accelerator-seconds it holds that
train nothing it keeps (idle while state crosses, loading, or redoing work), converted to seconds of
the job at the new plan's rate per accelerator; it happens only when that is less than staying on
the adjusted plan, and when it takes no more accelerator-seconds until the job finishes
(`gpu_seconds`) than staying does: a move must pay the job and the cluster both. Two ways are
weighed:

- transfer: make-before-break across the WAN (the target's accelerators taken, communicators
  built, then a pause while the state crosses, old and new accelerators idle);
- checkpoint: the checkpoint the job writes anyway (its next one) is copied to the target's
  domains in the background while the job trains on; then the target's accelerators are
  taken, load it (`restore_s`: read at the storage's bandwidth and warm up) while the old plan
  trains on, and the job switches with no pause, redoing the steps trained since that
  checkpoint (the old accelerators' work from the checkpoint to the switch is lost, and so
  charged). Checkpoints are independent of the layout (Megatron-Core's distributed
  checkpointing and PyTorch DCP re-shard on load), so the target may use another plan.

Whatever crosses the WAN is charged to the job's WAN traffic and bill.

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
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from xdscheduler.costmodel.constants import DEFAULT as CALIB
from xdscheduler.faults.checkpointing import CHECKPOINT_BYTES_PER_PARAM
from xdscheduler.planner.limits import accelerator_cost_per_hour
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.space import PIPELINE
from xdscheduler.planner.view import ClusterView
from xdscheduler.sim.measurement import percentile
from xdscheduler.sim.records import Adjustments, Relocations, Swings

COMM_INIT_S = 5.0  # MegaScale: process groups of 2,048 GPUs initialised in under 5 s
RESTART_S = 300.0  # the old way of moving a job: save, reschedule, load and warm up again
SWING_CAUSES = ("load", "rtt")  # load swings ≥ 20% and RTT rises ≥ 50%
Spans = dict[int, list[tuple[float, float]]]  # domain -> shares of the layers it holds


class Switch(StrEnum):
    """How a triggered re-plan moved the job (or the engine's way of moving running jobs)."""

    MAKE_BEFORE_BREAK = "make-before-break"  # prepared alongside, then one short pause
    FALLBACK = "fallback"  # make-before-break had no room alongside: restarted instead
    RESTART = "restart"  # the old way: save, stop, start the new plan RESTART_S later
    KEPT = "kept"  # the plan stayed as it was


class Relocate(StrEnum):
    """The two ways to relocate a job to other domains."""

    TRANSFER = "transfer"  # paused while the state crosses the WAN
    CHECKPOINT = "checkpoint"  # its next checkpoint copied while it trains on


class Phase(StrEnum):
    """Where a relocation stands."""

    WAIT = "wait"  # for the checkpoint to copy, or for the adjustment before a transfer
    COPY = "copy"  # the checkpoint crossing the WAN
    HELD = "held"  # the target's accelerators taken, the switch scheduled
    DONE = "done"
    CANCELLED = "cancelled"  # the target's accelerators gone, or the job moved or ended


WEIGHT_BYTES_PER_PARAM = 2.0  # bf16 weights: all that forward and backward read
OPTIMIZER_BYTES_PER_PARAM = CHECKPOINT_BYTES_PER_PARAM - WEIGHT_BYTES_PER_PARAM  # fp32 + Adam


@dataclass(frozen=True)
class SwitchCost:
    """Seconds and bytes of moving one job from one placement to another."""

    prepare_s: float  # the job trains on its old plan meanwhile
    pause_s: float  # nothing trains (weights re-laid, and any optimizer state still late)
    wan_gb: float  # state sent across the WAN (not between pools of one data centre)
    alongside: bool  # the new accelerators could be taken next to the old ones
    wan_s: float = 0.0  # seconds the whole state takes over the WAN (a checkpoint's copy)
    wan_cost: float = 0.0  # its bill at the links' prices


@dataclass
class Swing:
    """One triggered re-plan, from the trigger until the job is back at its target rate."""

    job: str
    cause: str
    how: Switch
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

    @property
    def adjustment_dip(self) -> float | None:
        """What the adjustment itself takes out: 1 − tokens trained from the trigger until
        recovery / what keeping the plan under the swing would have trained. `dip` also counts
        the swing's own slowdown, which no adjustment avoids while it prepares."""
        span = self.recovery_s
        if not span or self.swing_rate <= 0:
            return None
        return 1.0 - self.tokens / (self.swing_rate * span)


@dataclass
class Relocation:
    """A move to other domains (state over the WAN), decided apart from the adjustment, from
    the decision until the job trains on the target."""

    job: str
    cause: str
    how: Relocate
    start_s: float  # decided
    target: Placement
    at_s: float  # when its next phase begins
    transfer_s: float  # seconds its state spends on the WAN (paused for, or copied meanwhile)
    hold_s: float  # the target's accelerators held before the switch (communicators, or load)
    pause_s: float  # training stopped at the switch
    wan_gb: float
    wan_cost: float
    charge_s: float  # its charge when decided (`charge_s`), against staying's
    stay_s: float
    gpu_s: float  # accelerator-seconds until the job finishes if moved (`gpu_seconds`),
    stay_gpu_s: float  # and if it stays
    phase: Phase = Phase.WAIT  # wait -> copy (checkpoint) -> held -> done, or cancelled
    checkpoint: float = 0.0  # tokens the copied checkpoint holds
    switch_s: float | None = None
    redone: float = 0.0  # tokens trained after that checkpoint, lost at the switch
    lost_s: float = 0.0  # seconds of the job's training lost: paused, or redone
    lost_gpu_s: float = 0.0  # accelerator-seconds held that trained nothing kept


def charge_s(finish_s: float, idle_gpu_s: float, gpus: int) -> float:
    """What a move costs: the job's finish time plus the accelerator-seconds it holds that train
    nothing it keeps, converted to seconds of the job at its plan's rate per accelerator (the
    tokens they would have trained, at the job's rate)."""
    return finish_s + idle_gpu_s / max(gpus, 1)


def wan_seconds(wan_cost: float, placement: Placement, view: ClusterView) -> float:
    """A move's WAN bill as seconds of the accelerators it moves to, at their prices: a dollar
    of traffic weighs what a dollar of accelerator time does (0 where they cost nothing)."""
    per_s = accelerator_cost_per_hour(placement, view) / 3600
    return wan_cost / per_s if per_s > 0 else 0.0


def gpu_seconds(
    finish_s: float, before_s: float, held: int, extra: int, extra_s: float, gpus: int
) -> float:
    """Accelerator-seconds a move takes until the job finishes `finish_s` from now: the `held`
    ones until the switch `before_s` from now, the `extra` ones for `extra_s` before it, the
    new plan's `gpus` after it."""
    if not math.isfinite(before_s):
        return math.inf  # a move that never switches
    return held * before_s + extra * extra_s + gpus * (finish_s - before_s)


def switch_charge(
    left: float,
    now_rate: float,
    new_rate: float,
    held: int,
    extra: int,
    prepare_s: float,
    pause_s: float,
) -> tuple[float, float]:
    """(finish s, idle accelerator-s) of a make-before-break move: the old plan trains while
    `extra` new accelerators are prepared, then all `held + extra` stop for the pause."""
    trained = min(now_rate * prepare_s, left)
    return (
        prepare_s + pause_s + (left - trained) / new_rate,
        extra * prepare_s + (held + extra) * pause_s,
    )


def checkpoint_charge(
    left: float,
    stay_rate: float,
    new_rate: float,
    held: int,
    gpus: int,
    wait_s: float,
    copy_s: float,
    load_s: float,
) -> tuple[float, float]:
    """(finish s, idle accelerator-s) of a relocation through the checkpoint written `wait_s`
    from now: copied for `copy_s`, loaded by the target's `gpus` for `load_s` while the `held`
    accelerators train on; what they trained after the checkpoint is redone."""
    kept = min(stay_rate * wait_s, left)
    return (
        wait_s + copy_s + load_s + (left - kept) / new_rate,
        held * (copy_s + load_s) + gpus * load_s,
    )


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
        out = [
            piece
            for x, y in out
            for piece in ((x, min(y, lo)), (max(x, hi), y))
            if piece[1] - piece[0] > 1e-12
        ]
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


def offsite(flows: dict[tuple[int, int], float], view: ClusterView) -> dict:
    """The flows that cross the WAN: not those between pools of one data centre, which ride
    its own network (a flow no link carries, from -1, counts as the WAN's)."""
    return {(s, d): share for (s, d), share in flows.items() if s < 0 or view.over_wan((s, d))}


def crosses_wan(old: Placement, new: Placement, view: ClusterView) -> bool:
    """Whether moving from `old` to `new` sends state across the WAN (`switch_cost`'s wan_gb
    > 0): every flow `wan_bytes` lists carries some."""
    return bool(offsite(wan_bytes(old, new, view), view))


def switch_cost(
    old: Placement, new: Placement, params: float, view: ClusterView, window_s: float = 0.0
) -> SwitchCost:
    """Preparation and pause of moving a job from `old` to `new` under the view's links;
    `window_s`: seconds of the new plan's first step the optimizer state may stream in."""
    flows = wan_bytes(old, new, view)
    wan = offsite(flows, view)
    paths = [_wan_path(view, s, d, share, params) for (s, d), share in wan.items()]
    # Between pools of one data centre, and inside a domain kept, node by node over its NICs.
    relaid = [(d, d) for d in new.domains if d in old.taken]
    relaid += [sd for sd in flows if sd not in wan]
    paths += [
        np.maximum(relayout_s(old, s, params, view), relayout_s(new, d, params, view))
        for s, d in relaid
    ]
    weights_s = max((w for w, _ in paths), default=0.0)
    state_s = max((w + o for w, o in paths), default=0.0)  # each path: weights first
    # The optimizer step waits for the rest (a state no link can carry never arrives).
    stall = max(0.0, state_s - weights_s - window_s) if math.isfinite(state_s) else math.inf
    rtt = max((view.rtt_ms[a, b] for a in new.domains for b in new.domains if a != b), default=0.0)
    extra = new_accelerators(old, new)
    alongside = all(n <= view.domains[d].available for d, n in extra.items())
    state_gb = params * CHECKPOINT_BYTES_PER_PARAM / 1e9
    price = sum(
        share * state_gb * view.price_per_gb[s, d] if s >= 0 else 0.0
        for (s, d), share in wan.items()
    )
    return SwitchCost(
        COMM_INIT_S,
        weights_s + stall + rtt / 1e3,
        sum(wan.values()) * state_gb,
        alongside,
        max((w + o for w, o in paths[: len(wan)]), default=0.0),
        price,
    )


def _wan_path(view: ClusterView, s: int, d: int, share: float, params: float) -> np.ndarray:
    """(weights, optimizer state) seconds over one link for `share` of one model copy."""
    if s < 0:
        return np.array([math.inf, math.inf])
    rate = view.bandwidth_gbps[s, d] * 1e9 / 8 * CALIB.wan_efficiency
    return share * params * np.array([WEIGHT_BYTES_PER_PARAM, OPTIMIZER_BYTES_PER_PARAM]) / rate


def _per_node(view: ClusterView, d: int) -> int:
    return view.domains[d].node_gpus


def node_share(p: Placement, gpus: int) -> float:
    """Share of one model's weights that `gpus` accelerators of one node hold, in Megatron's
    rank order (TP innermost, then CP and DP, PP outermost; ZeRO-3 also splits over DP×CP)."""
    plan = p.plan
    if plan.zero >= 3:
        return min(1.0, gpus / (plan.tp * plan.pp * plan.dp * plan.cp))
    stages = max(1.0, gpus / (plan.tp * plan.cp * plan.dp))  # a node may span stages
    return min(1.0, min(gpus, plan.tp) / plan.tp * stages / plan.pp)


def _node_gpus(p: Placement, d: int, view: ClusterView) -> int:
    return min(_per_node(view, d), p.taken[d])


def optimizer_slice(p: Placement, params: float) -> float:
    """fp32 master weights and Adam moments one accelerator holds: split by TP and PP, and by
    DP×CP under ZeRO ≥ 1."""
    plan = p.plan
    shard = plan.dp * plan.cp if plan.zero >= 1 else 1
    return OPTIMIZER_BYTES_PER_PARAM * params / (plan.tp * plan.pp * shard)


def weight_slice(p: Placement, params: float) -> float:
    """bf16 weights one accelerator holds: split by TP and PP, and by DP×CP under ZeRO-3."""
    plan = p.plan
    shard = plan.dp * plan.cp if plan.zero >= 3 else 1
    return WEIGHT_BYTES_PER_PARAM * params / (plan.tp * plan.pp * shard)


def relayout_s(p: Placement, d: int, params: float, view: ClusterView) -> np.ndarray:
    """(weights, optimizer state) seconds for a node of domain d to send, or receive, what its
    accelerators hold under p: the node's weights once, striped over all its NICs, then fanned
    out over the scale-up fabric where its accelerators hold copies; each optimizer shard over
    its accelerator's own NIC (ZeRO ≥ 1) or, replicated, like the weights."""
    dom, g = view.domains[d], _node_gpus(p, d, view)
    nic = dom.scaleout_gbps * 1e9 / 8 * CALIB.collective_efficiency
    up = dom.scaleup_gbs * 1e9 * CALIB.collective_efficiency

    def striped(per_param: float, per_gpu: float) -> float:
        """The node's part once over its NICs, then each accelerator's slice over the fabric
        where they hold copies."""
        node = node_share(p, g) * per_param * params
        return node / (g * nic) + (per_gpu / up if g * per_gpu > node * (1 + 1e-9) else 0.0)

    weights = striped(WEIGHT_BYTES_PER_PARAM, weight_slice(p, params))
    gpu_o = optimizer_slice(p, params)
    optimizer = gpu_o / nic if p.plan.zero >= 1 else striped(OPTIMIZER_BYTES_PER_PARAM, gpu_o)
    return np.array([weights, optimizer])


def new_accelerators(old: Placement, new: Placement) -> dict[int, int]:
    """Accelerators the new placement needs beyond what the job holds, by domain."""
    held = old.taken
    return {d: n - held.get(d, 0) for d, n in new.taken.items() if n > held.get(d, 0)}


def _adjustment_figures(moved: list[Swing]) -> dict:
    closed = [s for s in moved if s.end_s is not None and s.dip is not None]
    # `closed` has every dip and recovery time: the filters repeat it for the type checker
    dip = [s.dip for s in closed if s.dip is not None]
    own = [s.adjustment_dip for s in closed if s.adjustment_dip is not None]
    rec = [s.recovery_s for s in closed if s.recovery_s is not None]
    return {
        "count": len(moved),
        "recovered": len(closed),
        "dip_p50": percentile(dip, 50),
        "dip_p99": percentile(dip, 99),
        "dip_max": percentile(dip, 100),
        # what the swing alone costs over the same windows, and what the adjustment does
        "swing_dip_p50": percentile([s.swing_dip for s in closed], 50),
        "swing_dip_max": percentile([s.swing_dip for s in closed], 100),
        "adjustment_dip_p50": percentile(own, 50),
        "adjustment_dip_p99": percentile(own, 99),
        "adjustment_dip_max": percentile(own, 100),
        "recovery_s_p50": percentile(rec, 50),
        "recovery_s_p99": percentile(rec, 99),
        "recovery_s_max": percentile(rec, 100),
    }


def adjustment_stats(moved: list[Swing]) -> Adjustments:
    """Adjustments: how many, how many recovered, and their dips and recovery times."""
    return Adjustments(**_adjustment_figures(moved))


def relocation_stats(moves: list[Relocation]) -> Relocations:
    """Relocations: how many, how, what crossed the WAN, and what each lost."""
    done = [m for m in moves if m.phase == Phase.DONE]
    lost = [m.lost_s for m in done]
    return Relocations(
        count=len(moves),
        switched=len(done),
        cancelled=sum(m.phase == Phase.CANCELLED for m in moves),
        by_checkpoint=sum(m.how == Relocate.CHECKPOINT for m in done),
        by_transfer=sum(m.how == Relocate.TRANSFER for m in done),
        transfer_s_p50=percentile([m.transfer_s for m in done], 50),
        transfer_s_max=percentile([m.transfer_s for m in done], 100),
        lost_s_p50=percentile(lost, 50),
        lost_s_max=percentile(lost, 100),
        lost_gpu_h=sum(m.lost_gpu_s for m in done) / 3600,
        wan_gb=sum(m.wan_gb for m in moves if m.phase != Phase.WAIT),
        wan_cost_usd=sum(m.wan_cost for m in moves if m.phase != Phase.WAIT),
    )


def summary(
    records: list[Swing], causes: tuple[str, ...] = SWING_CAUSES, moves: Sequence[Relocation] = ()
) -> Swings:
    """The report's `swings` block: the adjustments the given causes fired (re-plans that kept
    the job on its domains), and apart from them the relocations those causes led to."""
    moved = [s for s in records if s.cause in causes and s.how != Switch.KEPT]
    return Swings(
        causes=list(causes),
        **_adjustment_figures(moved),
        kept_plan=sum(s.cause in causes and s.how == Switch.KEPT for s in records),
        fallbacks_to_restart=sum(s.how in (Switch.FALLBACK, Switch.RESTART) for s in moved),
        relocations=relocation_stats([m for m in moves if m.cause in causes]),
    )
