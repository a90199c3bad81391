"""Measured runs, fitting the step-time model's constants to them, and the profile that results.

A row of a runs CSV (the columns of `benchmarks/published_runs.csv`) is one measured
configuration: accelerator, model architecture, parallel plan, batch, and one metric in the
source's own convention (tokens/s per GPU, iteration time, TFLOP/s per GPU counted as the source
counts, MFU). `fit` finds the constants (`FITTED`) that minimise the log error over the rows it
is given; `Profile` is what `xds calibrate` writes and `xds plan --profile` reads: a software
stack, its constants, and the rows that were fitted and held out, with their errors.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import Field, ValidationError

from xdscheduler import catalog
from xdscheduler.costmodel.constants import DEFAULT, Calibration
from xdscheduler.costmodel.plan import STACKS, VARIANT_OF, Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.errors import UserError
from xdscheduler.schema import FileModel, said
from xdscheduler.textfile import MAX_CSV_BYTES, read_text

FITTED = (
    "gemm_efficiency",
    "fp8_gemm_efficiency",
    "attention_efficiency",
    "memory_passes",
    "kernel_overhead_s",
)
BOUNDS = ([0.3, 0.2, 0.2, 0.1, 1e-7], [1.0, 1.0, 1.0, 8.0, 1e-3])  # physical ranges
# Pull toward the shipped constants (squared log ratio, this weight against each run's): a
# constant the runs say nothing of (FP8 efficiency, with no FP8 run) stays where it was, and
# a few runs cannot push the rest to the ends of their ranges.
PRIOR_WEIGHT = 0.1
# Vocabularies the tables leave blank, from each family's released tokenizer.
VOCAB_BY_FAMILY = {"gpt3": 51200, "llama2": 32000, "nemotron": 256000}
# Software each source ran (see Stack.preset), where a row has no `stack` column: the first
# key found in the source's name wins.
STACK_BY_SOURCE = {
    "narayanan": "megatron-2021",
    "korthikanti": "megatron-2022",
    "llama team": "unknown interleaving depth",
    "mosaicml": "fsdp",
    "rowwise": "the Float8 rowwise recipe (a scale per row; other kernels)",
    "eager": "fsdp2-eager",
    "2024-04 a100": "fsdp2-eager",  # no torch.compile
    "asynctp": "fsdp2-async-tp",
    "torchtitan": "fsdp2",
    "megatron-lm readme": "megatron-core-tp-overlap",
    "nemo": "megatron-core",
}
METRIC_PREFERENCE = ("tokens_per_s_per_gpu", "iteration_time_s", "tflops_per_gpu", "mfu")
DTYPES = {
    "fp8": "fp8",
    "fp8-cs": "fp8",
    "bf16": "bf16",
    "mixed precision 16-bit": "bf16",
    "fp16": "fp16",
    "tf32": "tf32",
    "fp32": "fp32",
}
SHIPPED = Path(__file__).with_name("profiles")  # fitted on benchmarks/published_runs.csv
SHARDED = ("fsdp", "fsdp2", "fsdp2-eager", "fsdp2-async-tp")  # ZeRO-3: all state sharded


@dataclass(frozen=True)
class Run:
    """One measured configuration."""

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
        return (
            f"{self.arch.name} {self.gpus}×{self.gpu.name} TP{p.tp} PP{p.pp}"
            + (f" CP{p.cp}" if p.cp > 1 else "")
            + (f" VP{p.vp}" if p.vp > 1 else "")
            + f" mb{p.micro_batch} GBS{self.global_batch} {p.dtype}"
            + (f" {p.recompute} recompute" if p.recompute != "none" else "")
        )


# The columns of a runs CSV that hold whole numbers, and the largest each may be; and the
# columns a row must have. A row is checked whole (`check_row`) before it is modelled: a value
# that makes no sense refuses the file, where a configuration the model lacks is only left out.
WHOLE = {
    "gpu_count": 1 << 20,
    "layers": 10_000,
    "hidden": 1 << 20,
    "ffn_hidden": 1 << 22,
    "heads": 1 << 14,
    "kv_heads": 1 << 14,
    "vocab": 1 << 24,
    "seq": 1 << 24,
    "global_batch": 1 << 24,
    "micro_batch": 1 << 16,
    "tp": 1 << 16,
    "pp": 1 << 16,
    "cp": 1 << 16,
    "vp": 1 << 16,
    "dp": 1 << 20,
}
REQUIRED = ("source", "source_ref", "gpu", "model", "metric", "value")


def check_row(row: dict, where: str) -> None:
    """Refuse (UserError naming `where` and the column) a measured run that makes no sense: a
    count that is not a whole number from 1 to its bound (a batch of 1.5, a micro-batch of
    1e9), a measured value that is not a finite number above 0, a micro-batch above the
    batch, heads that the key-value heads do not divide."""
    whole = {}
    for col, most in WHOLE.items():
        text = (row.get(col) or "").strip()
        if not text:
            continue
        try:
            whole[col] = int(text)
        except ValueError:
            raise UserError(f"{where}, column {col!r}: {text!r} is not a whole number") from None
        if not 1 <= whole[col] <= most:
            raise UserError(f"{where}, column {col!r}: {text} is outside 1 to {most:,}")
    text = (row.get("value") or "").strip()
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UserError(
            f"{where}, column 'value': {text!r} is not a measured value (a finite number above 0)"
        )
    if whole.get("micro_batch", 1) > whole.get("global_batch", math.inf):
        raise UserError(
            f"{where}: micro_batch {whole['micro_batch']} is above global_batch "
            f"{whole['global_batch']}"
        )
    heads, kv = whole.get("heads"), whole.get("kv_heads")
    if heads and kv and heads % kv:
        raise UserError(
            f"{where}: kv_heads {kv} does not divide heads {heads} (each key-value "
            f"head serves a whole group of query heads)"
        )


def _num(row: dict, key: str, default: float | None = None) -> float | None:
    value = (row.get(key) or "").strip().rstrip("%")
    return float(value) if value else default


def _need(row: dict, key: str, default: float | None = None) -> float:
    """The row's number in column `key` (or `default`); ValueError when it has none."""
    value = _num(row, key, default)
    if value is None:
        raise ValueError(f"the source gives no {key}")
    return value


