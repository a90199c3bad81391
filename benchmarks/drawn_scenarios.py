"""Does `planner` lead on clusters nobody here wrote? Scenarios drawn at random, every policy.

    python -m benchmarks.drawn_scenarios [--scenarios 12] [--seed 0] [--seeds 5]
        [--loads 0.9,1.2] [--hours 6] [--out DIR] [--local] [--giants K] [--from DIR]

Draws `--scenarios` clusters from `--seed` (2-6 domains of catalog accelerators, 16-512 each;
cities over a continent, each pair linked at 1-100 Gbit/s with the RTT of a fibre route over its
distance, a few pairs unlinked; the default workload generator's jobs, giants among them),
writes them as scenario files, and runs `xds compare` of every policy against `planner` on
them: each other policy's change in mean JCT and in R (work), paired by seed. A point
(scenario x load) where some policy is significantly better than `planner` on either is a
loss, printed with by how much. The first line says on how many points `planner` led or tied.
`--giants K` lists K jobs larger than any domain in each cluster that can hold one across
domains (drawn: a model of 8B to 405B, one node more than the largest domain up to 60% of the
cluster, 1-4 h of work, arriving in the first half): what crossing buys them on clusters nobody
wrote. Nothing here was tuned on these draws: they are new at every `--seed`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from benchmarks._compare import change_cell
from benchmarks._table import print_table
from xdscheduler.catalog import MODELS, accelerator
from xdscheduler.cli import main as xds
from xdscheduler.network.geography import fibre_rtt_ms
from xdscheduler.planner.policies import POLICIES
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.inputs import unplannable

OURS = "planner"
OURS_CONFINED = "planner-single-domain"  # the same search held to one domain
ACCELERATORS = ("H100-SXM", "H800", "H20", "A100-80GB", "A800", "Ascend-910B", "L40S", "MI300X")
NODES = (2, 4, 8, 16, 32, 64)  # nodes a domain
GPUS_PER_NODE = 8  # every drawn accelerator's usual node
FIGURES = {"mean_jct_s": -1, "objective_work": +1}  # better when lower / higher
GIANT_ROOM = 0.6  # a giant needing most of the cluster would wait for it all to empty
GIANT_MODELS = ("llama3-8b", "llama2-70b", "llama3-70b", "gpt3-175b", "llama3.1-405b")
GIANT_HOURS = (1.0, 4.0)  # a giant's work: hours on its minimum at GIANT_MFU of the peak
GIANT_MFU = 0.4  # sizes the drawn work only; the studies time it with the step-time model
GIANT_TRIES = 5  # draws of a giant before a cluster goes without it


def draw_scenario(rng: np.random.Generator, index: int) -> dict:
    """One cluster: domains, links by distance, the default workload."""
    n = int(rng.integers(2, 7))
    lat, lon = rng.uniform(22, 48, n), rng.uniform(95, 125, n)
    domains = [
        {
            "name": f"d{i}",
            "location": {
                "city": f"d{i}",
                "lat": round(float(lat[i]), 2),
                "lon": round(float(lon[i]), 2),
            },
            "nodes": [
                {"accelerator": str(rng.choice(ACCELERATORS)), "count": int(rng.choice(NODES))}
            ],
            "intra_domain_gbps": int(rng.choice([100, 200, 400])),
        }
        for i in range(n)
    ]
    links = []
    for i in range(n):
        for j in range(i + 1, n):
            if j > i + 1 and rng.random() < 0.2:  # neighbours in the list always linked
                continue
            links.append(
                {
                    "a": f"d{i}",
                    "b": f"d{j}",
                    "bandwidth_gbps": round(float(10 ** rng.uniform(0, 2)), 1),
                    "rtt_ms": round(fibre_rtt_ms(lat[i], lon[i], lat[j], lon[j]), 1),
                    "price_per_gb": round(float(rng.uniform(0.0, 0.05)), 3),
                    "fluctuation": round(float(rng.uniform(0.1, 0.4)), 2),
                }
            )
    return {
        "name": f"drawn_{index:02d}",
        "seed": int(rng.integers(2**31)),
        "domains": domains,
        "links": links,
        "workload": {"load": 0.9, "cluster": "kalos", "min_gpus": 8},
    }


def with_giants(doc: dict, count: int, hours: float, rng: np.random.Generator) -> dict:
    """`doc` with `count` listed jobs that no domain can hold, drawn from `rng`: a model of
    GIANT_MODELS, asking for at least one node more than the largest domain has and up to
    GIANT_ROOM of the cluster (at most twice that minimum), work for GIANT_HOURS on its
    minimum at the cluster's mean peak and GIANT_MFU, arriving at random over the first half
    of the study. A draw no plan could run on the whole cluster (too little memory) is drawn
    again, up to GIANT_TRIES times, then left out. Unchanged where the cluster beside its
    largest domain is too small to give one room."""
    held = sizes(doc)
    least = max(held) + GPUS_PER_NODE
    most = GPUS_PER_NODE * int(GIANT_ROOM * sum(held) / GPUS_PER_NODE)  # whole nodes
    if count == 0 or least > most:
        return doc
    peaks = [accelerator(d["nodes"][0]["accelerator"]).half_tflops for d in doc["domains"]]
    tflops = float(np.average(peaks, weights=held))  # the cluster's mean peak
    giants = []
    for k, arrival_s in enumerate(np.sort(rng.uniform(0, hours * 1800, count))):
        for _ in range(GIANT_TRIES):
            job = draw_giant(rng, f"giant-{k}", least, most, round(float(arrival_s)), tflops)
            scn = parse_scenario({**doc, "jobs": [job]}, doc["name"])
            if not unplannable(scn, scn.jobs):
                giants.append(job)
                break
    return {**doc, "jobs": [*doc.get("jobs", []), *giants]} if giants else doc


def draw_giant(
    rng: np.random.Generator, name: str, least: int, most: int, arrival_s: int, tflops: float
) -> dict:
    """One job asking for `least` to `most` accelerators of `tflops` peak each (see
    `with_giants`)."""
    arch = MODELS[str(rng.choice(GIANT_MODELS))]
    nodes = int(rng.integers(least // GPUS_PER_NODE, most // GPUS_PER_NODE + 1))
    gpus_min = nodes * GPUS_PER_NODE
    gpus_max = max(gpus_min, min(most, GPUS_PER_NODE * int(nodes * rng.uniform(1, 2))))
    rate = gpus_min * 1e12 * tflops * GIANT_MFU
    tokens = float(rng.uniform(*GIANT_HOURS)) * 3600 * rate / (6 * arch.params)
    return {
        "name": name,
        "model": arch.name,
        "global_batch": 1024,
        "tokens": float(f"{tokens:.3g}"),
        "arrival_s": arrival_s,
        "gpus": {"min": gpus_min, "max": gpus_max},
    }


def sizes(doc: dict) -> list[int]:
    """Each drawn domain's accelerators (one node group of GPUS_PER_NODE a node)."""
    return [GPUS_PER_NODE * d["nodes"][0]["count"] for d in doc["domains"]]


