"""Sailor and us side by side, under both models: Sailor's measured GH200 runs, and its five
zones at 8, 16 and 32 A100-40GB a zone.

Run: python -m benchmarks.sailor_side_by_side [SAILOR_DIR]   (or SAILOR_DIR=... in the
environment): a checkout of github.com/eth-easl/sailor. Without one it says so and stops.
`--model GPT-NEO` plans GPT-Neo-2.7B (global batch 2048, Sailor's config) on the zones instead
of OPT-350M; `--per-zone 8,16,32` sets the sizes; `--only fidelity|plans` runs one part.

1. Fidelity: each of Sailor's measured GH200 runs (Planner/simulations/validation/clariden:
   OPT-350M and GPT-Neo-2.7B, 1-64 nodes of 4, Megatron-DeepSpeed in fp32), its iteration time
   as measured, as Sailor's simulator gives it, and as our model gives it (a) with Sailor's
   GH200 layer profile as input (Planner/simulations/profiles_tmp.json, the same one Sailor's
   simulator reads) and (b) from the roofline alone. Nothing is fitted on these runs: the
   profile is a per-layer measurement Sailor made beforehand (and its GH200 network curve,
   sailor/providers/network_coeffs_all_homo.json, a send/recv measurement); our constants are
   the shipped ones, fitted on published Megatron-LM/NeMo runs. Also each run's memory, and
   what Sailor's host-staged pipeline receive would add at the times one H100 took for it
   (benchmarks/gpu_runs/host_staged_receive.json; a what-if, not the model).
2. Plans: Sailor's planner (its C++ planner compiled from the checkout, its pick the first of
   its sorted plans that fits its memory model, as its simulations/simulator.py picks) and our
   search (stack megatron-deepspeed, TF32, Sailor's A100-40 profile of OPT-350M as input) on
   scenarios/sailor_five_zones.yaml; each pick under Sailor's simulator and under our model,
   whether it fits Sailor's memory model, and the planning time, set-up included.

Needs g++, the jsoncpp headers (libjsoncpp-dev) and pybind11 to build Sailor's planner once
(about a minute; cached under ~/.cache/xds-sailor); part 1 needs none of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks._table import print_table
from benchmarks.sailor_driver import SailorError, layout
from benchmarks.sailor_zones import setup
from xdscheduler import catalog
from xdscheduler.costmodel.layers import MeasuredLayers, from_sailor, read_json
from xdscheduler.costmodel.messages import from_sailor as network_from_sailor
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.shape import replica_micro_batches, stage_layers
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import THROUGHPUT_ONLY, estimate_placement, search
from xdscheduler.planner.space import DATA, PIPELINE, SINGLE, SearchOptions

STACK = Stack.preset("megatron-deepspeed")
DTYPE = "tf32"  # fp32 tensors, matmuls on TF32 tensor cores (NGC's PyTorch default)
MODELS = {"OPT-350": ("OPT-350", "opt-350m"), "GPT-NEO": ("GPT-Neo-2.7", "gpt-neo-2.7b")}
GLOBAL_BATCH = {"OPT-350": 1024, "GPT-NEO": 2048}  # Sailor's training configs
PER_ZONE = (8, 16, 32)
# Sailor's measured network curves: GB/s of one GPU's send to another node's by message size
NETWORK = Path("sailor/providers/network_coeffs_all_homo.json")
# Sailor's pipeline receive as timed by benchmarks/host_staged_receive.py --out on one GPU
RECEIVES = Path(__file__).parent / "gpu_runs" / "host_staged_receive.json"
CACHE = Path(os.environ.get("XDS_CACHE", Path.home() / ".cache")) / "xds-sailor"


def driver(root: Path, request: dict) -> dict:
    """One request to benchmarks/sailor_driver.py in a child process with Sailor's modules."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.sailor_driver"],
        input=json.dumps({"root": str(root), "cache": str(CACHE), **request}),
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    if done.returncode:
        raise RuntimeError(f"Sailor's code failed ({request['op']}): {done.stderr[-3000:]}")
    answer = json.loads(done.stdout)
    if "error" in answer:
        raise SailorError(answer["error"])
    return answer


