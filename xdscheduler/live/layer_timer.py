"""`xds layers measure`: time a transformer's blocks on this machine's accelerator, in plain
PyTorch, and write the layer profile the step-time model reads (costmodel/layers.py).

A GPT-style block of the model's shape (pre-norm attention and MLP with their dropouts, the
attention unfused as Megatron runs it without flash attention, or PyTorch's fused
scaled-dot-product kernel), the embedding (token and position tables) and the output block
(final norm, output layer, cross-entropy), with random weights: no download. Each is timed
forward and backward at every micro-batch asked, with the CUDA events of its own stream where
there is a GPU and the wall clock otherwise; the median of the repeats is kept. Tensor
parallelism is timed on one device as the shard a rank computes (heads and FFN split by TP),
without the all-reduces: the profile says so and the model adds its own. The optimizer step
is AdamW over a known number of parameters; the memory a block keeps for its backward pass is
what the allocator holds after its forward (GPU only).

`chain` layers are timed as one run of that many distinct blocks, each layer's time the run's
share: a block timed alone between two synchronisations pays the kernel-launch latency that a
whole model's step hides behind the previous block's kernels, and so overstates small shapes.

`implementation="hf-gpt2"` times Hugging Face transformers' own GPT-2 modules of the model's
shape instead (its block, its token and position tables, its final norm, output layer and
loss), with fp32 weights under autocast in 16-bit, as its Trainer runs them: a profile of
the code a user trains, not of a Megatron-like block.

fp32 and tf32 are both fp32 tensors; what differs is whether PyTorch runs their matmuls on
TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32, which NVIDIA's containers turn on
through TORCH_ALLOW_TF32_CUBLAS_OVERRIDE): the profile records what the flag was when timed.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from xdscheduler import catalog
from xdscheduler.costmodel.layers import LayerMemory, LayerProfile, LayerTiming, Shape
from xdscheduler.errors import UserError

TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "tf32": torch.float32,
    "fp32": torch.float32,
}


class Block(nn.Module):
    """One transformer layer's shard on one tensor-parallel rank."""

    def __init__(self, shape: Shape, tp: int, fused_attention: bool, dropout: float = 0.1):
        super().__init__()
        h, heads = shape.hidden, shape.heads // tp
        self.heads, self.kv_heads = heads, max(shape.kv_heads // tp, 1)
        self.d_head = h // shape.heads
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv = nn.Linear(h, (heads + 2 * self.kv_heads) * self.d_head)
        self.proj = nn.Linear(heads * self.d_head, h)
        ffn = shape.ffn_hidden // tp
        self.up = nn.Linear(h, (2 if shape.gated_mlp else 1) * ffn)
        self.down = nn.Linear(ffn, h)
        self.gated, self.fused, self.p = shape.gated_mlp, fused_attention, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [self.heads * self.d_head, self.kv_heads * self.d_head, self.kv_heads * self.d_head],
            dim=-1,
        )
        q = q.view(b, s, self.heads, self.d_head).transpose(1, 2)
        k, v = (t.view(b, s, self.kv_heads, self.d_head).transpose(1, 2) for t in (k, v))
        if self.kv_heads != self.heads:
            k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
        if self.fused:
            attn = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True)
        else:  # Megatron's unfused path: scores, mask, softmax, dropout, then the values
            scores = torch.matmul(q, k.transpose(-1, -2)) / self.d_head**0.5
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            probs = F.dropout(scores.masked_fill(mask, -10000.0).softmax(-1), self.p)
            attn = torch.matmul(probs, v)
        x = x + F.dropout(self.proj(attn.transpose(1, 2).reshape(b, s, -1)), self.p)
        up = self.up(self.norm2(x))
        if self.gated:
            gate, lin = up.chunk(2, dim=-1)
            act = F.silu(gate) * lin
        else:
            act = F.gelu(up)
        return x + F.dropout(self.down(act), self.p)


