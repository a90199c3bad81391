"""Re-planning running jobs: what fires a re-plan, the adjustment on a job's own domains, and
relocations to other domains (costs and records in `reconfig`).

Every sample of the network, a job whose links dropped, whose RTT rose or whose domains' load
swung (against what it saw when placed), or that started smaller than it asked while
accelerators have since come free, is re-planned:
- at once, the best plan on the domains it holds, make-before-break, when that pays
  (`Switch.MAKE_BEFORE_BREAK`; `Switch.FALLBACK` to a restart when there is no room alongside);
- then, as a separate decision, a relocation to other domains, only when it pays for all it
  costs (`reconfig.charge_s`) by more than the model's error (`MOVE_MARGIN`): by a paused
  transfer or by copying its next checkpoint.
The old way (`Switch.RESTART`) restarts on any better plan, when that pays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from xdscheduler.planner.placement import Placement
from xdscheduler.sim import reconfig
from xdscheduler.sim.measurement import Action
from xdscheduler.sim.reconfig import (
    COMM_INIT_S,
    RESTART_S,
    Phase,
    Relocate,
    Relocation,
    Swing,
    Switch,
)
from xdscheduler.sim.recovery import restore_s

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine

LINK_DROP = 0.30  # re-plan when a link a job uses loses 30% of its bandwidth at placement,
RTT_RISE = 0.50  # or its RTT rises by half,
LOAD_TRIGGER = 0.20  # or a domain it uses sees its background load swing by a fifth
# A relocation's speed on its target is predicted (the job's speed where it runs is observed),
# and the cost model's log residual against published runs is 5% (benchmarks/calibration.md):
# a move is made when its charge beats staying by twice that. Smaller predicted gains are
# within the model's error, while their WAN bill is certain.
MOVE_MARGIN = 0.10


class _Option(NamedTuple):
    """A make-before-break switch weighed for a trigger."""

    placement: Placement
    how: Switch  # make-before-break, or fallback (no room alongside: restart)
    rate: float  # tokens/s on it
    cost: reconfig.SwitchCost
    prepare_s: float
    pause_s: float
    charge_s: float  # reconfig.charge_s of it


@dataclass
class Replanning:
    """The triggers' references and the relocations under way."""

    mode: Switch = Switch.MAKE_BEFORE_BREAK  # or Switch.RESTART, the old way
    reference: dict[str, tuple] = field(default_factory=dict)  # job -> links, loads placed on
    grow_tried: dict[str, tuple] = field(default_factory=dict)  # job -> free when growing did
    # not pay
    moving: dict[str, Relocation] = field(default_factory=dict)  # job -> relocation under way
    relocations: list[Relocation] = field(default_factory=list)  # every one decided

    # ------------------------------------------------------------------ hooks of the core

    def placed(self, eng: Engine, r) -> None:
        """The job has a new placement: triggers compare against what it sees now."""
        self.reference[r.name] = self._reference(eng, r.placement)

    def settled(self, r) -> bool:
        """Nothing pending for the job but, at most, a relocation about to switch."""
        m = self.moving.get(r.name)
        return r.next is None or (m is not None and m.phase == Phase.HELD)

    def cancel_move(self, eng: Engine, r) -> None:
        m = self.moving.pop(r.name, None)
        if m is not None:
            m.phase = Phase.CANCELLED
            eng.events.cancel(("move", r.name))

    # ------------------------------------------------------------------ triggers

    def retrigger(self, eng: Engine, t: float) -> None:
        """Re-plan running jobs whose links or domains changed enough, or that started smaller
        than they asked while accelerators have since come free, when moving pays."""
        free = tuple(d.available for d in eng.view.domains)
        for r in list(eng.active):
            if not r.running or r.paused_until > t or r.next is not None or r.name in self.moving:
                continue
            if self.mode != Switch.RESTART and self._yield(eng, r, t):
                continue
            grow = (
                not eng.queue
                and r.placed.total_gpus < r.spec.gpus_max
                and sum(free) >= r.placed.total_gpus
                and self.grow_tried.get(r.name, ()) != free
            )
            cause = self._triggered(eng, r) or ("grow" if grow else "")
            if not cause:
                continue
            self.grow_tried[r.name] = free
            if self.mode != Switch.RESTART:
                self._respond(eng, r, t, cause)
                continue
            new = eng.policy.replan(eng.replan_spec(r), r.placed, eng.speeds.links_left(r))
            if new is None or new.same_as(r.placement):
                self._kept(eng, r, t, cause)
                continue
            self._restart(eng, r, new, t, cause)

    def _yield(self, eng: Engine, r, t: float) -> bool:
        """A job spread over domains gives one back when a queued job needs it to start (the
        policy says which, `Policy.yielded`): make-before-break onto the domains it keeps."""
        yielded = getattr(eng.policy, "yielded", None)
        if yielded is None or not eng.queue or len(r.placement.domains) < 2:
            return False
        links = eng.speeds.links_left(r)
        new = yielded(eng.replan_spec(r), r.placement, links, [q.spec for q in eng.queue], t)
        if new is None:
            return False
        rate, cost, _ = _move_cost(eng, r, r.placement, new)
        eng.swing_meter.record(
            Swing(
                r.name,
                "yield",
                Switch.MAKE_BEFORE_BREAK,
                t,
                r.rate,
                r.rate,
                rate,
                r.done,
                cost.prepare_s,
                cost.pause_s,
            ),
            r,
        )
        r.count_replan()
        eng.switches.prepare(r, new, t + cost.prepare_s, cost.pause_s)
        eng.recorder.decision(
            r,
            Action.REPLAN,
            new,
            f"yield: gives a domain back to the queue; {new.explanation}",
            new.decision_ms,
        )
        return True

    def _reference(self, eng: Engine, p: Placement) -> tuple:
        """What the triggers compare against: the WAN links and loads a placement sees now (a
        mixed domain's own network between its pools does not swing)."""
        bw, rtt = eng.view.bandwidth_gbps, eng.view.rtt_ms
        load = np.array([d.reserved_gpus / max(d.total_gpus, 1) for d in eng.view.domains])
        links = eng.view.wan_links(p)
        return (
            np.array([min(bw[a, b], bw[b, a]) for a, b in links]),
            np.array([rtt[a, b] for a, b in links]),
            load[list(p.domains)],
        )

    def _triggered(self, eng: Engine, r) -> str:
        """What fired a re-plan ("" for nothing): an RTT rise, a load swing, a bandwidth drop."""
        bw_ref, rtt_ref, load_ref = self.reference[r.name]
        bw_now, rtt_now, load_now = self._reference(eng, r.placement)
        if np.any(rtt_now >= (1 + RTT_RISE) * rtt_ref):
            return "rtt"
        if np.any(np.abs(load_now - load_ref) >= LOAD_TRIGGER * load_ref):
            return "load"
        return "bandwidth" if np.any(bw_now <= (1 - LINK_DROP) * bw_ref) else ""

    def _kept(self, eng: Engine, r, t: float, cause: str, rate: float | None = None) -> None:
        """A trigger that left the plan as it was: new reference, and a record of it."""
        self.placed(eng, r)
        rate = eng.speeds.of(r, r.placement)[0] if rate is None else rate
        eng.swing_meter.record(
            Swing(r.name, cause, Switch.KEPT, t, r.rate, rate, rate, r.done, end_s=t), r
        )

    def _restart(self, eng: Engine, r, new: Placement, t: float, cause: str) -> None:
        """The old move: save, stop, and start the new plan RESTART_S later."""
        new_rate = eng.speeds.of(r, new, new.estimate)[0]
        if r.left / new_rate + RESTART_S >= r.left / max(r.rate, 1e-9):
            self._kept(eng, r, t, cause)
            return  # moving would not pay for the restart
        moved = reconfig.switch_cost(r.placement, new, r.spec.arch.params, eng.view).wan_gb
        eng.swing_meter.record(
            Swing(
                r.name,
                cause,
                Switch.RESTART,
                t,
                r.rate,
                eng.speeds.of(r, r.placement)[0],
                new_rate,
                r.done,
                pause_s=RESTART_S,
                wan_gb=moved,
            ),
            r,
        )
        r.count_replan()
        eng.restart(r, new, RESTART_S)

    # ------------------------------------------------------------------ adjustments

    def _respond(self, eng: Engine, r, t: float, cause: str) -> None:
        """A trigger's response: at once, the best plan on the data centres the job holds (state
        re-laid over their own networks only), when that pays; then, as a separate decision, a
        relocation to other data centres, only when it pays for all it costs (`reconfig.charge_s`:
        the job's time and the accelerator-seconds it holds idle or redoing work)."""
        left = r.left
        now_rate = eng.speeds.of(r, r.placement)[0]
        sites = eng.view.same_sites(r.placement.domains)
        links = eng.speeds.links_left(r)
        own = links.with_down({n for i, n in enumerate(eng.names) if i not in sites})
        spec = eng.replan_spec(r)
        here = eng.policy.replan(spec, r.placement, own)
        far = [
            p
            for p in (here, eng.policy.replan(spec, r.placement, links))
            if p is not None and not p.same_as(r.placement)
        ]
        adjust = (
            self._switch_option(eng, r, here, now_rate, left)
            if (here is not None and not here.same_as(r.placement))
            else None
        )
        if adjust is None or adjust.cost.wan_gb > 0 or adjust.charge_s >= left / now_rate:
            adjust = None  # what needs the WAN is a relocation, weighed below
            self._kept(eng, r, t, cause, now_rate)
        else:
            self._adjust(eng, r, adjust, t, cause, now_rate)
        # Relocations are weighed from where the adjustment leaves the job.
        base, rate = (adjust.placement, adjust.rate) if adjust else (r.placement, now_rate)
        moves = [m for p in far for m in self._relocations(eng, r, base, p, rate, left, cause, t)]
        # It must pay the job (its charge, by more than the model's error) and the cluster: no
        # more accelerator-seconds to finish than staying takes.
        best = min(
            (m for m in moves if m.gpu_s <= m.stay_gpu_s), key=lambda m: m.charge_s, default=None
        )
        if best is not None and best.charge_s < (1 - MOVE_MARGIN) * best.stay_s:
            self._plan_relocation(eng, r, best, t)

    def _switch_option(self, eng: Engine, r, p: Placement, now_rate: float, left: float) -> _Option:
        """A make-before-break switch from the job's placement to p: its pause, and its
        charge."""
        rate, cost, extra = _move_cost(eng, r, r.placement, p)
        if cost.alongside:
            finish, idle = reconfig.switch_charge(
                left, now_rate, rate, r.placement.total_gpus, extra, cost.prepare_s, cost.pause_s
            )
            return _Option(
                p,
                Switch.MAKE_BEFORE_BREAK,
                rate,
                cost,
                cost.prepare_s,
                cost.pause_s,
                reconfig.charge_s(finish, idle, p.total_gpus),
            )
        pause = RESTART_S + cost.pause_s  # a restart moves the same state, and more slowly
        return _Option(
            p,
            Switch.FALLBACK,
            rate,
            cost,
            0.0,
            pause,
            reconfig.charge_s(pause + left / rate, p.total_gpus * pause, p.total_gpus),
        )

    def _adjust(self, eng: Engine, r, m: _Option, t: float, cause: str, now_rate: float) -> None:
        """Start a switch on the job's own domains: prepared alongside, or (no room) restarted."""
        eng.swing_meter.record(
            Swing(
                r.name, cause, m.how, t, r.rate, now_rate, m.rate, r.done, m.prepare_s, m.pause_s
            ),
            r,
        )
        r.count_replan()
        new = m.placement
        if m.how == Switch.FALLBACK:
            eng.restart(r, new, m.pause_s)
            return
        before = {d.name: d.free_gpus for d in eng.view.domains}
        eng.switches.prepare(r, new, t + m.prepare_s, m.pause_s)
        eng.recorder.decision(
            r,
            Action.REPLAN,
            new,
            f"{cause}: prepared alongside for "
            f"{m.prepare_s:.0f} s, then a {m.pause_s:.2f} s switch; "
            f"{new.explanation}",
            new.decision_ms,
            before,
        )

    def switch_due(self, eng: Engine, t: float) -> None:
        """Jobs whose next plan is ready switch to it now (or drop it if a domain of it fell)."""
        for r in [r for r in eng.active if r.next is not None and r.switch_at <= t]:
            if not r.running or r.next is None:
                continue
            if any(eng.names[d] in eng.down for d in r.next.domains):
                eng.switches.cancel(r)
                continue
            old = eng.switches.switch(r)
            m = self.moving.get(r.name)
            if m is not None and m.phase == Phase.HELD:
                self._relocated(eng, r, m, old, t)

    # ------------------------------------------------------------------ relocations

    def _relocations(
        self,
        eng: Engine,
        r,
        base: Placement,
        p: Placement,
        base_rate: float,
        left: float,
        cause: str,
        t: float,
    ) -> list[Relocation]:
        """The two ways to move from `base` to p across the WAN, each with its charge (none
        when p sends nothing over the WAN, or has no room alongside)."""
        if not reconfig.crosses_wan(base, p, eng.view):
            return []
        rate, cost, extra = _move_cost(eng, r, base, p)
        if not cost.alongside:
            return []
        held, gpus = base.total_gpus, p.total_gpus
        stay_s, stay_gpu_s = left / base_rate, held * left / base_rate
        wan_s = reconfig.wan_seconds(cost.wan_cost, p, eng.view)  # its bill, in its time

        def move(
            how: Relocate,
            charge: tuple[float, float],
            *,
            before_s: float,
            extra_s: float,
            at_s: float,
            transfer_s: float,
            hold_s: float,
            pause_s: float,
        ) -> Relocation:
            """`charge`: its (finish s, idle accelerator-s); `before_s` from now to the switch,
            `extra_s` of it with the target's new accelerators held."""
            finish, idle = charge
            return Relocation(
                job=r.name,
                cause=cause,
                how=how,
                start_s=t,
                target=p,
                wan_gb=cost.wan_gb,
                wan_cost=cost.wan_cost,
                charge_s=reconfig.charge_s(finish, idle, gpus) + wan_s,
                stay_s=stay_s,
                gpu_s=reconfig.gpu_seconds(finish, before_s, held, extra, extra_s, gpus),
                stay_gpu_s=stay_gpu_s,
                at_s=at_s,
                transfer_s=transfer_s,
                hold_s=hold_s,
                pause_s=pause_s,
            )

        before = cost.prepare_s + cost.pause_s
        transfer = move(
            Relocate.TRANSFER,
            reconfig.switch_charge(
                left, base_rate, rate, held, extra, cost.prepare_s, cost.pause_s
            ),
            before_s=before,
            extra_s=before,
            at_s=t,
            transfer_s=cost.pause_s,
            hold_s=cost.prepare_s,
            pause_s=cost.pause_s,
        )
        wait = max(r.next_checkpoint_s - t, 0.0)
        hold = max(restore_s(eng.scn, r, p), COMM_INIT_S)
        copy = move(
            Relocate.CHECKPOINT,
            reconfig.checkpoint_charge(left, base_rate, rate, held, extra, wait, cost.wan_s, hold),
            before_s=wait + cost.wan_s + hold,
            extra_s=hold,
            at_s=t + wait,
            transfer_s=cost.wan_s,
            hold_s=hold,
            pause_s=0.0,
        )
        return [transfer, copy]

    def _plan_relocation(self, eng: Engine, r, m: Relocation, t: float) -> None:
        self.relocations.append(m)
        self.moving[r.name] = m
        eng.events.schedule(("move", r.name), m.at_s)
        if m.how == Relocate.TRANSFER and r.next is None:  # nothing before it: the target
            self._take(eng, r, m, t)  # taken now, before another job's decision counts it
        how = (
            "a paused transfer"
            if m.how == Relocate.TRANSFER
            else f"its checkpoint at {m.at_s:.0f} s, copied"
        )
        eng.recorder.decision(
            r,
            Action.RELOCATE,
            m.target,
            f"{m.cause}: relocate by {how} "
            f"({m.wan_gb:.0f} GB, {m.transfer_s:.0f} s over the WAN); charged "
            f"{m.charge_s:.0f} s against {m.stay_s:.0f} s staying; "
            f"{m.target.explanation}",
            m.target.decision_ms,
        )

    def relocations_due(self, eng: Engine, t: float) -> None:
        """Relocations move on: a checkpoint written starts its copy; a copy done, or the
        adjustment before a transfer done, takes the target's accelerators alongside."""
        for r in [r for r in eng.active if r.name in self.moving]:
            m = self.moving.get(r.name)
            if m is None or not r.running or m.phase not in (Phase.WAIT, Phase.COPY) or m.at_s > t:
                continue
            if m.phase == Phase.WAIT and m.how == Relocate.CHECKPOINT:
                m.checkpoint, m.phase, m.at_s = r.checkpoint, Phase.COPY, t + m.transfer_s
                eng.events.schedule(("move", r.name), m.at_s)
                r.charge_wan(m.wan_gb, m.wan_cost)
                continue
            if r.next is None and r.paused_until <= t:  # else a switch is under way: its
                self._take(eng, r, m, t)  # end is an event

    def _take(self, eng: Engine, r, m: Relocation, t: float) -> None:
        """The target's accelerators taken alongside the job's, until the switch; a target
        no longer there cancels the relocation."""
        if not _target_free(eng, r, m):
            self.cancel_move(eng, r)
            return
        if m.how == Relocate.TRANSFER:
            r.charge_wan(m.wan_gb, m.wan_cost)
        m.phase = Phase.HELD
        eng.events.cancel(("move", r.name))
        eng.switches.prepare(r, m.target, t + m.hold_s, m.pause_s)

    def _relocated(self, eng: Engine, r, m: Relocation, old: Placement, t: float) -> None:
        """A relocation's switch: through a checkpoint, the job goes back to it (redoing what
        the old plan trained since), and what was lost is recorded."""
        extra = sum(reconfig.new_accelerators(old, m.target).values())
        if m.how == Relocate.CHECKPOINT:
            m.redone = r.done - m.checkpoint
            since = t - (m.at_s - m.transfer_s)  # from the checkpoint to the switch
            eng.rewind(r, m.checkpoint)
            m.lost_s, m.lost_gpu_s = since, old.total_gpus * since + extra * m.hold_s
        else:
            m.lost_s = m.pause_s
            m.lost_gpu_s = (old.total_gpus + extra) * m.pause_s + extra * m.hold_s
        m.phase, m.switch_s = Phase.DONE, t
        del self.moving[r.name]
        r.count_replan()


def _move_cost(
    eng: Engine, r, base: Placement, p: Placement
) -> tuple[float, reconfig.SwitchCost, int]:
    """The job's rate on p (a placement the policy just made), what moving there from `base`
    costs, and how many accelerators it takes beside those `base` holds."""
    rate, window = eng.speeds.of(r, p, p.estimate)
    cost = reconfig.switch_cost(base, p, r.spec.arch.params, eng.view, window)
    return rate, cost, sum(reconfig.new_accelerators(base, p).values())


def _target_free(eng: Engine, r, m: Relocation) -> bool:
    """The relocation's target is up and its accelerators free beside the job's."""
    extra = reconfig.new_accelerators(r.placement, m.target)
    return not any(eng.names[d] in eng.down for d in m.target.domains) and all(
        n <= eng.view.domains[d].available for d, n in extra.items()
    )