def profile(
    checkout: Path, sailor_model: str, arch, sailor_gpu: str, gpu: str, planner_file: bool = False
) -> MeasuredLayers:
    """Sailor's layer profile of a model on an accelerator, read as ours (an input)."""
    planner = checkout / "sailor" / "Planner"
    path = (
        planner / "sailor_planner" / "profiles" / sailor_model / sailor_gpu / "profile.json"
        if planner_file
        else planner / "simulations" / "profiles_tmp.json"
    )
    return MeasuredLayers.of(
        from_sailor(
            read_json(path, "Sailor profile"),
            arch,
            gpu,
            sailor_model=sailor_model,
            sailor_gpu=sailor_gpu,
            llm_info=read_json(planner / "llm_info.json", "llm_info"),
            source=str(path.relative_to(checkout)),
        )
    )


# ------------------------------------------------------------------------------ 1. fidelity


def fidelity(root: Path, checkout: Path) -> None:
    runs = driver(root, {"op": "runs"})["runs"]
    gh200 = catalog.accelerator("GH200")
    plans, rows, sims = [], [], []
    for run in runs:
        key = run["file"].split("/")[-3]
        sailor_model, ours = MODELS[key]
        p = run["pipeline_list"][0]
        plans.append(
            {
                "model": sailor_model,
                "gbs": run["gbs"],
                "zone": run["zone"],
                "pipeline_list": run["pipeline_list"],
                "mbs": run["mbs"],
            }
        )
        arch = catalog.model(ours)
        plan = Plan(
            dp=p["dp"][0],
            tp=p["tmp_per_stage"][0][0][1],
            pp=p["num_stages"],
            micro_batch=run["mbs"],
            zero=0,
            dtype=DTYPE,
        )
        rows.append((run, key, arch, plan, sum(len(s) for s in p["layers_per_stage"])))
    for model in {pl["model"] for pl in plans}:
        idx = [i for i, pl in enumerate(plans) if pl["model"] == model]
        out = driver(root, {"op": "simulate", "model": model, "plans": [plans[i] for i in idx]})[
            "results"
        ]
        sims += list(zip(idx, out, strict=True))
    sailor_s = dict((i, r["iteration_s"]) for i, r in sims)
    measured = {
        key: profile(checkout, MODELS[key][0], catalog.model(MODELS[key][1]), "GH-96", "GH200")
        for key in MODELS
    }
    network = network_from_sailor(checkout / NETWORK, "GH-96")
    table = []
    errs: dict[str, list[float]] = {"sailor": [], "ours": [], "roofline": [], "memory": []}
    flagged = []
    for i, (run, key, arch, plan, listed) in enumerate(rows):
        one = PlanBatch.of([plan])
        with_profile = estimate(
            arch,
            run["gbs"],
            one,
            Hardware.of(gh200),
            stack=STACK,
            measured=(measured[key],),
            network=network,
        )
        roof = estimate(arch, run["gbs"], one, Hardware.of(gh200), stack=STACK)
        real = run["real"]
        e = {
            "sailor": sailor_s[i] / real - 1,
            "ours": float(with_profile.step_time_s[0]) / real - 1,
            "roofline": float(roof.step_time_s[0]) / real - 1,
        }
        bad = listed != arch.layers + 2  # the file's stages list another model's layers
        if bad:
            flagged.append(run["file"])
        for k, v in e.items():
            errs[k].append(v)
        errs["memory"].append(float(with_profile.memory_gib[0]) / (run["max_mem"] / 2**30) - 1)
        table.append(
            [
                run["file"].split("/")[-3]
                + " "
                + Path(run["file"]).stem.replace("plan_config_", ""),
                f"{plan.pp}x{plan.tp}x{plan.dp}",
                plan.micro_batch,
                run["gbs"],
                f"{real:.3f}",
                f"{sailor_s[i]:.3f}",
                f"{e['sailor']:+.1%}",
                f"{with_profile.step_time_s[0]:.3f}",
                f"{e['ours']:+.1%}",
                f"{roof.step_time_s[0]:.3f}",
                f"{e['roofline']:+.1%}",
                f"{run['max_mem'] / 2**30:.1f}",
                f"{with_profile.memory_gib[0]:.1f}",
                "NO: " + f"{listed} layers listed" if bad else "",
            ]
        )
    print_table(
        "Sailor's measured GH200 runs: iteration seconds, measured and modelled",
        [
            "run",
            "PPxTPxDP",
            "mb",
            "GBS",
            "measured",
            "Sailor sim",
            "err",
            "ours+profile",
            "err",
            "ours roofline",
            "err",
            "mem GiB",
            "ours GiB",
            "plan file sane",
        ],
        table,
    )
    keep = np.array([r[0]["file"] not in flagged for r in rows])
    summary = []
    for name, label in (
        ("sailor", "Sailor's simulator (its GH200 profile)"),
        ("ours", "ours, Sailor's GH200 layer profile as input"),
        ("roofline", "ours, roofline alone (no profile)"),
    ):
        a = np.abs(errs[name])
        summary.append(
            [
                label,
                f"{np.median(a):.1%}",
                f"{a.max():.1%}",
                f"{np.median(a[keep]):.1%}",
                f"{a[keep].max():.1%}",
                f"{ordered(rows, errs[name])}",
            ]
        )
    print()
    print_table(
        f"Error on Sailor's {len(rows)} measured GH200 runs (|model/measured - 1|)",
        [
            "model",
            "median",
            "max",
            f"median, {keep.sum()} sane",
            f"max, {keep.sum()} sane",
            "pairs ordered",
        ],
        summary,
        note=(
            "Not sane: " + ", ".join(flagged) + " (its stages list another model's "
            "layers; its measured time equals the other model's run's "
            "red_grads)\n"
            if flagged
            else ""
        )
        + f"Memory, ours against the runs' max_mem: median "
        f"{np.median(np.abs(errs['memory'])[keep]):.1%}, max "
        f"{np.abs(errs['memory'])[keep].max():.1%} on the sane runs.\n"
        + proposed_targets(rows, errs, keep),
    )
    if RECEIVES.exists():
        print()
        staged_receives(rows, errs["ours"], keep, json.loads(RECEIVES.read_text()))


