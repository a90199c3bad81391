"""Measured per-layer times and memory of a transformer on an accelerator: inputs the step-time
model uses in place of its roofline where they exist, as Sailor plans from its profiles.

A profile holds, for each (micro-batch, tensor-parallel degree) measured, the forward and
backward seconds of the first block (the embedding), of one transformer layer (its
tensor-parallel all-reduces included, as they ran) and of the last block (final norm, output
layer and loss); optionally the activation bytes each block keeps per sample for its backward
pass, and the optimizer step's seconds per parameter. It is measured (`xds layers measure`) or
read from another planner's profile (`xds layers import`, Sailor's format), and says where it
came from. End-to-end step times are never in it: they are what the model is checked against.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from xdscheduler import catalog
from xdscheduler.costmodel.plan import DTYPES, STACKS
from xdscheduler.errors import UserError
from xdscheduler.schema import FileModel, NonNegative, Positive, said

# Sailor's accelerator and model names (its profiles' keys) and ours.
SAILOR_GPUS = {"A100-40": "A100-40GB", "A100-80": "A100-80GB", "GH-96": "GH200"}
SAILOR_MODELS = {"OPT-350": "opt-350m", "GPT-Neo-2.7": "gpt-neo-2.7b"}
SAILOR_FLOAT_BYTES = 4  # its runs train in fp32: llm_info.json counts floats of 4 bytes
TIMES = ("first_fwd_s", "first_bwd_s", "layer_fwd_s", "layer_bwd_s", "last_fwd_s", "last_bwd_s")
MAX_BYTES = 8 << 20  # a profile of every (micro-batch, TP) of four models is under 1 MB


class Shape(FileModel):
    """The transformer profiled: what its layers' times depend on."""

    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    ffn_hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    vocab: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    gated_mlp: bool = False

    @classmethod
    def of(cls, arch: catalog.ModelArch, seq: int | None = None) -> Shape:
        return cls(
            layers=arch.layers,
            hidden=arch.hidden,
            ffn_hidden=arch.ffn_hidden,
            heads=arch.heads,
            kv_heads=arch.kv_heads,
            vocab=arch.vocab,
            seq_len=seq or arch.seq_len,
            gated_mlp=arch.gated_mlp,
        )

    def same_layers(self, arch: catalog.ModelArch, seq: int) -> bool:
        """A job whose layers are these (their count and the vocabulary padding aside)."""
        return (
            self.hidden,
            self.ffn_hidden,
            self.heads,
            self.kv_heads,
            self.seq_len,
            self.gated_mlp,
        ) == (arch.hidden, arch.ffn_hidden, arch.heads, arch.kv_heads, seq, arch.gated_mlp)


class LayerTiming(FileModel):
    """Seconds of one micro-batch through each block, at one micro-batch size and TP degree."""

    micro_batch: int = Field(ge=1)
    tp: int = Field(ge=1)
    first_fwd_s: NonNegative
    first_bwd_s: NonNegative
    layer_fwd_s: Positive
    layer_bwd_s: Positive
    last_fwd_s: NonNegative
    last_bwd_s: NonNegative


class LayerMemory(FileModel):
    """Activation bytes each block keeps for its backward pass, per sample, at one TP degree."""

    tp: int = Field(ge=1)
    first_bytes: NonNegative
    layer_bytes: NonNegative
    last_bytes: NonNegative


class LayerProfile(FileModel):
    """A model's measured layers on one accelerator, in one precision and software stack."""

    kind: Literal["layer-profile"] = "layer-profile"
    accelerator: str = Field(min_length=1, max_length=100)
    dtype: str
    stack: str
    shape: Shape
    source: str = Field(min_length=1, max_length=4000)  # who measured it, where, how
    optimizer_s_per_param: NonNegative | None = None
    # False where the last block was timed without the output layer (its logits GEMM and
    # loss): the model adds its own estimate of them
    output_layer_timed: bool = True
    # False where TP > 1 was timed as one rank's shard on one device, without the all-reduces:
    # the model adds its own
    tp_comm_timed: bool = True
    timings: list[LayerTiming] = Field(min_length=1, max_length=10_000)
    memory: list[LayerMemory] = Field(default=[], max_length=1000)

    @model_validator(mode="after")
    def _known(self) -> LayerProfile:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.stack not in STACKS:
            raise ValueError(f"stack {self.stack!r} is not one of {', '.join(STACKS)}")
        keys = [(t.micro_batch, t.tp) for t in self.timings]
        if len(set(keys)) != len(keys):
            raise ValueError("a (micro_batch, tp) pair is timed twice")
        return self

    def save(self, path: str | Path) -> Path:
        import yaml

        from xdscheduler.textfile import write_atomic

        return write_atomic(
            Path(path),
            yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True),
        )

    @classmethod
    def load(cls, path: str | Path) -> LayerProfile:
        from xdscheduler.yamlfile import read_yaml

        doc = read_yaml(Path(path), "layer profile")
        try:
            profile = cls.model_validate(doc, strict=False)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "the document"
            raise UserError(
                f"{path}: not a layer profile ({where}: {said(first)}); "
                f"xds layers measure or xds layers import write one"
            ) from None
        catalog.accelerator(profile.accelerator)  # an unknown one is named, with the known
        return profile