def describe(doc: dict) -> str:
    """`3 x H100-SXM 128, ...; WAN 1-80 Gbit/s`."""
    kinds = (d["nodes"][0]["accelerator"] for d in doc["domains"])
    parts = [f"{kind} {n}" for kind, n in zip(kinds, sizes(doc), strict=True)]
    bw = [link["bandwidth_gbps"] for link in doc["links"]]
    return f"{', '.join(parts)}; WAN {min(bw):g}-{max(bw):g} Gbit/s"


def points(doc: dict) -> list[dict]:
    """Per (scenario, load) and figure: the other policy best against `planner` and the one
    significantly better by most, if any (`best`: their paired changes), the best of the peers
    a user would run instead (`peer`: every policy but the planner confined to one domain), and
    whether that confined planner tied it exactly on every seed (`tie`)."""
    paired = [r for r in doc["paired"] if r["figure"] in FIGURES and r["mean"] is not None]
    out = []
    for scenario, load in sorted({(r["scenario"], r["load"]) for r in paired}):
        point: dict = {"scenario": scenario, "load": load, "best": {}, "peer": {}, "tie": True}
        for figure, sign in FIGURES.items():
            rows = [
                r
                for r in paired
                if (r["scenario"], r["load"], r["figure"]) == (scenario, load, figure)
            ]
            best = max(rows, key=lambda r: sign * r["mean"])
            # lost where any policy is significantly better: to the one better by most
            beaten = [r for r in rows if r["significant"] and sign * r["mean"] > 0]
            point["best"][figure] = (
                best,
                max(beaten, key=lambda r: sign * r["mean"], default=None),
            )
            point["peer"][figure] = max(
                (r for r in rows if r["policy"] != OURS_CONFINED), key=lambda r: sign * r["mean"]
            )
            confined = [r for r in rows if r["policy"] == OURS_CONFINED]
            point["tie"] &= bool(confined) and confined[0]["mean"] == 0 == confined[0]["half_width"]
        out.append(point)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0, help="draws the scenarios")
    ap.add_argument("--seeds", type=int, default=5, help="seeds of each cell")
    ap.add_argument("--loads", default="0.9,1.2")
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--out", help="keep the scenarios and the comparison here")
    ap.add_argument("--local", action="store_true", help="no Ray: one study after another")
    ap.add_argument(
        "--giants",
        type=int,
        default=0,
        help="listed jobs larger than any domain, added to each cluster that can hold one",
    )
    ap.add_argument("--from", dest="again", help="run nothing: report an earlier run's --out")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.again or args.out or tmp)
        if not args.again:
            run(args, out)
        try:
            doc = json.loads((out / "compare" / "compare.json").read_text())
            docs = {
                (d := yaml.safe_load(Path(path).read_text()))["name"]: d
                for path in doc["grid"]["scenarios"]
            }
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as err:
            raise SystemExit(
                f"error: {out}: no comparison of drawn scenarios to read "
                f"({type(err).__name__}: {err})"
            ) from None
    report(points(doc), docs, doc, time.perf_counter() - start)


