"""Accelerators and transformer architectures: the rated numbers every model starts from."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, ValidationError, model_validator

from xdscheduler.arguments import invisible
from xdscheduler.errors import UserError
from xdscheduler.schema import FileModel, named, said
from xdscheduler.yamlfile import read_yaml


@dataclass(frozen=True)
class Accelerator:
    """Rated, dense (no sparsity) capabilities of one accelerator."""

    name: str
    bf16_tflops: float | None  # None: no BF16 tensor cores (V100)
    fp8_tflops: float | None  # None: no FP8 tensor cores
    memory_gib: float
    memory_gbs: float  # HBM/GDDR bandwidth, GB/s
    scaleup_gbs: float  # scale-up link (NVLink, xGMI, HCCS, PCIe), GB/s per direction
    scaleout_gbps: float  # typical NIC bandwidth per accelerator, Gbit/s
    gpus_per_node: int
    power_w: float
    vendor: str
    aliases: tuple[str, ...] = ()
    source: str = ""  # where the figures come from: a datasheet, a measurement
    tf32_tflops: float | None = None  # dense TF32 tensor cores; None: none
    fp32_tflops: float | None = None  # FP32 without tensor cores; None: not rated
    fp16_tflops: float | None = None  # dense FP16 tensor cores; None: at the BF16 rate

    @property
    def rated_tflops(self) -> dict[str, float | None]:
        """Dense peak per precision, None where the catalog rates none; FP16 runs at the BF16
        rate on every chip that has both, so an entry names it only where BF16 is missing."""
        return {
            "bf16": self.bf16_tflops,
            "fp16": self.fp16_tflops or self.bf16_tflops,
            "fp8": self.fp8_tflops,
            "tf32": self.tf32_tflops,
            "fp32": self.fp32_tflops,
        }

    @property
    def half_tflops(self) -> float:
        """The 16-bit tensor peak (BF16, or FP16 where there is no BF16): the yardstick of
        speed, MFU and the compute index, which every accelerator has."""
        half = self.rated_tflops["fp16"]
        if half is None:  # a catalog entry gives one or the other (AcceleratorEntry)
            raise ValueError(f"{self.name} rates neither bf16_tflops nor fp16_tflops")
        return half

    def rates(self, dtype: str) -> bool:
        """Whether the catalog rates a peak in `dtype`: plans are made only in those."""
        return self.rated_tflops.get(dtype) is not None

    def peak_tflops(self, dtype: str) -> float:
        """The dense peak a plan in `dtype` computes at; UserError naming the precisions the
        accelerator has where the catalog rates none in `dtype`."""
        rated = self.rated_tflops
        if dtype not in rated:
            raise UserError(f"unknown dtype {dtype!r}; known: {', '.join(rated)}")
        peak = rated[dtype]
        if peak is None:
            what = "FP32 peak rated" if dtype == "fp32" else f"{dtype.upper()} tensor cores"
            has = ", ".join(d for d in rated if rated[d] is not None)
            raise UserError(
                f"{self.name} has no {what} in the catalog; use --dtype with one "
                f"it has ({has}), or add {dtype}_tflops to its entry"
            )
        return peak


ACCELERATOR = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
ACCELERATOR_RULE = (
    "an accelerator's name starts with a letter or digit and takes only letters A-Z a-z, "
    "digits, '_', '.', '+' and '-'"
)


class AcceleratorEntry(FileModel):
    """One accelerator as a catalog file or a scenario's `accelerators:` list gives it."""

    name: Annotated[
        str,
        AfterValidator(named(ACCELERATOR, ACCELERATOR_RULE)),
        Field(max_length=100, json_schema_extra={"pattern": ACCELERATOR}),
    ]
    aliases: list[str] = Field(default=[], max_length=20)
    vendor: str = Field(min_length=1, max_length=100)
    bf16_tflops: float | None = Field(default=None, gt=0, le=1e5)
    fp16_tflops: float | None = Field(default=None, gt=0, le=1e5)
    fp8_tflops: float | None = Field(default=None, gt=0, le=1e5)
    tf32_tflops: float | None = Field(default=None, gt=0, le=1e5)
    fp32_tflops: float | None = Field(default=None, gt=0, le=1e5)
    memory_gib: float = Field(gt=0, le=1e4)
    memory_gbs: float = Field(gt=0, le=1e6)
    scaleup_gbs: float = Field(gt=0, le=1e5)
    scaleout_gbps: float = Field(gt=0, le=1e5)
    gpus_per_node: int = Field(gt=0, le=128)
    power_w: float = Field(gt=0, le=1e5)
    source: str = Field(min_length=1, max_length=2000)  # a datasheet, or a measurement

    @model_validator(mode="after")
    def _a_16_bit_peak(self) -> AcceleratorEntry:
        # every model and index is paced by the 16-bit peak: an entry needs one of the two
        if self.bf16_tflops is None and self.fp16_tflops is None:
            raise ValueError("give bf16_tflops, or fp16_tflops where the chip has no BF16")
        return self

    def accelerator(self) -> Accelerator:
        return Accelerator(**{**self.model_dump(), "aliases": tuple(self.aliases)})


