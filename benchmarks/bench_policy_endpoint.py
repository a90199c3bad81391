"""The policy endpoint over HTTP on the default scenario, against the same work in process.

Decision states are met in seeded episodes of the default scenario. For each, the controller's
path is timed: the candidate search (in the controller), `POST /policy/act` for the upper
agent, then for the lower agent. Baselines, measured in the same run: the same agent steps
and the same whole decision in this process (no Serve, no HTTP).
Run: python -m benchmarks.bench_policy_endpoint [--states 60] [--repeats 3]
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._table import print_table, time_calls
from xdscheduler.rl.agents import Agents, decide, lower_options, upper_options
from xdscheduler.rl.candidates import choices, lower_observation, upper_observation
from xdscheduler.rl.pareto import fixed_states
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.serving.client import PolicyClient
from xdscheduler.serving.schemas import DecideRequest, job_in, state_of


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy-path")
    args = ap.parse_args()

    from ray import serve

    from xdscheduler.serving.app import APP_NAME, start
    from xdscheduler.serving.gate import api_token

    scn = load_scenario(default_scenario_path())
    w = scn.weights
    states = fixed_states(args.states)
    agents = Agents(w, args.policy_path)
    token = api_token()
    client = PolicyClient(start(None, args.policy_path, scn, port=8000, token=token), token)
    steps = []  # (agent, observation, options) of every agent step met
    for job, view, now in states:
        ch = choices(job, view, w, now)
        if ch is not None:
            steps.append(("upper", upper_observation(ch, 1), upper_options(ch)))
            steps.append(("lower", lower_observation(ch, 0, 1), lower_options(ch, 0)))
    bodies = [
        DecideRequest(
            job=job_in(j), domains=state_of(v)[0], links=state_of(v)[1], now_s=now
        ).model_dump_json()
        for j, v, now in states
    ]
    for s in steps[:6]:  # warm the replica
        client.step(*s)

    r = args.repeats
    timings = {
        "agent step in process (baseline)": [
            time_calls(lambda s=s: agents.step(*s), r) for s in steps
        ],
        "POST /policy/act over HTTP": [time_calls(lambda s=s: client.step(*s), r) for s in steps],
        "whole decision in process (baseline)": [
            time_calls(lambda j=j, v=v, t=t: decide(agents, w, j, v, 1, t), r) for j, v, t in states
        ],
        "whole decision via the endpoint": [
            time_calls(lambda j=j, v=v, t=t: decide(client, w, j, v, 1, t), r) for j, v, t in states
        ],
        "  of which: candidate search": [
            time_calls(lambda j=j, v=v, t=t: choices(j, v, w, t), r) for j, v, t in states
        ],
        "POST /policy/decide over HTTP": [
            time_calls(lambda b=b: client.post("/policy/decide", b), r) for b in bodies
        ],
    }
    serve.delete(APP_NAME)

    rows = []
    base = {
        "step": np.median(np.concatenate(timings["agent step in process (baseline)"])),
        "whole": np.median(np.concatenate(timings["whole decision in process (baseline)"])),
    }
    for name, samples in timings.items():
        x = np.concatenate(samples)
        ref = base["step"] if "step" in name or "/act" in name else base["whole"]
        rows.append(
            [
                name,
                len(x),
                float(np.percentile(x, 50)),
                float(np.percentile(x, 99)),
                float(x.max()),
                float(np.percentile(x, 50) / ref),
            ]
        )
    print_table(
        f"policy endpoint, {scn.name}: {len(states)} decision states, {len(steps)} "
        f"agent steps, × {r}",
        ["path", "calls", "p50 ms", "p99 ms", "max ms", "p50 vs baseline"],
        rows,
        "targets: POST /policy/act p50 ≤ 20 ms, p99 ≤ 100 ms; upper + lower decision "
        "(search, both steps) ≤ 200 ms",
    )


if __name__ == "__main__":
    main()
