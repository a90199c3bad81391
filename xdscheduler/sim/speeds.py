"""The speed each running job trains at, a part of the engine (`sim.engine`).

A job trains at its placement's step time under the links now (the cost model's), stretched by
a straggler in it, or at a study's ground truth (`sim.truth`) that the policies never see: their
model learns from the rates it observes (`sim.correction`), and each placement's prediction is
recorded beside the truth. Jobs that cross the same WAN link share it (`sim.wan_traffic`): each
trains at its step under the links as the others leave them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdscheduler.planner.placement import Estimate, Placement
from xdscheduler.planner.search import estimate_placement
from xdscheduler.planner.view import ClusterView
from xdscheduler.sim.correction import Correction, Prediction
from xdscheduler.sim.jobs import JobRun
from xdscheduler.sim.wan_traffic import Traffic, hops

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine
    from xdscheduler.sim.truth import Truth


class Speeds:
    """The estimates and speeds of the engine's jobs, and what the model learns of the truth."""

    def __init__(self, eng: Engine, truth: Truth | None):
        self.eng = eng
        self.truth = truth  # what jobs really run at (None: the model)
        self.correction = Correction.start(len(eng.names)) if truth else None
        self.predictions: list[Prediction] = []  # each placement's step, predicted and true
        self.shares: dict[str, tuple] = {}  # each job's links as last timed, while others send

    def traffic(self) -> Traffic:
        eng = self.eng
        return Traffic(eng.active, eng.view, eng.now)

    def view_of(
        self, r: JobRun, p: Placement | None = None, traffic: Traffic | None = None
    ) -> ClusterView:
        """The view as job r on p (default: its own) finds the links now: less what the other
        running jobs send."""
        return (traffic or self.traffic()).seen_by(r, p or r.placed, self.eng.view)

    def links_left(self, r: JobRun | None = None) -> ClusterView:
        """The view as a job placed now (or running job r, re-planned) finds the links: less
        what the running jobs (but r) send."""
        return self.eng.view.less_traffic(*self.traffic().without(r.name if r else None))

    def estimate(self, r: JobRun, p: Placement) -> Estimate:
        """Placement p's estimate for job r under the links now, as the others leave them."""
        return estimate_placement(p, r.spec, self.view_of(r, p))

    def of(self, r: JobRun, p: Placement, est: Estimate | None = None) -> tuple[float, float]:
        """Tokens/s of job r on p (under `est`, else the links now) and the seconds of each step
        in which optimizer state could stream."""
        est = est or self.estimate(r, p)
        step = est.step_time_s * r.slowdown
        return r.spec.global_batch * r.spec.seq / step, est.stream_window_s * r.slowdown

    def corrected(self, view: ClusterView) -> ClusterView:
        """The view as the policies' model sees it, with what it learnt of the truth."""
        return self.correction.apply(view) if self.correction else view

    def set_slowdown(self, r: JobRun, factor: float, refresh: bool = True) -> None:
        """A straggler in its placement stretches every step by `factor` (1: none); its speed
        follows now, or (`refresh=False`) when next estimated."""
        r.slowdown = factor
        if refresh and r.running:
            self.update(r)

    def update(self, r: JobRun, est: Estimate | None = None, placed: bool = False) -> None:
        """The job trains at its step time on its placement (`est`: the policies' estimate of
        it, made in this step; None: the model's under the view now), or at the truth's;
        `placed`: a placement it has just taken."""
        view = self.view_of(r)
        self.shares[r.name] = _share(r, view)
        # The model's step under the links as r finds them; a policy's estimate is that where
        # no other job sends over its links (made in this step, under these links)
        model = est if est is not None and view is self.eng.view else None
        model = model or estimate_placement(r.placed, r.spec, view)
        tokens = r.spec.global_batch * r.spec.seq
        step_s = (
            model.step_time_s
            if self.truth is None
            else self._observe(r, view, est or model, None if model is est else model, placed)
        )
        r.rate = tokens / (step_s * r.slowdown)
        r.bytes_per_token = model.cross_domain_bytes_per_step / tokens
        r.price_per_gb = model.wan_price_per_gb
        self.eng.wake(r)

    def reshare(self, traffic: Traffic | None = None) -> None:
        """Jobs whose links others now send more or less over train at their new speed
        (`traffic`: the running jobs' now, where already made)."""
        traffic = traffic or self.traffic()
        for r in self.eng.active:
            if hops(r.placed, self.eng.view) and self.shares.get(r.name) != _share(
                r, self.view_of(r, traffic=traffic)
            ):
                self.update(r)

    def _observe(
        self, r: JobRun, view: ClusterView, est: Estimate, model: Estimate | None, placed: bool
    ) -> float:
        """The job's true step time now under `view` (its links as it finds them), seen by the
        policies' model, which learns from it; a new placement's prediction (`est`) is recorded
        beside it (a fault's slowdown is no error of the model: it is left out). `model`: the
        model's estimate under `view`, where already made."""
        assert self.truth is not None and self.correction is not None  # only with a truth
        eng, p = self.eng, r.placed
        true_s = self.truth.step_s(p, r.spec, view)
        if placed:
            nominal = estimate_placement(p, r.spec, view.with_factors())
            self.predictions.append(
                Prediction(r.name, eng.now, est.step_time_s, nominal.step_time_s, true_s)
            )
        # the view carries the correction's factors, so its own estimate would be `model`'s
        self.correction = self.correction.observe(
            p, r.spec, view, true_s, model.step_time_s if model else None
        )
        eng.view = self.correction.apply(eng.view)
        return true_s


def _share(r: JobRun, view: ClusterView) -> tuple:
    """The bandwidth job r finds on each of its WAN hops (none: it crosses none)."""
    return tuple(round(float(view.bandwidth_gbps[a, b]), 6) for a, b in hops(r.placed, view))
