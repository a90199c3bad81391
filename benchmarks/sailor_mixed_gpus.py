"""Held out: Sailor's runs on three kinds of GPU at once, under its simulator and our model.

Run: python -m benchmarks.sailor_mixed_gpus [SAILOR_DIR]   (or SAILOR_DIR=...): a checkout of
github.com/eth-easl/sailor. Without one it says so and stops.

Sailor's validation/mit plans train OPT-350M (fp32, Megatron-DeepSpeed) on servers of eight
RTX-3090, RTX-2080 (Ti: 11 GiB) or Titan RTX. Nothing here was fitted or tuned on them: they
are the model's first meeting with consumer GPUs over PCIe and a 1 Gbit/s network
(docs/models.md, "Held out: Sailor's runs on mixed GPUs").

Our model sees them as our planner would: each server is a domain, and the links between them
are Sailor's measured peaks between two servers of those kinds (its
sailor/providers/multizone_bandwidths_het.json, as many GPUs of one sending to the other's as
the run took on each, per node pair; one GPU's peak is the link's flow rate; inside a server,
its intra_node_bandwidths.json). Each domain's accelerators are the catalog's (RTX-3090) and
benchmarks/consumer_gpus.yaml's (the two Turing cards); Sailor's layer profile of each kind
(Planner/simulations/profiles_tmp.json) is an input, as on its GH200 runs. A placement over
kinds is timed by its slowest member's profile, its links by the slowest it crosses. Each plan
is read as our placement where one holds it: replicas on different servers, or stages each on
one; Sailor's plans that pair stages and replicas across kinds another way have none.

Then our search picks a plan on the same servers; each pick is timed by Sailor's simulator,
the model that matches these runs best, beside the run's own plan (simulated and measured).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import combinations
from pathlib import Path

import numpy as np

from benchmarks._table import print_table
from benchmarks.sailor_driver import layout
from benchmarks.sailor_side_by_side import MODELS, STACK, driver, profile
from benchmarks.sailor_side_by_side import as_sailor as sailor_plan
from xdscheduler import catalog
from xdscheduler.costmodel.plan import Plan
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import THROUGHPUT_ONLY, JobSpec, estimate_placement, search
from xdscheduler.planner.space import DATA, PIPELINE, SINGLE, SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import parse_scenario

GPUS = Path(__file__).parent / "consumer_gpus.yaml"
KINDS = {"RTX-3090": "RTX-3090", "RTX-2080": "RTX-2080-Ti", "Titan-RTX": "Titan-RTX"}  # theirs
# Sailor's fp32 runs: fp32 tensors, matmuls in TF32 where the GPU has it (the 3090), FP32 else
DTYPE = "tf32"
BANDWIDTHS = Path("sailor/providers/multizone_bandwidths_het.json")
INTRA = Path("sailor/providers/intra_node_bandwidths.json")
RTT_MS = 0.1  # one machine room; Sailor's profile gives no latency (assumed, not measured)
SAILOR_MODEL, OUR_MODEL = MODELS["OPT-350"]


def servers(run: dict) -> list[list[str]]:
    """Each stage's replicas: the kind of server (Sailor's name) each runs on."""
    return [[vms[0][0] for vms, _tp in stage] for stage in run["pipeline_list"][0]["tmp_per_stage"]]


def used_servers(run: dict) -> list[tuple[str, int]]:
    """The servers a run used (each stage's replica has its own), as (kind, index) in order of
    appearance: a plan's second RTX-2080 is ("RTX-2080", 1)."""
    out: list[tuple[str, int]] = []
    for stage in servers(run):
        for gpu in stage:
            out.append((gpu, sum(k == gpu for k, _ in out)))
    return out


def name(gpu: str, i: int) -> str:
    """A server's domain name: its kind, lower case, and its index among that kind's."""
    return f"{gpu.lower()}-{i}"


def kind_of(server: str) -> str:
    """The kind of a server (Sailor's name) from its domain name."""
    return next(k for k in KINDS if server.rsplit("-", 1)[0] == k.lower())


@cache
def networks(checkout: Path) -> tuple[dict, dict]:
    """Sailor's measured peaks between servers and inside one, read once for every run."""
    het, intra = (json.loads((checkout / f).read_text()) for f in (BANDWIDTHS, INTRA))
    return het, intra


def measured_peak(het: dict, zone: str, a: str, b: str, gpus: int, best: bool = False) -> float:
    """Gbit/s from a server of kind `a` to one of kind `b`, `gpus` of each sending at once, as
    Sailor measured it; `best`: the most it measured between those kinds at any count (a
    link carries at least what it once did; Sailor's table has the RTX-2080 and Titan RTX
    servers at 23 Gbit/s with 2 and 4 GPUs a side and at 0.9 with 1 and 8)."""
    by_count = het[zone][a]
    counts = [n for n in by_count if b in by_count[n].get(zone, {})] if best else [str(gpus)]
    return max(by_count[n][zone][b][n][1] for n in counts) * 8 / 1e9


def scenario(checkout: Path, run: dict, best: bool = False) -> tuple[JobSpec, ClusterView]:
    """The servers the run used as domains, each with as many GPUs as the run took there,
    every pair linked at Sailor's measured peaks (`best`: each pair at its best measured);
    one OPT-350M job of the run's batch."""
    tp = run["pipeline_list"][0]["tmp_per_stage"][0][0][1]
    domains = used_servers(run)
    het, intra = networks(checkout)
    zone = run["zone"]

    def peak(a: str, b: str, gpus: int) -> float:
        return measured_peak(het, zone, a, b, gpus, best)

    links = [
        {
            "a": name(*x),
            "b": name(*y),
            "bandwidth_gbps": peak(x[0], y[0], tp),
            "bandwidth_gbps_ba": peak(y[0], x[0], tp),
            "flow_gbps": min(peak(x[0], y[0], 1), peak(y[0], x[0], 1)),
            "rtt_ms": RTT_MS,
            "per_node_pair": True,
            "fluctuation": 0.0,
            "source": f"Sailor {BANDWIDTHS.name}",
        }
        for x, y in combinations(domains, 2)
    ]
    raw = {
        "name": "sailor_mit_servers",
        "domains": [
            {
                "name": name(gpu, i),
                "location": {"region": zone},
                "nodes": [{"accelerator": KINDS[gpu], "count": 1, "gpus_per_node": tp}],
                # one GPU's rate to the others of its server, as Sailor measured it
                **({"intra_node_gbps": intra[gpu][str(tp)][1] * 8 / 1e9} if tp > 1 else {}),
            }
            for gpu, i in domains
        ],
        "links": links,
        "jobs": [
            {
                "name": "opt-350m",
                "model": OUR_MODEL,
                "global_batch": run["gbs"],
                "tokens": 1e9,
                "gpus": {"min": 1, "max": tp * len(domains)},
                "dtype": DTYPE,
            }
        ],
    }
    scn = parse_scenario(raw, "the MIT servers of Sailor's runs")
    return JobSpec.of(scn.jobs[0]), ClusterView.from_scenario(scn)


def as_placement(run: dict, job: JobSpec, view: ClusterView) -> Placement | None:
    """The run's plan as our placement: each replica on its own server (one stage), or each
    stage on its own server (one replica); None for a plan that mixes the two."""
    p = run["pipeline_list"][0]
    tp, pp, dp = p["tmp_per_stage"][0][0][1], p["num_stages"], p["dp"][0]
    plan = Plan(dp=dp, tp=tp, pp=pp, micro_batch=run["mbs"], zero=0, dtype=DTYPE)
    if pp == 1:
        kind = SINGLE if dp == 1 else DATA
    elif dp == 1:
        kind = PIPELINE
    else:
        return None
    names = [name(*server) for server in used_servers(run)]  # a replica's or a stage's each
    index = {d.name: i for i, d in enumerate(view.domains)}
    per = tp * (pp if kind != PIPELINE else dp)
    # a pipeline's stages hold the transformer layers Sailor gave them (the embedding and
    # the output layer it lists beside them are the model's first and last blocks)
    layers = [sum(0 < x <= job.arch.layers for x in s) for s in p["layers_per_stage"]]
    even = len(set(layers)) == 1
    return Placement(
        job.name,
        kind,
        tuple(index[n] for n in names),
        (per,) * len(names),
        plan,
        tuple(names),
        split=() if kind != PIPELINE or even else tuple(layers),
    )


def as_sailor(p: Placement, arch, zone: str) -> dict:
    """Our placement as the plan Sailor's simulator reads, each server a VM of its kind in
    `zone`."""
    return sailor_plan(p, arch, lambda server: (kind_of(server), zone))


def options(checkout: Path, arch) -> SearchOptions:
    """Our model's inputs: Sailor's layer profile of each kind; the links' measured peaks."""
    layers = tuple(
        profile(checkout, SAILOR_MODEL, arch, theirs, ours) for theirs, ours in KINDS.items()
    )
    return SearchOptions(dtype=DTYPE, stack=STACK, layers=layers)


@dataclass
class Case:
    """One run: its servers as our view, its plan as our placement (None: not expressible),
    our search's picks on those servers, and what Sailor's simulator said of its plan and of
    our readable pick."""

    run: dict
    job: JobSpec
    view: ClusterView
    theirs: Placement | None
    ours: Placement  # held to what Sailor's simulator reads
    free: Placement
    search_cpu_s: float
    at_best: ClusterView  # the servers with each pair's link at its best measurement
    sim_theirs: dict = field(default_factory=dict)
    sim_ours: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return Path(self.run["file"]).stem.replace("plan_config_", "")


def planned(checkout: Path, run: dict, opts: SearchOptions) -> Case:
    """The run's servers, its plan as ours, and our two picks there."""
    job, view = scenario(checkout, run)
    # as Sailor's simulator reads a plan: a TP group fills the GPUs taken on its server, and
    # replicas take as many micro-batches each (so no split by speed)
    tp = run["pipeline_list"][0]["tmp_per_stage"][0][0][1]
    readable = replace(opts, tensor=(tp,), balance=False)
    ours = search(job, view, THROUGHPUT_ONLY, readable, pareto=False).best
    t0 = time.process_time()
    free = search(job, view, THROUGHPUT_ONLY, opts, pareto=False).best
    cpu_s = time.process_time() - t0
    at_best = scenario(checkout, run, best=True)[1]
    return Case(run, job, view, as_placement(run, job, view), ours, free, cpu_s, at_best)


def simulated(root: Path, cases: list[Case], arch) -> None:
    """Sailor's simulator on each run's plan and on our readable pick, in one child."""
    bodies = [
        {**body, "gbs": c.run["gbs"]}
        for c in cases
        for body in (
            {k: c.run[k] for k in ("zone", "pipeline_list", "mbs")},
            as_sailor(c.ours, arch, c.run["zone"]),
        )
    ]
    request = {"op": "simulate", "model": SAILOR_MODEL, "plans": bodies, "memory": True}
    sims = driver(root, request)["results"]
    for c, theirs, ours in zip(cases, sims[::2], sims[1::2], strict=True):
        c.sim_theirs, c.sim_ours = theirs, ours


def mixed(root: Path, checkout: Path) -> None:
    runs = driver(root, {"op": "runs", "cluster": "mit"})["runs"]
    arch = catalog.model(OUR_MODEL)
    opts = options(checkout, arch)
    cases = [planned(checkout, run, opts) for run in runs]
    simulated(root, cases, arch)
    errs = fidelity(cases, opts)
    print()
    print_table(
        "Error (|model/measured - 1|)",
        ["model", "runs", "median", "max"],
        [
            [
                label,
                len(errs[k]),
                f"{np.median(np.abs(errs[k])):.1%}",
                f"{np.max(np.abs(errs[k])):.1%}",
            ]
            for k, label in (
                ("sailor", "Sailor's simulator (its profile of each kind)"),
                ("ours", "ours (the same profiles; the plans we can express)"),
                ("best", "ours, each server pair's link at its best measured (*)"),
                ("sailor memory", "Sailor's memory model against the runs' most allocated"),
                ("memory", "our memory against the runs' most allocated"),
            )
        ],
        note="(*) Sailor's table has the RTX-2080 and Titan RTX servers at 23 Gbit/s with 2 and "
        "4 GPUs a side and at 0.9 with 1 and 8 (the runs' TP8); read at its best, a stage "
        "between them and the RTX-3090 waits on one slow link, not two. A reading looked at "
        "after these runs' errors were seen: a sensitivity, not a held-out check.",
    )
    print()
    picks(cases)


def fidelity(cases: list[Case], opts: SearchOptions) -> dict[str, list[float]]:
    """Each run's time and memory, measured and under both models; the errors."""
    rows: list[list] = []
    keys = ("sailor", "ours", "best", "sailor memory", "memory")
    errs: dict[str, list[float]] = {k: [] for k in keys}
    for c in cases:
        real, sim = c.run["real"], c.sim_theirs
        est = estimate_placement(c.theirs, c.job, c.view, opts) if c.theirs else None
        best = estimate_placement(c.theirs, c.job, c.at_best, opts) if c.theirs else None
        measured_gib = c.run["max_mem"] / 2**30  # torch's most allocated on any of its GPUs
        sailor_gib = sim["memory_bytes"] / 2**30
        errs["sailor"].append(sim["iteration_s"] / real - 1)
        errs["sailor memory"].append(sailor_gib / measured_gib - 1)
        if est is not None and best is not None:
            errs["ours"].append(est.step_time_s / real - 1)
            errs["best"].append(best.step_time_s / real - 1)
            errs["memory"].append(est.memory_gib_per_gpu / measured_gib - 1)
        rows.append(
            [
                c.label,
                describe(c.theirs, c.run),
                f"{real:.2f}",
                f"{sim['iteration_s']:.2f}",
                f"{errs['sailor'][-1]:+.1%}",
                f"{est.step_time_s:.2f}" if est else "-",
                f"{errs['ours'][-1]:+.1%}" if est else "-",
                f"{best.step_time_s:.2f}" if best else "-",
                f"{errs['best'][-1]:+.1%}" if best else "-",
                f"{measured_gib:.1f}",
                f"{sailor_gib:.1f}",
                f"{est.memory_gib_per_gpu:.1f}" if est else "-",
            ]
        )
    print_table(
        f"Sailor's {len(cases)} measured runs on mixed GPUs (OPT-350M, fp32): iteration seconds",
        [
            "run",
            "plan",
            "measured",
            "Sailor sim",
            "err",
            "ours",
            "err",
            "links at best",
            "err",
            "mem GiB",
            "Sailor GiB",
            "ours GiB",
        ],
        rows,
    )
    return errs


def picks(cases: list[Case]) -> None:
    """Our picks on each run's servers beside the run's own plan."""
    rows = [
        [
            c.label,
            describe(c.ours, c.run),
            f"{c.sim_ours['iteration_s']:.2f}",
            "yes" if c.sim_ours["fits"] else "NO",
            f"{step_s(c.ours):.2f}",
            f"{c.sim_theirs['iteration_s']:.2f}",
            f"{c.run['real']:.2f}",
            describe(c.free, c.run),
            f"{step_s(c.free):.2f}",
            f"{c.search_cpu_s:.2f}",
        ]
        for c in cases
    ]
    print_table(
        "Our pick on each run's servers (as many GPUs as the run took on each), seconds per "
        "iteration",
        [
            "run",
            "our pick, as Sailor's simulator reads plans",
            "Sailor sim",
            "fits Sailor's memory",
            "our model",
            "run's plan, Sailor sim",
            "run's plan, measured",
            "our pick, free",
            "our model",
            "search CPU s",
        ],
        rows,
        note="As Sailor's simulator reads a plan, each replica's TP group fills the GPUs the "
        "run took on its server and replicas take as many micro-batches each. Free, our search "
        "may also put several replicas on one server and split work by speed; Sailor's "
        "simulator would time those replicas over the network between servers. Sailor's "
        "released planner cannot plan these servers (its GPU memory table has A100-40, V100-16 "
        "and GH-96 only, and one GPU kind's TP degrees).",
    )


def step_s(p: Placement) -> float:
    """A search's pick's step, as the search estimated it."""
    assert p.estimate is not None, "the search estimates what it returns"
    return p.estimate.step_time_s


def describe(p: Placement | None, run: dict) -> str:
    """A placement in a line; for a plan we cannot express, the run's own."""
    if p is None:
        x = run["pipeline_list"][0]
        stages = " | ".join("+".join(stage) for stage in servers(run))
        shape = f"PP{x['num_stages']} TP{x['tmp_per_stage'][0][0][1]} DP{x['dp'][0]}"
        return f"{shape}: {stages} (none of ours)"
    x = p.plan
    split = f" split {'/'.join(map(str, p.split))}" if p.split else ""
    return f"{p.kind} {'+'.join(p.names)}: PP{x.pp} TP{x.tp} DP{x.dp} mb{x.micro_batch}{split}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", nargs="?", default=os.environ.get("SAILOR_DIR"))
    args = parser.parse_args()
    if not args.checkout:
        print("skipped: give a checkout of github.com/eth-easl/sailor (an argument or SAILOR_DIR)")
        return
    checkout = Path(args.checkout).resolve()
    if not (checkout / "sailor" / "Planner" / "simulations" / "validation" / "mit").is_dir():
        print(f"skipped: {checkout} is not a checkout of Sailor with its validation/mit runs")
        return
    catalog.load_catalog(GPUS)
    mixed(layout(checkout), checkout)


if __name__ == "__main__":
    main()