class CatalogFile(FileModel):
    accelerators: list[AcceleratorEntry] = Field(min_length=1, max_length=1000)


SHIPPED = Path(__file__).with_name("accelerators.yaml")
ACCELERATORS: dict[str, Accelerator] = {}  # by name: the shipped catalog, then users' own
_ACCELERATOR_KEYS: dict[str, Accelerator] = {}  # by every name and alias, normalised


def register(entry: AcceleratorEntry | Accelerator, where: str = "catalog") -> Accelerator:
    """Add an accelerator to the catalog; one already known by any of its names must be the
    same, figure for figure (ValueError naming the first that differs)."""
    acc = entry.accelerator() if isinstance(entry, AcceleratorEntry) else entry
    for name in (acc.name, *acc.aliases):
        known = _ACCELERATOR_KEYS.get(_key(name))
        if known is None or known == acc:
            continue
        differs = next(
            (f for f in Accelerator.__dataclass_fields__ if getattr(known, f) != getattr(acc, f)),
            "name",
        )
        raise ValueError(
            f"{where}: accelerator {acc.name!r} is already known as "
            f"{known.name!r} with {differs} {getattr(known, differs)!r}, not "
            f"{getattr(acc, differs)!r}: give yours another name"
        )
    ACCELERATORS[acc.name] = acc
    for name in (acc.name, *acc.aliases):
        _ACCELERATOR_KEYS[_key(name)] = acc
    return acc


def accelerator_in(text: str) -> str | None:
    """The accelerator a device's own name (NVIDIA GH200 480GB, NVIDIA A100-SXM4-40GB) names:
    the one whose longest name or alias it contains; None if none."""
    key = _key(text)
    found = [
        (len(_key(n)), acc.name)
        for acc in ACCELERATORS.values()
        for n in (acc.name, *acc.aliases)
        if _key(n) and _key(n) in key
    ]
    return max(found)[1] if found else None


def accelerator_code(name: str) -> int:
    """A number for an accelerator, stable while the process runs (its place in the catalog,
    which only grows): how arrays of placements say which one a measured profile is of; -1
    for one the catalog does not hold (no profile can name it)."""
    found = _ACCELERATOR_KEYS.get(_key(name))
    return list(ACCELERATORS).index(found.name) if found else -1


def load_catalog(path: str | Path) -> list[Accelerator]:
    """Read a catalog file (like the shipped accelerators.yaml) and register its accelerators."""
    data = read_yaml(path, "accelerator catalog")
    try:
        entries = CatalogFile.model_validate(data).accelerators
    except ValidationError as err:
        first = err.errors()[0]
        where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first["loc"])
        raise UserError(f"{path}: {where.lstrip('.')}: {said(first)}") from None
    try:
        return [register(e, str(path)) for e in entries]
    except ValueError as err:
        raise UserError(str(err)) from None


_USER_CATALOGS: set[str] = set()  # XDS_ACCELERATORS entries already read


def user_catalogs() -> None:
    """Register the catalogs XDS_ACCELERATORS names (paths separated by ':'), each once."""
    for path in filter(None, os.environ.get("XDS_ACCELERATORS", "").split(os.pathsep)):
        if path not in _USER_CATALOGS:
            load_catalog(path)
            _USER_CATALOGS.add(path)


