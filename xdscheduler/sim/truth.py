"""A study's ground truth: the speeds jobs really run at, which the policies' model does not know.

Drawn once per study from its seed, the same for every policy (`Truth.draw`), from
distributions fitted to public measurements by `python -m benchmarks.fit_truth` (parameters and
provenance in `truth_params`; that script's docstring says why each is fitted as it is):
- compute speed per domain: its accelerators sustain the model's peak throughput and memory
  bandwidth times a factor: the accelerator type's bias, shared by domains of that type, times
  the domain's own. ln(bias) ~ N(mu, type_sigma), ln(own) ~ N(0,
  domain_sigma), so that ln(factor) has the spread of the cost model's log residuals against
  published Megatron-LM/NeMo runs (benchmarks/calibration.md): mu 0.0006, sigma 0.050 in all,
  of which the part between deployments (0.034) is the domain's and the rest (0.037) the
  type's;
- WAN goodput per link: both directions carry its bandwidth times a factor with ln(factor) ~
  Laplace(loc, scale), the pair-by-pair change between the two Skyplane snapshots (2022-11 over
  2022-01; loc -0.002, scale 0.128), at most 1 / the model's WAN efficiency (goodput cannot
  exceed the line rate);
- jitter per job: every step stretched by a slowdown s >= 1, ln(s) ~ Exponential(mean_log):
  mean over median step time of the Alibaba PAI jobs (their step: the slowest worker's; mean
  0.082, so s is 1.06 at the median and 1.09 on average).
The engine runs each job at the cost model's step time under these factors (`step_s`); the
policies decide on the nominal view and learn the factors from the rates they observe
(`sim.correction`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xdscheduler.costmodel.constants import DEFAULT
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import JobSpec, estimate_placement
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Job, Scenario
from xdscheduler.sim.records import GroundTruth
from xdscheduler.sim.truth_params import PARAMS

TRUTH_STREAM = 0x7247  # the truth's own random stream, apart from the workload's and network's
MAX_GOODPUT = 1 / DEFAULT.wan_efficiency  # the model's goodput at this factor is the line rate


@dataclass(frozen=True, eq=False)
class Truth:
    """What jobs really run at, against the model."""

    speed: np.ndarray  # (K,) per domain: sustained compute over the model's
    goodput: np.ndarray  # (K, K) per link, both directions: WAN goodput over the model's
    jitter: dict[str, float]  # per job: its mean step over the step the model predicts (>= 1)

    @classmethod
    def draw(cls, scn: Scenario, jobs: list[Job], seed: int, params: dict = PARAMS) -> Truth:
        """The study's truth for its seed: the same scenario, jobs and seed give the same."""
        rng = np.random.default_rng([seed, TRUTH_STREAM])
        sp, gp, jp = params["speed"], params["goodput"], params["jitter"]
        types = sorted({d.accelerator.name for d in scn.domains})
        bias = dict(zip(types, rng.normal(sp["mu"], sp["type_sigma"], len(types)), strict=True))
        own = rng.normal(0.0, sp["domain_sigma"], len(scn.domains))
        speed = np.exp(
            [bias[d.accelerator.name] + x for d, x in zip(scn.domains, own, strict=True)]
        )
        index = {d.name: i for i, d in enumerate(scn.domains)}
        goodput = np.ones((len(scn.domains),) * 2)
        # one factor a WAN line between two sites, whichever of their pools it joins; none on
        # a mixed domain's own network
        lines = {link: line for link in scn.links if len(line := scn.line(link.a, link.b)) == 2}
        pairs = list(dict.fromkeys(lines.values()))
        drawn = np.exp(rng.laplace(gp["loc"], gp["scale"], len(pairs)))
        factor = dict(zip(pairs, np.minimum(drawn, MAX_GOODPUT), strict=True))
        for link, pair in lines.items():
            i, j = index[link.a], index[link.b]
            goodput[i, j] = goodput[j, i] = factor[pair]
        names = sorted(j.name for j in jobs)
        slow = np.exp(rng.exponential(jp["mean_log"], len(names)))
        return cls(speed, goodput, dict(zip(names, slow.tolist(), strict=True)))

    @classmethod
    def model(cls, scn: Scenario, jobs: list[Job]) -> Truth:
        """The model itself as the truth: every factor 1."""
        k = len(scn.domains)
        return cls(np.ones(k), np.ones((k, k)), {j.name: 1.0 for j in jobs})

    def view(self, view: ClusterView) -> ClusterView:
        """The view as it really is: the truth's factors in place of any the policies learnt."""
        return view.with_factors(self.speed, self.goodput)

    def step_s(self, p: Placement, spec: JobSpec, view: ClusterView) -> float:
        """The job's true step time on p under the view's links now, its jitter included."""
        return estimate_placement(p, spec, self.view(view)).step_time_s * self.jitter[spec.name]

    def summary(self, scn: Scenario) -> GroundTruth:
        """The truth as report.json shows it."""
        index = {d.name: i for i, d in enumerate(scn.domains)}
        jitter = list(self.jitter.values())
        return GroundTruth(
            speed_factor={d.name: float(s) for d, s in zip(scn.domains, self.speed, strict=True)},
            goodput_factor={
                f"{x.a}-{x.b}": float(self.goodput[index[x.a], index[x.b]]) for x in scn.links
            },
            jitter_p50=float(np.median(jitter)) if jitter else None,
            jitter_max=float(np.max(jitter)) if jitter else None,
        )
