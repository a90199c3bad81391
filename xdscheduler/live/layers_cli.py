"""`xds layers`: measured per-layer profiles, the step-time model's inputs where they exist.

  xds layers measure   time a model's blocks on this machine's accelerator (plain PyTorch)
  xds layers import    read another planner's profile (Sailor's format) as ours
  xds layers show      what a profile holds and where it came from
  xds layers import-network   read a measured network curve (Sailor's network_coeffs)

`xds plan --layer-profile` and `xds estimate --layer-profile` then use it in place of the roofline.
"""

from __future__ import annotations

import json
from pathlib import Path

from xdscheduler.errors import UserError


def register(subparsers) -> None:
    from xdscheduler.arguments import number

    p = subparsers.add_parser(
        "layers",
        help="measured per-layer profiles: measure, import (Sailor's), show",
        description="per-layer forward and backward times and memory of a model on an "
        "accelerator: the step-time model uses them in place of its roofline "
        "(xds plan --layer-profile, xds estimate --layer-profile)",
    )
    sub = p.add_subparsers(dest="layers_command", metavar="COMMAND", required=True)

    m = sub.add_parser(
        "measure",
        help="time a model's blocks on this machine (PyTorch)",
        description="time the embedding, one transformer layer and the output "
        "block of a model's shape forward and backward, random "
        "weights, on the GPU where there is one (else the CPU), "
        "and the optimizer step; write a layer profile",
    )
    m.add_argument("--model", required=True, help="catalog model name (see xds catalog)")
    m.add_argument(
        "--micro-batch",
        default="1,2,4",
        metavar="B,B,...",
        help="micro-batch sizes to time (default 1,2,4)",
    )
    m.add_argument(
        "--tp",
        type=number(int, 1, 64),
        default=1,
        help="time one rank's shard of this TP degree (all-reduces not timed)",
    )
    m.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "tf32", "fp32"),
        default="bf16",
        help="tf32: fp32 tensors with TF32 matmuls allowed; fp32: not allowed",
    )
    m.add_argument(
        "--seq", type=number(int, 1, 1 << 20), help="sequence length (default: the model's)"
    )
    m.add_argument(
        "--attention",
        choices=("unfused", "fused"),
        default="unfused",
        help="unfused: Megatron's path without flash attention; fused: PyTorch's "
        "scaled_dot_product_attention",
    )
    m.add_argument(
        "--implementation",
        choices=("xds", "hf-gpt2"),
        default="xds",
        help="xds: a GPT block of its own (Megatron-like); hf-gpt2: Hugging Face "
        "transformers' GPT-2 modules, as its Trainer runs them (needs the hf extra)",
    )
    m.add_argument(
        "--stack",
        default="megatron-2021",
        help="the software stack the profile stands for (default megatron-2021: "
        "unfused attention, no sequence parallelism)",
    )
    m.add_argument(
        "--accelerator",
        help="catalog name of the device (default: the CUDA "
        "device's own name; required on the CPU)",
    )
    m.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    m.add_argument("--repeats", type=number(int, 1, 1000), default=5)
    m.add_argument(
        "--chain",
        type=number(int, 1, 64),
        default=4,
        metavar="N",
        help="time N layers run at once, each its share: a whole step hides the launch "
        "latency a block timed alone pays (default 4)",
    )
    _output(m)
    m.set_defaults(fn=cmd_measure)

    i = sub.add_parser(
        "import",
        help="read Sailor's profile as ours",
        description="read a profile of Sailor (github.com/eth-easl/sailor): "
        "its simulator's Planner/simulations/profiles_tmp.json or "
        "its planner's Planner/sailor_planner/profiles/MODEL/GPU/"
        "profile.json, with Planner/llm_info.json for memory",
    )
    i.add_argument("profile", help="Sailor's profile JSON")
    i.add_argument(
        "--model", required=True, help="our catalog model it profiles (opt-350m, gpt-neo-2.7b, ...)"
    )
    i.add_argument(
        "--accelerator",
        required=True,
        help="our catalog name of its GPU (Sailor's A100-40 is A100-40GB, GH-96 is GH200)",
    )
    i.add_argument(
        "--sailor-model",
        help="its model key where the file has several (OPT-350, GPT-Neo-2.7, ...)",
    )
    i.add_argument(
        "--sailor-gpu", help="its GPU key where the file has several (A100-40, GH-96, ...)"
    )
    i.add_argument("--llm-info", help="Sailor's llm_info.json: activation memory per layer")
    i.add_argument(
        "--dtype",
        choices=("tf32", "fp32", "bf16", "fp16"),
        default="tf32",
        help="what its runs computed in (default tf32: fp32 tensors on NGC's "
        "PyTorch, which allows TF32 matmuls)",
    )
    _output(i)
    i.set_defaults(fn=cmd_import)

    n = sub.add_parser(
        "import-network",
        help="read Sailor's network curve as ours",
        description="read the inter-node curve of one of Sailor's "
        "providers/network_coeffs_*.json (GB/s by log2 message MB, "
        "and the measured peak): xds plan --network-profile then "
        "prices a flat ring's messages at the rate their size gets",
    )
    n.add_argument("coeffs", help="Sailor's network_coeffs_*.json")
    n.add_argument("--sailor-gpu", required=True, help="its GPU key (A100-40, GH-96, ...)")
    n.add_argument(
        "--gpus",
        type=number(int, 1, 64),
        default=1,
        help="GPUs a node of its measurement (default 1: one GPU's connection)",
    )
    _output(n)
    n.set_defaults(fn=cmd_import_network)

    s = sub.add_parser("show", help="a profile's blocks, source and coverage")
    s.add_argument("profile")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(fn=cmd_show)


