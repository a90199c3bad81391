"""Packing pods that ask for GPU shares, whole GPUs or none onto nodes: one interface, the packers
Weng et al. compare (ATC'23) and ours.

A packer scores every candidate placement of a pod (a node, and for a share which of its GPUs)
with a key, lowest first; exact ties go to a random candidate, as Kubernetes' scheduler picks
among its best-scored nodes. Candidates are built vectorised over the nodes (`Cluster.options`).

- `random`: any node that fits.
- `best-fit`: the node with the least CPU and GPU left after placing (half each, normalised by
  the largest node).
- `dot-product`: Tetris (Grandl et al., SIGCOMM'14): the node whose free CPU and GPU align best
  with the pod's demand (largest dot product, both normalised by the largest node).
- `gpu-packing`: first GPUs already shared, then free GPUs of nodes already in use, then empty
  nodes, each the tightest.
- `fgd`: fragmentation gradient descent: the placement that increases the cluster's expected
  fragmentation (`fragmentation`) least.
- `fgd-bestfit` (ours): FGD, with ties on fragmentation broken by best fit instead of by chance:
  among placements that fragment equally, the one leaving the least CPU and GPU free keeps
  whole nodes empty for the pods that need them.
Where a packer says nothing of which GPU of a node takes a share, it takes the tightest one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xdscheduler.sharing.fragmentation import Workload, fragmentation
from xdscheduler.sharing.openb import MILLI, Nodes


@dataclass(frozen=True)
class Pod:
    cpu: int
    memory: int
    num_gpu: int
    gpu_milli: int
    spec: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Options:
    """Every candidate placement of one pod."""

    node: np.ndarray  # (K,) node index
    take: np.ndarray  # (K, G) milli taken from each GPU slot
    left: np.ndarray  # (K, G) each GPU slot's free milli after placing
    cpu_left: np.ndarray  # (K,) after placing
    gpu: np.ndarray  # (K,) free milli of the GPU a share takes, before (0: none or whole GPUs)

    def __len__(self) -> int:
        return len(self.node)


class Cluster:
    """The free resources of every node while pods are packed."""

    def __init__(self, nodes: Nodes, work: Workload):
        self.nodes, self.work = nodes, work
        self.cpu_left = nodes.cpu.copy()
        self.mem_left = nodes.memory.copy()
        slots = np.arange(max(nodes.gpus.max(), 1))  # as many as the largest node has
        self.left = np.where(slots < nodes.gpus[:, None], MILLI, 0).astype(np.int64)
        self.models, model_idx = np.unique(nodes.model, return_inverse=True)
        self.model_idx = model_idx
        self.access = work.access(list(self.models))[model_idx]  # (N, M)
        self.frag = fragmentation(self.left, self.cpu_left, self.access, work)
        self.max_cpu = float(nodes.cpu.max())
        self.max_gpu = float(len(slots) * MILLI)

    @property
    def capacity_milli(self) -> int:
        return int(self.nodes.gpus.sum()) * MILLI

    @property
    def allocated_milli(self) -> int:
        return self.capacity_milli - int(self.left.sum())

    def options(self, pod: Pod) -> Options:
        """Where the pod could go: one candidate per node, or per distinct free share of a
        node's GPUs for a pod asking for a share."""
        ok = (self.cpu_left >= pod.cpu) & (self.mem_left >= pod.memory)
        if pod.spec is not None:
            ok &= np.isin(self.nodes.model, pod.spec)
        if pod.num_gpu == 0:
            node = np.flatnonzero(ok)
            return Options(
                node,
                np.zeros_like(self.left[node]),
                self.left[node],
                self.cpu_left[node] - pod.cpu,
                np.zeros(len(node), np.int64),
            )
        ok &= (self.left >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
        if pod.gpu_milli >= MILLI:
            node = np.flatnonzero(ok)
            whole = self.left[node] == MILLI
            take = np.where(whole & (np.cumsum(whole, axis=1) <= pod.num_gpu), MILLI, 0)
            return Options(
                node,
                take,
                self.left[node] - take,
                self.cpu_left[node] - pod.cpu,
                np.zeros(len(node), np.int64),
            )
        # a share: each GPU with room, one per distinct free amount of a node
        left = self.left[ok]
        room = left >= pod.gpu_milli
        same = (left[:, :, None] == left[:, None, :]) & np.tri(left.shape[1], k=-1, dtype=bool).T
        first = room & ~same.any(axis=1)  # the first slot of each free amount
        rows, slots = np.nonzero(first)
        node = np.flatnonzero(ok)[rows]
        take = np.zeros((len(node), left.shape[1]), np.int64)
        take[np.arange(len(node)), slots] = pod.gpu_milli
        return Options(
            node, take, self.left[node] - take, self.cpu_left[node] - pod.cpu, left[rows, slots]
        )

    def place(self, opts: Options, k: int, pod: Pod) -> int:
        """Candidate k of `opts` taken: the pod's resources leave its node."""
        n = int(opts.node[k])
        self.left[n] = opts.left[k]
        self.cpu_left[n] -= pod.cpu
        self.mem_left[n] -= pod.memory
        self.frag[n] = fragmentation(
            self.left[n : n + 1], self.cpu_left[n : n + 1], self.access[n : n + 1], self.work
        )[0]
        return n

    def fragmentation_after(self, opts: Options) -> np.ndarray:
        """Each candidate's node fragmentation after placing, computed once per distinct node
        state (model, CPU left, GPU shares left in any order): most candidates repeat one."""
        state = np.column_stack(
            [self.model_idx[opts.node], opts.cpu_left, np.sort(opts.left, axis=1)]
        )
        unique, first, inverse = np.unique(state, axis=0, return_index=True, return_inverse=True)
        frag = fragmentation(unique[:, 2:], unique[:, 1], self.access[opts.node[first]], self.work)
        return frag[inverse.ravel()]


Key = Callable[[Cluster, Options, Pod, np.random.Generator], list[np.ndarray]]


def _left_after(c: Cluster, o: Options) -> np.ndarray:
    """Best fit's score: CPU and GPU left on the node after placing, half each."""
    return 0.5 * o.cpu_left / c.max_cpu + 0.5 * o.left.sum(axis=1) / c.max_gpu


def _random(c: Cluster, o: Options, pod: Pod, rng: np.random.Generator) -> list[np.ndarray]:
    per_node = rng.random(len(c.cpu_left))
    return [per_node[o.node], o.gpu]


def _best_fit(c: Cluster, o: Options, pod: Pod, rng: np.random.Generator) -> list[np.ndarray]:
    return [_left_after(c, o), o.gpu]


def _dot_product(c: Cluster, o: Options, pod: Pod, rng: np.random.Generator) -> list[np.ndarray]:
    free_cpu, free_gpu = c.cpu_left[o.node] / c.max_cpu, c.left[o.node].sum(axis=1) / c.max_gpu
    demand_gpu = pod.num_gpu * pod.gpu_milli / c.max_gpu
    return [-(free_cpu * pod.cpu / c.max_cpu + free_gpu * demand_gpu), o.gpu]


def _gpu_packing(c: Cluster, o: Options, pod: Pod, rng: np.random.Generator) -> list[np.ndarray]:
    before = c.left[o.node]
    fresh = ((o.take > 0) & (before == MILLI)).sum(axis=1)  # whole GPUs it starts using
    empty = (before == MILLI).sum(axis=1) == c.nodes.gpus[o.node]
    tier = np.where(fresh == 0, 0, np.where(empty, 2, 1))
    then = np.where(tier == 0, o.gpu, np.where(tier == 1, fresh, c.nodes.gpus[o.node]))
    return [tier, then, o.gpu]


def _fgd(c: Cluster, o: Options, pod: Pod, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.round(c.fragmentation_after(o) - c.frag[o.node], 6)]


def _fgd_bestfit(c: Cluster, o: Options, pod: Pod, rng: np.random.Generator) -> list[np.ndarray]:
    return [*_fgd(c, o, pod, rng), _left_after(c, o), o.gpu]


PACKERS: dict[str, Key] = {
    "random": _random,
    "best-fit": _best_fit,
    "dot-product": _dot_product,
    "gpu-packing": _gpu_packing,
    "fgd": _fgd,
    "fgd-bestfit": _fgd_bestfit,
}
OURS = "fgd-bestfit"


def choose(key: Key, cluster: Cluster, opts: Options, pod: Pod, rng: np.random.Generator) -> int:
    """The candidate with the lowest key (lexicographic); a random one among exact ties."""
    keys = key(cluster, opts, pod, rng)
    best = np.ones(len(opts), dtype=bool)
    for k in keys:
        k = np.asarray(k, dtype=float)
        best &= k == k[best].min()
    return int(rng.choice(np.flatnonzero(best)))