@dataclass(frozen=True, eq=False)
class MeasuredLayers:
    """A profile as arrays the model looks plans up in: per TP degree, the micro-batch sizes
    measured and the six block times at each (hashable by identity, so search options that
    hold it can be cached)."""

    profile: LayerProfile
    accelerator: int  # catalog.accelerator_code
    precision: int  # index into DTYPES
    by_tp: dict[int, tuple[np.ndarray, np.ndarray]]  # tp -> (micro-batches, (n, 6) times)
    memory_by_tp: dict[int, np.ndarray]  # tp -> (first, layer, last) bytes per sample

    @classmethod
    def of(cls, profile: LayerProfile) -> MeasuredLayers:
        by_tp: dict[int, list[LayerTiming]] = {}
        for t in profile.timings:
            by_tp.setdefault(t.tp, []).append(t)
        tables = {}
        for tp, rows in by_tp.items():
            rows.sort(key=lambda r: r.micro_batch)
            tables[tp] = (
                np.array([r.micro_batch for r in rows], dtype=float),
                np.array([[getattr(r, k) for k in TIMES] for r in rows]),
            )
        memory = {
            m.tp: np.array([m.first_bytes, m.layer_bytes, m.last_bytes]) for m in profile.memory
        }
        return cls(
            profile,
            catalog.accelerator_code(profile.accelerator),
            DTYPES.index(profile.dtype),
            tables,
            memory,
        )

    def applies(self, arch: catalog.ModelArch, seq: int) -> bool:
        return self.profile.shape.same_layers(arch, seq)

    def times(self, micro_batch, tp, accelerator, precision) -> np.ndarray:
        """(N, 6) block times of each plan (TIMES' order): measured, or linear between the
        micro-batch sizes measured at its TP degree; NaN where the profile does not reach
        (another accelerator or precision, a TP degree or micro-batch outside it)."""
        mb, tp = np.asarray(micro_batch, dtype=float), np.asarray(tp)
        n = np.broadcast(mb, tp, accelerator, precision).shape
        mb, tp = np.broadcast_to(mb, n), np.broadcast_to(tp, n)
        out = np.full((*n, len(TIMES)), np.nan)
        mine = (np.asarray(accelerator) == self.accelerator) & (
            np.asarray(precision) == self.precision
        )
        for degree, (sizes, table) in self.by_tp.items():
            rows = np.broadcast_to(mine, n) & (tp == degree)
            if rows.any():
                out[rows] = np.stack(
                    [
                        np.interp(mb[rows], sizes, table[:, k], np.nan, np.nan)
                        for k in range(len(TIMES))
                    ],
                    axis=-1,
                )
        return out

    def activation_bytes(self, tp, precision) -> np.ndarray:
        """(N, 3) bytes per sample each block keeps (first, layer, last); NaN where unmeasured."""
        tp = np.asarray(tp)
        out = np.full((*tp.shape, 3), np.nan)
        mine = np.asarray(precision) == self.precision
        for degree, row in self.memory_by_tp.items():
            out[(tp == degree) & mine] = row
        return out


def applicable(profiles, arch: catalog.ModelArch, seq: int) -> tuple[MeasuredLayers, ...]:
    return tuple(m for m in profiles or () if m.applies(arch, seq))


