"""The speed each running job trains at, a part of the engine (`sim.engine`).

A job trains at its placement's step time under the links now (the cost model's), stretched by
a straggler in it, or at a study's ground truth (`sim.truth`) that the policies never see: their
model learns from the rates it observes (`sim.correction`), and each placement's prediction is
recorded beside the truth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdscheduler.planner.placement import Estimate, Placement
from xdscheduler.planner.search import estimate_placement
from xdscheduler.planner.view import ClusterView
from xdscheduler.sim.correction import Correction, Prediction
from xdscheduler.sim.jobs import JobRun

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

    def estimate(self, r: JobRun, p: Placement) -> Estimate:
        """Placement p's estimate for job r under the links now."""
        return estimate_placement(p, r.spec, self.eng.view)

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
        current = est is None  # then the correction need not estimate it again
        est = est or self.estimate(r, r.placed)
        tokens = r.spec.global_batch * r.spec.seq
        step_s = est.step_time_s if self.truth is None else self._observe(r, est, placed, current)
        r.rate = tokens / (step_s * r.slowdown)
        r.bytes_per_token = est.cross_domain_bytes_per_step / tokens
        r.price_per_gb = est.wan_price_per_gb
        self.eng.wake(r)

    def _observe(self, r: JobRun, est: Estimate, placed: bool, current: bool) -> float:
        """The job's true step time now, seen by the policies' model, which learns from it; a
        new placement's prediction is recorded beside it (a fault's slowdown is no error of
        the model: it is left out)."""
        assert self.truth is not None and self.correction is not None  # only with a truth
        eng, p = self.eng, r.placed
        true_s = self.truth.step_s(p, r.spec, eng.view)
        if placed:
            nominal = estimate_placement(p, r.spec, eng.view.with_factors())
            self.predictions.append(
                Prediction(r.name, eng.now, est.step_time_s, nominal.step_time_s, true_s)
            )
        # `current`: est is the model's under this view, which carries the correction's
        # factors, so the correction's own estimate would be the same
        self.correction = self.correction.observe(
            p, r.spec, eng.view, true_s, est.step_time_s if current else None
        )
        eng.view = self.correction.apply(eng.view)
        return true_s
