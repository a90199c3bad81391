"""`xds catalog`, `estimate`, `plan`, `index` and `scenario`: the models and the plan search
alone, without a study or a cluster."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from xdscheduler import catalog
from xdscheduler.arguments import number
from xdscheduler.costmodel.plan import DTYPES
from xdscheduler.errors import UserError

GPUS = number(int, 1, 1 << 20)
DEGREE = number(int, 1, 1 << 16)  # a parallel degree


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=_json_default))


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _csv_floats(text: str, n: int, what: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != n or not all(0 <= v <= 1000 for v in values):  # also refuses NaN
        raise UserError(f"{what} takes {n} numbers in [0, 1000] separated by commas, got {text!r}")
    return values


def cmd_catalog(args) -> None:
    for path in args.accelerators or []:
        catalog.load_catalog(path)
    catalog.user_catalogs()
    accs = [
        {
            "name": a.name,
            "vendor": a.vendor,
            **{f"{k}_tflops": v for k, v in a.rated_tflops.items()},
            "memory_gib": a.memory_gib,
            "memory_gbs": a.memory_gbs,
            "scaleup_gbs": a.scaleup_gbs,
            "scaleout_gbps": a.scaleout_gbps,
            "gpus_per_node": a.gpus_per_node,
            "power_w": a.power_w,
            "aliases": list(a.aliases),
            "source": a.source,
        }
        for a in catalog.ACCELERATORS.values()
    ]
    models = [
        {
            "name": m.name,
            "params_b": round(m.params / 1e9, 2),
            "layers": m.layers,
            "hidden": m.hidden,
            "ffn_hidden": m.ffn_hidden,
            "heads": m.heads,
            "kv_heads": m.kv_heads,
            "vocab": m.vocab,
            "seq_len": m.seq_len,
            "gated_mlp": m.gated_mlp,
        }
        for m in catalog.MODELS.values()
    ]
    if args.json:
        print_json({"accelerators": accs, "models": models})
        return
    print(
        f"{'accelerator':<15}{'BF16 TF':>9}{'FP16 TF':>9}{'FP8 TF':>9}{'GiB':>6}"
        f"{'HBM GB/s':>10}{'link GB/s':>10}"
    )
    for a in accs:
        bf16, fp16, fp8 = (
            f"{a[k]:.0f}" if a[k] else "-" for k in ("bf16_tflops", "fp16_tflops", "fp8_tflops")
        )
        print(
            f"{a['name']:<15}{bf16:>9}{fp16:>9}{fp8:>9}{a['memory_gib']:>6.0f}"
            f"{a['memory_gbs']:>10.0f}{a['scaleup_gbs']:>10.0f}"
        )
    print(f"\n{'model':<15}{'params':>8}{'layers':>8}{'hidden':>8}{'heads':>7}{'kv':>5}{'seq':>7}")
    for m in models:
        print(
            f"{m['name']:<15}{m['params_b']:>7.1f}B{m['layers']:>8}{m['hidden']:>8}"
            f"{m['heads']:>7}{m['kv_heads']:>5}{m['seq_len']:>7}"
        )


def _arch_from_args(args) -> catalog.ModelArch:
    explicit = [args.layers, args.hidden, args.ffn_hidden, args.heads, args.vocab]
    if args.model and any(v is not None for v in explicit):
        raise UserError("give --model or an explicit architecture (--layers ...), not both")
    if args.model:
        base = catalog.model(args.model)
        return catalog.ModelArch(**{**base.__dict__, "seq_len": args.seq or base.seq_len})
    missing = [
        f"--{n}"
        for n, v in zip(("layers", "hidden", "ffn-hidden", "heads", "vocab"), explicit, strict=True)
        if v is None
    ]
    if missing:
        raise UserError("without --model, give the architecture: missing " + ", ".join(missing))
    gated = args.mlp == "swiglu" or (args.mlp == "auto" and args.ffn_hidden != 4 * args.hidden)
    arch = catalog.ModelArch(
        "custom",
        args.layers,
        args.hidden,
        args.ffn_hidden,
        args.heads,
        args.kv_heads or args.heads,
        args.vocab,
        args.seq or 2048,
        gated,
        not gated,
    )
    arch.validate()
    return arch


def cmd_estimate(args) -> None:
    from xdscheduler.costmodel.estimate import estimate_one

    arch = _arch_from_args(args)
    profile = _profile(args.profile)
    result = estimate_one(
        gpu=args.gpu,
        arch=arch,
        gpus=args.gpus,
        tp=args.tp,
        pp=args.pp,
        cp=args.cp,
        vp=args.vp,
        global_batch=args.global_batch,
        micro_batch=args.micro_batch,
        recompute=args.recompute,
        dtype=args.dtype,
        zero=args.zero,
        measured=_layer_profiles(args.layer_profiles),
        **(
            {"stack": profile.stack, "calibration": profile.calibration}
            if profile
            else {"stack": args.stack}
        ),
    )
    if args.json:
        print_json(result)
        return
    print(
        f"{result['model']} on {result['gpus']} × {result['gpu']}  "
        f"(DP {result['plan']['dp']} × TP {args.tp} × PP {args.pp} × CP {args.cp})"
    )
    print(f"  step time        {result['step_time_s']:.3f} s")
    print(f"  tokens/s per GPU {result['tokens_per_s_per_gpu']:.0f}")
    print(
        f"  model TFLOP/s    {result['model_tflops_per_gpu']:.1f} per GPU (MFU {result['mfu']:.1%})"
    )
    print(
        f"  memory           {result['memory_gib_per_gpu']:.1f} GiB per GPU, "
        f"{'fits' if result['fits'] else 'does NOT fit: ' + result['reason']}"
    )
    for key, value in result["breakdown_s"].items():
        print(f"    {key:<10} {value:9.3f} s")


def cmd_plan(args) -> None:
    from xdscheduler.costmodel.plan import Stack
    from xdscheduler.planner.limits import Limits, placement_cost_per_hour
    from xdscheduler.planner.search import JobSpec, search, unrated_note
    from xdscheduler.planner.space import SearchOptions
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.scenario import Weights, default_scenario_path, load_scenario, validated

    scn = load_scenario(args.scenario or default_scenario_path())
    weights = scn.weights
    if args.weights:
        w = _csv_floats(args.weights, 3, "--weights")
        weights = validated(
            Weights,
            dict(zip(("efficiency", "utilization", "cost"), w, strict=True)),
            "--weights",
            "weights",
        )
    job = scn.job(args.job)
    profile = _profile(args.profile)
    layers = _layer_profiles(args.layer_profiles)
    tuned = (
        {"stack": Stack.preset(profile.stack), "calibration": profile.calibration}
        if profile
        else _measured_stack(layers)
    )
    dtype = args.dtype or job.dtype or "bf16"
    opts = SearchOptions(
        diloco_h=(0, args.diloco) if args.diloco else (0,),
        dtype=dtype,
        layers=layers,
        network=_network(args.network_profile),
        **tuned,
    )
    view = ClusterView.from_scenario(scn)
    limits = Limits(args.budget, args.min_throughput)
    spec = replace(JobSpec.of(job), dtype=dtype)
    result = search(spec, view, weights, opts, args.top, limits=limits)

    def as_json(p):
        return {**p.to_json(), "cost_per_hour": placement_cost_per_hour(p, view)}

    out = {
        "scenario": scn.name,
        "job": job.name,
        **as_json(result.best),
        "decision_ms": result.decision_ms,
        "plans_evaluated": result.evaluated,
        "explanation": result.explanation,
        "alternatives": [as_json(c) for c in result.alternatives],
        "pareto": [as_json(c) for c in result.pareto],
        "left_out": unrated_note(view, opts.dtype).lstrip("; "),
    }
    if args.json:
        print_json(out)
        return
    from xdscheduler.planner.search import describe

    best = result.best.estimated
    print(
        f"{job.name} ({job.arch.size}) in {scn.name}: decided in "
        f"{result.decision_ms:.0f} ms over {result.evaluated} plans"
    )
    print(f"  plan   {describe(result.best)}")
    print(
        f"  step   {best.step_time_s:.2f} s, {best.tokens_per_s:,.0f} tokens/s, "
        f"{best.cross_domain_gb_per_step:.2f} GB over the WAN per step, "
        f"${out['cost_per_hour']:,.2f}/h"
    )
    print(f"  why    {result.explanation['summary']}")
    if out["left_out"]:
        print(f"  note   {out['left_out']}")
    for i, alt in enumerate(result.alternatives, 1):
        print(
            f"  alt {i}  R={alt.scored.objective:.3f}  {alt.estimated.step_time_s:.2f} s  "
            f"${placement_cost_per_hour(alt, view):,.2f}/h  {describe(alt)}"
        )


def _layer_profiles(paths: list[str] | None) -> tuple:
    """The layer profiles given with --layer-profile (xds layers measure / import), ready to
    use."""
    from xdscheduler.costmodel.layers import LayerProfile, MeasuredLayers

    return tuple(MeasuredLayers.of(LayerProfile.load(p)) for p in paths or ())


def _network(path: str | None):
    """The network curve given with --network-profile (xds layers import-network); None."""
    from xdscheduler.costmodel.messages import NetworkProfile

    return NetworkProfile.load(path).curve() if path else None


def _measured_stack(layers: tuple) -> dict:
    """Without a calibration profile, plan on the software the layer profiles measured (where
    they agree on one)."""
    from xdscheduler.costmodel.plan import Stack

    stacks = {m.profile.stack for m in layers}
    return {"stack": Stack.preset(stacks.pop())} if len(stacks) == 1 else {}


def _layers_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--layer-profile",
        action="append",
        metavar="PROFILE",
        dest="layer_profiles",
        help="a layer profile (xds layers measure / import): its measured times "
        "replace the roofline's for the model, accelerator, precision, TP "
        "degrees and micro-batches it covers (repeatable)",
    )


def _profile(path: str | None):
    """The profile `xds calibrate` wrote (a file or a shipped name); None: the shipped
    constants of the --stack given."""
    if path is None:
        return None
    from xdscheduler.costmodel.calibration import Profile

    return Profile.load(path)


def cmd_index(args) -> None:
    from xdscheduler.perception.compute_index import compute_index

    arch = catalog.model(args.model)
    gpus = [catalog.accelerator(g).name for g in args.gpu.split(",")] if args.gpu else None
    result = compute_index(arch, accelerators=gpus, reference=args.reference, gpus=args.gpus)
    if args.json:
        print_json(result)
        return
    print(f"compute index for {arch.name} (reference {result['reference']} = 1.00)")
    print("  sensitivity: " + ", ".join(f"{k} {v:.2f}" for k, v in result["sensitivity"].items()))
    for name, row in result["accelerators"].items():
        print(f"  {name:<13} {row['index']:6.2f}")


def cmd_scenario_check(args) -> None:
    from xdscheduler.planner.search import counted
    from xdscheduler.scenario import load_scenario
    from xdscheduler.sim.inputs import check_size, listed_jobs

    scn = load_scenario(args.file)
    gpus = sum(d.gpus for d in scn.domains)
    jobs = check_size(scn, 24.0)  # what `xds run` does by default must fit
    listed_jobs(scn)  # each can run, on the cluster to itself
    counts = ", ".join(
        counted(n, noun)
        for n, noun in (
            (len(scn.domains), "domain"),
            (gpus, "accelerator"),
            (len(scn.links), "link"),
            (len(scn.jobs), "job"),
        )
    )
    pooled = (
        f" (counting the pools {', '.join(scn.pooled)} {'was' if len(scn.pooled) == 1 else 'were'}"
        " split into, one per accelerator type)"
        if scn.pooled
        else ""
    )
    print(
        f"{args.file}: valid; {counts} listed{pooled}; a day's study holds about "
        f"{jobs:,.0f} job{'' if round(jobs) == 1 else 's'}"
    )


def cmd_scenario_from_measurements(args) -> None:
    from pathlib import Path

    from xdscheduler.network import measurements as m
    from xdscheduler.textfile import output_file

    regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    output_file(Path(args.out), "scenario")  # before the measurements are read
    data_dir = Path(args.data) if args.data else m.default_data_dir()
    doc = m.scenario_from_measurements(
        regions,
        data_dir,
        accelerator=catalog.accelerator(args.accelerator).name,
        nodes_per_domain=args.nodes,
        name=args.name,
    )
    m.write_scenario(doc, Path(args.out), overwrite=args.force)
    print(
        f"wrote {args.out}: {len(doc['domains'])} domains, {len(doc['links'])} links "
        f"from {data_dir}"
    )


def _dtype_argument(p: argparse.ArgumentParser, default: str | None = "bf16") -> None:
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default=default,
        help="precision of the GEMMs (fp16 at the 16-bit rate, the only 16-bit one on "
        "chips without BF16 such as V100; tf32 and fp32 keep weights, "
        "activations and gradients in 4 bytes)"
        + ("" if default else "; default: the job's `dtype` in the scenario, else bf16"),
    )


def commander(sub) -> Callable[[str, Callable | None, str], argparse.ArgumentParser]:
    def command(name: str, fn: Callable | None, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        return p

    return command


def register(sub) -> None:
    """`catalog`, `estimate`, `plan`, `index`, `scenario`: the models and the search alone."""
    command = commander(sub)
    p = command("catalog", cmd_catalog, "list accelerators and model architectures")
    p.add_argument(
        "--accelerators",
        action="append",
        metavar="FILE",
        help="a catalog file of your own accelerators to check and list with the "
        "shipped ones (like xdscheduler/accelerators.yaml; repeatable; "
        "XDS_ACCELERATORS names such files for every command)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("estimate", cmd_estimate, "step time, throughput and memory of one plan")
    p.add_argument("--gpu", required=True, help="accelerator name, e.g. H100-SXM or A100-80GB")
    p.add_argument("--model", help="catalog model name (see `xds catalog`)")
    for flag in ("layers", "hidden", "ffn-hidden", "heads", "kv-heads", "vocab"):
        p.add_argument(f"--{flag}", type=number(int, 1, 1 << 24), help="explicit architecture")
    p.add_argument(
        "--mlp",
        choices=("auto", "gelu", "swiglu"),
        default="auto",
        help="MLP type of an explicit architecture (auto: GeLU when ffn = 4·hidden)",
    )
    p.add_argument(
        "--seq", type=number(int, 1, 1 << 24), help="sequence length (default: the model's)"
    )
    p.add_argument("--gpus", type=GPUS, required=True)
    p.add_argument("--tp", type=DEGREE, default=1)
    p.add_argument("--pp", type=DEGREE, default=1)
    p.add_argument("--cp", type=DEGREE, default=1)
    p.add_argument("--vp", type=DEGREE, default=1, help="virtual pipeline stages per rank")
    p.add_argument(
        "--global-batch", type=number(int, 1, 1 << 24), required=True, help="sequences per step"
    )
    p.add_argument("--micro-batch", type=number(int, 1, 1 << 16), default=1)
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    _dtype_argument(p)
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=1)
    p.add_argument(
        "--stack",
        default="megatron-core",
        help="software stack preset: megatron-core, megatron-core-tp-overlap, "
        "megatron-2022, megatron-2021, fsdp, fsdp2",
    )
    p.add_argument("--profile", help="a profile from xds calibrate: its stack and constants")
    _layers_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("plan", cmd_plan, "best placement and parallel plan for a job of a scenario")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: five_domains)")
    p.add_argument("--job", help="job name (default: the scenario's first job)")
    p.add_argument("--weights", help="w1,w2,w3 for efficiency, utilisation, cost")
    p.add_argument("--top", type=number(int, 0, 100), default=5, help="alternatives to list")
    p.add_argument(
        "--diloco",
        type=number(int, 0, 1 << 20),
        default=0,
        help="also consider DiLoCo-style outer sync every H steps across domains",
    )
    _dtype_argument(p, default=None)
    p.add_argument(
        "--budget",
        type=number(float, 0, 1e9, above=True),
        metavar="DOLLARS",
        help="most to pay per hour (accelerators and WAN traffic): the best plan by R within it",
    )
    p.add_argument(
        "--profile",
        help="a software stack's profile from xds calibrate (default: "
        "Megatron-Core with the shipped constants)",
    )
    _layers_argument(p)
    p.add_argument(
        "--network-profile",
        help="a network curve (xds layers import-network): "
        "a flat ring's messages at the rate their size "
        "gets",
    )
    p.add_argument(
        "--min-throughput",
        type=number(float, 0, 1e15, above=True),
        metavar="TOKENS_PER_S",
        help="fewest tokens/s: alone, the plan that reaches it "
        "for the fewest dollars per token; with "
        "--budget, a floor",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("index", cmd_index, "compute index of accelerators for a model's training")
    p.add_argument("--model", required=True)
    p.add_argument("--gpu", help="comma-separated accelerators (default: all)")
    p.add_argument("--reference", default="H100-SXM")
    p.add_argument("--gpus", type=GPUS, default=64, help="accelerators the task runs on")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("scenario", None, "scenario files: check, build from measurements")
    ssub = p.add_subparsers(dest="scenario_command", required=True, metavar="ACTION")
    q = ssub.add_parser("check", help="validate a scenario file")
    q.add_argument("file")
    q.set_defaults(fn=cmd_scenario_check)
    q = ssub.add_parser(
        "from-measurements", help="a scenario from measured inter-region bandwidth and RTT"
    )
    q.add_argument("--regions", required=True, help="comma-separated, e.g. aws:us-east-1,...")
    q.add_argument("--out", required=True, help="YAML file to write")
    q.add_argument("--data", help="folder with the Skyplane CSVs (default: shared data)")
    q.add_argument("--accelerator", default="H100-SXM")
    q.add_argument("--nodes", type=number(int, 1, 100_000), default=16, help="nodes per domain")
    q.add_argument("--name", help="scenario name")
    q.add_argument("--force", action="store_true", help="overwrite an existing file")
    q.set_defaults(fn=cmd_scenario_from_measurements)