def member_codes(hw, n: int) -> np.ndarray:
    """(n, k) accelerator codes a profile may time each plan by, -1 padded: its accelerator
    where it has one, else its placement's members (each timed by its own profile, the
    slowest standing), else none."""
    acc = np.broadcast_to(np.asarray(hw.accelerator, dtype=float), (n,))
    if hw.members is None:
        return acc[:, None].copy()
    members = np.broadcast_to(np.asarray(hw.members, dtype=float), (n, np.shape(hw.members)[-1]))
    first = np.arange(members.shape[1]) == 0
    return np.where((acc >= 0)[:, None], np.where(first, acc[:, None], -1.0), members)


def coverage(
    profiles, arch: catalog.ModelArch, seq: int, plans, hw
) -> tuple[np.ndarray, np.ndarray]:
    """Per plan: whether profiles time it (each of its accelerators, its precision, TP degree
    and micro-batch, no context parallelism), and whether a profile is of one of its
    accelerators and its precision at all (then a plan they do not time would be the
    roofline's among measured ones: the search leaves those out, as Sailor plans only what it
    profiled)."""
    n = len(plans)
    codes = member_codes(hw, n)
    real = codes >= 0
    timed, profiled = np.zeros(codes.shape, dtype=bool), np.zeros(codes.shape, dtype=bool)
    for m in applicable(profiles, arch, seq):
        for j in range(codes.shape[1]):
            mine = (codes[:, j] == m.accelerator) & (np.asarray(plans.precision) == m.precision)
            profiled[:, j] |= mine
            timed[:, j] |= ~np.isnan(
                m.times(plans.micro_batch, plans.tp, codes[:, j], plans.precision)[..., 0]
            ) & (np.asarray(plans.cp) == 1)
    covered = (timed | ~real).all(axis=1) & real.any(axis=1)
    return np.asarray(covered), np.asarray((profiled & real).any(axis=1))


# ----------------------------------------------------------------------------- Sailor's format


def from_sailor(
    doc: dict,
    model: catalog.ModelArch,
    accelerator: str,
    *,
    sailor_model: str | None = None,
    sailor_gpu: str | None = None,
    llm_info: dict | None = None,
    dtype: str = "tf32",
    source: str = "",
) -> LayerProfile:
    """Sailor's profile as ours. `doc` is either its simulator's file
    (Planner/simulations/profiles_tmp.json: model -> GPU -> micro-batch -> TP -> layer ->
    [fwd, bwd, update]) or its planner's (Planner/sailor_planner/profiles/MODEL/GPU/
    profile.json: micro-batch -> TP -> layer -> [...]). Layer 0 is the embedding, the last
    the output layer; a transformer layer's times are the median of the ones between.

    `update` is left out: Sailor's figure is the same for every layer and far below an Adam
    step over the model's parameters, so its scope is unknown; the model's own optimizer term
    stands. `llm_info` (Planner/llm_info.json) gives the activation floats each block keeps
    per sample (act_mem_floats, 4 bytes each in its fp32 runs). Sailor trains in fp32 on NGC
    containers, whose PyTorch runs fp32 matmuls on TF32 tensor cores: its A100 profile implies
    more than the A100's 19.5 TFLOP/s of plain FP32, so `dtype` defaults to tf32."""
    table = doc
    if not _is_micro_batch_table(doc):
        sailor_model = _pick(doc, sailor_model, "model", "--sailor-model")
        gpus = doc[sailor_model]
        sailor_gpu = _pick(gpus, sailor_gpu, "GPU type", "--sailor-gpu")
        table = gpus[sailor_gpu]
        if not _is_micro_batch_table(table):
            raise UserError(
                f"Sailor profile: {sailor_model}/{sailor_gpu} is not a table of "
                f"micro-batch -> TP -> layer -> [fwd, bwd, update]"
            )
    timings = []
    for mb, by_tp in table.items():
        for tp, by_layer in by_tp.items() if isinstance(by_tp, dict) else ():
            try:
                timings.append(_sailor_timing(int(mb), int(tp), by_layer, model))
            except (TypeError, ValueError, IndexError, AttributeError) as err:
                raise UserError(
                    f"Sailor profile: micro-batch {mb}, TP {tp}: not a table of "
                    f"layer -> [fwd s, bwd s, update s] of numbers ("
                    f"{_first_error(err)})"
                ) from None
    if not timings:
        raise UserError("Sailor profile: no micro-batch -> TP -> layer times in it")
    try:
        memory = _sailor_memory(llm_info, sailor_model, model) if llm_info else []
        output_timed = _output_layer_in_last(llm_info, sailor_model, model)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise UserError(
            f"Sailor llm_info: not model -> TP -> layer -> act_mem_floats, "
            f"params_floats ({_first_error(err)})"
        ) from None
    return LayerProfile(
        accelerator=catalog.accelerator(accelerator).name,
        dtype=dtype,
        stack="megatron-deepspeed",
        shape=Shape.of(model),
        source=source,
        output_layer_timed=output_timed,
        timings=sorted(timings, key=lambda t: (t.tp, t.micro_batch)),
        memory=memory,
    )


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        return f"{'.'.join(str(x) for x in first['loc'])}: {said(first)}"
    return str(err)


