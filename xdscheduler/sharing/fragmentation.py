"""GPU fragmentation as Weng et al. define it (ATC'23, section 4): the share of a node's free GPU
resources that the next pod, drawn from the target workload, could not use.

For a pod class m and a node: if the node can host m (CPU, GPU model, and enough GPUs each with
at least m's share free), the fragments are the free parts of the GPUs too small for m; if it
cannot, or m asks for no GPU, every free GPU resource of the node is a fragment. A node's
fragmentation is the expectation over the workload's classes, in milli-GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from xdscheduler.sharing.openb import Pods


@dataclass(frozen=True)
class Workload:
    """The target workload: pod classes (CPU, GPUs, share of each, models allowed) and the
    probability that the next pod is of each class."""

    cpu: np.ndarray  # (M,) milli-cores
    num_gpu: np.ndarray  # (M,)
    gpu_milli: np.ndarray  # (M,)
    spec: np.ndarray  # (M,) object: allowed GPU models (a tuple) or None
    probability: np.ndarray  # (M,), sums to 1

    @classmethod
    def of(cls, pods: Pods) -> Workload:
        """The classes of `pods` with their frequencies."""
        frame = pd.DataFrame(
            {
                "cpu": pods.cpu,
                "num_gpu": pods.num_gpu,
                "gpu_milli": pods.gpu_milli,
                "spec": ["|".join(s) if s else "" for s in pods.spec],
            }
        )
        counts = frame.value_counts(sort=True).reset_index(name="n")
        spec = np.array([tuple(s.split("|")) if s else None for s in counts["spec"]], dtype=object)
        return cls(
            counts["cpu"].to_numpy(np.int64),
            counts["num_gpu"].to_numpy(np.int64),
            counts["gpu_milli"].to_numpy(np.int64),
            spec,
            counts["n"].to_numpy(float) / counts["n"].sum(),
        )

    def access(self, models: list[str]) -> np.ndarray:
        """(len(models), M): whether a node of each GPU model may host each class."""
        return np.array([[s is None or m in s for s in self.spec] for m in models], dtype=bool)


def fragmentation(
    left: np.ndarray, cpu_left: np.ndarray, access: np.ndarray, work: Workload
) -> np.ndarray:
    """Expected fragmented milli-GPUs of each node state.

    left: (S, G) free milli of each GPU slot (0 where the node has no such GPU); cpu_left: (S,);
    access: (S, M) whether each state's GPU model may host each class.
    """
    g, n = work.gpu_milli, work.num_gpu
    free = left.sum(axis=1)
    fits = left[:, :, None] >= g[None, None, :]  # (S, G, M)
    hosts = (fits.sum(axis=1) >= n) & (cpu_left[:, None] >= work.cpu) & access & (g > 0)  # (S, M)
    too_small = np.where(fits, 0, left[:, :, None]).sum(axis=1)  # (S, M)
    return np.where(hosts, too_small, free[:, None]) @ work.probability
