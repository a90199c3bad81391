"""Pipeline schedules run over shaped links, against the step-time model's count of the waits
they make a stage take.

    python -m benchmarks.pipeline_sends [--quick] [--out F]   # as root: namespaces, tc (~10 min)
    python -m benchmarks.pipeline_sends --from benchmarks/shaped_runs/pipeline_sends.json

Each stage is a process in its own network namespace, joined to the next by a link shaped
with a token bucket (the live cluster's fabric), and runs `costmodel.schedules.program` with
torch.distributed over gloo: DeepSpeed's lock-step blocking calls, or Megatron's 1F1B, whose
exchanges send and receive at once (each direction on its own connection, as NCCL's pair of
channels). A pass is a sleep of fixed length: what is measured is how the schedule waits for
its transfers, not how fast this CPU multiplies. The transfer time each row feeds the model
and the simulation is measured on each link first, alone; nothing is fitted. Some rows have
every link alike; in others one link is slow among fast ones (a pipeline crossing the WAN
once), at the first or the last boundary: the fill and drain depend on where it sits. Then
three stages each in a domain of its own cross two links of unlike speed, and the middle stage
waits on both, each at its own rate. In the last, four stages in three domains (one, two, one)
cross two links of unlike speed with a fast link between them: no stage sits between two
crossings, and the fill times each at its own rate.

The model's waits come from `exchanges.PipelineExchanges`, what `estimate` calls,
with the compute and bubble of uniform stages (`schedules.Pipeline.modelled_s`); the simulation
(`Pipeline.simulated_s`) has transfers wait for both ends, as NCCL's do (it has no eager
protocol: a send waits for the receiver's buffer). Two ways this transport differs, both
printed or seen in the table:

- TCP's socket buffers take part of a message before the receiver asks for it, so a blocking
  send here can return early; DeepSpeed's lock-step calls measure faster than both the model
  and the simulation, most with four stages, where a middle stage's sends and receives
  alternate.
- A link here carries its two directions at once only in part (printed above the table), so
  Megatron's exchanges measure somewhat slower than over a link that does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from benchmarks._table import print_table
from xdscheduler.costmodel.schedules import STYLES, Compute, Pipeline, program

REPO = Path(__file__).resolve().parents[1]
LINK_MBIT = 100.0
FAST_MBIT = 1000.0  # the other links of a pipeline crossing one slow link
SECOND_MBIT = 250.0  # the second crossing beside a stage that sits between two
WORLD = 4  # namespaces: the longest pipeline's stages
KEPT = Path(__file__).parent / "shaped_runs" / "pipeline_sends.json"  # a run's measurements
FORWARD_S, BACKWARD_S = 0.05, 0.10
MICRO_BATCHES = 8
PORT = 29500  # in a namespace of its own: free
log = logging.getLogger("pipeline_sends")
HEADER = [
    "schedule",
    "stages",
    "slow link",
    "transfer / compute",
    "measured",
    "model",
    "err",
    "simulated",
    "err",
    "model, place unknown",
    "err",
]


def grid(quick: bool) -> list[dict]:
    """Each row's schedule, stages, one transfer's share of a micro-batch's compute over the
    slow link, which link is slow (None: every link alike; else one crossing among links
    `FAST_MBIT / LINK_MBIT` times as fast, at the first or the last boundary), and each link's
    rate. Then rows of a stage to a domain and two crossings, at `LINK_MBIT` and
    `SECOND_MBIT`: the middle stage sits between them; the last, the same crossings with two
    stages in the middle domain, joined by a fast link."""
    ratios = (0.25, 1.0) if quick else (0.25, 1.0, 2.0)
    t_mb = FORWARD_S + BACKWARD_S

    def row(style, stages, ratio, slow_at=None, mbit=None, domains=None) -> dict:
        if mbit is None:
            mbit = [LINK_MBIT if slow_at in (None, i) else FAST_MBIT for i in range(WORLD - 1)]
        return {
            "style": style,
            "stages": stages,
            "ratio": ratio,
            "bytes": int(ratio * t_mb * LINK_MBIT * 1e6 / 8) // 4 * 4,
            "steps": 2 if quick else 3,
            "slow_at": slow_at,
            "mbit": list(mbit),
            "domains": domains,
        }

    alike = [row(s, p, r) for s in STYLES for p in (2, 4) for r in ratios]
    crossing = [row(s, 4, r, at) for at in (0, 2) for s in STYLES for r in ratios[1:]]
    two = (LINK_MBIT, SECOND_MBIT, FAST_MBIT)
    between = [row(s, 3, r, 0, two, [1, 1, 1]) for s in STYLES for r in ratios[1:]]
    apart = (LINK_MBIT, FAST_MBIT, SECOND_MBIT)
    several = [row(s, 4, r, 0, apart, [1, 2, 1]) for s in STYLES for r in ratios[1:]]
    return alike + crossing + between + several


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two link loads, two steps a row")
    parser.add_argument("--out", type=Path, help="also write the measurements here (JSON)")
    parser.add_argument(
        "--from", dest="saved", type=Path, help=f"report measurements kept (e.g. {KEPT})"
    )
    parser.add_argument("--worker", nargs=4, metavar=("RANK", "WORLD", "HOST:PORT", "GRID"))
    args = parser.parse_args()
    if args.worker:
        rank, world, address, path = args.worker
        _worker(int(rank), int(world), address, json.loads(Path(path).read_text()))
        return 0
    if args.saved:
        measured = _kept(args.saved)
    else:
        from xdscheduler.live import fabric as fab

        why = fab.available()
        if why:
            print(f"skipped: {why}; --from {KEPT} reports the measurements kept")
            return 0
        measured = _run(fab, grid(args.quick))
        if args.out:
            args.out.write_text(json.dumps(measured, indent=1) + "\n")
    _report(measured["rows"], measured["duplex"])
    return 0


def _kept(path: Path) -> dict:
    """Measurements a run wrote with --out; exits with what is wrong where they do not read."""
    try:
        measured = json.loads(path.read_text())
        needed = {"style", "stages", "slow_at", "link_s", "step_s"}
        if not measured["rows"] or not all(needed <= r.keys() for r in measured["rows"]):
            raise ValueError(f"no rows of {', '.join(sorted(needed))}")
        return measured
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--from {path}: not measurements this benchmark wrote ({e})") from None


def _run(fab, rows: list[dict]) -> dict:
    """Each set of rows with the same links (consecutive in the grid) on a fabric of its own,
    of `WORLD` namespaces, each link at its row's rate."""
    world = WORLD
    done: dict = {"rows": []}
    for rates in dict.fromkeys(tuple(r["mbit"]) for r in rows):
        mbit = np.full((world, world), FAST_MBIT)
        for i, rate in enumerate(rates):
            mbit[i, i + 1] = mbit[i + 1, i] = rate
        np.fill_diagonal(mbit, 0.0)
        fabric = fab.Fabric.plan([f"stage{i}" for i in range(world)], mbit / 1000, *fab.new_tag())
        these = [r for r in rows if tuple(r["mbit"]) == rates]
        log.info("%d rows, links of %s Mbit/s", len(these), "/".join(f"{x:g}" for x in rates))
        with tempfile.TemporaryDirectory(prefix="pipeline-sends-") as folder:
            path = Path(folder) / "grid.json"
            path.write_text(json.dumps(these))
            out = _run_on(fab, fabric, world, path)
        done["rows"] += out["rows"]
        done.setdefault("duplex", out["duplex"])
    return done