Value = TypeVar("Value")


def _lookup(table: dict[str, Value], text: str, what: str) -> Value:
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
        raise ValueError(
            f"precision {row.get('dtype')!r} is not modelled (bf16, fp16, fp8, tf32, fp32)"
        )
    if not (row.get("layers") and row.get("hidden") and row.get("gpu_count")):
        raise ValueError("the source gives no full architecture or GPU count")
    try:
        gpu = catalog.accelerator(row["gpu"])
    except Exception:
        raise ValueError(f"accelerator {row['gpu']!r} is not in the catalog") from None
    layers, hidden, heads = (int(_need(row, k)) for k in ("layers", "hidden", "heads"))
    ffn = int(_need(row, "ffn_hidden", 4 * hidden))
    vocab = _num(row, "vocab") or _lookup(
        VOCAB_BY_FAMILY, row["model"].replace(" ", ""), "vocabulary"
    )
    gated = ffn != 4 * hidden
    arch = catalog.ModelArch(
        row["model"],
        layers,
        hidden,
        ffn,
        heads,
        int(_need(row, "kv_heads", heads)),
        int(vocab),
        int(_need(row, "seq")),
        gated,
        not gated,
    )
    gpus = int(_need(row, "gpu_count"))
    tp, pp, cp = (int(_need(row, k, 1)) for k in ("tp", "pp", "cp"))
    dp = int(_need(row, "dp", gpus // (tp * pp * cp)))
    if dp * tp * pp * cp != gpus:
        raise ValueError(f"TP×PP×CP×DP = {dp * tp * pp * cp} differs from {gpus} GPUs")
    batch = int(_need(row, "global_batch", 0))
    if batch == 0:
        raise ValueError("no global batch")
    stack = (row.get("stack") or "").strip() or _lookup(
        STACK_BY_SOURCE, row["source"], "software stack"
    )
    if stack not in STACKS:
        raise ValueError(f"not modelled: {stack}")
    recompute = (row.get("recompute") or "").strip() or "none"
    plan = Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        vp=int(_need(row, "vp", 1)),
        micro_batch=int(_need(row, "micro_batch", 1)),
        zero=3
        if stack in SHARDED
        else (0 if stack == "megatron-2021" or not Stack.preset(stack).memory_savers else 1),
        recompute=recompute,
        dtype=dtype,
    )
    value = _need(row, "value")
    if row["metric"] == "mfu":
        value /= 100
    return Run(
        row["source"],
        row["source_ref"],
        gpu,
        arch,
        gpus,
        plan,
        batch,
        stack,
        row["metric"],
        convention_of(row),
        value,
    )


def read_rows(path: Path) -> list[dict]:
    """The rows of a runs CSV, each checked (`check_row`); UserError at the first bad one."""
    text = read_text(path, "runs CSV", MAX_CSV_BYTES, "CSV")
    reader = csv.DictReader(io.StringIO(text), strict=True)
    try:
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise UserError(
                f"{path}: no column {', '.join(missing)}; a runs CSV has the "
                f"columns of benchmarks/published_runs.csv"
            )
        rows = []
        for i, row in enumerate(reader, 1):
            if None in row or None in row.values():
                raise UserError(
                    f"{path}, row {i}: {len(row) - (None in row)} fields where the "
                    f"header has {len(header)}"
                )
            check_row(row, f"{path}, row {i}")
            rows.append(row)
    except csv.Error as err:
        raise UserError(f"{path}, line {reader.line_num}: not a readable CSV ({err})") from None
    return rows


def load_runs(path: Path) -> tuple[list[Run], list[tuple[dict, str]]]:
    """Modelled runs, one metric per configuration, and the rows left out with the reason."""
    runs, skipped, seen = [], [], set()
    rows = read_rows(path)
    rank = {m: i for i, m in enumerate(METRIC_PREFERENCE)}
    for row in sorted(rows, key=lambda r: rank.get(r.get("metric", ""), 99)):
        try:
            run = parse_row(row)
        except (ValueError, KeyError, TypeError) as err:
            skipped.append((row, str(err)))
            continue
        if (run.source, run.label, run.gpus) in seen:
            continue  # the same configuration in a less direct metric
        seen.add((run.source, run.label, run.gpus))
        runs.append(run)
    return runs, skipped


def source_flops(
    run: Run, step_s: np.ndarray, hardware_flops: np.ndarray, model_flops: float
) -> np.ndarray:
    """FLOPs of one step as the source counts them."""
    a, B = run.arch, run.global_batch
    s, L, h, V = a.seq_len, a.layers, a.hidden, a.vocab
    if run.convention == "megatron-96":
        return np.full_like(step_s, 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)))
    if run.convention == "hardware":
        return hardware_flops
    return np.full_like(step_s, model_flops)


