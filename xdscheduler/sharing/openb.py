"""The Alibaba GPU-sharing trace (openb, 2023) behind "Beware of Fragmentation" (Weng et al.,
ATC'23): a cluster's nodes and the pods it was asked to run.

Nodes have CPU (milli-cores), memory (MiB) and GPUs of one model (up to 8 in the trace, up to
MAX_GPUS_PER_NODE read). A pod asks for CPU, memory and either a share of one GPU (`num_gpu` 1,
`gpu_milli` below 1000), whole GPUs (`gpu_milli` 1000, `num_gpu` 1 or more) or none; `gpu_spec`
may confine it to some GPU models ("V100M16|V100M32"). Files:
`sharing/openb_node_list_gpu_node.csv` and `sharing/openb_pod_list_<trace>.csv` of the public
data folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.network.measurements import data_file, shared_data_dir
from xdscheduler.textfile import read_frame

MILLI = 1000  # a whole GPU, in the trace's unit
# 16-GPU hosts are common; the packers' slot arrays are as wide as the largest node read, so
# this bound only refuses what no single host has
MAX_GPUS_PER_NODE = 64
NODES_FILE = "openb_node_list_gpu_node.csv"
TRACES = ("default", "gpushare40")  # the shipped pod lists (gpushare40: more GPU sharing)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


@dataclass(frozen=True)
class Nodes:
    """The cluster: one row per node."""

    name: np.ndarray  # (N,) str
    cpu: np.ndarray  # (N,) milli-cores
    memory: np.ndarray  # (N,) MiB
    gpus: np.ndarray  # (N,) GPUs on the node, 0 to MAX_GPUS_PER_NODE
    model: np.ndarray  # (N,) str, the GPU model

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())


@dataclass(frozen=True)
class Pods:
    """Requests: one row per pod."""

    name: np.ndarray  # (P,) str
    cpu: np.ndarray  # (P,) milli-cores
    memory: np.ndarray  # (P,) MiB
    num_gpu: np.ndarray  # (P,) GPUs asked, 0 to MAX_GPUS_PER_NODE
    gpu_milli: np.ndarray  # (P,) of each GPU asked, 0-1000 (1000 where num_gpu > 1)
    spec: np.ndarray  # (P,) object: the GPU models allowed (a tuple), or None for any

    def __len__(self) -> int:
        return len(self.name)

    @property
    def gpu_demand(self) -> np.ndarray:
        """GPUs each pod asks for, shares as fractions."""
        return self.num_gpu * self.gpu_milli / MILLI

    def take(self, index: np.ndarray) -> Pods:
        return Pods(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


def data_folder() -> Path:
    return shared_data_dir("sharing", "the openb GPU-sharing trace")


def trace_path(trace: str) -> Path:
    """A shipped trace by name, or a pod list by path."""
    if trace in TRACES:
        return data_file(data_folder() / f"openb_pod_list_{trace}.csv")
    path = Path(trace)
    if not path.is_file():
        raise UserError(
            f"--trace: {trace!r} is neither a trace name ({', '.join(TRACES)}) nor a pod list file"
        )
    return path


def _read(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    if not path.exists():
        raise UserError(
            f"{path} is missing: the public data folder must hold it (see shared/data/README.md)"
        )
    frame = read_frame(path, "openb list")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UserError(f"{path}: no column {', '.join(missing)} (needs {', '.join(columns)})")
    for c in columns[1:]:
        if c != "model" and not pd.api.types.is_numeric_dtype(frame[c]):
            raise UserError(f"{path}: column {c} must hold numbers")
    if frame[list(columns)].isna().any().any():
        row = int(frame[list(columns)].isna().any(axis=1).to_numpy().argmax())
        raise UserError(f"{path}: row {row + 2} has an empty field among {', '.join(columns)}")
    _once(path, frame[columns[0]])
    return frame


def _once(path: Path, names: pd.Series) -> None:
    """Refuses a node or pod listed twice (a list pasted twice would read as twice the
    cluster or its load), naming the first repeat and where it was first."""
    repeated = names.duplicated()
    if repeated.any():
        row = int(repeated.to_numpy().argmax())
        first = int((names == names.iloc[row]).to_numpy().argmax())
        raise UserError(
            f"{path}: row {row + 2} repeats {names.name} {names.iloc[row]!r} of row {first + 2}: "
            f"each is listed once"
        )


def _check(path: Path, frame: pd.DataFrame, column: str, low: float, high: float) -> None:
    bad = ~frame[column].between(low, high)
    if bad.any():
        row = int(bad.to_numpy().argmax())
        raise UserError(
            f"{path}: row {row + 2}: {column} is {frame[column].iloc[row]}, "
            f"accepted {low:g} to {high:g}"
        )


def load_nodes(path: Path | None = None) -> Nodes:
    path = Path(path) if path else data_file(data_folder() / NODES_FILE)
    frame = _read(path, NODE_COLUMNS)
    _check(path, frame, "gpu", 0, MAX_GPUS_PER_NODE)
    for c in ("cpu_milli", "memory_mib"):
        _check(path, frame, c, 0, 1e9)
    return Nodes(
        frame["sn"].to_numpy(str),
        frame["cpu_milli"].to_numpy(np.int64),
        frame["memory_mib"].to_numpy(np.int64),
        frame["gpu"].to_numpy(np.int64),
        frame["model"].astype(str).to_numpy(),
    )


def load_pods(path: Path) -> Pods:
    frame = _read(path, POD_COLUMNS)
    _check(path, frame, "num_gpu", 0, MAX_GPUS_PER_NODE)
    _check(path, frame, "gpu_milli", 0, MILLI)
    for c in ("cpu_milli", "memory_mib"):
        _check(path, frame, c, 0, 1e9)
    shared_many = (frame["num_gpu"] > 1) & (frame["gpu_milli"] < MILLI)
    if shared_many.any():
        row = int(shared_many.to_numpy().argmax())
        raise UserError(
            f"{path}: row {row + 2}: a pod of {frame['num_gpu'].iloc[row]} GPUs "
            f"must take them whole (gpu_milli 1000), got "
            f"{frame['gpu_milli'].iloc[row]}"
        )
    num_gpu = frame["num_gpu"].to_numpy(np.int64)
    milli = np.where(num_gpu > 0, frame["gpu_milli"].to_numpy(np.int64), 0)
    num_gpu = np.where(milli > 0, num_gpu, 0)  # a pod with a 0-milli GPU asks for none
    specs = frame["gpu_spec"] if "gpu_spec" in frame.columns else pd.Series([None] * len(frame))
    spec = np.array(
        [tuple(str(s).split("|")) if isinstance(s, str) and s else None for s in specs],
        dtype=object,
    )
    return Pods(
        frame["name"].to_numpy(str),
        frame["cpu_milli"].to_numpy(np.int64),
        frame["memory_mib"].to_numpy(np.int64),
        num_gpu,
        milli,
        spec,
    )


def absent_models(pods: Pods, nodes: Nodes) -> tuple[np.ndarray, list[str]]:
    """Which pods' `gpu_spec` names no GPU model of the nodes (they fit nowhere), and the
    models those pods name."""
    have = set(nodes.model)
    absent = np.array([s is not None and not have.intersection(s) for s in pods.spec], bool)
    return absent, sorted({m for s in pods.spec[absent] for m in s})
