"""`xds share bench`: GPU-sharing packers on the openb trace, as Weng et al. compare them."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from xdscheduler.arguments import number
from xdscheduler.errors import UserError

DEFAULT_SEEDS = 10
log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "share",
        help="accelerator sharing: benchmark the packers",
        description="accelerator sharing: benchmark the packers",
    )
    ssub = p.add_subparsers(dest="share_command", required=True, metavar="ACTION")
    q = ssub.add_parser(
        "bench",
        help="replay the openb trace: unallocated GPUs against arrived workload",
        description="Pods drawn from the openb GPU-sharing trace arrive on its 1,213-node "
        "cluster until they ask for --until times its GPUs; every packer meets the "
        "same pods per seed. Prints the share of GPUs each packer leaves "
        "unallocated when the arrived workload reaches the cluster's capacity, "
        "with 95% CIs over seeds, and writes share_bench.{json,md,csv,png}.",
    )
    q.add_argument(
        "--trace",
        default="default",
        help="default or gpushare40 (the shipped pod lists), or a pod-list CSV",
    )
    q.add_argument("--nodes", help="node-list CSV (default: the trace's 1,213 nodes)")
    q.add_argument(
        "--packers",
        help="comma-separated (default: all): "
        "random, best-fit, dot-product, gpu-packing, fgd, fgd-bestfit",
    )
    q.add_argument(
        "--seeds",
        type=number(int, 1, 1000),
        default=DEFAULT_SEEDS,
        help=f"seeds 0..N-1 (default {DEFAULT_SEEDS})",
    )
    q.add_argument(
        "--until",
        type=number(float, 1.0, 3.0),
        default=1.2,
        help="arrive until this multiple of the cluster's GPUs (default 1.2)",
    )
    q.add_argument(
        "--workers",
        type=number(int, 1, 256),
        default=os.cpu_count() or 1,
        help="processes running seeds at once (default: every CPU)",
    )
    q.add_argument("--out", default="xds-share", help="folder for the report (default xds-share)")
    q.add_argument(
        "--readme",
        metavar="FILE",
        help="replace the text between <!-- share:begin --> and <!-- share:end --> "
        "in FILE with the headline and table",
    )
    q.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"packers": {NAME: '
        '{"unallocated_share_at_capacity": ...}, ...}, ...}',
    )
    q.set_defaults(fn=cmd_bench)


def _packers(text: str | None) -> list[str]:
    from xdscheduler.sharing.packers import PACKERS

    if text is None:
        return list(PACKERS)
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PACKERS]
    if unknown or not names:
        raise UserError(
            f"--packers: unknown {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(PACKERS)}"
        )
    return list(dict.fromkeys(names))


def cmd_bench(args) -> None:
    from xdscheduler.report.readme import check_readme, splice_readme
    from xdscheduler.sharing import inflation, report
    from xdscheduler.sharing.openb import load_nodes, load_pods, trace_path
    from xdscheduler.sharing.packers import OURS

    packers = _packers(args.packers)
    if args.readme:
        check_readme(Path(args.readme), "share")  # before the run, not after it
    report.check_out(Path(args.out))
    nodes = load_nodes(Path(args.nodes) if args.nodes else None)
    pods = load_pods(trace_path(args.trace))
    if nodes.total_gpus == 0 or len(pods) == 0:
        raise UserError("the cluster has no GPUs or the trace no pods: nothing to pack")
    if not pods.gpu_demand.any():  # arrivals would never reach the cluster's capacity
        raise UserError(
            f"every pod of {args.trace} asks for 0 GPUs: the bench packs GPUs "
            f"until the pods ask for {args.until:g}x the cluster's"
        )
    _check_models(pods, nodes, args.trace)
    curves = inflation.bench(
        nodes, pods, packers, list(range(args.seeds)), args.until, workers=args.workers
    )
    summary = report.finite(inflation.summary(curves))  # one seed: no interval, not NaN
    seeds = (
        f"{args.seeds} seeds, every packer meeting the same pods per seed; means with 95% CIs "
        f"over seeds"
        if args.seeds > 1
        else "one seed, no interval; every packer meeting the same pods"
    )
    setup = (
        f"openb {args.trace}: {len(nodes.name)} nodes, {nodes.total_gpus} GPUs, "
        f"{len(pods)} pods in the trace, drawn with replacement until they ask for "
        f"{args.until:g}x the cluster's GPUs; {seeds}."
    )
    result = {
        "headline": report.headline(summary, OURS),
        "setup": setup,
        "trace": args.trace,
        "seeds": args.seeds,
        "nodes": len(nodes.name),
        "gpus": nodes.total_gpus,
        "ours": OURS,
        "packers": summary,
        "out": str(Path(args.out)),
    }
    report.write(Path(args.out), curves, result)
    if args.readme:
        made = (
            f"Generated by `xds share bench --trace {args.trace} --seeds {args.seeds} "
            f"--until {args.until:g} --readme {args.readme}`."
        )
        splice_readme(
            Path(args.readme),
            "share",
            "\n\n".join([result["headline"], setup, report.table(summary)]),
            made,
        )
    if args.json:
        print(json.dumps(report.finite(result), indent=2))
        return
    print(result["headline"])
    print(setup)
    print(report.table(summary))
    print(f"report, curves and plot in {args.out}/ (share_bench.md, .csv, .png)")


def _check_models(pods, nodes, trace: str) -> None:
    """Pods confined to GPU models no node has are always turned away: refuse when that leaves
    no GPU to ask for, else say how many."""
    from xdscheduler.sharing.openb import absent_models

    absent, models = absent_models(pods, nodes)
    if not absent.any():
        return
    named = f"GPU models no node has ({', '.join(models)}; the nodes have "
    named += f"{', '.join(sorted(set(nodes.model)))})"
    if not pods.gpu_demand[~absent].any():
        raise UserError(f"every pod of {trace} that asks for GPUs names only {named}")
    log.warning(
        "%d of %d pods of %s (%.1f%% of the GPUs asked) name only %s: they are always turned away",
        absent.sum(),
        len(pods),
        trace,
        100 * pods.gpu_demand[absent].sum() / pods.gpu_demand.sum(),
        named,
    )