def proposed_targets(rows, errs, keep, least: int = 4) -> str:
    """The two targets proposed in place of "max <= 25%" on every run, computed: the max on the
    sane runs of at least `least` micro-batches a replica (in a step of one micro-batch, the
    per-step costs that no layer profile holds weigh most), and on how many sane runs ours is
    no further off than Sailor's simulator."""
    many = np.array(
        [
            replica_micro_batches(r["gbs"], plan.dp, plan.micro_batch) >= least
            for r, *_, plan, _ in rows
        ]
    )
    ours, sailor = np.abs(errs["ours"]), np.abs(errs["sailor"])
    sel = keep & many
    return (
        f"Sane runs of >= {least} micro-batches a replica ({sel.sum()}): max ours "
        f"{ours[sel].max():.1%}, Sailor's simulator {sailor[sel].max():.1%}. Ours no further "
        f"off than Sailor's simulator on {(ours <= sailor)[keep].sum()} of {keep.sum()} sane "
        f"runs; where further, by at most {100 * (ours - sailor)[keep].max():.1f} points."
    )


def staged_receives(rows, errs, keep, measured: dict) -> None:
    """What Sailor's host-staged pipeline receive (benchmarks/host_staged_receive.py) would add
    to our estimates, at the times measured on another machine: a what-if, not the model. The
    binding stage takes each of its receives once per micro-batch slot, (micro-batches + stages
    - 1) a step: an end stage one receive a micro-batch, a middle stage two."""
    took = {(r["model"], r["micro_batch"]): r["sailor_ms"] / 1e3 for r in measured["rows"]}
    table = []
    err: dict[int, list[float]] = {1: [], 2: []}
    for (run, key, _, plan, _), e in zip(rows, errs, strict=True):
        ours = run["real"] * (1 + e)
        slots = int(replica_micro_batches(run["gbs"], plan.dp, plan.micro_batch)) + plan.pp - 1
        receive = took[(MODELS[key][0], plan.micro_batch)] if plan.pp > 1 else 0.0
        for k in (1, 2):  # receives a slot, at most one a neighbour
            err[k].append((ours + slots * min(k, plan.pp - 1) * receive) / run["real"] - 1)
        if plan.pp > 1:
            table.append(
                [
                    key + " " + Path(run["file"]).stem.replace("plan_config_", ""),
                    plan.pp,
                    slots,
                    f"{receive * 1e3:.2f}",
                    f"{e:+.1%}",
                    f"{err[1][-1]:+.1%}",
                    f"{err[2][-1]:+.1%}",
                ]
            )
    a1, a2 = (np.abs(err[k])[keep] for k in (1, 2))
    print_table(
        f"What Sailor's host-staged receives would add, at the times measured on "
        f"{measured['gpu']} behind {measured['host']} (a what-if, not the model)",
        ["run", "PP", "slots", "receive (ms)", "ours+profile", "1 receive a slot", "2 (middle)"],
        table,
        f"on the {keep.sum()} sane runs: median / max {np.median(a1):.1%} / {a1.max():.1%} "
        f"with one receive a slot, {np.median(a2):.1%} / {a2.max():.1%} with a middle stage's "
        "two; PP1 runs unchanged. The receive times are another machine's: a GH200's host "
        "path (Grace's memory, copies over NVLink-C2C) is not measured.",
    )


