"""How long a live job's checkpoint holds its training up, at Ray Train's default worker poll
(every 2 s) and at the live control plane's (`TRAIN_POLL_S`).

A worker's `train.report` with a checkpoint waits until the controller has polled the report
before it; at a 2 s poll, every checkpoint of a job that steps faster than that stalls it. This
runs the live training loop itself (two CPU workers on a local Ray, the small GPT, a checkpoint
every 10 steps) under a listener that hears each step as the live controller does, and prints
the median gap after a checkpointed step against the median gap after any other step.

    python -m benchmarks.bench_checkpoint [--steps 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import ray

from benchmarks._table import print_table
from xdscheduler.live.training import TRAIN_POLL_ENV, TRAIN_POLL_S, TrainConfig, train_loop

RAY_DEFAULT_POLL_S = 2.0
LISTENER = "bench-checkpoint-listener"
DEFAULT, OURS = "Ray Train's default", "live control plane"


@ray.remote(num_cpus=0)
class Listener:
    """What the live controller is to a run's workers: hears each step, never says stop."""

    def __init__(self):
        self.times: dict[int, float] = {}

    def heard(self, job: str, metrics: dict) -> None:  # the controller's two calls
        self.times[metrics["step"]] = time.monotonic()

    def stopped(self, job: str, attempt: int, step: int) -> bool:
        return False

    def steps(self) -> dict[int, float]:
        return self.times


def run(poll_s: float, steps: int, workers: int, storage: str) -> dict[int, float]:
    """When each step of one run was heard, with Ray Train polling every `poll_s`."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    os.environ[TRAIN_POLL_ENV] = str(poll_s)  # read when the trainer starts its controller
    listener = Listener.options(name=LISTENER).remote()
    name = f"bench-checkpoint-{poll_s}-{time.time_ns()}"
    config = TrainConfig(job=name, steps=steps, controller=LISTENER, storage=storage,
                         checkpoint_every=10)
    result = TorchTrainer(
        train_loop, train_loop_config=config.model_dump(),
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=name, storage_path=storage)).fit()
    if result.error:
        raise result.error
    heard = ray.get(listener.steps.remote())
    ray.kill(listener)
    return heard


def gaps(heard: dict[int, float], every: int) -> tuple[np.ndarray, np.ndarray]:
    """(gaps after a checkpointed step, gaps after any other), in seconds; the first steps
    (collectives warming up) left out."""
    after = {s: heard[s + 1] - heard[s] for s in heard if s + 1 in heard and s > 3}
    ckpt = np.array([g for s, g in after.items() if s % every == 0])
    plain = np.array([g for s, g in after.items() if s % every != 0])
    return ckpt, plain


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    ray.init(address="local", num_cpus=args.workers, include_dashboard=False,
             log_to_driver=False)
    rows, stall = [], {}
    with tempfile.TemporaryDirectory() as storage:
        for label, poll_s in ((DEFAULT, RAY_DEFAULT_POLL_S), (OURS, TRAIN_POLL_S)):
            started = time.monotonic()
            ckpt, plain = gaps(run(poll_s, args.steps, args.workers, storage), 10)
            wall = time.monotonic() - started
            stall[label] = float(np.median(ckpt) - np.median(plain))
            rows.append([label, poll_s, len(ckpt), float(np.median(plain)),
                         float(np.median(ckpt)), stall[label], wall])
    ray.shutdown()
    for row in rows:
        row.append(stall[row[0]] / stall[DEFAULT])
    print_table(
        f"Checkpoint stall of a live run: {args.steps} steps, {args.workers} CPU workers, "
        "a checkpoint every 10",
        ["poll", "every (s)", "checkpoints", "step gap (s)", "gap at checkpoint (s)",
         "stall (s)", "run (s)", "stall vs default"], rows,
        f"each checkpoint stalls the run {stall[DEFAULT]:.2f} s at Ray Train's default poll, "
        f"{stall[OURS]:.2f} s at the live control plane's (stall: the median gap after a "
        "checkpointed step less the median gap after any other)")


if __name__ == "__main__":
    main()
