"""What a message's size does to the rate it moves at: collectives and sends price each message
at the bandwidth a message that size gets, measured where a network profile gives a curve, an
alpha-beta default (a fixed latency a message, then the connection's rate) otherwise.

A network profile is measured data, an input like a layer profile: Sailor's
(sailor/providers/network_coeffs_*.json) fits, per accelerator and GPUs a node, the GB/s of a
send/recv between two nodes as a polynomial in log2(message MB), and keeps the measured peak.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationError

from xdscheduler.errors import UserError
from xdscheduler.schema import FileModel, Positive, said

# Latency of one ring step over the network, seconds: NCCL's tuning model
# (src/graph/tuning.cc, hwLat[NET][Ring][Simple] = 14 us a step).
NET_STEP_LATENCY_S = 14e-6


@dataclass(frozen=True)
class MessageCurve:
    """GB/s one connection moves a message of m bytes at: a polynomial in log2(m / 1e6)
    (highest power first), capped at the measured peak `peak_gbps` (Gbit/s)."""

    coeffs: tuple[float, ...]
    peak_gbps: float
    source: str = ""

    def share(self, message_bytes) -> np.ndarray:
        """Fraction of the connection's peak a message of that many bytes gets."""
        x = np.log2(np.maximum(message_bytes, 1.0) / 1e6)
        gb_s = np.polyval(np.asarray(self.coeffs, float), x)
        return np.clip(gb_s * 8 / self.peak_gbps, 1e-3, 1.0)


def ring_s(size, ranks, bps, bucket=np.inf, curve: MessageCurve | None = None):
    """Ring all-reduce of `size` bytes over `ranks` ranks, each connection `bps` bytes/s at its
    peak, in buckets of `bucket` bytes: every bucket is 2(n-1) steps of one message of
    bucket/n bytes, each paying a step's latency and moving at the rate its size gets."""
    size, ranks = np.asarray(size, float), np.asarray(ranks, float)
    bucket = np.minimum(bucket, np.maximum(size, 1.0))
    full = np.floor(size / bucket + 1e-9)
    rest = np.maximum(size - full * bucket, 0.0)

    def one(b):
        m = b / np.maximum(ranks, 1.0)
        rate = bps * (curve.share(m) if curve is not None else 1.0)
        return np.where(b > 0, 2 * (ranks - 1) * (NET_STEP_LATENCY_S + m / rate), 0.0)

    return np.where(ranks > 1, full * one(bucket) + one(rest), 0.0)


def connection_bps(pair_bps, flow_bps, flows, gpn):
    """Bytes/s each of `flows` connections gets when they cross between one pair of nodes at
    once: one alone gets `flow_bps`, the `gpn` accelerators of a node together get the pair's
    `pair_bps`, and in between the pair's total grows as a power of the connection count
    through those two points. Over the 25 zone pairs of Sailor's measurements
    (multizone_bandwidths_het.json, 4-GPU A100 VMs), the total of two GPUs sending at once
    comes a median 6% from the measured one this way; n x flow capped at the pair is a median
    37% over it. Where no flow rate is known, or `gpn` is 1, it is min(pair / flows, flow)."""
    pair_bps, flow_bps = np.asarray(pair_bps, float), np.asarray(flow_bps, float)
    flows, gpn = np.maximum(np.asarray(flows, float), 1.0), np.asarray(gpn, float)
    measured = np.isfinite(flow_bps) & (gpn > 1)
    if not measured.any():  # one connection's rate, or no rate known: the power is 1
        return np.minimum(flow_bps, pair_bps / flows)
    with np.errstate(divide="ignore", invalid="ignore"):
        power = np.log(pair_bps / flow_bps) / np.log(gpn)
    power = np.where(measured, np.clip(power, 0.0, 1.0), 1.0)
    return np.minimum(flow_bps * flows ** (power - 1.0), pair_bps / flows)


def from_sailor(path: Path, gpu: str, gpus: int = 1) -> MessageCurve:
    """The inter-node curve of `gpus` GPUs a node of Sailor's accelerator `gpu` (its names:
    A100-40, GH-96, ...) from one of its network_coeffs_*.json files."""
    try:
        coeffs, peak_bytes_s = json.loads(Path(path).read_text())["inter"][gpu][str(gpus)]
        return MessageCurve(
            tuple(float(c) for c in coeffs),
            float(peak_bytes_s) * 8 / 1e9,
            f"{Path(path).name}: inter {gpu} x{gpus}",
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(
            f"{path}: no Sailor network curve for inter/{gpu}/{gpus} ({e}); "
            "expected a network_coeffs_*.json of Sailor's providers"
        ) from None


class NetworkProfile(FileModel):
    """A measured network curve as a file (`xds layers import-network`), YAML."""

    coeffs: list[float] = Field(min_length=1, max_length=8)
    peak_gbps: Positive
    source: str = ""

    def curve(self) -> MessageCurve:
        return MessageCurve(tuple(self.coeffs), self.peak_gbps, self.source)

    def save(self, path: str | Path) -> Path:
        import yaml

        from xdscheduler.textfile import write_atomic

        return write_atomic(
            Path(path), yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
        )

    @classmethod
    def load(cls, path: str | Path) -> NetworkProfile:
        from xdscheduler.yamlfile import read_yaml

        try:
            return cls.model_validate(read_yaml(Path(path), "network profile"), strict=False)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "the document"
            raise UserError(
                f"{path}: not a network profile ({where}: {said(first)}); "
                "xds layers import-network writes one"
            ) from None