def ordered(rows, errs) -> str:
    """Pairs of runs of one model, node count and global batch that the model orders as
    measured (which of the two is faster)."""
    right = total = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i][0], rows[j][0]
            if (rows[i][1], a["N"], a["gbs"]) != (rows[j][1], b["N"], b["gbs"]):
                continue
            total += 1
            ma, mb = a["real"] * (1 + errs[i]), b["real"] * (1 + errs[j])
            right += (ma < mb) == (a["real"] < b["real"])
    return f"{right}/{total}"


# ---------------------------------------------------------------------------------- 2. plans


def zone(name: str) -> str:
    return name.removeprefix("gcp-")


def written_ring(p: Placement, view) -> Placement:
    """A replicated job's ring listed from after its hop of lowest one-connection rate (then
    narrowest bandwidth). Sailor's simulator times a ring by the hops between neighbours in the
    list, at one connection's rate, and leaves out the hop back to the first. A ring has no
    first member: where the list starts changes neither the ring nor its direction, so it
    starts where the hop left out is the one that would pace it."""
    if p.kind != DATA:
        return p
    ring = np.asarray(p.domains)
    hop = (ring, np.roll(ring, -1))
    flow = view.bandwidth_gbps if view.flow_gbps is None else view.flow_gbps
    start = (np.lexsort((view.bandwidth_gbps[hop], flow[hop]))[0] + 1) % len(ring)

    def turned(listed: tuple) -> tuple:
        return (*listed[start:], *listed[:start])

    return replace(p, domains=turned(p.domains), gpus=turned(p.gpus), names=turned(p.names))


def sailor_layers(arch, pp: int, counts: tuple[int, ...] = ()) -> list[list[int]]:
    """Each stage's layers as Sailor lists them (0 the embedding, layers + 1 the output):
    `counts` transformer layers a stage, or as Megatron-DeepSpeed's type:transformer
    partition splits them (the embedding with the first, the output with the last)."""
    if not counts:
        heaviest = int(stage_layers(arch.layers, pp)[0])
        split = [heaviest] * pp
        ends_first = [pp - 1, 0, *range(pp - 2, 0, -1)]
        for i in ends_first[: heaviest * pp - arch.layers]:  # the shortfall, last stage first
            split[i] -= 1
        counts = tuple(split)
    bounds = np.cumsum([0, *counts])
    stages = [list(range(1 + int(bounds[i]), 1 + int(bounds[i + 1]))) for i in range(pp)]
    stages[0].insert(0, 0)
    stages[-1].append(arch.layers + 1)
    return stages


def five_zone_vm(domain: str) -> tuple[str, str]:
    """Sailor's GPU and zone of a VM in a domain of the five zones."""
    return "A100-40", zone(domain)