@dataclass(frozen=True)
class ModelArch:
    """A dense decoder-only transformer."""

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    gated_mlp: bool  # SwiGLU (three FFN matrices) instead of GeLU (two)
    tied_embeddings: bool

    @property
    def params_per_layer(self) -> int:
        h = self.hidden
        attention = h * h * 2 + 2 * h * (h // self.heads) * self.kv_heads
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn_hidden
        return attention + mlp + 4 * h  # two norms with weight and bias

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return self.layers * self.params_per_layer + self.embedding_params

    @property
    def size(self) -> str:
        """The parameter count as people say it: 350M, 70B."""
        p = self.params
        return f"{p / 1e9:.0f}B" if p >= 1e9 else f"{p / 1e6:.0f}M"

    def validate(self) -> None:
        problems = []
        for field in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len"):
            if getattr(self, field) <= 0:
                problems.append(f"{field} must be positive, got {getattr(self, field)}")
        if self.heads > 0 and self.hidden % self.heads:
            problems.append(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.kv_heads > 0 and self.heads % self.kv_heads:
            problems.append(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        if problems:
            raise UserError(f"model {self.name!r}: " + "; ".join(problems))


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int = 51200) -> ModelArch:
    # GPT-3 (Brown et al. 2020, Table 2.1): FFN 4h, GeLU, vocab 50257 padded to 51200 as
    # Megatron-LM does, context 2048, tied input/output embeddings.
    return ModelArch(name, layers, hidden, 4 * hidden, heads, heads, vocab, 2048, False, True)


MODELS: dict[str, ModelArch] = {
    m.name: m
    for m in [
        _gpt("gpt3-125m", 12, 768, 12),
        _gpt("gpt3-350m", 24, 1024, 16),
        _gpt("gpt3-760m", 24, 1536, 16),
        _gpt("gpt3-1.3b", 24, 2048, 16),
        _gpt("gpt3-2.7b", 32, 2560, 32),
        _gpt("gpt3-6.7b", 32, 4096, 32),
        _gpt("gpt3-13b", 40, 5120, 40),  # the paper's d_model 5140 is a typo for 5120
        _gpt("gpt3-175b", 96, 12288, 96),
        # OPT-350M (Zhang et al. 2022; facebook/opt-350m config.json): 24 layers, hidden 1024,
        # 16 heads, FFN 4096 (ReLU: two matrices, as GeLU), vocabulary 50272, context 2048, tied
        # embeddings; the same numbers Sailor (SOSP'25, github.com/eth-easl/sailor) trains it
        # with. The released weights embed at 512 and project to 1024; Sailor's Megatron
        # model, like this entry, embeds at the full 1024.
        _gpt("opt-350m", 24, 1024, 16, vocab=50272),
        # GPT-Neo 2.7B's size (EleutherAI; 32 layers, hidden 2560, GPT-2's vocabulary of
        # 50257, context 2048) as Sailor trains it with Megatron's GPT (its
        # training_config_gpt_neo27.json): 32 heads of 80 and dense attention in every layer,
        # where the released model has 20 heads of 128 and local attention in every other one.
        _gpt("gpt-neo-2.7b", 32, 2560, 32, vocab=50257),
        # Llama 2 (Touvron et al. 2023; params.json of the released weights).
        ModelArch("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, True, False),
        ModelArch("llama2-13b", 40, 5120, 13824, 40, 40, 32000, 4096, True, False),
        ModelArch("llama2-70b", 80, 8192, 28672, 64, 8, 32000, 4096, True, False),
        # Llama 3 / 3.1 (Dubey et al. 2024, Table 3; config.json of the released weights).
        ModelArch("llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, True, False),
        ModelArch("llama3-70b", 80, 8192, 28672, 64, 8, 128256, 8192, True, False),
        ModelArch("llama3.1-8b", 32, 4096, 14336, 32, 8, 128256, 8192, True, False),
        ModelArch("llama3.1-70b", 80, 8192, 28672, 64, 8, 128256, 8192, True, False),
        ModelArch("llama3.1-405b", 126, 16384, 53248, 128, 8, 128256, 8192, True, False),
    ]
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


for _entry in CatalogFile.model_validate(read_yaml(SHIPPED, "accelerator catalog")).accelerators:
    register(_entry, str(SHIPPED))
_MODEL_KEYS = {_key(m.name): m for m in MODELS.values()}


def did_you_mean(name: str, known) -> str:
    """ ", did you mean X?" for the closest known name, or nothing."""
    lowered = str(name).lower()
    match = next((k for k in known if k.lower().startswith(lowered)), None)  # a name cut short
    if match is None:
        close = difflib.get_close_matches(lowered, [k.lower() for k in known], n=1, cutoff=0.6)
        match = next((k for k in known if close and k.lower() == close[0]), None)
    return f" (did you mean {match!r}?)" if match else ""


def _visible(name: str, what: str) -> None:
    """Refuse a name that is not what it shows: punctuation is ignored in a look-up, a hidden
    character must not be."""
    why = invisible(name)
    if why:
        raise UserError(f"{what} name {name!r} {why}; type the name plainly")


def accelerator(name: str) -> Accelerator:
    """Look an accelerator up by name or alias, ignoring case and punctuation."""
    user_catalogs()
    _visible(name, "accelerator")
    found = _ACCELERATOR_KEYS.get(_key(name))
    if found is None:
        raise UserError(
            f"unknown accelerator {name!r}{did_you_mean(name, ACCELERATORS)}; "
            f"known: {', '.join(sorted(ACCELERATORS))}"
        )
    return found


def model(name: str) -> ModelArch:
    """Look a model architecture up by name, ignoring case and punctuation."""
    _visible(name, "model")
    found = _MODEL_KEYS.get(_key(name))
    if found is None:
        raise UserError(
            f"unknown model {name!r}{did_you_mean(name, MODELS)}; "
            f"known: {', '.join(sorted(MODELS))}"
        )
    return found
