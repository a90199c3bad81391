"""The step-time model against training steps measured on a GPU that nothing was fitted on.

On a machine with a CUDA GPU (writes the measurements to OUT):

    python -m benchmarks.gpu_steps --measure OUT

  1. `xds layers measure` times each model's embedding, one layer, the output block and the
     optimizer step on the GPU: the layer profile, an input of the model;
  2. a Hugging Face GPT-2 of the same shape (built from a config: random weights, no
     download) trains on random tokens with AdamW at several micro-batches and gradient
     accumulation counts, bf16 under autocast (fp32 master weights) and fp32 with TF32
     matmuls; each run's median step time and peak memory go to OUT/steps.json.

Anywhere (reads a folder of such measurements; default benchmarks/gpu_runs, measured on one
H100 and committed; benchmarks/gpu_runs/h200 on one H200):

    python -m benchmarks.gpu_steps [DIR]

  prints our estimate of every measured step, with that GPU's measured profile as input and
  from the roofline alone, and each one's error. The end-to-end steps are never fitted on:
  the profile times single blocks, the step is a whole model trained by another library.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from benchmarks._table import print_table

RUNS = Path(__file__).parent / "gpu_runs"
STACK = "plain-dp"  # one process, the whole optimizer state, no recomputation
# (model, dtype): the micro-batches and accumulation counts trained
CASES = {
    ("opt-350m", "bf16"): ((1, 4, 8), (1, 8)),
    ("opt-350m", "tf32"): ((1, 4, 8), (1, 8)),
    ("gpt-neo-2.7b", "bf16"): ((1, 2), (1, 4)),
    ("gpt-neo-2.7b", "tf32"): ((1, 2), (1, 4)),
}
WARMUP, TIMED = 3, 6


class Profiled(NamedTuple):
    """A kind of layer profile: whose layers it times, and how many run at once."""

    implementation: str  # xds: our Megatron-like block; hf-gpt2: transformers' GPT-2 modules
    chain: int
    label: str


PROFILES = {
    "xds": Profiled("xds", 1, "our block"),
    "hf-gpt2": Profiled("hf-gpt2", 1, "transformers' GPT-2 modules"),
    "hf-gpt2-chain4": Profiled("hf-gpt2", 4, "transformers' GPT-2 modules, 4 run at once"),
}

MEMORY_READ = ("hf-gpt2", "hf-gpt2-chain4")  # profiles of the code trained: their memory too


def profile_name(model: str, dtype: str, kind: str) -> str:
    return f"profile-{model}-{dtype}-{kind}.yaml"


# ------------------------------------------------------------------------------ measure


def measure(out: Path, quick: bool) -> None:
    """Profile and train every case on this machine's GPU (`quick`: a short sequence on
    whatever device there is, to try the script)."""
    import torch

    from xdscheduler.cli import main as xds

    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    seq = 128 if quick else None
    runs = []
    for (model, dtype), (mbs, accums) in CASES.items():
        if quick and model != "opt-350m":
            continue
        if quick:
            mbs, accums = mbs[:1], (1, 2)
        for kind, profiled in PROFILES.items():
            name = profile_name(model, dtype, kind)
            argv = ["layers", "measure", "--model", model, "--dtype", dtype, "--force"]
            argv += ["--micro-batch", ",".join(map(str, mbs)), "--attention", "fused"]
            argv += ["--implementation", profiled.implementation, "--stack", STACK]
            argv += ["--chain", str(profiled.chain)]
            argv += ["--out", str(out / name)]
            argv += [] if cuda else ["--device", "cpu", "--accelerator", "H100-SXM"]
            argv += ["--seq", str(seq)] if seq else []
            started = time.monotonic()
            if xds(argv) != 0:
                raise SystemExit(f"xds {' '.join(argv)} failed")
            print(f"profiled {name} in {time.monotonic() - started:.1f} s", flush=True)
        for mb in mbs:
            for accum in accums:
                try:
                    runs.append(train(model, dtype, mb, accum, seq))
                except torch.cuda.OutOfMemoryError:
                    runs.append(
                        {
                            "model": model,
                            "dtype": dtype,
                            "micro_batch": mb,
                            "accumulation": accum,
                            "out_of_memory": True,
                        }
                    )
                    torch.cuda.empty_cache()
                print(json.dumps(runs[-1]), flush=True)
                (out / "steps.json").write_text(json.dumps(about(torch) | {"runs": runs}))


def about(torch) -> dict:
    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "stack": STACK,
        "warmup_steps": WARMUP,
        "timed_steps": TIMED,
    }


def train(model: str, dtype: str, mb: int, accum: int, seq: int | None) -> dict:
    """The median step of a GPT-2 of `model`'s shape trained on random tokens."""
    import torch
    from transformers import GPT2LMHeadModel

    from xdscheduler import catalog
    from xdscheduler.costmodel.layers import Shape
    from xdscheduler.live.layer_timer import hf_gpt2_config

    arch = catalog.model(model)
    seq = seq or arch.seq_len
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    torch.manual_seed(0)
    config = hf_gpt2_config(Shape.of(arch, seq), arch.layers)
    with dev:
        net = GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=dev.type == "cuda")
    half = torch.autocast(dev.type, torch.bfloat16, enabled=dtype == "bf16")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(WARMUP + TIMED):
        sync(torch, dev)
        start = time.perf_counter()
        for _ in range(accum):
            ids = torch.randint(0, arch.vocab, (mb, seq), device=dev)
            with half:
                loss = net(input_ids=ids, labels=ids).loss / accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(torch, dev)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0
    del net, opt
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "model": model,
        "dtype": dtype,
        "micro_batch": mb,
        "accumulation": accum,
        "seq": seq,
        "step_s": statistics.median(times[WARMUP:]),
        "steps_s": times[WARMUP:],
        "peak_gib": peak,
    }


