"""Does the weight sweep find the Pareto front? Checked on a fixed set of decision states.

For each state every candidate the agents could pick (any weighting's allocations and plans) is
evaluated exhaustively on efficiency, utilisation and cost. A linear weighting can only ever
reach the supported points of the front: for each weighting of the sweep, the exhaustive
argmax of R. Coverage is the share of those Pareto-optimal choices the trained agents pick.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from xdscheduler.planner.objective import pareto_mask
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.candidates import Choices, choices
from xdscheduler.scenario import Weights
from xdscheduler.textfile import write_atomic

STATES_SEED = 777_000  # far from training's episode seeds


class Chooser(Protocol):
    def choose(self, ch: Choices) -> int | None:
        """The candidate picked among the choices (None: wait)."""


def fixed_states(
    n: int, seed: int = STATES_SEED, scenario: str | None = None
) -> list[tuple[JobSpec, ClusterView, float]]:
    """n decision states (job, cluster view, time) met on the way through seeded episodes in
    which the best allocation is always placed."""
    from xdscheduler.rl.env import UPPER, PlacementEnv

    env = PlacementEnv({"seed": seed, "scenario": scenario, "max_decisions": 10})
    states: list[tuple[JobSpec, ClusterView, float]] = []
    obs, _ = env.reset()
    while len(states) < n:
        if UPPER in obs:
            states.append((env.run.spec, env.engine.view, env.engine.now))
        obs, _, term, trunc, _ = env.step({a: 0 for a in obs})
        if term["__all__"] or trunc["__all__"]:
            obs, _ = env.reset()
    return states


def coverage(states, trials: Sequence[tuple[Weights, Chooser]]) -> dict:
    """trials: (weights, agents trained under them). Returns the coverage figures."""
    supported, picked_supported, on_front, picks, front_total = 0, 0, 0, 0, 0
    points: dict[int, list] = {i: [] for i in range(len(trials))}
    for job, view, now_s in states:
        per_w = [ch for w, _ in trials if (ch := choices(job, view, w, now_s)) is not None]
        if len(per_w) < len(trials):
            continue
        cand = np.unique(np.concatenate([np.concatenate(ch.groups) for ch in per_w]))
        t = per_w[0].ev.terms
        eff, util, cost = t["efficiency"][cand], t["utilization"][cand], t["cost"][cand]
        front = set(cand[pareto_mask(eff, util, cost)].tolist())
        best = {
            int(cand[np.argmax(w.efficiency * eff + w.utilization * util - w.cost * cost)])
            for w, _ in trials
        }
        chosen = set()
        for k, ((_, agents), ch) in enumerate(zip(trials, per_w, strict=True)):
            c = agents.choose(ch)
            if c is None:
                continue
            chosen.add(c)
            picks += 1
            on_front += c in front
            points[k].append((t["efficiency"][c], t["utilization"][c], t["cost"][c]))
        supported += len(best)
        picked_supported += len(best & chosen)
        front_total += len(front)
    return {
        "states": len(states),
        "pareto_choices": supported,
        "coverage": picked_supported / max(supported, 1),
        "picks_on_front": on_front / max(picks, 1),
        "front_size": front_total,
        "mean_terms": {k: np.mean(v, axis=0).tolist() if v else None for k, v in points.items()},
    }


def plot_front(result: dict, weights: list[Weights], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    pts = [(w, m) for w, m in zip(weights, result["mean_terms"].values(), strict=True) if m]
    eff = [m[0] for _, m in pts]
    util = [m[1] for _, m in pts]
    cost = [m[2] for _, m in pts]
    sc = ax.scatter(eff, util, c=cost, cmap="viridis_r", s=80, edgecolors="black")
    at: dict[tuple, int] = {}  # weightings that land on one point are stacked, not overlaid
    for (w, _), x, y in zip(pts, eff, util, strict=True):
        spot = (round(x, 2), round(y, 2))
        k = at[spot] = at.get(spot, -1) + 1
        ax.annotate(
            f"w=({w.efficiency:g},{w.utilization:g},{w.cost:g})",
            (x, y),
            textcoords="offset points",
            xytext=(-60, 6 + 11 * k),
            fontsize=8,
        )
    fig.colorbar(sc, ax=ax, label="WAN cost / accelerator cost (lower is better)")
    ax.set_xlabel("mean efficiency of the chosen plans")
    ax.set_ylabel("mean utilisation (MFU) of the chosen plans")
    ax.set_title(
        f"Weight sweep: coverage {result['coverage']:.0%} of "
        f"{result['pareto_choices']} Pareto-optimal choices"
    )
    fig.tight_layout()
    path = write_atomic(Path(out) / "pareto_front.png", lambda p: fig.savefig(p, dpi=120))
    plt.close(fig)
    return path


def sweep_report(trials: list[dict], out: Path, states: int = 40) -> dict:
    """The trained trials of a sweep against exhaustive evaluation; writes the front plot."""
    from xdscheduler.rl.agents import Agents

    weights = [Weights(**t["weights"]) for t in trials]
    agents = [(w, Agents(w, t["module"])) for w, t in zip(weights, trials, strict=True)]
    result = coverage(fixed_states(states), agents)
    result["plot"] = str(plot_front(result, weights, out))
    return result
