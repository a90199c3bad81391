"""`xds profile`: measure what each domain's accelerators really do, as Sailor profiles before it
plans, and write catalog entries the cost model reads.

On every accelerator of every domain at once (a task per accelerator, so each runs as it would
under jobs that fill the cluster): GEMM throughput per dtype and shape, and memory bandwidth (a
large copy). Inside the domain: the bus bandwidth of the gradient reduction the live runner does
(`DomainSync`), under Ray Train as a job runs it, each reduction after a burst of compute on
every accelerator, as a training step meets it (stragglers' waits included). Across every link:
goodput both ways (`probe`). The figures are the largest GEMM's rate of each dtype (the model's
GEMM efficiency applies on top, as it does to a datasheet's peak), the copy rate as memory
bandwidth, the reduction's median bus bandwidth over its sizes as the scale-up bandwidth, and
the rest of the entry from the accelerator the domain names.
"""

from __future__ import annotations

import json
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import ray

from xdscheduler.catalog import AcceleratorEntry
from xdscheduler.live import quota
from xdscheduler.live.state import DOMAIN_LABEL, HEAD_LABEL
from xdscheduler.scenario import Scenario
from xdscheduler.timing import per_second

SHAPES = (256, 512, 1024)
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
REDUCE_MB = (1, 2, 4, 8)  # gradients of 0.25-2 M fp32 parameters
REDUCE_REPEATS = 9
# Reference trainings (layers, hidden, batch, micro-batch: 0 the whole batch; 4 heads, 512
# tokens, sequences of 64): the live runner's own step on one accelerator, for `xds calibrate`
# to fit the plain-dp stack's constants to. Shapes around, not of, the jobs in scenarios/jobs;
# two in small micro-batches, so that a pass's own cost is told apart from its samples' (a
# split by speed takes small micro-batches, and a profile without them called those free).
REFERENCES = (
    (1, 64, 8, 0),
    (1, 128, 16, 0),
    (2, 96, 4, 0),
    (3, 128, 4, 0),
    (2, 192, 8, 0),
    (4, 64, 12, 0),
    (2, 96, 8, 1),
    (3, 128, 8, 2),
)
REFERENCE_STEPS = (3, 10)  # warm-up, then timed


@ray.remote(num_cpus=1, max_calls=1)  # its worker joined an accelerator's group: not reused
def measure_accelerator(seconds: float) -> dict:
    """This accelerator's GEMMs and copies, then its reference trainings, on one thread: one
    worker for both (a worker's start and torch's import cost more than the GEMMs do)."""
    import torch

    quota.join()
    torch.set_num_threads(1)
    return {**gemms_and_copies(seconds), "trainings": reference_trainings()}