def sync(torch, dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------ compare


def compare(folder: Path) -> None:
    from xdscheduler import catalog
    from xdscheduler.costmodel.layers import LayerProfile, MeasuredLayers
    from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
    from xdscheduler.costmodel.steptime import estimate

    found = json.loads((folder / "steps.json").read_text())
    kinds = {k: f"ours, a profile of {p.label}" for k, p in PROFILES.items()}
    kinds["roofline"] = "ours, roofline alone"
    rows, left_out = [], []
    errs: dict[str, list[float]] = {k: [] for k in kinds}
    memory_errs: dict[str, list[float]] = {k: [] for k in MEMORY_READ}
    hw, stack = Hardware.of(catalog.accelerator(accelerator_of(folder))), Stack.preset(STACK)
    for run in found["runs"]:
        if run.get("out_of_memory"):
            left_out.append(
                f"{run['model']} {run['dtype']} mb {run['micro_batch']} x {run['accumulation']}"
            )
            continue
        arch = catalog.model(run["model"])
        plan = PlanBatch.of(
            [Plan(dp=1, micro_batch=run["micro_batch"], zero=0, dtype=run["dtype"])]
        )
        batch = run["micro_batch"] * run["accumulation"]
        row = [run["model"], run["dtype"], run["micro_batch"], run["accumulation"]]
        row.append(f"{run['step_s']:.4f}")
        memory = dict.fromkeys(MEMORY_READ, "-")
        for kind in kinds:
            path = folder / profile_name(run["model"], run["dtype"], kind)
            if kind != "roofline" and not path.is_file():
                row += ["-", "-"]
                continue
            measured = (MeasuredLayers.of(LayerProfile.load(path)),) if path.is_file() else ()
            got = estimate(arch, batch, plan, hw, stack=stack, seq=run["seq"], measured=measured)
            step = float(got.step_time_s[0])
            errs[kind].append(step / run["step_s"] - 1)
            row += [f"{step:.4f}", f"{errs[kind][-1]:+.1%}"]
            if kind in MEMORY_READ:  # the activation bytes the profile read, where it did
                memory[kind] = f"{got.memory_gib[0]:.1f}"
                memory_errs[kind].append(float(got.memory_gib[0]) / run["peak_gib"] - 1)
        rows.append([*row, f"{run['peak_gib']:.1f}", *memory.values()])
    summary = [
        [label, f"{np.median(np.abs(errs[k])):.1%}", f"{np.max(np.abs(errs[k])):.1%}"]
        for k, label in kinds.items()
        if errs[k]
    ]
    best = min((k for k in kinds if errs[k]), key=lambda k: np.median(np.abs(errs[k])))
    others = "; ".join(
        f"{kinds[k].removeprefix('ours, ')} {np.median(np.abs(errs[k])):.1%}"
        for k in kinds
        if errs[k] and k != best
    )
    print(
        f"{kinds[best]}: median {np.median(np.abs(errs[best])):.1%} off {len(rows)} training "
        f"steps of a Hugging Face GPT-2 measured on {found['device']} (others: {others})"
    )
    print_table("Error on every measured step", ["model", "median", "max"], summary)
    print()
    heads = ["model", "dtype", "mb", "accum", "measured"]
    for kind in kinds:
        heads += [kind if kind == "roofline" else f"+{kind}", "err"]
    print_table(
        f"Training steps on {found['device']} (torch {found['torch']}), seconds, measured and "
        "modelled",
        [*heads, "peak GiB", *(f"ours GiB ({k})" for k in MEMORY_READ)],
        rows,
        "memory, ours against torch's peak allocation: "
        + "; ".join(
            f"{k} median {np.median(np.abs(e)):.1%}, max {np.max(np.abs(e)):.1%}"
            for k, e in memory_errs.items()
            if e
        ),
    )
    if left_out:
        print(f"left out, out of memory when measured: {', '.join(left_out)}")


def accelerator_of(folder: Path) -> str:
    """The catalog accelerator the folder's profiles were measured as (a CPU's quick try
    names one); exits where there is none, or profiles of several (one machine's run a
    folder)."""
    from xdscheduler.costmodel.layers import LayerProfile

    paths = sorted(folder.glob(profile_name("*", "*", "*")))
    kinds = sorted({LayerProfile.load(path).accelerator for path in paths})
    if not kinds:
        sys.exit(f"no layer profiles in {folder}: measure them with --measure")
    if len(kinds) > 1:
        sys.exit(f"{folder} holds profiles of {', '.join(kinds)}: keep one machine's a folder")
    return kinds[0]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", type=Path, default=RUNS, help="measurements to read")
    p.add_argument("--measure", type=Path, metavar="OUT", help="measure here, write to OUT")
    p.add_argument("--quick", action="store_true", help="with --measure: short, any device")
    args = p.parse_args(argv)
    if args.measure:
        measure(args.measure, args.quick)
    elif not (args.folder / "steps.json").is_file():
        sys.exit(f"no measurements in {args.folder} (--measure on a GPU machine first)")
    else:
        compare(args.folder)


if __name__ == "__main__":
    main()
