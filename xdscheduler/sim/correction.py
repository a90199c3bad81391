"""What the policies learn of their model's error from the step rates they observe.

The model is corrected by a speed factor per domain (on its accelerators' peak and memory
bandwidth) and a goodput factor per link (on its bandwidth), all 1 at first, which the view
applies (`ClusterView.with_factors`) to every estimate the policies make. Each time a job's
step rate is observed (on a new placement, and when the links under a job across domains
change), the factor it depends on moves: the domain of a job inside one (the pools of a job
inside one data centre), a cross-domain job's narrowest WAN link (domains are left to the jobs
inside them). The observation implies the factor
at which the model, corrected, would have predicted the step it saw; the new factor is the
exponentially weighted mean, in logs, of the old and that one (weight `WEIGHT`). The implied
factor is found with one Newton step on ln(step time) against ln(factor), whose slope is
measured by bumping the factor by 1%: a step that hardly depends on a factor (communication
hidden behind compute) says nothing about it and leaves it alone.

The live plane learns from a run's measured step with `observe_run`: there a cross-domain run's
excess is split between its narrowest link and a factor of the job's own (the studies' engine
has no such factor yet, and puts it all on the link).

`Prediction` records what the policy's estimate said for each placement a job ran on, what the
nominal model would have said, and what the job ran at: the study's prediction error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import DEFAULT_OPTIONS, JobSpec, estimate_placement
from xdscheduler.planner.space import SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.sim.truth_params import PARAMS

WEIGHT = 0.3  # of the newest observation; jobs' jitter (sd of ln ~0.08) makes single ones noisy
BUMP = 0.01  # relative change of a factor that measures the step's dependence on it
MIN_ELASTICITY = 0.05  # d ln(step) / d ln(factor) below this: the step says nothing of it
MAX_LOG_MOVE = math.log(2)  # one observation implies at most half or twice the factor
# How far the model is expected to be off, in ln, from the public measurements the studies'
# truth is drawn from (sim/truth_params.py): a link's goodput (the Laplace spread of Skyplane's
# pair-by-pair change, sd sqrt(2) x scale), and a job's own step apart from its links (its
# jitter's spread, with its domains' compute against the published runs)
_FITTED: dict = PARAMS
LINK_SD = math.sqrt(2) * _FITTED["goodput"]["scale"]
JOB_SD = math.hypot(_FITTED["jitter"]["mean_log"], _FITTED["speed"]["sigma"])


@dataclass(frozen=True)
class Prediction:
    """A placement a job ran on: its step time as predicted and as run."""

    job: str
    time_s: float
    predicted_s: float  # the policy's estimate: the model as corrected then
    nominal_s: float  # the model without corrections
    true_s: float  # what the job ran at


@dataclass(frozen=True, eq=False)
class Correction:
    """The factors learnt so far."""

    speed: np.ndarray  # (K,) per domain
    goodput: np.ndarray  # (K, K) per link, both directions alike
    # (K, K): the links an observation taught something, both directions alike; factors given
    # outright count as learnt where they differ from 1
    learnt: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.learnt is None:
            object.__setattr__(self, "learnt", self.goodput != 1.0)

    @classmethod
    def start(cls, k: int) -> Correction:
        return cls(np.ones(k), np.ones((k, k)))

    def apply(self, view: ClusterView) -> ClusterView:
        return view.with_factors(self.speed, self.goodput)

    def relaxed(self, share: float) -> Correction:
        """The factors moved `share` (0-1) of the way back to 1, in logs: what was learnt of a
        domain or a link no job runs on grows stale (a slowdown may be over), and a factor
        left low would keep every job off it, so that nothing would ever check it again."""
        keep = 1.0 - share
        return replace(self, speed=self.speed**keep, goodput=self.goodput**keep)

    def pooled(self, fabric: np.ndarray | None = None) -> Correction:
        """Every WAN link nothing was learnt of yet given the geometric mean of what was learnt
        of the others: a link no job has crossed is expected to deliver what crossed ones did,
        not the model's full rate. Deciding a move on the factors as they are makes a job's
        own links, the only ones it taught anything, look worse than all the others. A data
        centre's own network between its pools (`fabric`, K × K) is no WAN link: it neither
        gives to the mean nor takes it."""
        wan = ~np.eye(len(self.speed), dtype=bool)
        if fabric is not None:
            wan &= ~fabric
        seen = wan & self.learnt
        if not seen.any():
            return self
        prior = float(np.exp(np.log(self.goodput[seen]).mean()))
        return replace(self, goodput=np.where(wan & ~seen, prior, self.goodput))

    def forgetting_link(self, i: int, j: int) -> Correction:
        """The link between domains i and j back to the model: what was learnt of it tells
        nothing once it is seen to have changed."""
        goodput, learnt = self.goodput.copy(), self.learnt.copy()
        goodput[i, j] = goodput[j, i] = 1.0
        learnt[i, j] = learnt[j, i] = False
        return replace(self, goodput=goodput, learnt=learnt)

    def observe(
        self,
        p: Placement,
        spec: JobSpec,
        view: ClusterView,
        true_s: float,
        step_s: float | None = None,
        weight: float = WEIGHT,
        opts: SearchOptions = DEFAULT_OPTIONS,
    ) -> Correction:
        """The factors after the job was seen stepping in `true_s` on p under the view's
        links now; `step_s`: the model's step on p under these factors, when already known
        (`self` comes back unchanged where no factor explains the step). `weight`: of this
        observation (1 for a median over many steps, which one step's jitter does not move).
        `opts`: the stack and constants the model runs with."""
        corrected = self.apply(view)
        if step_s is None:
            step_s = estimate_placement(p, spec, corrected, opts).step_time_s
        seen = (p, spec, view, true_s, step_s, weight, opts)
        if not view.over_wan(p.domains):  # inside one data centre: its domains' (pools') speed
            return self._moved("speed", (list(p.domains),), *seen)
        a, b = _narrowest(p, corrected)
        return self._moved("goodput", ([a, b], [b, a]), *seen)

    def observe_run(
        self,
        p: Placement,
        spec: JobSpec,
        view: ClusterView,
        true_s: float,
        opts: SearchOptions = DEFAULT_OPTIONS,
        own: float = 1.0,
    ) -> tuple[Correction, float | None]:
        """A run's step taken whole (weight 1). Inside one domain, or one data centre's pools:
        `observe`, and None (it says nothing of the job's crossing). Across the WAN: the factors,
        and the job's own factor on its steps across domains (`own` until now). The step's log
        excess over the model (as corrected, times `own`) is split between the job's narrowest WAN
        link and the job itself, each in proportion to how far it is expected to be off (LINK_SD,
        JOB_SD) and to how much the step depends on it: the least-squares split under those priors.
        All of it on the link made a busy host's slow steps look like a slow link, and a link read a
        little faster then looked like a large saving; a step that hardly depends on its link
        (DiLoCo's) leaves it all to the job."""
        corrected = self.apply(view)
        step_s = estimate_placement(p, spec, corrected, opts).step_time_s
        if not view.over_wan(p.domains):
            return self.observe(p, spec, view, true_s, step_s, weight=1.0, opts=opts), None
        a, b = _narrowest(p, corrected)
        cells = ([a, b], [b, a])
        elasticity = self._elasticity("goodput", cells, p, spec, view, step_s, opts)
        excess = math.log(step_s * own / true_s)  # < 0: the run is slower than predicted
        if elasticity < MIN_ELASTICITY:
            return self, own * math.exp(-excess)
        link = (LINK_SD * elasticity) ** 2  # the link's variance, in ln of the step
        share = link / (link + JOB_SD**2)  # of the excess, the link's
        log_move = float(np.clip(share * excess / elasticity, -MAX_LOG_MOVE, MAX_LOG_MOVE))
        left = own * math.exp(elasticity * log_move - excess)
        return self._scaled("goodput", cells, log_move), left

    def _moved(
        self,
        name: str,
        cells: tuple,
        p: Placement,
        spec: JobSpec,
        view: ClusterView,
        true_s: float,
        step_s: float,
        weight: float,
        opts: SearchOptions,
    ) -> Correction:
        elasticity = self._elasticity(name, cells, p, spec, view, step_s, opts)
        if elasticity < MIN_ELASTICITY:
            return self
        implied = np.clip(math.log(step_s / true_s) / elasticity, -MAX_LOG_MOVE, MAX_LOG_MOVE)
        return self._scaled(name, cells, weight * float(implied))

    def _elasticity(
        self,
        name: str,
        cells: tuple,
        p: Placement,
        spec: JobSpec,
        view: ClusterView,
        step_s: float,
        opts: SearchOptions,
    ) -> float:
        """d ln(step) / d ln(factor) of the factor's `cells`, by bumping them BUMP."""
        bumped = getattr(self, name).copy()
        bumped[cells] *= 1 + BUMP
        bumped_s = estimate_placement(
            p, spec, replace(self, **{name: bumped}).apply(view), opts
        ).step_time_s
        return math.log(step_s / bumped_s) / math.log1p(BUMP)

    def _scaled(self, name: str, cells: tuple, log_move: float) -> Correction:
        """The factor's `cells` times exp(log_move); a link so moved counts as learnt."""
        moved = getattr(self, name).copy()
        moved[cells] *= math.exp(log_move)
        if name == "speed":
            return replace(self, speed=moved)
        learnt = self.learnt.copy()
        learnt[cells] = True
        return replace(self, goodput=moved, learnt=learnt)


def _narrowest(p: Placement, view: ClusterView) -> tuple[int, int]:
    """The WAN link that bounds a cross-domain placement's traffic: the narrowest between
    consecutive stages (both ways: activations go on, gradients come back), or the narrowest
    hop of the ring of replicas (one way: each sends only to the next)."""
    bw = view.goodput_gbps
    return min(view.wan_links(p), key=lambda ab: bw[ab] if p.ring else min(bw[ab], bw[ab[::-1]]))


def error_figures(predictions: list[Prediction]) -> dict[str, float | None]:
    """|predicted / true − 1| of the placements' throughput (tokens/s), median and 90th
    percentile, and its signed mean (positive: predicted faster than the jobs ran), for the
    policy's corrected model (`prediction_*`) and the nominal one (`uncorrected_*`); None
    without predictions."""
    true = np.array([x.true_s for x in predictions])
    out: dict[str, float | None] = {}
    for prefix, attr in (("prediction", "predicted_s"), ("uncorrected", "nominal_s")):
        err = true / np.array([getattr(x, attr) for x in predictions]) - 1  # in throughput
        figures = (
            (np.median(np.abs(err)), np.percentile(np.abs(err), 90), err.mean())
            if len(err)
            else (None, None, None)
        )
        out.update(
            {
                f"{prefix}_{key}": None if v is None else float(v)
                for key, v in zip(("error_p50", "error_p90", "bias"), figures, strict=True)
            }
        )
    return out
