"""Accelerators and transformer architectures: the rated numbers every model starts from."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from xdscheduler.errors import UserError


@dataclass(frozen=True)
class Accelerator:
    """Rated, dense (no sparsity) capabilities of one accelerator."""

    name: str
    bf16_tflops: float
    fp8_tflops: float | None  # None: no FP8 tensor cores
    memory_gib: float
    memory_gbs: float  # HBM/GDDR bandwidth, GB/s
    scaleup_gbs: float  # scale-up link (NVLink, xGMI, HCCS, PCIe), GB/s per direction
    scaleout_gbps: float  # typical NIC bandwidth per accelerator, Gbit/s
    gpus_per_node: int
    power_w: float
    vendor: str
    aliases: tuple[str, ...] = ()

    def peak_tflops(self, dtype: str) -> float:
        if dtype == "fp8":
            if self.fp8_tflops is None:
                raise UserError(f"{self.name} has no FP8 tensor cores; use --dtype bf16")
            return self.fp8_tflops
        return self.bf16_tflops


# Sources: vendor datasheets; bidirectional NVLink figures are halved to get "per direction".
ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in [
        # NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TF BF16, 1979 TF FP8 dense,
        # 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s; DGX H100: 8 GPUs, 8x400G ConnectX-7.
        Accelerator("H100-SXM", 989.4, 1978.9, 80, 3350, 450, 400, 8, 700, "NVIDIA",
                    ("H100", "H100-80GB", "H100-SXM5")),
        # NVIDIA H800 SXM (China SKU): H100 compute and memory, NVLink limited to 400 GB/s.
        Accelerator("H800", 989.4, 1978.9, 80, 3350, 200, 400, 8, 700, "NVIDIA",
                    ("H800-SXM",)),
        # NVIDIA H20 product brief: 148 TF BF16, 296 TF FP8, 96 GB HBM3 at 4.0 TB/s,
        # NVLink 900 GB/s.
        Accelerator("H20", 148.0, 296.0, 96, 4000, 450, 400, 8, 400, "NVIDIA"),
        # NVIDIA H200 datasheet (SXM): H100 compute, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s.
        Accelerator("H200", 989.4, 1978.9, 141, 4800, 450, 400, 8, 700, "NVIDIA",
                    ("H200-SXM",)),
        # NVIDIA HGX B200 datasheet, per GPU: 2.25 PF BF16 and 4.5 PF FP8 dense,
        # 180 GB HBM3e at 7.7 TB/s, NVLink 5 1.8 TB/s.
        Accelerator("B200", 2250.0, 4500.0, 180, 7700, 900, 400, 8, 1000, "NVIDIA"),
        # NVIDIA A100 datasheet (SXM4 80GB): 312 TF BF16, 80 GB HBM2e at 2,039 GB/s,
        # NVLink 600 GB/s; DGX A100: 8 GPUs, 8x200G HDR.
        Accelerator("A100-80GB", 312.0, None, 80, 2039, 300, 200, 8, 400, "NVIDIA",
                    ("A100", "A100-SXM", "A100-SXM4-80GB")),
        # Same datasheet, SXM4 40GB: 1,555 GB/s HBM2.
        Accelerator("A100-40GB", 312.0, None, 40, 1555, 300, 200, 8, 400, "NVIDIA",
                    ("A100-SXM4-40GB",)),
        # NVIDIA A800 SXM4 80GB (China SKU): A100 compute, NVLink limited to 400 GB/s.
        Accelerator("A800", 312.0, None, 80, 2039, 200, 200, 8, 400, "NVIDIA",
                    ("A800-80GB",)),
        # NVIDIA L40S datasheet: 362 TF BF16 and 733 TF FP8 dense (half the sparse figures),
        # 48 GB GDDR6 at 864 GB/s, no NVLink: PCIe Gen4 x16 (32 GB/s per direction).
        Accelerator("L40S", 362.05, 733.0, 48, 864, 32, 200, 8, 350, "NVIDIA"),
        # Huawei Atlas 800T A2 / Ascend 910B (910B2): 376 TF FP16, 64 GB HBM2e at 1.6 TB/s,
        # HCCS 392 GB/s (196 per direction), 8 NPUs per server, 200G RoCE per NPU.
        Accelerator("Ascend-910B", 376.0, None, 64, 1600, 196, 200, 8, 400, "Huawei",
                    ("910B", "Ascend910B")),
        # AMD Instinct MI300X datasheet: 1307 TF BF16, 2615 TF FP8 dense, 192 GB HBM3 at
        # 5.3 TB/s, Infinity Fabric 896 GB/s aggregate (448 per direction), 8 per platform.
        Accelerator("MI300X", 1307.4, 2614.9, 192, 5300, 448, 400, 8, 750, "AMD"),
    ]
}


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


_ACCELERATOR_KEYS = {
    _key(alias): acc for acc in ACCELERATORS.values() for alias in (acc.name, *acc.aliases)
}
_MODEL_KEYS = {_key(m.name): m for m in MODELS.values()}


def did_you_mean(name: str, known) -> str:
    """", did you mean X?" for the closest known name, or nothing."""
    lowered = str(name).lower()
    match = next((k for k in known if k.lower().startswith(lowered)), None)  # a name cut short
    if match is None:
        close = difflib.get_close_matches(lowered, [k.lower() for k in known], n=1, cutoff=0.6)
        match = next((k for k in known if close and k.lower() == close[0]), None)
    return f" (did you mean {match!r}?)" if match else ""


def accelerator(name: str) -> Accelerator:
    """Look an accelerator up by name or alias, ignoring case and punctuation."""
    found = _ACCELERATOR_KEYS.get(_key(name))
    if found is None:
        raise UserError(f"unknown accelerator {name!r}{did_you_mean(name, ACCELERATORS)}; "
                        f"known: {', '.join(sorted(ACCELERATORS))}")
    return found


def model(name: str) -> ModelArch:
    """Look a model architecture up by name, ignoring case and punctuation."""
    found = _MODEL_KEYS.get(_key(name))
    if found is None:
        raise UserError(f"unknown model {name!r}{did_you_mean(name, MODELS)}; "
                        f"known: {', '.join(sorted(MODELS))}")
    return found