class Embedding(nn.Module):
    def __init__(self, shape: Shape, tp: int):
        super().__init__()
        self.tokens = nn.Embedding(-(-shape.vocab // tp), shape.hidden)
        self.positions = nn.Embedding(shape.seq_len, shape.hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return F.dropout(self.tokens(ids) + self.positions(pos), 0.1)


class Output(nn.Module):
    def __init__(self, shape: Shape, tp: int):
        super().__init__()
        self.norm = nn.LayerNorm(shape.hidden)
        self.logits = nn.Linear(shape.hidden, -(-shape.vocab // tp), bias=False)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.logits(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


IMPLEMENTATIONS = ("xds", "hf-gpt2")


def hf_gpt2_config(shape: Shape, layers: int, fused_attention: bool = True, tp: int = 1):
    """transformers' GPT2Config of `shape` with `layers` blocks (whole, not a TP shard)."""
    try:
        from transformers import GPT2Config
    except ImportError as err:
        raise UserError(
            "--implementation hf-gpt2 needs transformers (pip install 'xdscheduler[hf]')"
        ) from err
    if tp != 1 or shape.gated_mlp or shape.kv_heads != shape.heads:
        raise UserError(
            "--implementation hf-gpt2 times GPT-2's own layers: TP 1, no gated MLP, as many "
            "key/value heads as heads"
        )
    return GPT2Config(
        vocab_size=shape.vocab,
        n_positions=shape.seq_len,
        n_embd=shape.hidden,
        n_layer=layers,
        n_head=shape.heads,
        n_inner=shape.ffn_hidden,
        attn_implementation="sdpa" if fused_attention else "eager",
        bos_token_id=None,
        eos_token_id=None,
    )


def hf_gpt2_blocks(
    shape: Shape, tp: int, fused_attention: bool, chain: int
) -> dict[str, nn.Module]:
    """transformers' GPT-2 modules of `shape`: embedding, `chain` blocks, output and loss."""
    config = hf_gpt2_config(shape, chain, fused_attention, tp)
    from transformers import GPT2LMHeadModel

    net = GPT2LMHeadModel(config)
    return {"first": HFEmbedding(net), "layer": HFBlocks(net), "last": HFOutput(net)}


class HFEmbedding(nn.Module):
    def __init__(self, net: Any):  # a GPT2LMHeadModel (transformers: untyped here)
        super().__init__()
        self.wte, self.wpe, self.drop = (
            net.transformer.wte,
            net.transformer.wpe,
            net.transformer.drop,
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.drop(self.wte(ids) + self.wpe(pos))


class HFBlocks(nn.Module):
    def __init__(self, net: Any):  # a GPT2LMHeadModel (transformers: untyped here)
        super().__init__()
        self.blocks = net.transformer.h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            out = block(x)  # causal, as in the whole model: no mask to pad
            x = out[0] if isinstance(out, tuple) else out
        return x


class HFOutput(nn.Module):
    def __init__(self, net: Any):  # a GPT2LMHeadModel (transformers: untyped here)
        super().__init__()
        self.norm, self.head, self.loss = net.transformer.ln_f, net.lm_head, net.loss_function

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.norm(x))
        return self.loss(logits, labels, vocab_size=logits.shape[-1])


class Autocast(nn.Module):
    """A module run under autocast to `dtype` (its weights stay as they are)."""

    def __init__(self, inner: nn.Module, device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.inner, self.device_type, self.dtype = inner, device.type, dtype

    def forward(self, *args):
        with torch.autocast(self.device_type, self.dtype):
            return self.inner(*args)


def warm_up(dev: torch.device, seconds: float = 2.0) -> None:
    """Matrix products until the GPU's clocks are up: the first block timed on an idle GPU
    otherwise runs slower than the rest."""
    if dev.type != "cuda":
        return
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


class Clock:
    """Seconds of a call: CUDA events on the device's stream, else the wall clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn) -> float:
        if self.cuda:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
        begin = time.perf_counter()
        fn()
        return time.perf_counter() - begin


def time_block(
    module: nn.Module, make_input, clock: Clock, repeats: int, warmup: int = 2
) -> tuple[float, float, float]:
    """Median forward and backward seconds of `module`, and the bytes its forward keeps."""
    fwd, bwd, kept = [], [], 0.0
    cuda = clock.cuda
    for i in range(warmup + repeats):
        args = make_input()
        before = torch.cuda.memory_allocated() if cuda else 0
        out: dict[str, torch.Tensor] = {}
        f = clock(lambda args=args, out=out: out.setdefault("y", module(*args)))
        y = out["y"]
        if cuda:
            kept = float(torch.cuda.memory_allocated() - before - y.numel() * y.element_size())
        grad = torch.ones_like(y) if y.dim() == 0 else torch.randn_like(y)
        b = clock(lambda y=y, grad=grad: y.backward(grad))
        if i >= warmup:
            fwd.append(f)
            bwd.append(b)
        module.zero_grad(set_to_none=True)
    return statistics.median(fwd), statistics.median(bwd), max(kept, 0.0)


def time_optimizer(
    device: torch.device, clock: Clock, repeats: int, params: int = 1 << 24
) -> float:
    """Seconds per parameter of an AdamW step over `params` parameters (fused on a GPU)."""
    p = torch.zeros(params, device=device, dtype=torch.float32, requires_grad=True)
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=device.type == "cuda")
    times = [clock(opt.step) for _ in range(repeats + 1)][1:]
    return statistics.median(times) / params


def measure(
    arch: catalog.ModelArch,
    *,
    micro_batches: list[int],
    tp: int,
    dtype: str,
    accelerator: str | None,
    device: str = "auto",
    repeats: int = 5,
    fused_attention: bool = False,
    stack: str = "megatron-2021",
    seq: int | None = None,
    implementation: str = "xds",
    chain: int = 4,
) -> LayerProfile:
    """The layer profile of `arch` on this machine's device, each layer timed as a share of a
    run of `chain` blocks."""
    dev = _device(device)
    if arch.heads % tp or arch.ffn_hidden % tp:
        raise UserError(
            f"TP {tp} does not divide the {arch.heads} heads and FFN "
            f"{arch.ffn_hidden} of {arch.name}"
        )
    name = _accelerator(dev, accelerator)
    ran = _set_precision(dev, dtype)
    shape = Shape.of(arch, seq)
    clock = Clock(dev)
    torch.manual_seed(0)
    blocks, torch_dtype = _blocks(shape, tp, dtype, dev, fused_attention, implementation, chain)
    vocab = -(-shape.vocab // tp)  # one TP shard's rows
    warm_up(dev)
    timings: list[LayerTiming] = []
    kept: dict[str, list[float]] = {}  # per block, the bytes its forward keeps per sample
    for mb in micro_batches:
        s, h = shape.seq_len, shape.hidden

        def ids(mb=mb, s=s, vocab=vocab):
            return (torch.randint(0, vocab, (mb, s), device=dev),)

        def hidden(mb=mb, s=s, h=h):
            return (torch.randn(mb, s, h, device=dev, dtype=torch_dtype, requires_grad=True),)

        def head(mb=mb, s=s, h=h, vocab=vocab):
            return (*hidden(mb, s, h), torch.randint(0, vocab, (mb, s), device=dev))

        t = {}
        for key, make in (("first", ids), ("layer", hidden), ("last", head)):
            share = chain if key == "layer" else 1
            t[key] = tuple(x / share for x in time_block(blocks[key], make, clock, repeats))
            kept.setdefault(key, []).append(t[key][2] / mb)
        timings.append(
            LayerTiming(
                micro_batch=mb,
                tp=tp,
                first_fwd_s=t["first"][0],
                first_bwd_s=t["first"][1],
                layer_fwd_s=t["layer"][0],
                layer_bwd_s=t["layer"][1],
                last_fwd_s=t["last"][0],
                last_bwd_s=t["last"][1],
            )
        )
    memory = (
        [LayerMemory(tp=tp, **{f"{k}_bytes": statistics.median(v) for k, v in kept.items()})]
        if dev.type == "cuda"
        else []
    )
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return LayerProfile(
        accelerator=name,
        dtype=ran,
        stack=stack,
        shape=shape,
        source=(
            f"xds layers measure on {where} (torch {torch.__version__}; "
            f"allow_tf32={torch.backends.cuda.matmul.allow_tf32}; "
            f"{_what(implementation, dtype)}; "
            f"{'fused' if fused_attention else 'unfused'} attention; {repeats} repeats, "
            f"median; {_chained(chain)}TP {tp} timed as one rank's shard without its "
            "all-reduces)"
        ),
        optimizer_s_per_param=time_optimizer(dev, clock, repeats),
        tp_comm_timed=tp == 1,
        timings=timings,
        memory=memory,
    )


def _device(device: str) -> torch.device:
    """The device `--device` names (auto: CUDA where there is one, else the CPU)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "--device cuda: no CUDA device here (torch.cuda.is_available() is "
            "false); use --device cpu or auto"
        )
    return dev


def _set_precision(dev: torch.device, dtype: str) -> str:
    """Let matmuls run in TF32 only for a TF32 profile; the precision they then run in (a CPU
    has no TF32, and the flag is what PyTorch reads at each matmul)."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    if dtype not in ("tf32", "fp32"):
        return dtype
    return "tf32" if dev.type == "cuda" and torch.backends.cuda.matmul.allow_tf32 else "fp32"


def _chained(chain: int) -> str:
    return f"a layer's time a share of {chain} run at once; " if chain > 1 else ""


def _blocks(shape, tp, dtype, dev, fused_attention, implementation, chain):
    """The three blocks to time on `dev` (the middle one `chain` layers), and the dtype of
    the activations they take."""
    if implementation == "xds":
        made = {
            "first": Embedding(shape, tp),
            "layer": nn.Sequential(*(Block(shape, tp, fused_attention) for _ in range(chain))),
            "last": Output(shape, tp),
        }
        return {k: m.to(dev, TORCH_DTYPES[dtype]) for k, m in made.items()}, TORCH_DTYPES[dtype]
    if implementation != "hf-gpt2":
        raise UserError(
            f"unknown implementation {implementation!r}; one of {', '.join(IMPLEMENTATIONS)}"
        )
    made = {k: m.to(dev) for k, m in hf_gpt2_blocks(shape, tp, fused_attention, chain).items()}
    if dtype in ("bf16", "fp16"):  # fp32 weights and residual stream, 16-bit matmuls
        made = {k: Autocast(m, dev, TORCH_DTYPES[dtype]) for k, m in made.items()}
    return made, torch.float32


def _what(implementation: str, dtype: str) -> str:
    if implementation == "xds":
        return "a GPT block of its own"
    import transformers

    cast = ", fp32 weights under autocast" if dtype in ("bf16", "fp16") else ""
    return f"transformers {transformers.__version__} GPT-2 modules{cast}"


def _accelerator(dev: torch.device, given: str | None) -> str:
    """The catalog's name for the device: --accelerator, else the CUDA device's own name."""
    if given:
        return catalog.accelerator(given).name
    if dev.type != "cuda":
        raise UserError(
            "on the CPU, name the accelerator the profile stands for with "
            "--accelerator (a catalog name): a CPU is not in the catalog"
        )
    device_name = torch.cuda.get_device_name(dev)
    found = catalog.accelerator_in(device_name)
    if found:
        return found
    raise UserError(
        f"CUDA device {device_name!r} is not in the catalog: name it with --accelerator"
    )
