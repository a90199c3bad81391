"""What Ray Train's settings cost a live run: how long each checkpoint holds it up, and how long
after its last step the run returns, under Ray Train's defaults and under the environment the
live control plane gives each run's driving task (`trainer_env`).

A worker's `train.report` with a checkpoint waits until the controller has polled the report
before it (every 2 s by default); and a run returns only once Ray Train's placement-group
cleaner has stopped, which waits on the state API the cleaner finds by itself unless told.
This runs the live runner itself (`run_training`, two CPU workers on a local Ray with its
dashboard, the small GPT, a checkpoint every 10 steps), each run in the environment of its row,
under a listener that hears each step as the controller does. The default row's end depends
on what Ray's default temp folder holds on this machine (a stale cluster there cost 12 s).

    python -m benchmarks.bench_checkpoint [--steps 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import ray

from benchmarks._table import print_table
from xdscheduler.live.runs import make_placement_group, placement_group_name, run_training
from xdscheduler.live.state import DOMAIN_LABEL
from xdscheduler.live.training import TRAIN_POLL_ENV, TrainConfig, trainer_env

RAY_DEFAULT_POLL_S = 2.0
LISTENER = "bench-checkpoint-listener"
DEFAULT, OURS = "Ray Train's defaults", "live control plane"
BENCH_DOMAIN = "bench"  # the one domain label of the local node: the runner pins workers by it


@ray.remote(num_cpus=0)
class Listener:
    """What the live controller is to a run's workers: hears each step, never says stop."""

    def __init__(self) -> None:
        self.times: dict[int, float] = {}

    def heard(self, job: str, metrics: dict) -> None:  # the controller's two calls
        self.times[metrics["step"]] = time.time()

    def stopped(self, job: str, attempt: int, step: int) -> int:
        return 0  # go on

    def startup_mark(self, job: str, attempt: int, stage: str, at: float) -> None:
        pass

    def steps(self) -> dict[int, float]:
        return self.times


def run(
    env: dict[str, str], steps: int, workers: int, storage: str
) -> tuple[dict[int, float], float]:
    """When each step of one run was heard, and when the run returned, its driving task in
    `env`."""
    # a Ray actor class, though typed as the class it decorates
    listener = Listener.options(name=LISTENER).remote()  # type: ignore[attr-defined]
    job = f"bench-checkpoint-{time.time_ns()}"
    group = make_placement_group(job, 1, [BENCH_DOMAIN] * workers, False)
    config = TrainConfig(
        job=job,
        steps=steps,
        controller=LISTENER,
        storage=storage,
        checkpoint_every=10,
        attempt=1,
        placement_group=placement_group_name(job, 1),
    )
    ended = ray.get(
        run_training.options(runtime_env={"env_vars": env}).remote(
            config.model_dump(), [BENCH_DOMAIN] * workers, storage, False
        )
    )
    returned = time.time()
    ray.util.remove_placement_group(group)
    if ended["error"]:
        raise RuntimeError(ended["error"])
    heard = ray.get(listener.steps.remote())
    ray.kill(listener)
    return heard, returned


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
    ctx = ray.init(
        address="local",
        num_cpus=args.workers,
        log_to_driver=False,
        include_dashboard=True,
        labels={DOMAIN_LABEL: BENCH_DOMAIN},
    )
    envs = {
        DEFAULT: {TRAIN_POLL_ENV: str(RAY_DEFAULT_POLL_S)},
        OURS: trainer_env(f"http://{ctx.dashboard_url}", ray.get_runtime_context().gcs_address),
    }
    rows, stall, end = [], {}, {}
    with tempfile.TemporaryDirectory() as storage:
        for label, env in envs.items():
            started = time.time()
            heard, returned = run(env, args.steps, args.workers, storage)
            ckpt, plain = gaps(heard, 10)
            stall[label] = float(np.median(ckpt) - np.median(plain))
            end[label] = returned - max(heard.values())
            rows.append(
                [
                    label,
                    float(env[TRAIN_POLL_ENV]),
                    len(ckpt),
                    float(np.median(plain)),
                    stall[label],
                    end[label],
                    returned - started,
                ]
            )
    ray.shutdown()
    print_table(
        f"A live run under Ray Train's settings: {args.steps} steps, {args.workers} CPU "
        "workers, a checkpoint every 10",
        ["settings", "poll (s)", "checkpoints", "step gap (s)", "stall (s)", "end (s)", "run (s)"],
        rows,
        f"each checkpoint held the run {stall[DEFAULT]:.2f} s under Ray Train's defaults, "
        f"{stall[OURS]:.2f} s under the live control plane's (stall: the median gap after a "
        "checkpointed step less the median gap after any other); the run returned "
        f"{end[DEFAULT]:.1f} s after its last step against {end[OURS]:.1f} s",
    )


if __name__ == "__main__":
    main()
