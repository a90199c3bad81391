"""Runs Sailor's own planner and simulator from a checkout of it, for sailor_side_by_side.

Run by that benchmark in a child process (Sailor's modules on its path, its prints kept off
ours): reads one JSON request on standard input and writes one JSON answer on standard output.
Nothing of Sailor's is copied here: its modules are imported from the checkout, its C++ planner
compiled from the checkout's sources into a cache folder.

Requests:
  {"op": "simulate", "model": "OPT-350", "gbs": 1024, "plans": [{"pipeline_list": ..., "mbs":
   ..}, ...], "memory": true}   each plan's iteration time under Sailor's simulator, whether
   it fits Sailor's memory model (check_config_fits), and (asked with "memory") the most bytes
   that model gives one of its GPUs
  {"op": "plan", "model": "OPT-350", "gpu": "A100-40", "zones": {...}, "sizes": [8, 16, 32]}
   Sailor's pick at each size: the first of its planner's sorted plans that fits its memory
   model (as Sailor's simulations/simulator.py chooses), with the seconds of set-up (import,
   planner construction) and of each decision
  {"op": "runs", "cluster": "clariden"}   Sailor's measured runs of that cluster (or "mit")
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

BUILD_NEEDS = "g++, the jsoncpp headers (libjsoncpp-dev) and pybind11"


class SailorError(RuntimeError):
    """What Sailor's side could not do, said in one line (the benchmark stops on it)."""


TRAINING_CONFIGS = {
    "OPT-350": "training_config_opt_350.json",
    "GPT-Neo-2.7": "training_config_gpt_neo27.json",
}


def layout(checkout: Path) -> Path:
    """Sailor finds its files as {SAILOR_PATH}/sailor/sailor/...: a folder holding the checkout
    under the name `sailor`."""
    if checkout.name == "sailor":
        return checkout.parent
    root = Path(tempfile.mkdtemp(prefix="sailor-path-"))
    (root / "sailor").symlink_to(checkout.resolve())
    return root