def _run_on(fab, fabric, world: int, path: Path) -> dict:
    """Every stage's process in its namespace, the grid read from `path`; the fabric built
    for them and torn down after."""
    fab.build(fabric)
    try:
        env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0")
        address = f"{fabric.ip(0)}:{PORT}"
        procs = [
            subprocess.Popen(
                [*_in(fabric.namespace(i)), str(i), str(world), address, str(path)],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(world)
        ]
        outs = [p.communicate(timeout=1800)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"a stage failed: exit codes {[p.returncode for p in procs]}")
        return json.loads(outs[0])
    finally:
        fab.teardown(fabric)


def _in(namespace: str) -> list[str]:
    """A stage's command, run in `namespace`."""
    this = ["-m", "benchmarks.pipeline_sends", "--worker"]
    return ["ip", "netns", "exec", namespace, sys.executable, *this]


def _worker(rank: int, world: int, address: str, rows: list[dict]) -> None:
    """Stage `rank` of `world`: every row of the grid, the first stage printing the results."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{address}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=600),
    )
    # one connection a direction between neighbours: a stage's send and its receive from the
    # same neighbour run at once, as NCCL's channels do
    groups = {}
    for i in range(world - 1):
        for pair in ((i, i + 1), (i + 1, i)):
            groups[pair] = dist.new_group([i, i + 1])
    duplex = _duplex(dist, torch, rank, groups, rows[0]["bytes"])
    done = []
    for n, row in enumerate(rows):
        buf = torch.zeros(row["bytes"] // 4)
        scratch = torch.empty_like(buf)
        links = [_transfer_s(dist, torch, rank, groups, buf, i) for i in range(row["stages"] - 1)]
        ops = (
            program(row["style"], rank, row["stages"], MICRO_BATCHES)
            if rank < row["stages"]
            else []
        )
        steps = []
        for _ in range(row["steps"] + 1):  # the first warms the connections
            dist.barrier()
            start = time.perf_counter()
            _execute(dist, rank, ops, groups, buf, scratch)
            steps.append(_most(dist, torch, time.perf_counter() - start))
        done.append(dict(row, link_s=links, step_s=statistics.median(steps[1:])))
        if rank == 0:
            log.info("row %d of %d: %s", n + 1, len(rows), done[-1])
    if rank == 0:
        print(json.dumps({"rows": done, "duplex": duplex}))
    dist.destroy_process_group()


def _transfer_s(dist, torch, rank: int, groups: dict, buf, src: int = 0) -> float:
    """The median of three sends from stage `src` to the next alone."""
    took = []
    for _ in range(3):
        dist.barrier()
        start = time.perf_counter()
        if rank == src:
            dist.send(buf, src + 1, group=groups[src, src + 1])
        elif rank == src + 1:
            dist.recv(buf, src, group=groups[src, src + 1])
        took.append(time.perf_counter() - start)
    return _most(dist, torch, statistics.median(took) if rank == src + 1 else 0.0)


def _duplex(dist, torch, rank: int, groups: dict, nbytes: int) -> float:
    """An exchange both ways between stages 0 and 1 over one transfer alone (1: the link
    carries both directions at full rate; 2: one at a time)."""
    out, back = torch.zeros(nbytes // 4), torch.zeros(nbytes // 4)
    both = []
    for _ in range(4):
        dist.barrier()
        start = time.perf_counter()
        if rank < 2:
            peer = 1 - rank
            reqs = [
                dist.isend(out, peer, group=groups[rank, peer]),
                dist.irecv(back, peer, group=groups[peer, rank]),
            ]
            for r in reqs:
                r.wait()
        both.append(time.perf_counter() - start)
    seen = _most(dist, torch, statistics.median(both[1:]) if rank == 1 else 0.0)
    return seen / _transfer_s(dist, torch, rank, groups, out)


def _most(dist, torch, seconds: float) -> float:
    """The most of every stage's `seconds`: a step ends when its last stage does."""
    seen = torch.tensor([seconds])
    dist.all_reduce(seen, op=dist.ReduceOp.MAX)
    return float(seen)


def _execute(dist, rank: int, ops: list, groups: dict, buf, scratch) -> None:
    """Run a stage's program: passes as sleeps, exchanges as sends (of `buf`) and receives
    (into `scratch`) started together and waited for together."""
    for op in ops:
        if isinstance(op, Compute):
            time.sleep(FORWARD_S if op.forward else BACKWARD_S)
            continue
        reqs = [dist.isend(buf, d, group=groups[rank, d]) for d in op.send]
        reqs += [dist.irecv(scratch, s, group=groups[s, rank]) for s in op.recv]
        for r in reqs:
            r.wait()


def _report(rows: list[dict], duplex: float) -> None:
    table, model_err, sim_err = [], [], []
    unplaced_err: list[float] = []
    for r in rows:
        links, slow_at, domains = r["link_s"], r["slow_at"], r.get("domains") or ()
        if domains:  # every link a crossing of its own: each as measured
            timed: float | list[float] = links
            slow = links[slow_at]
        elif slow_at is None:  # every link alike: the first one's, as measured
            timed = links[0]
            slow = links[0]
        else:  # the slow one, and the others' median for each of them
            slow = links[slow_at]
            fast = statistics.median(x for i, x in enumerate(links) if i != slow_at)
            timed = [slow if i == slow_at else fast for i in range(len(links))]
        pipeline = Pipeline(r["style"], r["stages"], MICRO_BATCHES, FORWARD_S, BACKWARD_S, timed)
        model, sim = pipeline.modelled_s(domains=domains), pipeline.simulated_s()
        model_err.append(model / r["step_s"] - 1)
        sim_err.append(sim / r["step_s"] - 1)
        table.append(
            [
                "DeepSpeed (blocking)" if r["style"] == "blocking" else "Megatron 1F1B",
                r["stages"],
                _which(r),
                f"{slow / (FORWARD_S + BACKWARD_S):.2f}",
                r["step_s"],
                model,
                f"{model_err[-1]:+.1%}",
                sim,
                f"{sim_err[-1]:+.1%}",
                *_unplaced(pipeline, r["step_s"], slow_at, domains, unplaced_err),
            ]
        )
    med = np.median(np.abs(model_err))
    print(
        f"The step-time model is {med:.1%} (median) and {np.max(np.abs(model_err)):.1%} (max) "
        f"off {len(rows)} measured pipeline steps over {LINK_MBIT:g} Mbit/s links (one "
        f"among {FAST_MBIT:g} Mbit/s ones where a link is slow); the "
        f"schedule's simulation {np.median(np.abs(sim_err)):.1%} and "
        f"{np.max(np.abs(sim_err)):.1%}."
    )
    slow_rows = [i for i, r in enumerate(rows) if r["slow_at"] is not None]
    crossings = f"({LINK_MBIT:g} and {SECOND_MBIT:g} Mbit/s)"
    for label, kind, untold in (
        (
            "With one slow link",
            "one",
            "where it sits (its fill then charged over every link each way)",
        ),
        (
            f"With a stage between two crossings {crossings}",
            "between",
            "the faster one (the slowest then standing for both)",
        ),
        (
            f"With two crossings apart {crossings}",
            "apart",
            "each crossing and the links after it (the slowest then standing for both)",
        ),
    ):
        at = [k for k, i in enumerate(slow_rows) if _kind(rows[i]) == kind]
        if at:
            known = np.abs([model_err[slow_rows[k]] for k in at])
            unknown = np.abs([unplaced_err[k] for k in at])
            print(
                f"{label}: {np.median(known):.1%} (median) and {known.max():.1%} (max); "
                f"{np.median(unknown):.1%} and {unknown.max():.1%} when the model is not told "
                f"{untold}."
            )
    print(
        f"{MICRO_BATCHES} micro-batches, {FORWARD_S * 1e3:g} + {BACKWARD_S * 1e3:g} ms a pass "
        f"pair; an exchange both ways took {duplex:.2f}x one way alone on these links.\n"
    )
    print_table(
        "Pipeline steps over shaped links (seconds)",
        HEADER,
        table,
        "transfer / compute: one micro-batch's transfer over the slow link (every link where "
        "none is slow), measured alone, over its compute. slow link: which boundary is the one "
        "slow link, where one is (the fill depends on it).",
    )


def _kind(r: dict) -> str:
    """A row's crossings: one slow link, two with a stage between them, or two apart."""
    domains = r.get("domains") or ()
    if not domains:
        return "one"
    return "between" if 1 in domains[1:-1] else "apart"


def _which(r: dict) -> str:
    """Which boundary is the slow link (or the crossings' rates), '-' where none is."""
    if domains := r.get("domains"):
        ends = np.cumsum(domains)[:-1] - 1
        return "crossings: " + " + ".join(f"{r['mbit'][i]:g}" for i in ends)
    return "-" if r["slow_at"] is None else f"{r['slow_at'] + 1} of {r['stages'] - 1}"


def _unplaced(pipeline: Pipeline, step_s: float, slow_at, domains, errs: list) -> list:
    """The model not told where the slow link sits (nor, of two crossings, each one's rate:
    the slowest stands for both), and its error; blank where no link is slow."""
    if slow_at is None:
        return ["", ""]
    model = pipeline.modelled_s(placed=False, domains=domains)
    errs.append(model / step_s - 1)
    return [model, f"{errs[-1]:+.1%}"]


if __name__ == "__main__":
    sys.exit(main())
