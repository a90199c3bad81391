"""`POST /policy/act` over HTTP on the default scenario: latency of whole decisions.

Each request carries a real decision state met in seeded episodes (free accelerators, links,
indicators, the job); the endpoint runs the candidate search, the upper agent and the lower
agent, and explains. The baseline is the same decision in this process, measured in the same
run, so the ratio is what Serve and HTTP add. Run: python -m benchmarks.bench_policy_endpoint
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._table import print_table, time_calls
from xdscheduler.rl.agents import Agents
from xdscheduler.rl.candidates import choices, lower_observation, upper_observation
from xdscheduler.rl.pareto import fixed_states
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.serving.client import PolicyClient
from xdscheduler.serving.schemas import ActRequest, job_in, state_of


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy-path")
    args = ap.parse_args()

    from ray import serve

    from xdscheduler.serving.app import start

    scn = load_scenario(default_scenario_path())
    states = fixed_states(args.states)
    agents = Agents(scn.weights, args.policy_path)
    url = start(None, args.policy_path, scn, port=8000)
    client = PolicyClient(url)
    bodies = []
    for job, view in states:
        domains, links = state_of(view)
        bodies.append(ActRequest(job=job_in(job), domains=domains, links=links).model_dump_json())
    for body in bodies[:5]:  # warm the replica
        client.post("/policy/act", body)

    local, http, search, infer = [], [], [], []
    for (job, view), body in zip(states, bodies, strict=True):
        local.append(time_calls(lambda j=job, v=view: agents.decide(j, v), args.repeats))
        http.append(time_calls(lambda b=body: client.post("/policy/act", b), args.repeats))
        search.append(time_calls(lambda j=job, v=view: choices(j, v, scn.weights), args.repeats))
        ch = choices(job, view, scn.weights)
        if ch is not None:
            up, low = upper_observation(ch, 1), lower_observation(ch, 0, 1)
            infer.append(time_calls(lambda u=up, lo=low: (agents.act(agents.upper, u),
                                                     agents.act(agents.lower, lo)),
                               args.repeats))
    serve.delete("xds")

    rows = []
    base = np.percentile(np.concatenate(local), 50)
    for name, samples in (("decision in process (baseline)", local),
                          ("POST /policy/act over HTTP", http),
                          ("  of which: candidate search", search),
                          ("  of which: upper + lower inference", infer)):
        x = np.concatenate(samples)
        rows.append([name, len(x), float(np.percentile(x, 50)), float(np.percentile(x, 99)),
                     float(x.max()), float(np.percentile(x, 50) / base)])
    print_table(f"policy endpoint, {scn.name}, {len(states)} decision states × {args.repeats}",
                ["path", "calls", "p50 ms", "p99 ms", "max ms", "p50 vs baseline"], rows,
                "targets: HTTP p50 ≤ 20 ms, p99 ≤ 100 ms; upper + lower decision ≤ 200 ms")


if __name__ == "__main__":
    main()