def build_planner(checkout: Path, cache: Path) -> Path:
    """Sailor's C++ planner (pybind11) compiled from the checkout's sources, once per commit."""
    src = checkout / "sailor" / "Planner" / "sailor_planner" / "cpp_src"
    head = (
        subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    out = cache / head
    lib = out / f"libplanner{sysconfig.get_config_var('EXT_SUFFIX')}"
    if lib.exists():
        return out
    try:
        import pybind11
    except ImportError:
        raise SailorError(f"building Sailor's planner needs {BUILD_NEEDS}: no pybind11") from None

    out.mkdir(parents=True, exist_ok=True)
    sources = [
        str(src / "utils" / "read_json.cpp"),
        str(src / "utils" / "network_utils.cpp"),
        *(str(src / f) for f in ("training.cpp", "planner_utils.cpp", "planner.cpp")),
    ]
    cmd = [
        "g++",
        "-O3",
        "-fPIC",
        "-shared",
        f"-I{pybind11.get_include()}",
        f"-I{sysconfig.get_paths()['include']}",
        *sources,
        "-ljsoncpp",
        "-o",
        str(lib),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise SailorError(f"building Sailor's planner needs {BUILD_NEEDS}: no g++") from None
    if done.returncode:
        first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr[-500:])
        raise SailorError(f"building Sailor's planner needs {BUILD_NEEDS}; g++ said: {first}")
    return out


def simulator(root: Path, model: str, gbs: int, zone: str):
    from sailor.Planner.simulations.runtime_simulator import Simulator

    planner_dir = root / "sailor" / "sailor" / "Planner"
    config = json.loads(
        (planner_dir / "simulations" / "configs" / TRAINING_CONFIGS[model]).read_text()
    )
    config["global_batch_size"] = gbs
    llm_info = json.loads((planner_dir / "llm_info.json").read_text())
    profiles = json.loads((planner_dir / "simulations" / "profiles_tmp.json").read_text())
    return Simulator(str(root), config, llm_info, False, profiles, zone)


def simulate(root: Path, req: dict) -> dict:
    out = []
    for plan in req["plans"]:
        sim = simulator(root, req["model"], plan.get("gbs", req.get("gbs")), plan["zone"])
        body = {"pipeline_list": plan["pipeline_list"], "mbs": plan["mbs"]}
        seconds, cost, _ = sim.simulate_iteration_time(body)
        fits = bool(sim.check_config_fits(body))
        result = {"iteration_s": seconds, "comm_cost": cost, "fits": fits}
        if req.get("memory"):
            result["memory_bytes"] = _most_memory(sim, body)
        out.append(result)
    return {"results": out}


def _most_memory(sim, body: dict) -> float:
    """The most memory Sailor's model gives any GPU of the plan: each stage at each of its TP
    degrees, as its validation (validate.py, --simulate_mem) takes it."""
    stages = body["pipeline_list"][0]["tmp_per_stage"]
    pairs = {(stage, tp) for stage, configs in enumerate(stages) for _vms, tp in configs}
    return max(float(sim.get_memory_footprint_on_gpu(body, stage, tp)) for stage, tp in pairs)


def plan(root: Path, req: dict) -> dict:
    checkout = root / "sailor"
    t0 = time.perf_counter()
    sys.path.insert(0, str(build_planner(checkout, Path(req["cache"]))))
    built, cpu = time.perf_counter(), time.process_time()
    import libplanner

    s = checkout / "sailor"
    quotas = s / "Planner" / "sailor_planner" / "dummy_quotas_dict.json"
    gpu_types = sorted(json.loads(quotas.read_text()))
    planner = libplanner.SailorPlanner(
        str(s / "Planner" / "sailor_planner" / "profiles" / req["model"]) + "/",
        str(s / "providers" / "multizone_bandwidths_het.json"),
        str(s / "Planner" / "simulations" / "configs" / TRAINING_CONFIGS[req["model"]]),
        str(s / "Planner" / "llm_info.json"),
        str(s / "providers" / "gcp" / "communication_cost.json"),
        True,
        False,
        str(quotas),
        "throughput",
    )
    sim = simulator(root, req["model"], req["gbs"], req["zones"][0])
    setup_s, setup_cpu_s = time.perf_counter() - built, time.process_time() - cpu
    picks = []
    for size in req["sizes"]:
        start, cpu = time.perf_counter(), time.process_time()
        configs = planner.get_sorted_plans({z: {req["gpu"]: size} for z in req["zones"]}, 0.0, 0.0)
        pick = None
        for c in configs:  # the first that fits Sailor's memory model, as its simulator picks
            body = _as_plan(c, gpu_types)
            if sim.check_config_fits(body):
                pick = {**body, "planner_iteration_s": c.get_Tpp()}
                break
        picks.append(
            {
                "size": size,
                "plan": pick,
                "decision_s": time.perf_counter() - start,
                "decision_cpu_s": time.process_time() - cpu,
                "candidates": len(configs),
            }
        )
    return {"setup_s": setup_s, "setup_cpu_s": setup_cpu_s, "build_s": built - t0, "picks": picks}


def _as_plan(config, gpu_types: list[str]) -> dict:
    """A planner Config as the plan dict Sailor's simulator reads (its Python wrapper's
    conversion: TP fills each VM it uses)."""
    zones = list(config.get_zones())
    stages = [
        [([(gpu_types[g], tp, zones[z])], tp) for g, tp, z in stage]
        for stage in config.get_config_per_stage()
    ]
    return {
        "pipeline_list": [
            {
                "num_stages": len(stages),
                "layers_per_stage": [list(s) for s in config.get_stages()],
                "tmp_per_stage": stages,
                "dp": [len(s) for s in stages],
            }
        ],
        "mbs": config.get_mbs(),
    }


def validation_runs(root: Path, cluster: str = "clariden") -> dict:
    """Sailor's measured runs: each plan file of Planner/simulations/validation/CLUSTER
    (clariden: its GH200 runs; mit: its runs on three kinds of GPU at once)."""
    base = root / "sailor" / "sailor" / "Planner" / "simulations" / "validation" / cluster
    runs = []
    for path in sorted(glob.glob(str(base / "**" / "N*" / "*.json"), recursive=True)):
        runs.append(
            {
                "file": str(Path(path).relative_to(root / "sailor")),
                **json.loads(Path(path).read_text()),
            }
        )
    return {"runs": runs}


def main() -> None:
    req = json.loads(sys.stdin.read())
    root = Path(req["root"])
    sys.path.insert(0, str(root / "sailor"))
    os.environ["SAILOR_PATH"] = str(root)
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # Sailor prints as it goes, from Python and C++ alike: to standard error
    with contextlib.redirect_stdout(sys.stderr):
        try:
            answer = {
                "simulate": simulate,
                "plan": plan,
                "runs": lambda r, q: validation_runs(r, q.get("cluster", "clariden")),
            }[req["op"]](root, req)
        except SailorError as e:
            answer = {"error": str(e)}
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)


if __name__ == "__main__":
    main()
