"""Where a live run's start goes, stage by stage, and what the live plane's own launch saves
against Ray Train left to itself, measured in turn on the same cluster.

A run of the built-in GPT on two workers of one domain (the domains in turn), launched two ways:

- *live plane*: as the controller launches (`live.runs.run_training`): on its own placement
  group, no placement-group cleaner, no runtime environment of its own (so Ray may hand it the
  node's idle workers), its workers joining their domain's CPU share once their setup is done;
- *Ray Train alone (before)*: a plain `TorchTrainer` as the controller launched it before: Ray
  Train makes its placement group and a detached cleaner actor, the driving task runs in an
  environment of its own (`trainer_env`), the workers join the CPU share as they enter the loop.

Both report the same marks (`live.runs.StartupMarks`, and the loop's own): placement group
reserved, Ray Train controller up, workers' processes up, backend (torch, process group), loop
entered, the domains' groups, the checkpoint read, the first step.

    python -m benchmarks.bench_startup [--runs 3] [--up]   # as root with --up
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from benchmarks._live import maybe_up
from benchmarks._table import print_table
from xdscheduler.live.client import default_state_path

# Ray reads the cluster's token when it is first imported: everything Ray is imported once
# `cluster.connect` has set it (`measure`)
REPO = Path(__file__).resolve().parents[1]
LISTENER = "bench-startup-listener"
OURS, BEFORE = "live plane", "Ray Train alone (before)"


def measure(state_path: Path, runs: int, storage: str) -> dict[str, list[dict]]:
    """Each launch's stages, `runs` times each, in turn, on the cluster of `state_path`."""
    from xdscheduler.live import cluster

    state = cluster.connect(state_path)
    import ray

    from xdscheduler.live.runs import (
        StartupMarks,
        make_placement_group,
        placement_group_name,
        run_training,
        stages,
    )
    from xdscheduler.live.state import DOMAIN_LABEL, HEAD_LABEL
    from xdscheduler.live.training import TrainConfig, trainer_env

    class Listener:
        """What the controller is to a run: hears the start-up marks and the first step."""

        def __init__(self) -> None:
            self.marks: dict[str, dict[str, float]] = {}

        def startup_mark(self, job: str, attempt: int, stage: str, at: float) -> None:
            got = self.marks.setdefault(job, {})
            got[stage] = max(got.get(stage, at), at)

        def heard(self, job: str, metrics: dict) -> None:
            self.marks.setdefault(job, {}).update(
                {f"loop:{k}": v for k, v in (metrics.get("startup") or {}).items()}
            )

        def stopped(self, job: str, attempt: int, step: int) -> int:
            return 0

        def of(self, job: str) -> dict[str, float]:
            return self.marks.get(job, {})

    def quota_first(config: dict) -> None:
        """The loop as it was: the worker joined its domain's CPU share on entering it."""
        from xdscheduler.live import quota
        from xdscheduler.live.plan import train_loop

        quota.join()
        train_loop(config)

    def plain_training(config: dict, workers: list[str]) -> str | None:
        # ray.train's, as Ray Train V2 (the default) has them
        from ray.train.v2.api.config import RunConfig, ScalingConfig
        from ray.train.v2.torch.torch_trainer import TorchTrainer

        trainer = TorchTrainer(
            quota_first,
            train_loop_config=config,
            scaling_config=ScalingConfig(
                num_workers=len(workers),
                resources_per_worker={"CPU": 1},
                label_selector=[{DOMAIN_LABEL: d} for d in workers],
            ),
            run_config=RunConfig(
                name=config["job"],
                storage_path=config["storage"],
                # typed as UserCallbacks; Ray Train takes any RayTrainCallback (this is its own)
                callbacks=[StartupMarks(LISTENER, config["job"], 1)],  # type: ignore[list-item]
            ),
        )
        result = trainer.fit()
        return str(result.error) if result.error else None

    def launch(how: str, domain: str, storage: str, env: dict[str, str]) -> dict[str, float]:
        """One run of 3 steps; its stages' seconds."""
        job = f"startup-{time.time_ns()}"
        workers = [domain, domain]
        launched = time.time()
        cfg = TrainConfig(
            job=job,
            steps=3,
            storage=storage,
            controller=LISTENER,
            attempt=1,
            launched_at=launched,
            checkpoint_every=1000,
            placement_group=placement_group_name(job, 1),
        )
        listener = ray.get_actor(LISTENER)
        if how == OURS:
            group = make_placement_group(job, 1, workers, False)
            out = ray.get(
                run_training.options(label_selector={HEAD_LABEL: "head"}).remote(
                    cfg.model_dump(), workers, storage, False
                )
            )
            ray.util.remove_placement_group(group)
            error = out["error"]
        else:
            error = ray.get(
                plain.options(
                    label_selector={HEAD_LABEL: "head"}, runtime_env={"env_vars": env}
                ).remote(cfg.model_dump(), workers)
            )
        if error:
            raise RuntimeError(error)
        # a handle's methods are typed Never; `of` returns this
        marks = cast("dict[str, float]", ray.get(listener.of.remote(job)))
        reached = {k: t - launched for k, t in marks.items() if ":" not in k}
        reached |= {k.split(":")[1]: t for k, t in marks.items() if k.startswith("loop:")}
        return stages(reached) | {"total_s": reached.get("first_step", float("nan"))}

    # typed as the handle or the class; a new actor is its handle
    listen = cast(
        "ray.actor.ActorHandle", ray.remote(num_cpus=0)(Listener).options(name=LISTENER).remote()
    )
    plain = ray.remote(num_cpus=0, max_retries=0)(plain_training)
    run_env = trainer_env(state.dashboard, ray.get_runtime_context().gcs_address)
    domains = list(state.domains) or ["east"]
    seen: dict[str, list[dict]] = {OURS: [], BEFORE: []}
    for i in range(runs):
        for how in (BEFORE, OURS):  # in turn: the machine's load falls on both alike
            seen[how].append(launch(how, domains[i % len(domains)], storage, run_env))
            print(how, seen[how][-1], file=sys.stderr)
    ray.kill(listen)
    cluster.disconnect()
    return seen


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each launch")
    ap.add_argument("--state", help="the cluster's state file")
    ap.add_argument("--up", action="store_true", help="start a local cluster for the run")
    args = ap.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="bench-startup-")
    state_path = (
        Path(args.state)
        if args.state
        else (Path(folder) / "cluster.json" if args.up else default_state_path())
    )
    try:
        with maybe_up(state_path, args.up):
            seen = measure(state_path, args.runs, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    from xdscheduler.live.runs import STAGES

    keys = [f"{k}_s" for k in STAGES] + ["total_s"]
    med = {
        how: {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
        for how, runs in seen.items()
    }
    rows = [
        [
            k[:-2],
            med[BEFORE][k],
            med[OURS][k],
            med[OURS][k] / med[BEFORE][k] if med[BEFORE][k] else float("nan"),
        ]
        for k in keys
    ]
    print_table(
        f"A live run's start, launch to first step: median of {args.runs} runs each "
        f"(2 workers of one domain; load {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores)",
        ["stage", f"{BEFORE} (s)", f"{OURS} (s)", "ratio"],
        rows,
        f"start-up {med[BEFORE]['total_s']:.1f} s -> {med[OURS]['total_s']:.1f} s"
        f" ({med[OURS]['total_s'] / med[BEFORE]['total_s']:.2f}x)",
    )


if __name__ == "__main__":
    main()