def run(args, out: Path) -> None:
    """Draw the scenarios into `out` and compare every policy against ours on them."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    paths = []
    for i in range(args.scenarios):
        # the giants from a stream of their own: the clusters are the same with or without
        giants = np.random.default_rng([args.seed, i])
        doc = with_giants(draw_scenario(rng, i), args.giants, args.hours, giants)
        paths.append(out / f"{doc['name']}.yaml")
        paths[-1].write_text(yaml.safe_dump(doc, sort_keys=False))
    argv = ["compare", *map(str, paths), "--policies", ",".join(POLICIES)]
    argv += ["--baseline", OURS, "--seeds", str(args.seeds), "--loads", args.loads]
    argv += ["--hours", str(args.hours), "--out", str(out / "compare"), "--force"]
    argv += ["--local"] if args.local else []
    with contextlib.redirect_stdout(io.StringIO()):  # its tables: in compare.md
        code = xds(argv)
    if code:
        raise SystemExit(code)


def giants_line(doc: dict, listed: list[str]) -> str:
    """What `planner` did for the giants of the clusters with listed ones, against the same
    search confined to one domain (paired by seed; the comparison's baseline is `planner`)."""
    rows = [
        r
        for r in doc["paired"]
        if r["scenario"] in listed and r["policy"] == OURS_CONFINED and r["mean"] is not None
    ]
    jct = [r for r in rows if r["figure"] == "giant_mean_jct_s"]
    never = [r for r in rows if r["figure"] == "giant_never_started"]
    # the rows are the confined search against ours: (its - ours) / ours, seed by seed
    return (
        f"Giants listed in {len(listed)} clusters: under {OURS_CONFINED} the giants' mean JCT "
        f"(listed and generated: asking for more than the largest domain's free share) is "
        f"{100 * min((r['mean'] for r in jct), default=math.nan):+.0f}% to "
        f"{100 * max((r['mean'] for r in jct), default=math.nan):+.0f}% against {OURS}'s over "
        f"{len(jct)} points (significantly longer at "
        f"{sum(r['significant'] and r['mean'] > 0 for r in jct)}), and "
        f"{sum(r['mean'] for r in never) / max(len(never), 1):+.1f} more giants a study never "
        f"start, on average"
    )


def report(found: list[dict], docs: dict, compared: dict, took_s: float) -> None:
    """The first line (who led, by how much), the giants' line where some are listed, the
    table."""
    grid = compared["grid"]
    lost = [p for p in found if any(beaten for _, beaten in p["best"].values())]
    # where another policy is significantly better: by how much, at most
    worst = [
        max((sign * p["best"][f][1]["mean"] for p in lost if p["best"][f][1]), default=math.nan)
        for f, sign in FIGURES.items()
    ]
    where = (
        f"where another policy was significantly better, by at most {100 * worst[0]:.1f}% in "
        f"mean JCT and {100 * worst[1]:.1f}% in R (work) (nan: on neither)"
        if lost
        else "no other policy was significantly better on either figure anywhere"
    )
    lead = [p["peer"]["mean_jct_s"] for p in found]
    low, high = (100 * f(r["mean"] for r in lead) for f in (min, max))
    higher = sum(r["significant"] and r["mean"] > 0 for r in lead)
    ties = sum(p["tie"] for p in found)
    print(
        f"{OURS} led or tied on {len(found) - len(lost)} of {len(found)} drawn scenario x load "
        f"points ({len(docs)} drawn scenarios, {len(grid['seeds'])} seeds each, "
        f"{grid['hours']:g} h, paired by seed, 95% CIs): {where}. "
        "The best peer a user would run instead had "
        f"{low:+.1f}% to {high:+.1f}% mean JCT against it (significantly higher at {higher} of "
        f"{len(found)} points); {OURS_CONFINED}, the same search held to one domain, tied it "
        f"exactly at {ties} of {len(found)}"
        + (": crossing domains paid nowhere here" if ties == len(found) else "")
    )
    listed = [name for name, d in docs.items() if d.get("jobs")]
    if listed:
        print(giants_line(compared, listed))
    rows = [
        [
            p["scenario"],
            describe(docs[p["scenario"]]),
            f"{p['load']:g}",
            *(f"{p['best'][f][0]['policy']}: {change_cell(p['best'][f][0])}" for f in FIGURES),
            *(f"{p['peer'][f]['policy']}: {change_cell(p['peer'][f])}" for f in FIGURES),
        ]
        for p in found
    ]
    print_table(
        f"Against {OURS}, paired by seed (* significant): the best other policy at each point, "
        f"and the best peer (any but {OURS_CONFINED}); {took_s:.0f} s",
        [
            "scenario",
            "domains",
            "load",
            "best: mean JCT",
            "best: R (work)",
            "peer: mean JCT",
            "peer: R (work)",
        ],
        rows,
        "mean JCT: lower is better for the other policy; R (work): higher is",
    )


if __name__ == "__main__":
    main()
