"""A job's run: a Ray Train `TorchTrainer` on the placement group the live controller made for it.

The controller owns every run's placement group: it creates it (a bundle a worker, each pinned to
its worker's domain by label) when it launches the run, and removes it on every way out (done,
cancelled, moved, preempted, lost, failed by the watchdog). Removing it ends the run's workers at
once, wherever the run is in its life. Left to itself, Ray Train makes a placement group of its
own for each worker group and counts on a detached cleaner actor to remove it when its
controller dies; a run cancelled by force kept its group reserved (4 CPUs held, 0 used) and every
later run waited for workers for ever. So the run's Ray Train controller gets a worker group
that takes the controller's placement group (`OwnedWorkerGroup`), and no cleaner (one process
fewer a run: the group's owner removes it).

These reach into Ray Train 2.60's V2 internals (`TrainController.worker_group_cls`,
`WorkerGroup._create_placement_group`, the trainer's default callbacks); `tests/test_live.py`
runs them on every change of Ray.
"""

from __future__ import annotations

import os
import time
from unittest import mock

import ray
from ray.train.v2._internal.callbacks.placement_group_callback import (
    PlacementGroupCleanerCallback,
)
from ray.train.v2._internal.execution.callback import WorkerCallback, WorkerGroupCallback
from ray.train.v2._internal.execution.controller.controller import TrainController
from ray.train.v2._internal.execution.worker_group.placement_group_handle import (
    DefaultPlacementGroupHandle,
)
from ray.train.v2._internal.execution.worker_group.worker_group import WorkerGroup
from ray.train.v2.api import data_parallel_trainer
from ray.train.v2.torch.torch_trainer import TorchTrainer

from xdscheduler.live.state import DOMAIN_LABEL, NAMESPACE
from xdscheduler.live.training import TRAIN_POLL_ENV, TRAIN_POLL_S

KEEP_CHECKPOINTS = 5  # per job, in its storage (Ray Train deletes the older ones)


def placement_group_name(job: str, attempt: int) -> str:
    return f"xds-run-{job}-{attempt}"


def make_placement_group(job: str, attempt: int, workers: list[str], use_gpu: bool):
    """The run's placement group: a bundle a worker (a CPU, or a GPU and a CPU), each on a node
    of that worker's domain. Not waited for: the run waits, and the watchdog with it."""
    bundle = {"GPU": 1, "CPU": 1} if use_gpu else {"CPU": 1}
    return ray.util.placement_group(
        [dict(bundle) for _ in workers],
        strategy="PACK",
        name=placement_group_name(job, attempt),
        bundle_label_selector=[{DOMAIN_LABEL: d} for d in workers],
    )


class BorrowedHandle(DefaultPlacementGroupHandle):
    """The controller's placement group as Ray Train's worker group holds it: never removed by
    the worker group (a worker group restarting would free what the job holds)."""

    def shutdown(self) -> None:
        pass


class OwnedWorkerGroup(WorkerGroup):
    """Ray Train's worker group, on the placement group the controller made for the run (named
    in the run's config)."""

    def _create_placement_group(self, scaling_config, worker_group_context):
        name = self._train_run_context.train_loop_config["placement_group"]
        return BorrowedHandle(ray.util.get_placement_group(name))


class OwnedTrainController(TrainController):
    """Ray Train's controller of a run, with the owned worker group. It polls its workers every
    TRAIN_POLL_S (a worker's checkpoint waits for the poll), set here rather than in the run's
    environment: a run with environment variables of its own cannot use the node's idle,
    warmed-up worker processes (see `xds up`)."""

    worker_group_cls = OwnedWorkerGroup

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._health_check_interval_s = float(os.environ.get(TRAIN_POLL_ENV, TRAIN_POLL_S))


class OwnedTorchTrainer(TorchTrainer):
    """A TorchTrainer whose workers run on the controller's placement group."""

    def _create_default_callbacks(self):
        return [
            c
            for c in super()._create_default_callbacks()
            if not isinstance(c, PlacementGroupCleanerCallback)
        ]

    def _initialize_and_run_controller(self, **kwargs):
        # the trainer builds its controller actor from this module attribute; patched for
        # this call only (this task's process may run other Ray Train code later)
        with mock.patch.object(data_parallel_trainer, "TrainController", OwnedTrainController):
            return super()._initialize_and_run_controller(**kwargs)


class StartupMarks(WorkerGroupCallback, WorkerCallback):
    """When a run passes each stage of its start (wall clock), told to the live controller:
    its Ray Train controller began the worker group, a worker's context is ready (its process
    is up, Ray Train imported), the backend is set up (torch imported, the process group
    joined). The train loop tells the rest with its first step (`live.training`)."""

    def __init__(self, controller: str, job: str, attempt: int):
        self.controller, self.job, self.attempt = controller, job, attempt

    def _mark(self, stage: str) -> None:
        try:
            listener = ray.get_actor(self.controller, namespace=NAMESPACE)
        except ValueError:
            return  # no controller (a run started by hand): nobody to tell
        listener.startup_mark.remote(self.job, self.attempt, stage, time.time())

    def before_worker_group_start(self, worker_group_context) -> None:
        self._mark("train_controller")

    def after_init_train_context(self) -> None:
        self._mark("worker")

    def after_worker_group_start(self, worker_group) -> None:
        self._mark("backend")


# A run's start, stage by stage: its placement group reserved (alongside the rest), its Ray Train
# controller up, its workers' processes up, the backend (torch, the process group), the train
# loop entered, the domains' groups made, the checkpoint read, the first step done
STAGES = (
    "placement",
    "train_controller",
    "worker",
    "backend",
    "loop",
    "groups",
    "resumed",
    "first_step",
)


def stages(marks: dict[str, float]) -> dict[str, float]:
    """Each stage's own seconds (`<stage>_s`), from when each was reached (seconds since the
    launch); the placement overlaps the others."""
    out, last = {}, 0.0
    for t, k in sorted((marks[k], k) for k in STAGES if k in marks):
        out[f"{k}_s"] = round(t - (0.0 if k == "placement" else last), 3)
        last = last if k == "placement" else t
    return out


@ray.remote(num_cpus=0, max_retries=0)
def run_training(config: dict, workers: list[str], storage: str, use_gpu: bool) -> dict:
    """One Ray Train run: a worker per entry of `workers`, on the placement group
    `config["placement_group"]` (its bundles in the order of `workers`). A run started again
    under the same name resumes from its last checkpoint."""
    from ray.train.torch import TorchConfig
    from ray.train.v2.api.config import (  # ray.train's, as Ray Train V2 (the default) has them
        CheckpointConfig,
        FailureConfig,
        RunConfig,
        ScalingConfig,
    )

    from xdscheduler.live.plan import train_loop

    marks = (
        [StartupMarks(config["controller"], config["job"], config["attempt"])]
        if config.get("controller")
        else []
    )
    trainer = OwnedTorchTrainer(
        train_loop,
        train_loop_config=config,
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=len(workers),
            use_gpu=use_gpu,
            resources_per_worker=None if use_gpu else {"CPU": 1},
        ),
        run_config=RunConfig(
            name=config["job"],
            storage_path=storage,
            # typed as UserCallbacks; Ray Train takes any RayTrainCallback (these are its own)
            callbacks=marks,  # type: ignore[arg-type]
            checkpoint_config=CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS),
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    result = trainer.fit()
    # its last checkpoint's step and loss: the steps are heard one by one, and the last may
    # still be on its way when the run is reaped
    last = {k: result.metrics[k] for k in ("step", "loss")} if result.metrics else {}
    return {"error": str(result.error) if result.error else None, **last}