def as_sailor(p: Placement, arch, vm: Callable[[str], tuple[str, str]] = five_zone_vm) -> dict:
    """Our placement as the plan Sailor's simulator reads: each stage's replicas, each a VM
    (`vm`: Sailor's GPU and zone for a domain's name) holding one replica's TP group, in the
    placement's order (see `written_ring`); stages take the layers as Megatron-DeepSpeed's
    type:transformer partition does (the embedding with the first, the output with the last),
    or as a pipeline split by speed gives them."""
    plan = p.plan
    counts = (
        tuple(p.split[p.names.index(d)] for d in p.stage_to_domain)
        if p.split and p.kind == PIPELINE
        else ()
    )
    per_replica = plan.tp * plan.pp * plan.cp
    if p.kind == PIPELINE:
        domains_of = [[n] * plan.dp for n in p.stage_to_domain]
    else:
        replicas = [
            n for n, g in zip(p.names, p.gpus, strict=True) for _ in range(g // per_replica)
        ]
        domains_of = [replicas] * plan.pp
    tmp = [[[[[gpu, plan.tp, z]], plan.tp] for gpu, z in map(vm, ns)] for ns in domains_of]
    return {
        "pipeline_list": [
            {
                "num_stages": plan.pp,
                "layers_per_stage": sailor_layers(arch, plan.pp, counts),
                "tmp_per_stage": tmp,
                "dp": [plan.dp] * plan.pp,
            }
        ],
        "mbs": plan.micro_batch,
        "zone": vm(p.names[0])[1],
    }


def from_sailor_plan(body: dict, view, job) -> Placement | None:
    """Sailor's pick as our placement where our kinds hold it: replicas over zones (no
    pipeline across them) or stages each in one zone; None otherwise."""
    pl = body["pipeline_list"][0]
    tp, pp, dp = pl["tmp_per_stage"][0][0][1], pl["num_stages"], pl["dp"][0]
    plan = Plan(dp=dp, tp=tp, pp=pp, micro_batch=body["mbs"], zero=0, dtype=DTYPE)
    index = {zone(d.name): i for i, d in enumerate(view.domains)}
    stage_zones = [[vm[0][0][2] for vm in stage] for stage in pl["tmp_per_stage"]]
    if all(zs == stage_zones[0] for zs in stage_zones):  # each replica in one zone
        count = {z: stage_zones[0].count(z) for z in dict.fromkeys(stage_zones[0])}
        doms = [index[z] for z in count]
        kind = SINGLE if len(doms) == 1 else DATA
        gpus = [count[z] * tp * pp for z in count]
    elif all(len(set(zs)) == 1 for zs in stage_zones):
        order = list(dict.fromkeys(zs[0] for zs in stage_zones))
        doms, kind = [index[z] for z in order], PIPELINE
        gpus = [sum(1 for zs in stage_zones if zs[0] == z) * dp * tp for z in order]
    else:
        return None
    return Placement(
        job.name, kind, tuple(doms), tuple(gpus), plan, tuple(view.domains[d].name for d in doms)
    )


def plans(root: Path, checkout: Path, key: str = "OPT-350", per_zone_sizes=PER_ZONE) -> None:
    """Both planners on the five zones for model `key` (of MODELS) at these sizes a zone."""
    sailor_model, ours_model = MODELS[key]
    arch, gbs = catalog.model(ours_model), GLOBAL_BATCH[key]
    start = time.perf_counter()
    sailor = driver(
        root,
        {
            "op": "plan",
            "model": sailor_model,
            "gpu": "A100-40",
            "gbs": gbs,
            "zones": [zone(d.name) for d in setup(8)[1].domains],
            "sizes": list(per_zone_sizes),
        },
    )
    sailor_wall = time.perf_counter() - start
    rows, timing = [], []
    for pick in sailor["picks"]:
        per_zone = pick["size"]
        job, view = setup(per_zone, ours_model, gbs)
        t0 = time.perf_counter()
        c0 = time.process_time()
        layers = profile(checkout, sailor_model, arch, "A100-40", "A100-40GB", planner_file=True)
        opts = SearchOptions(
            dtype=DTYPE,
            stack=STACK,
            layers=(layers,),
            network=network_from_sailor(checkout / NETWORK, "A100-40"),
        )
        ours = written_ring(search(job, view, THROUGHPUT_ONLY, opts, pareto=False).best, view)
        ours_s, ours_cpu = time.perf_counter() - t0, time.process_time() - c0
        theirs = from_sailor_plan(pick["plan"], view, job)
        bodies = [pick["plan"], as_sailor(ours, arch)]
        sims = driver(
            root,
            {
                "op": "simulate",
                "model": sailor_model,
                "gbs": gbs,
                "plans": [{**b, "zone": b.get("zone", zone(view.domains[0].name))} for b in bodies],
            },
        )["results"]
        for who, p, sim in (("Sailor", theirs, sims[0]), ("ours", ours, sims[1])):
            est = estimate_placement(p, job, view, opts) if p is not None else None
            rows.append(
                [
                    per_zone,
                    who,
                    describe(p),
                    f"{sim['iteration_s']:.3f}",
                    f"{est.step_time_s:.3f}" if est else "-",
                    "yes" if sim["fits"] else "NO",
                    f"{est.memory_gib_per_gpu:.1f}" if est else "-",
                ]
            )
        timing.append(
            [
                per_zone,
                f"{sailor['setup_s']:.1f} / {sailor['setup_cpu_s']:.1f}",
                f"{pick['decision_s']:.2f} / {pick['decision_cpu_s']:.2f}",
                f"{ours_s:.2f} / {ours_cpu:.2f}",
            ]
        )
    print_table(
        f"Sailor's five zones, {arch.name}, global batch {gbs}: each pick under each model "
        "(seconds per iteration; lower is faster)",
        [
            "GPUs/zone",
            "planner",
            "pick",
            "Sailor's simulator",
            "our model",
            "fits Sailor's memory",
            "our GiB/GPU",
        ],
        rows,
        note="Our model: stack megatron-deepspeed, TF32, Sailor's A100-40 layer "
        f"profile of {arch.name} and its A100-40 network curve (one GPU a node, "
        f"{NETWORK}) as input. Sailor's pick: the first of its planner's "
        "sorted plans that fits its memory model. Each ring as the pick lists it; ours "
        "starts after its slowest hop, the one Sailor's simulator leaves out.",
    )
    print()
    print_table(
        "Planning time, seconds, wall / CPU (Sailor: its modules' import and its "
        "planner's set-up once, then each decision; ours: profile import and search)",
        ["GPUs/zone", "Sailor set-up", "Sailor decision", "ours, everything"],
        timing,
        note=f"Sailor's planner built in {sailor['build_s']:.1f} s (cached "
        f"after the first run); its whole child process took "
        f"{sailor_wall:.1f} s.",
    )


def describe(p: Placement | None) -> str:
    if p is None:
        return "(not expressible as our placement)"
    x = p.plan
    where = "+".join(n.removeprefix("gcp-us-") for n in p.names)
    return f"{p.kind} {where}: PP{x.pp} TP{x.tp} DP{x.dp} mb{x.micro_batch} on {p.total_gpus}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", nargs="?", default=os.environ.get("SAILOR_DIR"))
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="OPT-350",
        help="the model both planners plan for on the five zones (default: OPT-350, the "
        "issue's; GPT-NEO has Sailor's A100-40 profiles too)",
    )
    parser.add_argument(
        "--per-zone",
        default=",".join(map(str, PER_ZONE)),
        help="accelerators a zone, comma-separated multiples of 4 (default: 8,16,32)",
    )
    parser.add_argument("--only", choices=("fidelity", "plans"), help="run one part")
    args = parser.parse_args()
    try:
        sizes = [int(x) for x in args.per_zone.split(",")]
    except ValueError:
        parser.error(f"--per-zone takes whole numbers, comma-separated; got {args.per_zone!r}")
    if any(n <= 0 or n % 4 for n in sizes):
        parser.error(f"--per-zone takes positive multiples of 4 (4-GPU VMs); got {args.per_zone}")
    arg = args.checkout
    if not arg:
        print("skipped: give a checkout of github.com/eth-easl/sailor (an argument or SAILOR_DIR)")
        return
    checkout = Path(arg).resolve()
    if not (checkout / "sailor" / "Planner" / "simulations" / "runtime_simulator.py").exists():
        print(
            f"skipped: {checkout} is not a checkout of Sailor (no "
            "sailor/Planner/simulations/runtime_simulator.py)"
        )
        return
    root = layout(checkout)
    try:
        if args.only != "plans":
            fidelity(root, checkout)
            print()
        if args.only != "fidelity":
            plans(root, checkout, args.model, sizes)
    except SailorError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
