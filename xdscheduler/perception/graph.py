"""The live resource graph: domains as nodes, WAN links as edges, jobs' footprints on the nodes.

Fed incrementally by domain reports (only samples that pass their checks count); read as
fixed-size padded arrays, the form RLlib's observation spaces accept (no graph spaces on its new
API stack), or as a torch_geometric `Data` (`xdscheduler.rl.module.graph_data`; torch stays out
of this module).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xdscheduler.perception.indicators import INDICATORS
from xdscheduler.planner.view import ClusterView

INDICATOR_NAMES = tuple(INDICATORS)
# Typical magnitude of each indicator: features are value / scale, so most lie in [0, 2].
SCALE = {
    "compute_index": 128.0,
    "free_accelerators": 512.0,
    "utilization": 1.0,
    "free_accelerator_memory": 512.0 * 80,
    "storage_io": 1000.0,
    "free_storage": 10000.0,
    "intra_domain_bandwidth": 400.0,
    "inter_domain_bandwidth": 10.0,
    "latency": 50.0,
    "health": 1.0,
    "load": 1.0,
    "power": 1000.0,
}
NODE_EXTRAS = ("free_now", "size", "price", "bf16_pflops", "memory_100gib", "up")
NODE_FEATURES = len(INDICATOR_NAMES) + len(NODE_EXTRAS)
EDGE_FEATURES = 4  # bandwidth now, RTT, fluctuation ε = now/leased − 1, price per GB
# Graphs are padded to at least this many nodes, the size the shipped modules were trained on;
# a larger cluster pads to its own size (the encoder and the scorer take any number of nodes).
MAX_NODES = 8
MAX_EDGES = MAX_NODES * (MAX_NODES - 1)


def graph_size(domains: int) -> tuple[int, int]:
    """(nodes, directed edges) a padded graph of this many domains has room for."""
    n = max(domains, MAX_NODES)
    return n, n * (n - 1)


@dataclass
class ResourceGraph:
    """Indicator values per domain, kept current one report at a time."""

    names: list[str]
    values: np.ndarray = field(init=False)  # (K, 12) last accepted value of each indicator
    last_seen_s: np.ndarray = field(init=False)
    down_since_s: dict[str, float] = field(default_factory=dict)
    footprints: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> job -> GPUs

    def __post_init__(self):
        self.values = np.zeros((len(self.names), len(INDICATOR_NAMES)))
        self.last_seen_s = np.full(len(self.names), -np.inf)
        self._col = {n: j for j, n in enumerate(INDICATOR_NAMES)}
        self._row = {n: i for i, n in enumerate(self.names)}

    def update(self, report, samples) -> None:
        """One domain's report and the samples of it that passed their checks."""
        i = self._row[report.domain]
        for s in samples:
            self.values[i, self._col[s.name]] = s.value
        self.last_seen_s[i] = report.time_s
        self.footprints[report.domain] = dict(report.allocations)
        self.down_since_s.pop(report.domain, None)

    def mark_down(self, name: str, now_s: float) -> None:
        self.down_since_s.setdefault(name, now_s)

    def status(self) -> dict[str, str]:
        return {n: "down" if n in self.down_since_s else "up" for n in self.names}


def node_features(view: ClusterView) -> np.ndarray:
    """(K, NODE_FEATURES): the reported indicators, scaled, and what the view knows now."""
    k = len(view.domains)
    ind = view.indicators if view.indicators is not None else np.zeros((k, len(INDICATOR_NAMES)))
    scaled = ind / np.array([SCALE[n] for n in INDICATOR_NAMES])
    extras = np.array(
        [
            [
                d.available / max(d.total_gpus, 1),
                d.total_gpus / 512,
                d.price_per_gpu_hour / 3,
                d.accelerator.half_tflops / 1000,
                d.accelerator.memory_gib / 100,
                float(d.up),
            ]
            for d in view.domains
        ]
    )
    return np.concatenate([scaled, extras], axis=1).astype(np.float32)


def edges(view: ClusterView) -> tuple[np.ndarray, np.ndarray]:
    """Directed links with bandwidth now: (2, E) indices and (E, EDGE_FEATURES) features."""
    bw = view.bandwidth_gbps
    src, dst = np.nonzero(bw > 0)
    base = view.base_bandwidth_gbps if view.base_bandwidth_gbps is not None else bw
    eps = np.where(base[src, dst] > 0, bw[src, dst] / np.maximum(base[src, dst], 1e-9) - 1, 0)
    feats = np.stack(
        [bw[src, dst] / 10, view.rtt_ms[src, dst] / 50, eps, view.price_per_gb[src, dst] * 20],
        axis=1,
    )
    return np.stack([src, dst]).astype(np.int64), feats.astype(np.float32)


def padded(view: ClusterView) -> dict[str, np.ndarray]:
    """The graph as fixed-size arrays with masks, for an observation space."""
    k = len(view.domains)
    nodes, links = graph_size(k)
    index, feats = edges(view)
    e = index.shape[1]
    out = {
        "nodes": np.zeros((nodes, NODE_FEATURES), np.float32),
        "node_mask": np.zeros(nodes, np.float32),
        "edge_index": np.zeros((2, links), np.float32),
        "edges": np.zeros((links, EDGE_FEATURES), np.float32),
        "edge_mask": np.zeros(links, np.float32),
    }
    out["nodes"][:k] = node_features(view)
    out["node_mask"][:k] = 1
    out["edge_index"][:, :e] = index
    out["edges"][:e] = feats
    out["edge_mask"][:e] = 1
    return out