def _output(p) -> None:
    p.add_argument("--out", required=True, help="the layer profile to write (YAML)")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _writable(path: str, force: bool) -> Path:
    out = Path(path)
    if out.exists() and not force:
        raise UserError(f"{out} exists: --force to replace it")
    return out


def cmd_measure(args) -> None:
    from xdscheduler import catalog

    out = _writable(args.out, args.force)
    sizes = _sizes(args.micro_batch)
    from xdscheduler.live.layer_timer import measure  # torch: only this command needs it

    profile = measure(
        catalog.model(args.model),
        micro_batches=sizes,
        tp=args.tp,
        dtype=args.dtype,
        accelerator=args.accelerator,
        device=args.device,
        repeats=args.repeats,
        fused_attention=args.attention == "fused",
        stack=_stack(args.stack),
        seq=args.seq,
        implementation=args.implementation,
        chain=args.chain,
    )
    profile.save(out)
    _report(profile, out, args.json)


def cmd_import(args) -> None:
    from xdscheduler import catalog
    from xdscheduler.costmodel.layers import from_sailor, read_json

    out = _writable(args.out, args.force)
    doc = read_json(args.profile, "Sailor profile")
    info = read_json(args.llm_info, "Sailor llm_info") if args.llm_info else None
    profile = from_sailor(
        doc,
        catalog.model(args.model),
        args.accelerator,
        sailor_model=args.sailor_model,
        sailor_gpu=args.sailor_gpu,
        llm_info=info,
        dtype=args.dtype,
        source=f"Sailor profile {Path(args.profile).name}"
        + (
            f" ({args.sailor_model}/{args.sailor_gpu})"
            if args.sailor_model or args.sailor_gpu
            else ""
        )
        + (f", memory from {Path(args.llm_info).name}" if args.llm_info else ""),
    )
    profile.save(out)
    _report(profile, out, args.json)


def cmd_import_network(args) -> None:
    from xdscheduler.costmodel.messages import NetworkProfile, from_sailor

    out = _writable(args.out, args.force)
    curve = from_sailor(Path(args.coeffs), args.sailor_gpu, args.gpus)
    profile = NetworkProfile(
        coeffs=list(curve.coeffs), peak_gbps=curve.peak_gbps, source=curve.source
    )
    profile.save(out)
    doc = {"written": str(out), **profile.model_dump(mode="json")}
    print(
        json.dumps(doc, indent=2)
        if args.json
        else f"{curve.source}: peak {curve.peak_gbps:.1f} Gbit/s, a 1 MB message "
        f"{curve.share(1e6):.0%} of it, 64 MB {curve.share(64e6):.0%}; wrote {out}"
    )


def cmd_show(args) -> None:
    from xdscheduler.costmodel.layers import LayerProfile

    profile = LayerProfile.load(args.profile)
    _report(profile, None, args.json)


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(v) for v in text.split(",")})
    except ValueError:
        sizes = []
    if not sizes or not all(1 <= v <= 1 << 16 for v in sizes):
        raise UserError(
            f"--micro-batch takes sizes from 1 to 65536 separated by commas, got {text!r}"
        )
    return sizes


def _stack(name: str) -> str:
    from xdscheduler.costmodel.plan import STACKS

    if name not in STACKS:
        raise UserError(f"unknown stack {name!r}; known: {', '.join(STACKS)}")
    return name


def _report(profile, out: Path | None, as_json: bool) -> None:
    doc = profile.model_dump(mode="json")
    if as_json:
        print(json.dumps({**({"written": str(out)} if out else {}), **doc}, indent=2))
        return
    sh = profile.shape
    print(
        f"{profile.accelerator}, {profile.dtype}, stack {profile.stack}: layers of hidden "
        f"{sh.hidden}, {sh.heads} heads, FFN {sh.ffn_hidden}, sequence {sh.seq_len}"
        + (f"; wrote {out}" if out else "")
    )
    print(f"  source: {profile.source}")
    print(
        f"  {'TP':>3} {'mb':>4}  {'embed fwd/bwd ms':>17}  {'layer fwd/bwd ms':>17}  "
        f"{'output fwd/bwd ms':>17}"
    )
    for t in profile.timings:
        print(
            f"  {t.tp:>3} {t.micro_batch:>4}  {t.first_fwd_s * 1e3:8.3f}/"
            f"{t.first_bwd_s * 1e3:<8.3f}  {t.layer_fwd_s * 1e3:8.3f}/"
            f"{t.layer_bwd_s * 1e3:<8.3f}  {t.last_fwd_s * 1e3:8.3f}/"
            f"{t.last_bwd_s * 1e3:<8.3f}"
        )
    for m in profile.memory:
        print(f"  TP {m.tp}: a layer keeps {m.layer_bytes / 2**20:,.1f} MiB a sample")
    if profile.optimizer_s_per_param is not None:
        print(f"  optimizer step: {profile.optimizer_s_per_param * 1e9:.3f} ns a parameter")
    if not profile.output_layer_timed:
        print("  the output block stops at the final norm: the model adds the output layer")