def predict(run: Run, calib: Calibration) -> float:
    """The model's value of the run's metric, in the source's convention."""
    est = estimate(
        run.arch,
        run.global_batch,
        PlanBatch.of([run.plan]),
        Hardware.of(run.gpu),
        stack=Stack.preset(run.stack),
        calib=calib,
    )
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
    return np.array([relative_error(run, predict(run, calib)) for run in runs])


def relative_error(run: Run, predicted: float) -> float:
    ratio = predicted / run.value
    return 1 / ratio - 1 if run.metric == "iteration_time_s" else ratio - 1


def fit(
    runs: list[Run], start: Calibration = DEFAULT, prior_weight: float = PRIOR_WEIGHT
) -> Calibration:
    """The constants that minimise the squared log error over `runs` (least squares), held
    near `start` by a weak prior."""
    from scipy.optimize import least_squares

    x0 = np.clip([getattr(start, k) for k in FITTED], *BOUNDS)

    def residual(x):
        err = np.log1p(errors(runs, replace(start, **dict(zip(FITTED, x, strict=True)))))
        return np.concatenate([err, prior_weight * np.log(x / x0)])

    result = least_squares(residual, x0, bounds=BOUNDS)
    return replace(start, **dict(zip(FITTED, (float(v) for v in result.x), strict=True)))


