"""The step-time model against the schedules' event simulation, on pipelines over several WAN
crossings: told each crossing's time and the links after it, as the planner tells it, and told
only the slowest (the count before, every crossing at the slowest's time, every link twice in
the fill).

    python -m benchmarks.pipeline_fill [--pipelines 300] [--seed 9] [--inside 0.05]
                                       [--micro-batches 2-16]

Random pipelines over 3-5 domains, the middle ones of 2-4 stages, the ends of 1-3; forward
0.3-1 s, backward 1-3 times it, links inside a domain a twentieth of a micro-batch's compute,
2-16 micro-batches. Each crossing is drawn in one of three ranges of a micro-batch's compute.
A second table draws middles of 1-4 stages, one of them a single stage alone between two
crossings. Nothing is fitted: the forms were derived from the schedules' programs or found on
their simulation (`costmodel/exchanges.py`). Ten seconds or so.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from benchmarks._table import print_table
from xdscheduler.arguments import number, seed
from xdscheduler.costmodel.schedules import STYLES, Pipeline, Style

RANGES = ((0.05, 1.0), (1.0, 2.0), (2.0, 3.5))  # a crossing's transfer over t


@dataclass(frozen=True)
class Drawn:
    """How the pipelines are drawn beyond their crossings."""

    inside: float = 0.05  # a link inside a domain, over t
    micro_batches: tuple[int, int] = (2, 16)  # the fewest and the most


def drawn(
    rng: np.random.Generator,
    low: float,
    high: float,
    style: Style,
    lone: bool = False,
    how: Drawn = Drawn(),
):
    """One random pipeline and the stages each domain holds; `lone`: one middle domain (or
    more) holds a single stage."""
    n = int(rng.integers(3, 6))
    middle = [int(c) for c in rng.integers(1 if lone else 2, 5, size=n - 2)]
    if lone:
        middle[int(rng.integers(0, n - 2))] = 1
    counts = (int(rng.integers(1, 4)), *middle, int(rng.integers(1, 4)))
    fwd = rng.uniform(0.3, 1.0)
    bwd = fwd * rng.uniform(1.0, 3.0)
    t = fwd + bwd
    crossings = rng.uniform(low, high, size=n - 1) * t
    links: list[float] = []
    for i, c in enumerate(counts):
        links += [how.inside * t] * (c - 1) + ([crossings[i]] if i < n - 1 else [])
    fewest, most = how.micro_batches
    pipe = Pipeline(style, sum(counts), int(rng.integers(fewest, most + 1)), fwd, bwd, links)
    return pipe, counts


def errors(
    pipelines: int,
    seed: int,
    low: float,
    high: float,
    style: Style,
    lone: bool = False,
    how: Drawn = Drawn(),
):
    """The model's error against the simulation, told each crossing and not."""
    rng = np.random.default_rng(seed)
    told, untold = [], []
    for _ in range(pipelines):
        pipe, counts = drawn(rng, low, high, style, lone, how)
        simulated = pipe.simulated_s()
        told.append(pipe.modelled_s(domains=counts) / simulated - 1)
        untold.append(pipe.modelled_s(domains=counts, placed=False) / simulated - 1)
    return np.array(told), np.array(untold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=number(int, 1), default=300, help="pipelines a row")
    parser.add_argument("--seed", type=seed, default=9)
    parser.add_argument(
        "--inside",
        type=number(float, 0, above=True),
        default=0.05,
        help="a link inside, over the compute",
    )
    parser.add_argument(
        "--micro-batches", type=_span, default=(2, 16), help="the fewest and the most, as 2-16"
    )
    args = parser.parse_args()
    how = Drawn(args.inside, args.micro_batches)
    kinds = (
        (False, "over several WAN crossings"),
        (True, "with a stage alone between two crossings"),
    )
    for lone, what in kinds:
        print_table(
            f"Pipelines {what}: the model against the schedules' simulation "
            f"({args.pipelines} random pipelines a row, seed {args.seed}, links inside a domain "
            f"{how.inside:g} of the compute, {how.micro_batches[0]}-{how.micro_batches[1]} "
            f"micro-batches)",
            [
                "schedule",
                "crossing / compute",
                "exact",
                "median |error|",
                "min / max",
                "slowest for all: median",
                "min / max",
                "mean |error|: slowest for all / model",
            ],
            [
                row(args.pipelines, args.seed, how, r, style, lone)
                for style in STYLES
                for r in RANGES
            ],
            note="error: model / simulation - 1. 'slowest for all': told only the slowest "
            "crossing, every link twice in the fill (the count before).",
        )


def _span(text: str) -> tuple[int, int]:
    """'2-16' as (2, 16)."""
    try:
        fewest, most = (int(x) for x in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give the fewest and the most, as 2-16"
        ) from None
    if not 1 <= fewest <= most:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= fewest <= most")
    return fewest, most


def row(
    pipelines: int, seed: int, how: Drawn, crossing: tuple[float, float], style: Style, lone: bool
):
    told, untold = errors(pipelines, seed, *crossing, style, lone, how)
    return [
        "DeepSpeed (blocking)" if style == "blocking" else "Megatron 1F1B",
        f"{crossing[0]:g}-{crossing[1]:g}",
        f"{np.mean(np.abs(told) < 1e-9):.0%}",
        f"{np.median(np.abs(told)):.1%}",
        f"{told.min():+.1%} / {told.max():+.1%}",
        f"{np.median(np.abs(untold)):.1%}",
        f"{untold.min():+.1%} / {untold.max():+.1%}",
        f"{np.mean(np.abs(untold)) / np.mean(np.abs(told)):.1f}x",
    ]


if __name__ == "__main__":
    main()
