"""Calibrate the step-time model on published measurements and report how well it holds.

Run: python -m benchmarks.calibrate [--fit] [--out benchmarks/calibration.md]

Reads benchmarks/published_runs.csv (each row a measured configuration, its source and the
source's FLOP-counting convention), predicts each with the model, and compares in the
source's own metric and convention. With --fit, the constants of
xdscheduler/costmodel/constants.py are fitted on every other configuration of each source
(least squares on log error) and checked on the rest; without it, the shipped constants are
checked on all rows.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks._table import print_table
from xdscheduler import catalog
from xdscheduler.costmodel.constants import DEFAULT, Calibration
from xdscheduler.costmodel.plan import STACKS, Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.steptime import estimate

HERE = Path(__file__).resolve().parent
FITTED = ("gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency", "memory_passes",
          "kernel_overhead_s")


@dataclass(frozen=True)
class Run:
    """One published measurement."""

    source: str
    ref: str
    gpu: catalog.Accelerator
    arch: catalog.ModelArch
    gpus: int
    plan: Plan
    global_batch: int
    stack: str
    metric: str
    convention: str
    value: float

    @property
    def label(self) -> str:
        p = self.plan
        return (f"{self.arch.name} {self.gpus}×{self.gpu.name} TP{p.tp} PP{p.pp}"
                + (f" CP{p.cp}" if p.cp > 1 else "") + (f" VP{p.vp}" if p.vp > 1 else "")
                + f" mb{p.micro_batch} GBS{self.global_batch} {p.dtype}")


# Vocabularies the tables leave blank, from each family's released tokenizer.
VOCAB_BY_FAMILY = {"gpt3": 51200, "llama2": 32000, "nemotron": 256000}
# Software each source ran (see Stack.preset).
STACK_BY_SOURCE = {"narayanan": "megatron-2021", "korthikanti": "megatron-2022",
                   "llama team": "unknown interleaving depth",
                   "mosaicml": "fsdp", "megatron-lm readme": "megatron-core-tp-overlap",
                   "nemo": "megatron-core"}
METRIC_PREFERENCE = ("tokens_per_s_per_gpu", "iteration_time_s", "tflops_per_gpu", "mfu")
DTYPES = {"fp8": "fp8", "fp8-cs": "fp8", "bf16": "bf16", "mixed precision 16-bit": "bf16"}


def _num(row: dict, key: str, default: float | None = None) -> float | None:
    value = (row.get(key) or "").strip().rstrip("%")
    return float(value) if value else default


def _lookup(table: dict, text: str, what: str) -> str:
    for key, value in table.items():
        if key in text.lower():
            return value
    raise ValueError(f"no {what} for {text!r}")


def convention_of(row: dict) -> str:
    text = (row.get("flops_convention") or "").lower()
    if "96" in text:
        return "megatron-96"
    if "hardware" in text or "hfu" in text.split(";")[0]:
        return "hardware"
    return "model"


def parse_row(row: dict) -> Run:
    """One CSV row as a Run, or ValueError saying why it cannot be modelled."""
    dtype = (row.get("dtype") or "").strip().lower().split(" (")[0]
    if not dtype and "megatron-lm readme" in row["source"].lower():
        dtype = "bf16"  # its MFU figures are against the dense BF16 peak
    dtype = DTYPES.get(dtype)
    if dtype is None:
        raise ValueError(f"precision {row.get('dtype')!r} is not modelled (bf16, fp8 only)")
    if not (row.get("layers") and row.get("hidden") and row.get("gpu_count")):
        raise ValueError("the source gives no full architecture or GPU count")
    try:
        gpu = catalog.accelerator(row["gpu"])
    except Exception:
        raise ValueError(f"accelerator {row['gpu']!r} is not in the catalog") from None
    layers, hidden, heads = (int(_num(row, k)) for k in ("layers", "hidden", "heads"))
    ffn = int(_num(row, "ffn_hidden", 4 * hidden))
    vocab = _num(row, "vocab") or _lookup(VOCAB_BY_FAMILY, row["model"].replace(" ", ""),
                                          "vocabulary")
    gated = ffn != 4 * hidden
    arch = catalog.ModelArch(row["model"], layers, hidden, ffn, heads,
                             int(_num(row, "kv_heads", heads)), int(vocab),
                             int(_num(row, "seq")), gated, not gated)
    gpus = int(_num(row, "gpu_count"))
    tp, pp, cp = (int(_num(row, k, 1)) for k in ("tp", "pp", "cp"))
    dp = int(_num(row, "dp", gpus // (tp * pp * cp)))
    if dp * tp * pp * cp != gpus:
        raise ValueError(f"TP×PP×CP×DP = {dp * tp * pp * cp} differs from {gpus} GPUs")
    batch = int(_num(row, "global_batch", 0))
    if batch == 0:
        raise ValueError("no global batch")
    stack = _lookup(STACK_BY_SOURCE, row["source"], "software stack")
    if stack not in STACKS:
        raise ValueError(f"not modelled: {stack}")
    recompute = (row.get("recompute") or "").strip() or "none"
    plan = Plan(dp=dp, tp=tp, pp=pp, cp=cp, vp=int(_num(row, "vp", 1)),
                micro_batch=int(_num(row, "micro_batch", 1)),
                zero=3 if stack == "fsdp" else (0 if stack == "megatron-2021" else 1),
                recompute=recompute, dtype=dtype)
    value = _num(row, "value")
    if row["metric"] == "mfu":
        value /= 100
    return Run(row["source"], row["source_ref"], gpu, arch, gpus, plan, batch, stack,
               row["metric"], convention_of(row), value)


def load_runs(path: Path) -> tuple[list[Run], list[tuple[dict, str]]]:
    """Modelled runs, one metric per configuration, and the rows left out with the reason."""
    runs, skipped, seen = [], [], set()
    with path.open() as f:
        rows = list(csv.DictReader(f))
    rank = {m: i for i, m in enumerate(METRIC_PREFERENCE)}
    for row in sorted(rows, key=lambda r: rank.get(r["metric"], 99)):
        try:
            run = parse_row(row)
        except ValueError as err:
            skipped.append((row, str(err)))
            continue
        key = (run.source, run.label, run.gpus, run.value if run.metric == "x" else 0)
        if (run.source, run.label, run.gpus) in seen:
            continue  # the same configuration in a less direct metric
        seen.add(key[:3])
        runs.append(run)
    return runs, skipped


def source_flops(run: Run, step_s: np.ndarray, hardware_flops: np.ndarray,
                 model_flops: float) -> np.ndarray:
    """FLOPs of one step as the source counts them."""
    a, B = run.arch, run.global_batch
    s, L, h, V = a.seq_len, a.layers, a.hidden, a.vocab
    if run.convention == "megatron-96":
        return np.full_like(step_s, 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)))
    if run.convention == "hardware":
        return hardware_flops
    return np.full_like(step_s, model_flops)


def predict(run: Run, calib: Calibration) -> float:
    est = estimate(run.arch, run.global_batch, PlanBatch.of([run.plan]), Hardware.of(run.gpu),
                   stack=Stack.preset(run.stack), calib=calib)
    step = est.step_time_s
    if run.metric == "iteration_time_s":
        return float(step[0])
    if run.metric == "tokens_per_s_per_gpu":
        return float(run.global_batch * run.arch.seq_len / step[0] / run.gpus)
    flops = source_flops(run, step, est.hardware_flops, est.model_flops)
    per_gpu = flops[0] / step[0] / run.gpus / 1e12
    if run.metric == "tflops_per_gpu":
        return float(per_gpu)
    if run.metric in ("mfu", "hfu"):
        return float(per_gpu / run.gpu.peak_tflops("bf16"))
    raise ValueError(f"unknown metric {run.metric!r}")


def errors(runs: list[Run], calib: Calibration) -> np.ndarray:
    """Relative error of each prediction, with time-like metrics inverted to throughput."""
    out = []
    for run in runs:
        ratio = predict(run, calib) / run.value
        out.append(1 / ratio - 1 if run.metric == "iteration_time_s" else ratio - 1)
    return np.array(out)


def split_fit(runs: list[Run]) -> list[bool]:
    """Every other configuration of each Megatron-family source (by model size) is fitted;
    the rest, and every run of another software stack, is held out."""
    chosen = [False] * len(runs)
    by_source: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        if run.stack != "fsdp":
            by_source.setdefault(run.source, []).append(i)
    for idx in by_source.values():
        for k, i in enumerate(sorted(idx, key=lambda i: (runs[i].arch.params, runs[i].gpus))):
            chosen[i] = k % 2 == 0
    return chosen


def fit(runs: list[Run]) -> Calibration:
    from scipy.optimize import least_squares

    def residual(x):
        calib = replace(DEFAULT, **dict(zip(FITTED, x, strict=True)))
        return np.log1p(errors(runs, calib))

    start = [getattr(DEFAULT, k) for k in FITTED]
    bounds = ([0.3, 0.2, 0.2, 0.1, 0.0], [1.0, 1.0, 1.0, 8.0, 1e-3])  # physical ranges
    result = least_squares(residual, start, bounds=bounds)
    return replace(DEFAULT, **dict(zip(FITTED, result.x, strict=True)))


def in_family(run: Run) -> bool:
    """Megatron-LM / NeMo runs: the software whose mechanisms the model describes."""
    return run.stack != "fsdp"


def summary_rows(runs: list[Run], errs: np.ndarray, fitted: list[bool]) -> list[list]:
    groups = {
        "Megatron-LM / NeMo, all": [in_family(r) for r in runs],
        "Megatron-LM / NeMo, fitted": [in_family(r) and f for r, f in zip(runs, fitted,
                                                                           strict=True)],
        "Megatron-LM / NeMo, held out": [in_family(r) and not f
                                         for r, f in zip(runs, fitted, strict=True)],
        "other stack (Composer FSDP), held out": [not in_family(r) for r in runs],
    }
    rows = []
    for name, mask in groups.items():
        mask = np.array(mask)
        if mask.any():
            gpus = sorted({r.gpu.name for r, m in zip(runs, mask, strict=True) if m})
            e = np.abs(errs[mask])
            rows.append([name, int(mask.sum()), ", ".join(gpus), f"{np.median(e):.1%}",
                         f"{e.max():.1%}"])
    return rows


def write_report(path: Path, runs: list[Run], errs: np.ndarray, fitted: list[bool],
                 calib: Calibration, skipped: list[tuple[dict, str]], data: Path) -> None:
    lines = [
        "# Calibration of the step-time model against published measurements",
        "",
        "Generated by `python -m benchmarks.calibrate`; every number below is computed by",
        f"that run from `{data.name}` ({_count_rows(data)} published rows, each citing its",
        "source; one metric is kept per configuration, tokens/s where given).",
        "Each prediction is compared in the source's own metric and FLOP-counting",
        "convention: tokens/s per GPU where the source gives it, else TFLOP/s per GPU",
        "counted as the source counts (Narayanan et al.: 96·B·s·L·h²·(1 + s/6h + V/16Lh),",
        "recompute included; NVIDIA tables: model FLOPs with full attention).",
        "The constants were fitted (least squares on log error) on every other",
        "configuration of each Megatron-LM/NeMo source, ordered by model size; the rest",
        "are held out. Runs of another software stack (MosaicML Composer with PyTorch FSDP)",
        "were never fitted and are shown as an out-of-family check.",
        "",
        "## Summary",
        "",
        "| runs | configurations | GPU types | median abs error | max abs error |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |"
              for row in summary_rows(runs, errs, fitted)]
    lines += ["", "## Constants", "", "| constant | value | meaning |", "|---|---|---|"]
    for name in (*FITTED, "collective_efficiency", "wan_efficiency"):
        kind = "fitted" if name in FITTED else "fixed"
        lines.append(f"| `{name}` ({kind}) | {getattr(calib, name):.4g} | {_field_doc(name)} |")
    lines += [
        "",
        "## Configurations",
        "",
        "| source | configuration | stack | metric | published | model | error | role |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, err, was_fit in zip(runs, errs, fitted, strict=True):
        lines.append(
            f"| {run.source} ({run.ref}) | {run.label} | {run.stack} | {_metric(run)} | "
            f"{_num_text(run.value)} | {_num_text(predict(run, calib))} | "
            f"{err:+.1%} | {'fit' if was_fit else 'held out'} |")
    lines += ["", "## Rows not modelled", "", "| source | model | GPU | metric | reason |",
              "|---|---|---|---|---|"]
    for row, reason in skipped:
        lines.append(f"| {row['source']} | {row['model']} | {row['gpu']} | {row['metric']} "
                     f"| {reason} |")
    lines += ["", "Defaults where a source is silent: micro-batch 1, no interleaving, no",
              "recompute, distributed optimizer (ZeRO-1) for Megatron-Core/NeMo, FFN 4·h and",
              "MHA for GPT models, vocabulary of the model family's released tokenizer."]
    path.write_text("\n".join(lines) + "\n")


def _count_rows(path: Path) -> int:
    with path.open() as f:
        return sum(1 for _ in csv.DictReader(f))


def _metric(run: Run) -> str:
    flops = run.metric in ("tflops_per_gpu", "mfu")
    return f"{run.metric} ({run.convention} FLOPs)" if flops else run.metric


def _num_text(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _field_doc(name: str) -> str:
    import inspect

    src = inspect.getsource(Calibration)
    doc = src.split(f"    {name}:", 1)[1].split('"""', 2)[1]
    return " ".join(doc.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(HERE / "published_runs.csv"))
    parser.add_argument("--fit", action="store_true", help="fit the constants first")
    parser.add_argument("--out", default=str(HERE / "calibration.md"))
    args = parser.parse_args()
    runs, skipped = load_runs(Path(args.data))
    fitted = split_fit(runs)
    calib = fit([r for r, f in zip(runs, fitted, strict=True) if f]) if args.fit else DEFAULT
    errs = errors(runs, calib)
    rows = [[r.source[:40], r.label, r.metric, r.value, predict(r, calib), f"{e:+.1%}",
             "fit" if f else "held out"] for r, e, f in zip(runs, errs, fitted, strict=True)]
    print_table("Step-time model against published measurements",
                ["source", "configuration", "metric", "published", "model", "error", "role"],
                rows)
    print()
    print_table("Summary", ["runs", "configs", "GPU types", "median |error|", "max |error|"],
                summary_rows(runs, errs, fitted))
    print("constants: " + ", ".join(f"{k}={getattr(calib, k):.4g}" for k in FITTED)
          + ("" if args.fit else " (shipped)"))
    write_report(Path(args.out), runs, errs, fitted, calib, skipped, Path(args.data))
    print(f"wrote {args.out} ({len(skipped)} rows not modelled, reasons listed there)")


if __name__ == "__main__":
    main()