def every_other(runs: list[Run], group=lambda run: run.source) -> list[bool]:
    """The default split, fixed before fitting: in each group (a source, by default),
    configurations ordered by model size and GPU count, the 1st, 3rd, ... fitted and the rest
    held out."""
    chosen = [False] * len(runs)
    by_source: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        by_source.setdefault(group(run), []).append(i)
    for idx in by_source.values():
        for k, i in enumerate(sorted(idx, key=lambda i: (runs[i].arch.params, runs[i].gpus))):
            chosen[i] = k % 2 == 0
    return chosen


def held_out_by_default(runs: list[Run]) -> list[bool]:
    """The runs `xds calibrate` holds out unless told: every other one of a stack's runs,
    whatever their source (`every_other`'s order)."""
    return [not f for f in every_other(runs, group=lambda run: 0)]


class RowError(FileModel):
    configuration: str
    source: str
    metric: str
    measured: float
    model: float
    error: float


class Profile(FileModel):
    """A software stack's fitted constants, and how well they hold on measured runs."""

    stack: str
    constants: dict[str, float] = Field(max_length=len(FITTED))
    data: str = ""  # the CSV the constants were fitted on
    fitted: list[RowError] = Field(default_factory=list)
    held_out: list[RowError] = Field(default_factory=list)

    @property
    def calibration(self) -> Calibration:
        return replace(DEFAULT, **self.constants)

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """A profile file, or the name of a shipped one (megatron-core, fsdp, fsdp2, ...)."""
        from xdscheduler.yamlfile import read_yaml

        shipped = SHIPPED / f"{path}.yaml"
        if not Path(path).exists() and shipped.exists():
            path = shipped
        elif not Path(path).exists():
            names = ", ".join(sorted(p.stem for p in SHIPPED.glob("*.yaml")))
            raise UserError(
                f"no profile {path!r}: give a file from xds calibrate or one of "
                f"the shipped: {names}"
            )
        doc = read_yaml(path, "profile")
        try:
            profile = cls.model_validate(doc)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "the document"
            raise UserError(
                f"{path}: not a profile written by xds calibrate ({where}: {said(first)})"
            ) from None
        unknown = set(profile.constants) - set(FITTED)
        if unknown or profile.stack not in STACKS:
            raise UserError(
                f"{path}: unknown stack {profile.stack!r} or constants "
                f"{sorted(unknown)}; stacks: {', '.join(STACKS)}; constants: "
                f"{', '.join(FITTED)}"
            )
        return profile


def of_stack(run: Run, stack: str) -> bool:
    """A run of `stack` or of one of its variants (fsdp2-async-tp is fsdp2 with AsyncTP)."""
    return stack in (run.stack, VARIANT_OF.get(run.stack))


def calibrate(runs: list[Run], held_out: list[bool], data: str = "") -> Profile:
    """Fit one stack's constants on the runs not held out (its variants' runs with it); the
    profile with both sets' errors."""
    stacks = {VARIANT_OF.get(r.stack, r.stack) for r in runs}
    if len(stacks) != 1:
        raise UserError(
            f"calibrate one software stack at a time; the runs are of {', '.join(sorted(stacks))}"
        )
    family = stacks.pop()
    train = [r for r, h in zip(runs, held_out, strict=True) if not h]
    if len(train) < 2:
        raise UserError(f"{len(train)} run(s) to fit on: at least 2 are needed")
    calib = fit(train)
    rows = [
        RowError(
            configuration=r.label,
            source=r.source,
            metric=r.metric,
            measured=r.value,
            model=m,
            error=relative_error(r, m),
        )
        for r, m in ((r, predict(r, calib)) for r in runs)
    ]
    return Profile(
        stack=family,
        constants={k: getattr(calib, k) for k in FITTED},
        data=data,
        fitted=[row for row, h in zip(rows, held_out, strict=True) if not h],
        held_out=[row for row, h in zip(rows, held_out, strict=True) if h],
    )


def median_error(rows: list[RowError]) -> float:
    return float(np.median([abs(r.error) for r in rows])) if rows else float("nan")