def gemms_and_copies(seconds: float) -> dict:
    """This worker's GEMM TFLOP/s per dtype and size, and copy GB/s."""
    import torch

    gemm = {}
    for name, dtype in DTYPES.items():
        for n in SHAPES:
            a, b = (torch.randn(n, n, dtype=getattr(torch, dtype)) for _ in range(2))
            gemm[f"{name}_{n}"] = 2 * n**3 * per_second(partial(torch.matmul, a, b), seconds) / 1e12
    src = torch.empty(32 * 2**20 // 4)
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() * 4 * per_second(lambda: dst.copy_(src), seconds) / 1e9
    return {"node": ray.util.get_node_ip_address(), "gemm_tflops": gemm, "memory_gbs": copy_gbs}


def reference_trainings() -> list[float]:
    """This accelerator's median step time of each reference training (the live runner's step:
    forward, backward and AdamW, no gradient reduction)."""
    import torch

    from xdscheduler.live.gpt import Gpt, GptShape, MarkovCorpus
    from xdscheduler.live.training import accumulate

    warm, timed = REFERENCE_STEPS
    medians = []
    for layers, hidden, batch, micro_batch in REFERENCES:
        torch.manual_seed(0)
        model = Gpt(GptShape(layers=layers, hidden=hidden, heads=4, vocab=512, seq=64))
        opt = torch.optim.AdamW(model.parameters())
        corpus, took = MarkovCorpus(512, 0), []
        for step in range(warm + timed):
            tokens = corpus.batch(batch, 64, step, 0)
            start = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            accumulate(model, tokens, micro_batch)
            opt.step()
            took.append(time.perf_counter() - start)
        medians.append(float(np.median(took[warm:])))
    return medians


def reduce_loop(config: dict) -> None:
    """Ray Train's per-worker function: each domain's gradient sum as the live runner does it,
    every domain at once, after `burst_s` of GEMMs on every rank; each domain's leader times
    it, and rank 0 reports every domain's median seconds per size."""
    import torch
    import torch.distributed as dist
    from ray import train

    from xdscheduler.live.training import DomainSync

    quota.join()
    torch.set_num_threads(1)
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    label = ray.get_runtime_context().get_node_labels()[DOMAIN_LABEL]  # a str, whatever the
    sync = DomainSync(str(label), rank, world)  # annotation (Dict[str, List[str]]) says
    a = torch.randn(256, 256)
    seconds = {}
    for mb in config["sizes_mb"]:
        flat, took = torch.zeros(mb * 2**20 // 4), []
        for _ in range(config["repeats"]):
            start = time.perf_counter()
            while time.perf_counter() - start < config["burst_s"]:
                torch.matmul(a, a)
            start = time.perf_counter()
            sync.hierarchical_sum(flat, cross=False)
            took.append(time.perf_counter() - start)
        seconds[str(mb)] = float(np.median(took[1:]))
    leaders = [None] * world
    dist.all_gather_object(leaders, (sync.domain, seconds) if rank == sync.leader else None)
    # Ray Train keeps a run's metrics with its checkpoints only: rank 0's figures go in one
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "reduce_s.json").write_text(json.dumps(dict(filter(None, leaders))))
        train.report({}, checkpoint=train.Checkpoint.from_directory(folder) if rank == 0 else None)


@ray.remote(num_cpus=0, max_retries=0)
def measure_reduction(domains: dict[str, int], storage: str, burst_s: float) -> dict:
    """Per domain (name -> accelerators), the bus bandwidth (GB/s, as nccl-tests counts it)
    of its gradient reduction over all its accelerators, per size; {} for a domain of one.
    One Ray Train run over every domain, each reducing inside itself: one start-up, not one a
    domain (three at once took 45 s here, one alone 19 s). A task: it drives that run."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    several = {n: k for n, k in domains.items() if k >= 2}
    if not several:
        return {n: {} for n in domains}
    workers = [{DOMAIN_LABEL: n} for n, k in several.items() for _ in range(k)]
    result = TorchTrainer(
        reduce_loop,
        train_loop_config={"sizes_mb": REDUCE_MB, "repeats": REDUCE_REPEATS, "burst_s": burst_s},
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(
            num_workers=len(workers),
            resources_per_worker={"CPU": 1},
            label_selector=workers,
        ),  # type: ignore[call-arg]
        run_config=RunConfig(name=f"xds-profile-{time.time_ns()}", storage_path=storage),
    ).fit()
    if result.error:
        raise result.error
    assert result.checkpoint is not None, "the reduce loop reports a checkpoint"
    with result.checkpoint.as_directory() as folder:
        seconds = json.loads((Path(folder) / "reduce_s.json").read_text())

    def busbw(k: int, per_size: dict) -> dict:
        ring = 2 * (k - 1) / k  # bytes each rank moves per byte reduced
        return {mb: ring * int(mb) * 2**20 / s / 1e9 for mb, s in per_size.items()}

    return {n: busbw(k, seconds[n]) if n in several else {} for n, k in domains.items()}


def measure_domains(
    domains: dict[str, int], seconds: float, storage: str, env: dict[str, str]
) -> list[dict]:
    """Per domain (name -> accelerators), the median over its accelerators of the GEMMs and
    copies and of the reference trainings, and the bus bandwidth of a reduction over them
    all: every domain at once, each phase on every accelerator, as jobs that fill the cluster
    run them (the accelerators share the host's caches and memory: measured one domain at a
    time, fresh profiles predicted the jobs 26% short to 18% long; at once, 12% short to 20%
    long over 31 runs). `env`: the environment of the tasks that drive Ray Train runs."""

    def at_once(task, *args) -> dict[str, list]:
        refs = {
            n: [task.options(label_selector={DOMAIN_LABEL: n}).remote(*args) for _ in range(k)]
            for n, k in domains.items()
        }
        return {n: ray.get(r, timeout=600) for n, r in refs.items()}

    runs = at_once(measure_accelerator, seconds)
    reduce = ray.get(
        measure_reduction.options(
            label_selector={HEAD_LABEL: "head"}, runtime_env={"env_vars": env}
        ).remote(domains, storage, seconds / 4),
        timeout=600,
    )
    return [_summary(n, k, runs[n], reduce[n]) for n, k in domains.items()]


def _summary(name: str, accelerators: int, runs: list[dict], reduce: dict) -> dict:
    steps = np.median([r["trainings"] for r in runs], axis=0)
    keys = runs[0]["gemm_tflops"]
    return {
        "domain": name,
        "accelerators": accelerators,
        "gemm_tflops": {k: float(np.median([r["gemm_tflops"][k] for r in runs])) for k in keys},
        "memory_gbs": float(np.median([r["memory_gbs"] for r in runs])),
        "reduce_busbw_gbs": reduce,
        "trainings": [
            {
                "layers": layers,
                "hidden": hidden,
                "batch": batch,
                "micro_batch": micro_batch or batch,
                "step_s": float(t),
            }
            for (layers, hidden, batch, micro_batch), t in zip(REFERENCES, steps, strict=True)
        ],
    }


RUN_COLUMNS = (
    "source",
    "source_ref",
    "gpu",
    "gpu_count",
    "model",
    "layers",
    "hidden",
    "ffn_hidden",
    "heads",
    "kv_heads",
    "vocab",
    "seq",
    "global_batch",
    "micro_batch",
    "tp",
    "pp",
    "dp",
    "dtype",
    "recompute",
    "stack",
    "metric",
    "value",
)


def run_rows(measured: dict, accelerator: str) -> list[dict]:
    """The domain's reference trainings as rows of a runs CSV (the columns of
    benchmarks/published_runs.csv) on `accelerator`, for `xds calibrate --stack plain-dp`."""
    return [
        {
            "source": f"xds profile of domain {measured['domain']}",
            "source_ref": f"{time.strftime('%Y-%m-%d')}, median of {REFERENCE_STEPS[1]} steps "
            f"on each of {measured['accelerators']} accelerators at once",
            "gpu": accelerator,
            "gpu_count": 1,
            "model": f"gpt L{t['layers']} H{t['hidden']}",
            "layers": t["layers"],
            "hidden": t["hidden"],
            "ffn_hidden": 4 * t["hidden"],
            "heads": 4,
            "kv_heads": 4,
            "vocab": 512,
            "seq": 64,
            "global_batch": t["batch"],
            "micro_batch": t["micro_batch"],
            "tp": 1,
            "pp": 1,
            "dp": 1,
            "dtype": "fp32",
            "recompute": "none",
            "stack": "plain-dp",
            "metric": "iteration_time_s",
            "value": round(t["step_s"], 6),
        }
        for t in measured["trainings"]
    ]


def fit_runner(rows: list[dict]):
    """The plain-dp stack's profile fitted to reference trainings (`run_rows` of entries
    already in the catalog), every other run held out to show how it holds: what
    `xds calibrate` fits to the same rows."""
    from xdscheduler.costmodel.calibration import calibrate, held_out_by_default, parse_row

    runs = [parse_row({k: str(v) for k, v in row.items()}) for row in rows]
    return calibrate(runs, held_out_by_default(runs), data="xds profile")


def pooled(measured: list[dict]) -> dict:
    """Several domains' measurements of one accelerator type as one: the medians of each
    figure (the first domain's name stands for them; `domains` names them all)."""

    def median(values) -> float:
        return float(np.median(list(values)))

    first = measured[0]
    return {
        "domain": first["domain"],
        "domains": [m["domain"] for m in measured],
        "accelerators": sum(m["accelerators"] for m in measured),
        "gemm_tflops": {
            k: median(m["gemm_tflops"][k] for m in measured) for k in first["gemm_tflops"]
        },
        "memory_gbs": median(m["memory_gbs"] for m in measured),
        "reduce_busbw_gbs": {
            mb: median(m["reduce_busbw_gbs"][mb] for m in measured)
            for mb in first["reduce_busbw_gbs"]
            if all(mb in m["reduce_busbw_gbs"] for m in measured)
        },
    }


def entry(measured: dict, scn: Scenario, name: str) -> AcceleratorEntry:
    """A catalog entry: the measured figures over those of the domain's accelerator."""
    domain = next(d for d in scn.domains if d.name == measured["domain"])
    base = domain.accelerator
    # each dtype's largest GEMM: a small one runs within one quota period's burst on a share
    # of a CPU core (read 40-60% fast), and leaves a GPU idle part of the time
    gemm = measured["gemm_tflops"]
    best = {
        dt: gemm[
            max((k for k in gemm if k.startswith(f"{dt}_")), key=lambda k: int(k.split("_")[1]))
        ]
        for dt in DTYPES
    }
    shapes = ", ".join(f"{k} {v:.3f}" for k, v in measured["gemm_tflops"].items())
    reduce = measured["reduce_busbw_gbs"]
    sizes = ", ".join(f"{mb} MB {v:.3f}" for mb, v in reduce.items())
    return AcceleratorEntry(
        name=name,
        vendor=base.vendor,
        bf16_tflops=round(best["bf16"], 4),
        fp32_tflops=round(best["fp32"], 4),
        tf32_tflops=round(best["fp32"], 4),
        memory_gib=base.memory_gib,
        memory_gbs=round(measured["memory_gbs"], 2),
        scaleup_gbs=round(float(np.median(list(reduce.values()))), 4)
        if reduce
        else base.scaleup_gbs,
        scaleout_gbps=base.scaleout_gbps,
        gpus_per_node=domain.gpus_per_node,
        power_w=base.power_w,
        source=f"xds profile of domain {', '.join(measured.get('domains', [domain.name]))} "
        f"({measured['accelerators']} accelerators "
        f"at once, one thread each) on {time.strftime('%Y-%m-%d')}: GEMM TFLOP/s "
        f"{shapes}; copy {measured['memory_gbs']:.1f} GB/s"
        + (f"; gradient reduction bus GB/s {sizes} (scale-up: the median)" if reduce else "")
        + f"; memory, node shape and power from {base.name}",
    )