def _is_micro_batch_table(doc) -> bool:
    return isinstance(doc, dict) and bool(doc) and all(str(k).isdigit() for k in doc)


def _pick(doc: dict, key: str | None, what: str, flag: str) -> str:
    if key is None and len(doc) == 1:
        return next(iter(doc))
    if key is None or key not in doc:
        raise UserError(
            f"Sailor profile: {'no ' + what + ' ' + repr(key) if key else what + 's'}"
            f" in it; give {flag} one of: {', '.join(sorted(doc))}"
        )
    return key


def _sailor_timing(mb: int, tp: int, by_layer: dict, model: catalog.ModelArch) -> LayerTiming:
    layers = {int(k): v for k, v in by_layer.items()}
    if sorted(layers) != list(range(model.layers + 2)):
        raise UserError(
            f"Sailor profile: micro-batch {mb}, TP {tp} has {len(layers)} "
            f"entries; {model.name} needs {model.layers + 2} (embedding, "
            f"{model.layers} layers, output): is it the right --model?"
        )
    inner = [layers[i] for i in range(1, model.layers + 1)]
    first, last = layers[0], layers[model.layers + 1]
    return LayerTiming(
        micro_batch=mb,
        tp=tp,
        first_fwd_s=float(first[0]),
        first_bwd_s=float(first[1]),
        layer_fwd_s=statistics.median(float(v[0]) for v in inner),
        layer_bwd_s=statistics.median(float(v[1]) for v in inner),
        last_fwd_s=float(last[0]),
        last_bwd_s=float(last[1]),
    )


def _output_layer_in_last(
    llm_info: dict | None, sailor_model: str | None, model: catalog.ModelArch
) -> bool:
    """Whether Sailor's last block holds the output layer: its parameters (llm_info.json, TP
    1) are the vocabulary's embedding, not only the final norm (GPT-Neo's profile stops at
    the norm). Without llm_info it is taken to."""
    name = _sailor_name(sailor_model, model)
    if not llm_info or name not in llm_info or "1" not in llm_info[name]:
        return True
    last = llm_info[name]["1"].get(str(model.layers + 1), {})
    return last.get("params_floats", np.inf) >= model.vocab * model.hidden / 2


def _sailor_name(sailor_model: str | None, model: catalog.ModelArch) -> str | None:
    return sailor_model or next((k for k, v in SAILOR_MODELS.items() if v == model.name), None)


def _sailor_memory(
    llm_info: dict, sailor_model: str | None, model: catalog.ModelArch
) -> list[LayerMemory]:
    name = _sailor_name(sailor_model, model)
    if name not in llm_info:
        raise UserError(f"Sailor llm_info: no model {name!r}; it has {', '.join(llm_info)}")
    out = []
    for tp, by_layer in llm_info[name].items():
        floats = {int(k): v["act_mem_floats"] for k, v in by_layer.items()}
        inner = [floats[i] for i in range(1, model.layers + 1)]
        out.append(
            LayerMemory(
                tp=int(tp),
                first_bytes=floats[0] * SAILOR_FLOAT_BYTES,
                layer_bytes=statistics.median(inner) * SAILOR_FLOAT_BYTES,
                last_bytes=floats[model.layers + 1] * SAILOR_FLOAT_BYTES,
            )
        )
    return sorted(out, key=lambda m: m.tp)


def read_json(path: str | Path, what: str) -> dict:
    from xdscheduler.textfile import read_text

    text = read_text(Path(path), what, MAX_BYTES, "JSON")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: a JSON object is expected, not {type(doc).__name__}")
    return doc
