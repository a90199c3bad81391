"""Training under Tune: one trial per reward weighting, each a multi-agent PPO run.

The trained modules are written where inference finds them without the trainer:
<out>/<trial>/rl_module/{upper,lower} (restored with `RLModule.from_checkpoint`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from xdscheduler.errors import UserError
from xdscheduler.textfile import write_atomic
from xdscheduler.yamlfile import read_yaml

CONFIGS = Path(__file__).resolve().parents[2] / "rllib_configs"
DEFAULT_CONFIG = CONFIGS / "hppo.yaml"  # the study policy, `xds run --policies ppo`
SWEEP_CONFIG = CONFIGS / "hppo_sweep.yaml"  # the per-decision trade-off and its weight sweep
SECTIONS = {"env", "model", "ppo", "iterations", "checkpoint_every", "seed", "sweep"}
WEIGHT_KEYS = {"efficiency", "utilization", "cost"}


def load_config(path: str | Path | None = None) -> dict:
    path = Path(path) if path else DEFAULT_CONFIG
    cfg = read_yaml(path, "training config") or {}
    if not isinstance(cfg, dict):
        raise UserError(
            f"{path}: a training config is a mapping of sections ({', '.join(sorted(SECTIONS))})"
        )
    unknown = set(cfg) - SECTIONS
    if unknown:
        raise UserError(f"{path}: unknown sections {sorted(unknown)}; accepted: {sorted(SECTIONS)}")
    for i, w in enumerate(cfg.get("sweep", [])):
        if not isinstance(w, dict) or set(w) != WEIGHT_KEYS:
            raise UserError(f"{path}: sweep entry {i + 1} must give exactly {sorted(WEIGHT_KEYS)}")
    return cfg


def algo_config(cfg: dict, weights: dict | None = None, init: str | Path | None = None):
    """The PPO configuration: two modules (upper, lower) over the placement environment,
    started from the trained modules in `init` when given."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from xdscheduler.rl.env import UPPER, PlacementEnv, module_of
    from xdscheduler.rl.module import GraphChoiceModule

    env = {k: v for k, v in cfg.get("env", {}).items() if v is not None}
    env["seed"] = int(cfg.get("seed", 0))
    if weights:
        env["weights"] = weights

    def spec(module: str) -> RLModuleSpec:
        return RLModuleSpec(
            module_class=GraphChoiceModule,
            model_config=dict(cfg.get("model", {})),
            load_state_path=str(Path(init).resolve() / module) if init else None,
        )

    return (
        PPOConfig()
        .environment(PlacementEnv, env_config=env)
        .framework("torch")
        .env_runners(num_env_runners=0, num_cpus_per_env_runner=0)
        .learners(num_learners=0)
        .multi_agent(policies={UPPER, "lower"}, policy_mapping_fn=module_of)
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={UPPER: spec(UPPER), "lower": spec("lower")}
            )
        )
        .training(**cfg.get("ppo", {}))
        .debugging(seed=int(cfg.get("seed", 0)))
    )


def sweep_weights(cfg: dict, samples: int) -> list[dict]:
    sweep = cfg.get("sweep") or []
    if samples > 1 and samples > len(sweep):
        raise UserError(f"--samples {samples}: the config's sweep lists {len(sweep)} weightings")
    return sweep[:samples]


def train(
    cfg: dict,
    out: Path,
    samples: int = 1,
    iterations: int | None = None,
    weights: dict | None = None,
    init: str | Path | None = None,
    verbose: int = 1,
) -> list[dict]:
    """Train one trial per weighting (the scenario's own when samples is 1 and no weights are
    given), each from `init`'s modules if given; returns per trial its weights, last metrics
    and module directory."""
    from ray import tune
    from ray.rllib.algorithms.ppo import PPO

    runs = [weights] if weights or samples == 1 else sweep_weights(cfg, samples)
    if init and not (Path(init) / "upper").is_dir():
        raise UserError(f"--init {init}: not a trained policy (no upper/ module inside)")
    space = algo_config(cfg, init=init).to_dict()
    if runs != [None]:
        space["env_config"] = tune.grid_search(
            [{**space["env_config"], "weights": w} for w in runs]
        )
    out = Path(out).resolve()
    stop = {"training_iteration": int(iterations or cfg.get("iterations", 10))}
    tuner = tune.Tuner(
        PPO,
        param_space=space,
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(
            name="hppo",
            storage_path=str(out / "tune"),
            stop=stop,
            verbose=verbose,
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_at_end=True, checkpoint_frequency=int(cfg.get("checkpoint_every", 0))
            ),
        ),
    )
    results = tuner.fit()
    if results.errors:
        raise RuntimeError(f"training failed: {results.errors[0]}")
    trials = []
    for i, res in enumerate(
        sorted((results[k] for k in range(len(results))), key=lambda r: r.path)
    ):
        if res.checkpoint is None or res.config is None:  # checkpoint_at_end makes both
            raise RuntimeError(f"trial {res.path} ended without a checkpoint")
        target = out / f"trial_{i}" / "rl_module"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(
            Path(res.checkpoint.path) / "learner_group" / "learner" / "rl_module", target
        )
        metrics = res.metrics or {}
        trials.append(
            {
                "weights": res.config["env_config"].get("weights"),
                "iterations": metrics.get("training_iteration"),
                "episode_return_mean": metrics.get("env_runners", {}).get("episode_return_mean"),
                "module": str(target),
            }
        )
    write_atomic(out / "trials.json", json.dumps(trials, indent=2))
    return trials
