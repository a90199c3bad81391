"""The live control plane: a cluster of labelled Ray nodes in network namespaces with shaped
links, real Ray Train jobs placed by the planner, and what `xds up`/`down` leave behind.

The cluster tests run the `xds` commands as a user would, in processes of their own; they need
root and iproute2 (namespaces, veth, tc) and skip, saying so, where those are absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, SCENARIOS, catalog_kept, gloo_ranks
from tests.reaper import reaped
from xdscheduler.errors import UserError
from xdscheduler.live import fabric
from xdscheduler.live.agent import DemandHistory, indicators, link_counters
from xdscheduler.live.jobs import load_job
from xdscheduler.live.training import (
    TRAIN_POLL_ENV,
    TRAIN_POLL_S,
    TrainConfig,
    rank_batches,
    share,
    trainer_env,
)
from xdscheduler.ray_cluster import free_port

JOBS = SCENARIOS / "jobs"
LOCAL = SCENARIOS / "local_three_domains.yaml"
PROFILE = SCENARIOS / "profiles" / "local-cpu-plain-dp.yaml"  # what xds calibrate fitted


def test_fabric_shapes_every_direction_at_its_own_rate():
    bw = np.array([[0, 1.0, 0.5], [0.8, 0, 0.25], [0.5, 0.25, 0]])
    f = fabric.Fabric.plan(["east", "west", "north"], bw, "ab12", "10.250.3")
    assert f.ip(0) == "10.250.3.10" and f.head_ip == "10.250.3.1"
    assert all(len(f.host_end(i)) <= 15 for i in range(3)) and len(f.bridge) <= 15
    # east -> west at 1 Gbit/s of payload: the bucket counts the frames' headers too
    rates = [c for c in f.shaping_commands(0) if "classid" in c and "1:101" in c]
    assert (
        rates
        and rates[0][rates[0].index("rate") + 1] == f"{1000 * fabric.WIRE_PER_PAYLOAD:.3f}mbit"
    )
    west = next(c for c in f.shaping_commands(1) if "1:100" in c and "classid" in c)
    assert west[west.index("rate") + 1] == f"{800 * fabric.WIRE_PER_PAYLOAD:.3f}mbit"
    down = f.down_commands()
    assert ["ip", "netns", "del", "xdsab12-north"] in down and down[-1][-1] == "xdsbrab12"


def test_a_link_is_reshaped_in_its_own_direction_only():
    f = fabric.Fabric.plan(["east", "west", "north"], np.ones((3, 3)), "ab12", "10.250.3")
    cmd = f.rate_command("north", "east", 0.002)
    assert cmd[:4] == ["ip", "netns", "exec", "xdsab12-north"]
    assert cmd[cmd.index("change") + 1 : cmd.index("change") + 3] == ["dev", "eth0"]
    assert cmd[cmd.index("classid") + 1] == "1:100"  # north's class for the link to east
    assert cmd[cmd.index("rate") + 1] == f"{2 * fabric.WIRE_PER_PAYLOAD:.3f}mbit"
    for args, reason in (
        (("north", "south", 1.0), "no domain 'south'.*east, west, north"),
        (("east", "east", 1.0), "two different domains"),
        (("east", "west", 0.0), "give 0.0001 to 100"),
    ):
        with pytest.raises(UserError, match=reason):
            f.rate_command(*args)


def test_fabric_refuses_a_pair_without_a_link():
    bw = np.array([[0, 1.0, 0], [1.0, 0, 1.0], [0, 1.0, 0]])
    with pytest.raises(UserError, match="no link between 'a' and 'c'"):
        fabric.Fabric.plan(["a", "b", "c"], bw, "ab12", "10.250.3")


TC_CLASSES = """class htb 1:101 root prio 0 rate 261394Kbit ceil 261394Kbit burst 1568b cburst 1568b
 Sent 29734215 bytes 20837 pkt (dropped 0, overlimits 471 requeues 0)
 backlog 0b 0p requeues 0

class htb 1:100 root prio 0 rate 1045Mbit ceil 1045Mbit burst 1568b cburst 1568b
 Sent 35387062 bytes 23795 pkt (dropped 0, overlimits 527 requeues 0)
 backlog 0b 0p requeues 0

class htb 1:1 root prio 0 rate 100Gbit ceil 100Gbit burst 0b cburst 0b
 Sent 1413291 bytes 3916 pkt (dropped 0, overlimits 3427 requeues 0)
"""


def test_an_agent_reads_each_links_rate_and_bytes_from_its_token_buckets():
    """`tc -s class show` of north's uplink (as the fabric builds it): class 1:100+j is the
    link to domain j, its rate counts frames on the wire; the head's class is no link."""
    got = link_counters(TC_CLASSES, ["east", "west", "north"])
    assert set(got) == {"east", "west"}
    assert got["west"][0] == pytest.approx(0.261394 / fabric.WIRE_PER_PAYLOAD)
    assert got["east"] == (pytest.approx(1.045 / fabric.WIRE_PER_PAYLOAD), 35387062)
    assert got["west"][1] == 29734215


def test_a_live_report_gives_the_12_indicators_a_study_domain_reports():
    from xdscheduler.perception.indicators import INDICATORS, rejection
    from xdscheduler.scenario import load_scenario

    east = load_scenario(LOCAL).domains[0]
    report = {
        "domain": "east",
        "time": time.time(),
        "nodes": 1,
        "cpus": 2,
        "gpus": 0,
        "free_cpus": 1,
        "free_gpus": 0,
        "held": 1,
        "links": [
            {"dst": "west", "rate_gbps": 1.0, "sent_gbps": 0.25},
            {"dst": "north", "rate_gbps": 0.5, "sent_gbps": None},
        ],
        "rtt_ms": {"west": 0.2, "north": 0.4},
    }
    got = {s.name: s for s in indicators(report, east, {"west": 0.9})}
    assert set(got) == set(INDICATORS)
    assert not [rejection(s, time.time()) for s in got.values() if rejection(s, time.time())]
    assert got["free_accelerators"].value == 1 and got["utilization"].value == 0.5
    # west: its probe less what goes over it now; north: its bucket's rate, nothing sent
    assert got["inter_domain_bandwidth"].value == pytest.approx((0.9 - 0.25 + 0.5) / 2)
    assert got["latency"].value == pytest.approx(0.3)
    assert got["compute_index"].value == pytest.approx(2 * east.accelerator.half_tflops / 989.4)


def test_an_agents_demand_history_is_a_mean_per_minute():
    h = DemandHistory()
    for t, held in ((0, 2), (30, 4), (61, 0), (200, 6)):  # minute 2 had no sample
        h.add(t, held)
    assert h.series() == [3.0, 0.0, 0.0, 6.0]


def test_batch_shares_cover_the_global_batch():
    for batch, world in ((16, 3), (32, 4), (5, 8)):
        parts = [share(batch, world, r) for r in range(world)]
        assert sum(parts) == batch and max(parts) - min(parts) <= 1


def test_a_split_by_speed_gives_each_domains_ranks_its_samples():
    """A domain's samples (the planner's split) go as evenly as can be over its ranks; where no
    split names exactly the run's domains, the global batch goes evenly over every rank."""
    members = {"east": [0, 1], "west": [2]}
    assert rank_batches(12, {"east": 5, "west": 7}, members) == {0: 3, 1: 2, 2: 7}
    assert rank_batches(12, {}, members) == {0: 4, 1: 4, 2: 4}
    assert rank_batches(12, {"east": 12}, members) == {0: 4, 1: 4, 2: 4}
    with pytest.raises(ValueError, match="must add up to global_batch 12"):
        TrainConfig(job="j", global_batch=12, domain_batch={"east": 5, "west": 6})


def test_the_live_planners_split_by_speed_reaches_the_runner_whole(tmp_path):
    """A job no domain holds, across a fast and a half-speed domain: the planner splits its
    micro-batches by speed, and the runner's samples a domain (`domain_batches`) follow that
    split and add up to the global batch; an even placement (or a batch too small to split)
    gives none."""
    from dataclasses import replace

    import yaml

    from xdscheduler.live.planning import LIVE_OPTIONS, domain_batches
    from xdscheduler.planner.policies import PlannerPolicy
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.scenario import load_scenario

    raw = yaml.safe_load((SCENARIOS / "local_three_domains.yaml").read_text())
    slow = dict(raw["accelerators"][0], name="CPU-core-half")
    for key in ("bf16_tflops", "fp32_tflops", "tf32_tflops"):
        slow[key] /= 2
    raw["accelerators"].append(slow)
    raw["domains"][1]["nodes"][0]["accelerator"] = "CPU-core-half"  # west
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(raw))
    with catalog_kept():
        scn = load_scenario(path)
        job = load_job(str(SCENARIOS / "jobs" / "gpt-wide.yaml"))
        policy = PlannerPolicy(scn.weights, "planner", LIVE_OPTIONS)
        (p,) = policy.decide([job.spec(0.0)], ClusterView.from_scenario(scn), 0.0)
    by_domain = dict(zip(p.names, p.gpus, strict=True))
    assert p.split and by_domain.get("west", 0) > 0, p
    batches = domain_batches(p, job.global_batch)
    assert sum(batches.values()) == job.global_batch
    per_replica = {d: batches[d] / by_domain[d] for d in batches}
    fast = next(d for d in p.names if d != "west")
    assert per_replica["west"] < per_replica[fast]
    assert domain_batches(replace(p, split=()), job.global_batch) == {}
    assert domain_batches(p, 1) == {}  # a sample cannot go to both domains: even shares


SYNC_WORKER = """
import json, os, sys
import torch, torch.distributed as dist
from xdscheduler.live.plan import make_plan
from xdscheduler.live.training import TrainConfig, rank_batches
rank, diloco = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", rank=rank, world_size=3)
domain = ["east", "east", "west"][rank]
cfg = TrainConfig(job="j", global_batch=12, domain_batch={"east": 5, "west": 7}, diloco_h=diloco)
plan = make_plan(cfg, rank, 3, 0, domain, torch.device("cpu"), {})
g = torch.Generator().manual_seed(0)
x, y = torch.randn(12, 4, generator=g), torch.randn(12, 1, generator=g)
order = [r for d in sorted(plan.domains) for r in plan.domains[d]]  # samples in rank order
batches = rank_batches(12, cfg.domain_batch, plan.domains)
start = sum(batches[r] for r in order[: order.index(rank)])
torch.manual_seed(1)
model = torch.nn.Linear(4, 1)
mine = slice(start, start + plan.batch)
torch.nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
plan.sync_gradients(model)
synced = [p.grad.clone() for p in model.parameters()]
own = slice(0, 5) if domain == "east" else slice(5, 12)  # the domain's samples
whole = slice(0, 12) if not diloco else own
model.zero_grad()
torch.nn.functional.mse_loss(model(x[whole]), y[whole]).backward()
error = max(float((a - p.grad).abs().max()) for a, p in zip(synced, model.parameters()))
with torch.no_grad():
    for p in model.parameters():
        p.fill_(1.0 if domain == "east" else 3.0)
plan.outer_sync(model, diloco or 1)
print(json.dumps({"batch": plan.batch, "error": error,
                  "averaged": float(next(model.parameters()).flatten()[0])}))
dist.destroy_process_group()
"""


@pytest.mark.integration  # three processes join a gloo group: seconds of imports
@pytest.mark.parametrize("diloco", [0, 10])
def test_uneven_shares_sync_the_gradient_of_the_whole_batchs_mean_loss(diloco):
    """Three ranks, two in east (5 samples: 3 and 2) and one in west (7): each rank's gradient
    of its own samples' mean loss, synced, is the gradient of the mean over every sample (or,
    under DiLoCo, over its domain's), and DiLoCo's outer step weighs each domain's weights by
    its samples (east at 1, west at 3: 1 x 5/12 + 3 x 7/12)."""
    import json

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    outs = gloo_ranks(lambda rank: ["-c", SYNC_WORKER, str(rank), str(diloco)], 3, env)
    got = [json.loads(out) for out in outs]
    assert [g["batch"] for g in got] == [3, 2, 7]
    assert max(g["error"] for g in got) < 1e-6, got
    if diloco:
        assert all(g["averaged"] == pytest.approx(1 * 5 / 12 + 3 * 7 / 12) for g in got)


def test_a_runs_trainer_polls_often_and_finds_the_state_api_of_its_own_cluster(monkeypatch):
    """Every checkpoint waits for Ray Train's poll (2 s by default): a live run's polls every
    TRAIN_POLL_S unless the user said otherwise (benchmarks/bench_checkpoint measures the
    stall either way). Its placement-group cleaner asks the state API of this cluster: the
    dashboard where it is known, else the cluster's GCS (never Ray's default temp folder)."""
    monkeypatch.delenv(TRAIN_POLL_ENV, raising=False)
    env = trainer_env("http://10.0.0.1:8265", "10.0.0.1:6379")
    assert (
        env == {TRAIN_POLL_ENV: str(TRAIN_POLL_S), "RAY_API_SERVER_ADDRESS": "http://10.0.0.1:8265"}
        and TRAIN_POLL_S < 2
    )
    monkeypatch.setenv(TRAIN_POLL_ENV, "3")
    assert trainer_env(None, "10.0.0.1:6379") == {
        TRAIN_POLL_ENV: "3",
        "RAY_ADDRESS": "10.0.0.1:6379",
    }


def test_a_run_across_domains_is_timed_over_whole_sync_rounds():
    """Steps of 0.1 s, every 10th also averaging the domains' weights (1 s more): the run
    takes 0.2 s a step, which the median of its steps (0.1 s) does not say."""
    from xdscheduler.live.records import WARMUP_STEPS, JobRecord

    rec = JobRecord(load_job(str(JOBS / "gpt-wide.yaml")), 0.0)
    rec.placement = {"domains": {"west": 2, "north": 2}, "diloco_h": 10}
    for step in range(1, 47):  # rounds end at steps 10, 20, 30, 40; 41-46 is no whole round
        rec.hear({"step": step, "loss": 1.0, "step_time_s": 1.1 if step % 10 == 0 else 0.1})
    assert rec.measured() == pytest.approx(0.2)  # the rounds from step 11 on: 10 is warm-up's
    rec.placement = {"domains": {"west": 4}, "diloco_h": 10}  # one domain: no sync at all
    assert rec.measured() == pytest.approx(0.1)
    rec.measure_afresh()  # conditions changed: no whole round seen since, so nothing known
    for step in range(47, 47 + WARMUP_STEPS + 9):
        rec.hear({"step": step, "loss": 1.0, "step_time_s": 0.1})
    rec.placement = {"domains": {"west": 2, "north": 2}, "diloco_h": 10}
    assert rec.measured() is None


def test_a_run_that_slows_down_is_measured_slow_within_its_recent_steps():
    from xdscheduler.live.records import RECENT_STEPS, JobRecord

    rec = JobRecord(load_job(str(JOBS / "gpt-long.yaml")), 0.0)
    rec.placement = {"domains": {"west": 2}}
    for step in range(1, 1000 + RECENT_STEPS // 2 + 2):  # 1000 fast steps, then slow ones
        rec.hear({"step": step, "loss": 1.0, "step_time_s": 0.1 if step <= 1000 else 0.3})
    assert rec.measured() == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("workers: {min: 4, max: 2}", r"workers: min 4 is larger than max 2"),
        (
            "name: Bad Name",
            r"job.yaml: name: 'Bad Name' is not accepted: a job's name takes only lowercase "
            r"letters a-z, digits and '-', .*; e\.g\. 'bad-name'$",
        ),
        ("name: x\ntenant: Lab A", r"tenant: 'Lab A' is not accepted: .*; e\.g\. 'Lab-A'$"),
        ("model: {hidden: 130, heads: 4}", r"model: .*hidden 130 is not a multiple of heads 4"),
        ("model: {layers: 100000}", r"model.layers: Input should be less than or equal"),
    ],
)
def test_a_bad_job_file_names_the_field(tmp_path, text, reason):
    bad = tmp_path / "job.yaml"
    bad.write_text(text if text.startswith("name:") else f"name: x\n{text}\n")
    with pytest.raises(UserError, match=reason):
        load_job(str(bad))


def test_the_small_gpt_learns_the_corpus():
    torch = pytest.importorskip("torch")
    from xdscheduler.live.gpt import Gpt, GptShape, MarkovCorpus

    torch.manual_seed(0)
    model, corpus = Gpt(GptShape()), MarkovCorpus(512, 0)
    assert torch.equal(corpus.batch(4, 64, 3, 1), corpus.batch(4, 64, 3, 1))  # resumable
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = float(model.loss(corpus.batch(16, 64, 0, 0)).detach())
    assert abs(first - corpus.start_loss) < 0.3  # a fresh model knows nothing
    for step in range(40):
        opt.zero_grad()
        loss = model.loss(corpus.batch(16, 64, step, 0))
        loss.backward()
        opt.step()
    assert float(loss) < first - 2.0


@pytest.mark.parametrize("policy", ["planner", "ppo"])
def test_the_live_policies_put_the_jobs_as_the_live_runner_trains(policy):
    """One job that one domain holds, one that no domain holds: the planner puts them inside
    one and across two; both policies (the agents in process here, over HTTP on a cluster)
    choose data-parallel plans only (what the live runner trains)."""
    from xdscheduler.live.planning import LIVE_OPTIONS, live_policy
    from xdscheduler.live.state import ClusterState
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.rl.agents import Agents
    from xdscheduler.scenario import load_scenario

    scn = load_scenario(LOCAL)
    state = ClusterState(scenario=str(LOCAL), address="", policy=policy)
    small, wide = (load_job(str(JOBS / f)) for f in ("gpt-small.yaml", "gpt-wide.yaml"))
    decider = live_policy(state, scn.weights, LIVE_OPTIONS, Agents(scn.weights))
    placed = decider.decide([small.spec(0.0), wide.spec(1.0)], ClusterView.from_scenario(scn), 2.0)
    by_job = {p.job: p for p in placed}
    assert set(by_job) == {"gpt-small", "gpt-wide"}
    assert by_job["gpt-wide"].kind == "data" and len(by_job["gpt-wide"].names) >= 2
    if policy == "planner":
        assert by_job["gpt-small"].kind == "single" and len(by_job["gpt-small"].names) == 1
    for p in placed:
        assert p.plan.tp == p.plan.pp == 1 and p.plan.dp == p.total_gpus
        assert p.explanation


def test_the_ppo_policy_of_a_state_without_an_api_says_so():
    """The ppo policy asks the cluster's policy app: a state that records none is refused with
    why (not as a malformed --serve-url)."""
    from xdscheduler.live.planning import LIVE_OPTIONS, live_policy
    from xdscheduler.live.state import ClusterState
    from xdscheduler.scenario import load_scenario

    state = ClusterState(scenario=str(LOCAL), address="", policy="ppo")
    with pytest.raises(UserError, match=r"records none \(api\)"):
        live_policy(state, load_scenario(LOCAL).weights, LIVE_OPTIONS)


# ---- a live cluster on this machine
needs_fabric = pytest.mark.skipif(
    fabric.available() is not None, reason=f"no local cluster here: {fabric.available()}"
)


@needs_fabric
@pytest.mark.live
def test_a_fabric_left_behind_by_a_dead_cluster_is_swept_and_a_busy_one_kept():
    """A cluster killed before `xds down` leaves its namespaces and bridge (and its subnet):
    the next `xds up` removes a fabric whose namespaces are old and hold no process, and
    keeps one whose namespace runs something, however old."""
    taken = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    tags = [t for t in ("f0e1", "f0e2", "f0e3", "f0e4") if f"xds{t}-" not in taken][:2]
    dead, busy = (
        fabric.Fabric.plan(["a", "b"], np.ones((2, 2)), tag, f"10.251.{k}")
        for k, tag in enumerate(tags)
    )
    for f in (dead, busy):
        fabric.build(f)
    sleeper = subprocess.Popen(["ip", "netns", "exec", busy.namespace(0), "sleep", "60"])
    try:
        time.sleep(0.5)  # inside its namespace
        ours = {dead.tag, busy.tag}  # (another fabric here may be being built)
        assert not fabric.sweep_stale(only=ours)  # young: they may be being built
        swept = fabric.sweep_stale(min_age_s=0.0, only=ours)  # (an age cannot be set back)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert dead.tag in swept and dead.namespace(0) not in listed
        assert busy.tag not in swept and busy.namespace(1) in listed
        assert fabric.teardown(dead) == [  # nothing of it left to remove
            " ".join(c) for c in dead.down_commands()
        ]
    finally:
        sleeper.kill()
        sleeper.wait()
        fabric.teardown(busy)


def xds_env(state) -> dict:
    """The environment `xds` runs in for the cluster of `state`."""
    env = {**os.environ, "XDS_CLUSTER": str(state)}
    for var in (
        "RAY_ADDRESS",
        "RAY_AUTH_TOKEN",
        "RAY_AUTH_MODE",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
    ):
        env.pop(var, None)  # the test session's Ray (one machine alone) is not the one tested
    return env


def xds(*args: str, state, timeout: float = 300, check: bool = True) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "xdscheduler", *args],
        cwd=REPO,
        env=xds_env(state),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("live") / "cluster.json"
    down = [sys.executable, "-m", "xdscheduler", "down"]
    with reaped(down, env=xds_env(state), cwd=str(REPO)):
        xds("up", str(LOCAL), "--profile", str(PROFILE), "--json", state=state)
        try:
            yield state, json.loads(state.read_text())
        finally:
            if state.exists():
                xds("down", state=state)


@needs_fabric
@pytest.mark.slow
def test_links_measure_what_the_scenario_configures(cluster):
    """Each link, each way, delivers its configured rate, and never more. A sender held back
    by a busy CPU (the suite's other worker) reads a link slow, never fast: a link's best of
    up to three probes is what it delivers."""
    state, _ = cluster
    best: dict[tuple[str, str], dict] = {}
    for _ in range(3):
        rows = json.loads(xds("links", "probe", "--seconds", "1.5", "--json", state=state))
        assert len(rows["links"]) == 6  # three links, both directions
        for r in rows["links"]:
            assert r["measured_gbps"] < 1.15 * r["configured_gbps"], r  # the shaper holds
            key = (r["src"], r["dst"])
            if key not in best or r["measured_gbps"] > best[key]["measured_gbps"]:
                best[key] = r
        if all(r["measured_gbps"] > 0.85 * r["configured_gbps"] for r in best.values()):
            break
    for r in best.values():
        assert abs(r["measured_gbps"] / r["configured_gbps"] - 1) < 0.15, r


PROBE_STATE_API = """
import json, os, sys, ray
from ray.util.state import list_nodes
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0, label_selector={sys.argv[2]: sys.argv[3]})
def probe():
    return os.environ.get("RAY_API_SERVER_ADDRESS"), len(list_nodes(timeout=10))

print(json.dumps(ray.get(probe.remote(), timeout=60)))
"""


@needs_fabric
@pytest.mark.slow
def test_a_users_own_tasks_find_the_state_api_of_this_cluster(cluster):
    """Every node of `xds up` runs with its dashboard's address, so Ray's state API, and Ray
    Train's placement-group cleaner in a user's own trainer, ask this cluster (left to find one
    themselves, they read Ray's default temp folder, which names another cluster or none)."""
    from xdscheduler.live.cluster import DOMAIN_LABEL, load

    state = load(cluster[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {k: v for k, v in state.environment().items() if k != "RAY_API_SERVER_ADDRESS"}
    domain = next(iter(state.domains))
    done = subprocess.run(
        [sys.executable, "-c", PROBE_STATE_API, state.address, DOMAIN_LABEL, domain],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    address, nodes = json.loads(done.stdout.strip().splitlines()[-1])
    assert address == state.dashboard
    assert nodes == len(state.processes)  # the head and every domain's nodes: this cluster


@needs_fabric
@pytest.mark.slow
def test_profile_measures_every_domain_and_calibrate_fits_the_runner_to_it(cluster, tmp_path):
    """xds profile on the live cluster, no job running: GEMMs, copies, the domain's gradient
    reduction and the reference trainings of every domain; the controller plans every job
    after with what it measured (--apply: the two-jobs test checks its predictions), and xds
    calibrate fits the plain-dp stack to the same trainings from the files it wrote."""
    from xdscheduler.live.profile import REFERENCES

    state, _ = cluster
    entries, runs, fitted = tmp_path / "acc.yaml", tmp_path / "runs.csv", tmp_path / "fit.yaml"
    out = json.loads(
        xds(
            "profile",
            "--out",
            str(entries),
            "--runs",
            str(runs),
            "--apply",
            "--json",
            state=state,
            timeout=400,
        )
    )
    assert [m["domain"] for m in out["domains"]] == ["east", "west", "north"]
    for m in out["domains"]:
        assert min(m["gemm_tflops"].values()) > 0 and m["memory_gbs"] > 0
        assert sorted(m["reduce_busbw_gbs"], key=float) == ["1", "2", "4", "8"]
        assert min(m["reduce_busbw_gbs"].values()) > 0
        assert len(m["trainings"]) == len(REFERENCES)
        assert min(t["step_s"] for t in m["trainings"]) > 0
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xdscheduler.cli",
            "calibrate",
            str(runs),
            "--stack",
            "plain-dp",
            "--accelerators",
            str(entries),
            "--out",
            str(fitted),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    # every domain's reference trainings, every other one held out
    assert summary["fitted"] == summary["held_out"] == 3 * len(REFERENCES) // 2
    assert fit_beats_the_shipped_constants(runs, entries, summary["constants"])
    # the model's shape fits a CPU loosely (the shipped fit: 11% held out, 0.33 once beside a
    # busy worker: the trainings' times are this machine's, load and all); off by half, the
    # model or the measurement is broken, however busy the machine
    assert summary["median_abs_error_held_out"] < 0.5, summary
    # --apply fits the same runs, on one entry of the three domains' medians (one CPU type)
    assert len({e["name"] for e in out["applied"]["entries"].values()}) == 1
    assert set(out["applied"]["entries"]) == {"east", "west", "north"}
    assert out["applied"]["entries"]["east"]["fp32_tflops"] == pytest.approx(
        float(np.median([e["fp32_tflops"] for e in out["accelerators"]])), abs=1e-4
    )
    assert out["applied"]["median_abs_error_held_out"] < 0.5


def fit_beats_the_shipped_constants(runs_csv: Path, entries: Path, constants: dict) -> bool:
    """On the runs it was fitted on, the fit's squared log error is below the shipped
    constants' (its least squares start there, where its prior is nought, and measured runs
    never sit exactly at that start): true whatever the runs' noise, so it tests the fit, not
    the machine."""
    from dataclasses import replace

    from xdscheduler import catalog
    from xdscheduler.costmodel.calibration import errors, held_out_by_default, load_runs
    from xdscheduler.costmodel.constants import DEFAULT

    with catalog_kept():
        catalog.load_catalog(entries)
        runs, _ = load_runs(runs_csv)
        fitted = [r for r, held in zip(runs, held_out_by_default(runs), strict=True) if not held]

        def cost(calib) -> float:
            return float(np.sum(np.log1p(errors(fitted, calib)) ** 2))

        return cost(replace(DEFAULT, **constants)) < cost(DEFAULT)  # one that moved nothing fails


@needs_fabric
@pytest.mark.slow
def test_two_jobs_train_one_inside_a_domain_one_across_two(cluster):
    state, _ = cluster
    for job in ("gpt-small.yaml", "gpt-wide.yaml"):
        assert "submitted" in xds("submit", str(JOBS / job), state=state)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        jobs = {j["job"]: j for j in json.loads(xds("jobs", "--json", state=state))["jobs"]}
        if all(j["status"] in ("done", "failed") for j in jobs.values()):
            break
        time.sleep(3)
    small, wide = jobs["gpt-small"], jobs["gpt-wide"]
    for j in (small, wide):  # the figures, for a reader of `pytest -rA`
        print(
            j["job"],
            j["domains"],
            {
                k: j[k]
                for k in (
                    "predicted_step_s",
                    "measured_step_s",
                    "wall_step_s",
                    "corrected_step_s",
                    "first_loss",
                    "loss",
                )
            },
        )
    assert small["status"] == wide["status"] == "done", jobs
    assert len(small["domains"]) == 1 and len(wide["domains"]) >= 2
    assert "the whole job runs inside" in small["reason"] and "replicas over" in wide["reason"]
    for j in (small, wide):
        assert j["step"] == j["steps"] and j["loss"] < j["first_loss"] - 1.0, j
        # predicted from the profile alone (the fresh `xds profile --apply` of the test
        # before), before any correction: the right quantity, not a unit or a worker count
        # off. Quiet, over 31 runs the ratio ranged 0.88-1.20; a busy machine slows the steps
        # differently from the profile it ran (30-33% off seen), so how close it comes is a
        # benchmark's figure (benchmarks/bench_live_stress.py), not a pass or fail here
        assert 0.5 < j["predicted_step_s"] / j["measured_step_s"] < 2, j
        # corrected online from the steps seen: within 5% of what the steps took
        assert abs(j["corrected_step_s"] / j["measured_step_s"] - 1) < 0.05, j
        assert j["wall_step_s"] > 0, j  # timed from the steps as heard, to the last
    table = xds("jobs", state=state)
    assert "gpt-small" in table and "gpt-wide" in table and "wall s" in table
    placed = [
        e
        for e in json.loads(xds("logs", "gpt-wide", "--json", state=state))["events"]
        if e["event"] == "placed"
    ]
    # its workers ran where it was last placed (the controller may move it once gpt-small's
    # domain frees up, where the correction finds it would finish sooner)
    assert placed and sorted(set(placed[-1]["workers"])) == sorted(wide["domains"])
    for name in ("gpt-small", "gpt-wide"):
        # a run's end is heard after its last step: within 1-2 s on a quiet machine, where Ray
        # Train's placement-group cleaner, left to find a state API by itself, held every end
        # 12 s; that figure is benchmarks/bench_checkpoint.py's, and here only a hang fails
        events = json.loads(xds("logs", name, "--json", state=state))["events"]
        # where its start went, stage by stage, from its launch to its first step
        started = next(e for e in events if e["event"] == "started")
        stages = [k for k in started if k.endswith("_s") and k != "startup_s"]
        assert {
            "placement_s",
            "train_controller_s",
            "worker_s",
            "backend_s",
            "loop_s",
            "resumed_s",
            "first_step_s",
        } <= set(stages), started
        print(name, "start-up", {k: started[k] for k in ("startup_s", *stages)})
        last = max(e["time"] for e in events if e["event"] == "step")
        done = next(e["time"] for e in events if e["event"] == "done")
        assert done - last < 60, (name, done - last)
    # every domain's agent reports its nodes, its links' bytes and its demand forecast
    time.sleep(7)  # a report after the last job's end (every 5 s)
    domains = {d["domain"]: d for d in json.loads(xds("domains", "--json", state=state))["domains"]}
    assert set(domains) == {"east", "west", "north"}
    for d in domains.values():
        assert d["status"] == "up" and d["nodes"] == 1 and d["cpus"] == 2, d
        assert d["free_cpus"] == 2 and d["held"] == 0, d  # both jobs are done
        assert [h["horizon_min"] for h in d["forecast"]] == [10, 60], d
        # the 12 indicators, each sound: links measured, round trips to the other domains
        assert len(d["indicators"]) == 12 and not d["rejected"], d
        assert d["indicators"]["inter_domain_bandwidth"] > 0 and set(d["rtt_ms"]) == {
            "east",
            "west",
            "north",
        } - {d["domain"]}, d
    a, b = sorted(wide["domains"])
    crossed = next(r for r in domains[a]["links"] if r["dst"] == b)
    # the replicas' exchange crossed the link the fabric shapes (a DiLoCo sync: 4 B a
    # parameter each way, every few steps)
    assert crossed["sent_total_gb"] > 1e-3, domains[a]["links"]
    assert "links (Gbit/s)" in xds("domains", state=state)
    again = subprocess.run(
        [sys.executable, "-m", "xdscheduler", "submit", str(JOBS / "gpt-small.yaml")],
        capture_output=True,
        text=True,
        env={**os.environ, "XDS_CLUSTER": str(state)},
        cwd=REPO,
    )
    assert again.returncode == 2 and "exists already" in again.stderr


@needs_fabric
@pytest.mark.slow
def test_a_job_on_a_domain_slowed_under_it_moves_where_it_runs_faster(cluster, tmp_path):
    """Cut the CPU quota of the domain a job trains in to a third (as other work on its
    accelerators would): the correction learns the domain's speed from the job's steps, the
    controller finds another placement that finishes it sooner by more than moving costs,
    and the job stops after a checkpoint and resumes from it there."""
    from xdscheduler.live import quota

    state, started = cluster
    domain = running_long_job(state, tmp_path, "gpt-slowed", steps=400, until_step=15)
    group = next(p["cgroup"] for p in started["processes"] if p.get("domain") == domain)
    before = quota.cores(group)
    quota.create(group, before / 3)
    try:
        ended, events = trained_after_moving(state, "gpt-slowed")
    finally:
        quota.create(group, before)
    moving = next(e for e in events if e["event"] == "moving")
    print(
        f"slowed {domain} at step 15; moved at step {moving['at_step']} to "
        f"{moving['domains']}: {moving['from_step_s']:.3f} -> {moving['step_s']:.3f} s a "
        f"step, {moving['gain_s']:.1f} s sooner for {moving['cost_s']:.1f} s of moving"
    )
    assert domain not in ended["domains"] and domain not in moving["domains"], (ended, moving)
    assert moving["from_step_s"] > 1.5 * moving["step_s"]  # the correction saw the slowdown
    assert [e["event"] for e in events].count("placed") == 2


@needs_fabric
@pytest.mark.slow
def test_a_job_across_a_link_that_drops_is_set_moving_and_cancelled_while_moving(cluster, tmp_path):
    """Drop the link a job trains across to 2 Mbit/s both ways, as a WAN's bandwidth swings:
    the agents report the new rate, the controller re-plans with it (each DiLoCo round would
    wait seconds for the sync) and sets the job moving, to domains joined by a fast link. It
    moves at its next checkpoint (every 50 steps here): cancelled while moving, it ends within
    5 s. (The slowed-domain test follows a move to its end.)"""
    import yaml

    state, started = cluster
    rates = {(r["src"], r["dst"]): r["rate_gbps"] for r in link_rates(state)}
    spec = {
        **load_job(JOBS / "gpt-wide.yaml").model_dump(),
        "name": "gpt-swung",
        "steps": 250,
        "checkpoint_every": 50,
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    xds("submit", str(tmp_path / "job.yaml"), state=state)
    a, b = sorted(wait_for(state, "gpt-swung", lambda r: r["step"] >= 5)["domains"])
    said = xds("links", "set", a, b, "0.002", "--both", state=state)
    assert said.split("\n")[:2] == [f"{a} -> {b}: 0.002 Gbit/s", f"{b} -> {a}: 0.002 Gbit/s"]
    api, auth = started["api"], auth_of(started)
    try:
        # over HTTP, not `xds jobs`: a move lasts until the run's next step, which a poll
        # through the CLI can miss on a busy machine
        moving = wait_for_over_http(api, auth, "gpt-swung", lambda r: r["status"] == "moving")
        row, took = cancelled(api, auth, "gpt-swung")
    finally:
        for src, dst in ((a, b), (b, a)):
            xds("links", "set", src, dst, str(rates[src, dst]), state=state)
    events = json.loads(xds("logs", "gpt-swung", "--json", state=state))["events"]
    kinds = [e["event"] for e in events]
    swung = [e for e in events if e["event"] == "link_changed"]
    assert {(e["src"], e["dst"]) for e in swung} == {(a, b), (b, a)}, swung
    assert all(e["gbps"] == pytest.approx(0.002, rel=0.01) for e in swung)
    decided = next(e for e in events if e["event"] == "moving")
    print(
        f"{a} <-> {b} dropped to 2 Mbit/s; set moving at step {decided['at_step']} to "
        f"{decided['domains']}: {decided['from_step_s']:.3f} -> {decided['step_s']:.3f} s a "
        f"step; cancelled while {moving['status']} at step {moving['step']}, over in "
        f"{took:.1f} s"
    )
    assert kinds.index("link_changed") < kinds.index("moving")
    assert set(decided["domains"]) != {a, b}  # off the dropped link
    # the drop as the model reads it: a longer step than it was placed at, which the move
    # shortens. How much longer is the machine's: the step placed at is corrected by the
    # steps measured, and a slower machine (or a DiLoCo plan, syncing every H steps) leaves
    # the link a smaller share of it (2.2x seen under load, where 3x was asserted)
    placed = next(e for e in events if e["event"] == "placed")
    assert decided["from_step_s"] > placed["corrected_step_s"], (placed, decided)
    assert decided["step_s"] < decided["from_step_s"], decided
    # cancelled in the state the poll saw, or (the move done in between) once placed again:
    # either way nothing was placed after the cancel
    cancel = kinds.index("cancel")
    assert row["status"] == "cancelled" and "placed" not in kinds[cancel:], kinds
    if events[cancel]["status"] == "moving":
        assert kinds.count("placed") == 1, kinds


def link_rates(state) -> list[dict]:
    """Every link's rate as the domains' agents last reported it."""
    domains = json.loads(xds("domains", "--json", state=state))["domains"]
    return [{"src": d["domain"], **r} for d in domains for r in d.get("links", [])]


def running_long_job(state, tmp_path, name: str, steps: int, until_step: int) -> str:
    """Submit gpt-long as `name` with `steps`; once it passed `until_step`, its one domain."""
    import yaml

    spec = {**load_job(JOBS / "gpt-long.yaml").model_dump(), "name": name, "steps": steps}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    xds("submit", str(tmp_path / "job.yaml"), state=state)
    (domain,) = wait_for(state, name, lambda r: r["step"] >= until_step)["domains"]
    return domain


def trained_after_moving(state, job: str) -> tuple[dict, list[dict]]:
    """Once `job` was moved and trained a checkpoint's worth of steps (10) where it went, it is
    cancelled: the rest of its steps would show nothing more, and take the longest part of a
    test. Its last row and its events, after checking that each run it was moved into went on
    from the checkpoint its last run stopped at."""
    resumed = wait_for(state, job, lambda r: r["attempts"] >= 2 and r["status"] == "running")
    wait_for(
        state,
        job,
        lambda r: (
            r["step"] >= resumed["step"] + 10 or r["status"] in ("done", "failed", "cancelled")
        ),
    )
    xds("cancel", job, state=state)
    ended = wait_for(state, job, lambda r: r["status"] in ("done", "failed", "cancelled"))
    events = json.loads(xds("logs", job, "--json", state=state))["events"]
    assert ended["status"] == "cancelled" and ended["attempts"] >= 2, ended
    # a run stops at its first ask after a checkpoint (every 10 steps): the next goes on from it
    resumed_at = [(e["step"] // 10 * 10, i) for i, e in enumerate(events) if e["event"] == "moved"]
    for checkpoint, i in resumed_at:
        heard = [e["step"] for e in events[i:] if e["event"] == "step"]
        assert min(heard[:3]) == checkpoint + 1, (events[i], heard[:3])  # reports may cross
    assert resumed_at and ended["step"] >= resumed_at[0][0] + 10, (ended, resumed_at)
    return ended, events


def auth_of(started: dict) -> dict[str, str]:
    return {"Authorization": f"Bearer {started['api_token']}"}


def cancelled(api: str, auth: dict, job: str) -> tuple[dict, float]:
    """Cancel `job` over HTTP and follow it to its end: its last row, and how long that took
    (printed: the 5 s the docs promise is a speed, measured by benchmarks/bench_live_stress.py
    on a loaded machine; here a minute only tells a hang)."""
    import requests

    start = time.monotonic()
    assert requests.delete(f"{api}/jobs/{job}", headers=auth, timeout=30).status_code == 200
    while (row := requests.get(f"{api}/jobs/{job}", headers=auth, timeout=30).json())[
        "status"
    ] not in ("done", "failed", "cancelled"):
        assert time.monotonic() - start < 60, row
        time.sleep(0.2)
    return row, time.monotonic() - start


PG_TABLE = """
import json, sys
from pathlib import Path
from xdscheduler.live import cluster
cluster.connect(Path(sys.argv[1]))
import ray
table = {v["name"]: v["state"] for v in ray.util.placement_group_table().values()}
cluster.disconnect()
print(json.dumps(table))
"""


def placement_groups(state) -> dict[str, str]:
    """Every placement group the cluster's GCS knows, by name, with its state."""
    done = subprocess.run(
        [sys.executable, "-c", PG_TABLE, str(state)],
        cwd=REPO,
        env={**os.environ, "XDS_CLUSTER": str(state)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def held_by_nobody(state, jobs: dict[str, dict]) -> dict[str, str]:
    """The placement groups still reserved that no running job's current run owns."""
    running = {
        f"xds-run-{j['job']}-{j['attempts']}"
        for j in jobs.values()
        if j["status"] not in ("queued", "done", "failed", "cancelled")
    }
    return {n: s for n, s in placement_groups(state).items() if s != "REMOVED" and n not in running}


def wait_for_over_http(
    api: str, auth: dict, job: str, until, timeout_s: float = 400, every_s: float = 0.1
) -> dict:
    """`job`'s row from the jobs API, polled until `until(row)`."""
    import requests

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if until(row := requests.get(f"{api}/jobs/{job}", headers=auth, timeout=30).json()):
            return row
        time.sleep(every_s)
    raise AssertionError(f"{job} never got there: {row}")


def wait_for(state, job: str, until, timeout_s: float = 400) -> dict:
    """`wait_for_over_http` on the cluster of the state file, every second: the rows `xds jobs
    --json` prints, without a Python process started for each look (on 2 cores, hundreds of
    them over the live tests took CPU from the jobs they waited for)."""
    started = json.loads(Path(state).read_text())
    return wait_for_over_http(started["api"], auth_of(started), job, until, timeout_s, 1.0)


@pytest.fixture(scope="module")
def wide_low(cluster, tmp_path_factory):
    """A low-priority job on all six accelerators (two a domain): the dashboard shows it, a
    priority job preempts it."""
    import yaml

    state, _ = cluster
    spec = {
        **load_job(JOBS / "gpt-wide.yaml").model_dump(),
        "name": "wide-low",
        "steps": 3000,
        "workers": {"min": 6, "max": 6},
        "priority": 1,
        "global_batch": 48,
    }  # divides over 6 workers and their micro-batches
    path = tmp_path_factory.mktemp("wide") / "wide-low.yaml"
    path.write_text(yaml.safe_dump(spec))
    xds("submit", str(path), state=state)
    return "wide-low"


@needs_fabric
@pytest.mark.slow
def test_the_live_dashboard_in_headless_chromium_shows_the_live_jobs(cluster, wide_low):
    """The controller publishes to the board the studies use: the API's `/` shows the live
    domains and the jobs running on them."""
    from tests.test_monitor import Dom, chromium

    browser = chromium()
    state, started = cluster
    wait_for(state, wide_low, lambda r: r["status"] == "running")
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=6000",
            "--dump-dom",
            f"{started['api']}/?policy=live&token={started['api_token']}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom()
    dom.feed(done.stdout)
    body = next(a for t, a in dom.elements if t == "body")
    assert body["data-policy"] == "live" and int(body["data-updates"]) >= 2
    assert {a["data-domain"] for t, a in dom.elements if t == "g" and "data-domain" in a} == {
        "east",
        "west",
        "north",
    }
    running = {
        a["data-job"] for t, a in dom.elements if t == "tr" and a.get("data-state") == "running"
    }
    assert wide_low in running, running
    assert "the live cluster, up" in done.stdout


@needs_fabric
@pytest.mark.slow
def test_a_priority_job_preempts_a_running_one_which_resumes_from_its_checkpoint(
    cluster, wide_low, tmp_path
):
    """wide-low holds every accelerator; a job of priority 5 arrives: wide-low saves a
    checkpoint at its next question and queues again, the urgent job trains and finishes, and
    wide-low goes on from the step it saved (then it is cancelled while running: within 5 s)."""
    import yaml

    state, started = cluster
    wait_for(state, wide_low, lambda r: r["status"] == "running" and r["step"] >= 3)
    spec = {
        **load_job(JOBS / "gpt-long.yaml").model_dump(),
        "name": "urgent",
        "steps": 20,
        "priority": 5,
    }
    (tmp_path / "urgent.yaml").write_text(yaml.safe_dump(spec))
    xds("submit", str(tmp_path / "urgent.yaml"), state=state)
    assert (
        wait_for(state, "urgent", lambda r: r["status"] in ("done", "failed"))["status"] == "done"
    )
    resumed = wait_for(state, wide_low, lambda r: r["attempts"] >= 2 and r["status"] == "running")
    events = json.loads(xds("logs", wide_low, "--json", state=state))["events"]
    kinds = [e["event"] for e in events]
    preempting = next(e for e in events if e["event"] == "preempting")
    preempted = next(e for e in events if e["event"] == "preempted")
    assert preempting["why"].startswith("preempted for urgent (priority 5 over 1)")
    saved = preempted["checkpoint"]
    after = [e["step"] for e in events[kinds.index("preempted") :] if e["event"] == "step"]
    urgent = json.loads(xds("logs", "urgent", "--json", state=state))["events"]
    placed = next(e["time"] for e in urgent if e["event"] == "placed")
    print(
        f"wide-low preempted at step {preempting['at_step']}, saved step {saved}; urgent "
        f"placed {placed - preempted['time']:.1f} s after; wide-low went on at "
        f"{after[:1]} (attempt {resumed['attempts']})"
    )
    assert placed >= preempted["time"]  # it took what wide-low gave back
    # the first reports after the restart may cross: the earliest is the step after the save
    assert after and min(after[:3]) == saved + 1 and saved >= preempting["at_step"], (saved, after)
    row, _ = cancelled(started["api"], auth_of(started), wide_low)
    assert row["status"] == "cancelled"


@needs_fabric
@pytest.mark.slow
def test_over_http_a_job_stuck_in_its_start_is_failed_by_the_watchdog_and_cancelled(
    cluster, tmp_path
):
    """The jobs API (what every `xds` job command asks), on a job whose code hangs before its
    first step: the watchdog ends its run after its start-up timeout (its placement group
    removed) and queues it again. Cancelled while it starts again it ends within 5 s, as a
    queued job does; no placement group outlives its run. (A running job's cancel: the
    preemption test; a moving one's: the link-drop test.)"""
    import requests

    state, started = cluster
    api, auth = started["api"], auth_of(started)
    jobs = f"{api}/jobs"
    (tmp_path / "hang.py").write_text("import time\ntime.sleep(3600)\n")
    stuck = {
        "name": "stuck",
        "script": str(tmp_path / "hang.py"),
        "startup_timeout_s": 20.0,
        "workers": {"min": 2, "max": 2},
    }
    assert requests.get(jobs, timeout=30).status_code == 401  # no token
    made = requests.post(jobs, json=stuck, headers=auth, timeout=30)
    assert made.status_code == 201 and made.json()["job"] == "stuck", made.text
    assert requests.post(jobs, json=stuck, headers=auth, timeout=30).status_code == 409
    for bad, field in (
        ({"global_batch": 0}, "global_batch"),
        ({"tenant": "lab"}, "tenant"),
        # no plan trains 16 samples on 6 workers, even on the idle cluster
        ({"workers": {"min": 6, "max": 6}, "global_batch": 16}, "workers"),
    ):
        refused = requests.post(jobs, json={"name": "refused", **bad}, headers=auth, timeout=30)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", field], refused.text
    row = wait_for(
        state, "stuck", lambda r: r["attempts"] >= 2 and r["status"] == "starting", timeout_s=120
    )
    big = {"name": "too-big", "workers": {"min": 6, "max": 6}, "global_batch": 48}
    assert requests.post(jobs, json=big, headers=auth, timeout=30).status_code == 201
    assert wait_for(state, "too-big", lambda r: True)["status"] == "queued"  # stuck holds 2
    big, took_queued = cancelled(api, auth, "too-big")
    gone, took_starting = cancelled(api, auth, "stuck")
    events = requests.get(f"{jobs}/stuck/events", headers=auth, timeout=30).json()["events"]
    watchdog = next(e for e in events if e["event"] == "watchdog")
    print(
        f"watchdog after {watchdog['after_s']:.1f} s ({watchdog['stage']}); cancelled "
        f"queued in {took_queued:.2f} s, starting in {took_starting:.2f} s"
    )
    assert [e["event"] for e in events][:2] == ["submitted", "placed"]
    assert watchdog["stage"] == "starting" and watchdog["after_s"] >= 20.0
    assert watchdog["placement_group"] == "xds-run-stuck-1"
    assert big["status"] == gone["status"] == "cancelled" and big["attempts"] == 0
    assert requests.get(f"{jobs}/nobody", headers=auth, timeout=30).status_code == 404
    assert requests.delete(f"{jobs}/nobody", headers=auth, timeout=30).status_code == 404
    domains = requests.get(f"{api}/live/domains", headers=auth, timeout=30).json()
    assert {d["domain"]: d["status"] for d in domains["domains"]} == dict.fromkeys(
        ("east", "west", "north"), "up"
    )
    listed = {j["job"]: j for j in requests.get(jobs, headers=auth, timeout=30).json()["jobs"]}
    groups = placement_groups(state)
    assert (
        groups.get("xds-run-stuck-1") == groups.get(f"xds-run-stuck-{row['attempts']}") == "REMOVED"
    ), groups
    assert held_by_nobody(state, listed) == {}


BURN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"


@needs_fabric
@pytest.mark.slow
def test_under_load_only_a_killed_raylets_domain_is_found_down_and_the_hf_job_resumes(
    cluster, tmp_path
):
    """The transformers GPT-2 example trains across two domains; four busy processes load the
    machine's two cores (as `stress-ng --cpu 4`). The agent of one of its domains is killed:
    the domain is suspected, its raylet still answers, so it is not found down and the job
    trains on. Then the raylet of one of its domains is killed (a node lost): found down (in a
    second or two; the test bounds only a hang); the job goes on from its last checkpoint on
    the domains left (the load off by then), every checkpointed step trained once, and
    finishes. No other domain is ever found down, and no placement group outlives its run."""
    import yaml

    pytest.importorskip("transformers", reason="the hf extra is not installed")
    state, started = cluster
    spec = {**load_job(JOBS / "hf-gpt2.yaml").model_dump(), "steps": 150}
    (tmp_path / "hf.yaml").write_text(yaml.safe_dump(spec))
    xds("submit", str(tmp_path / "hf.yaml"), state=state)
    row = wait_for(state, "hf-gpt2", lambda r: r["step"] >= 12, timeout_s=600)
    first, second = sorted(row["domains"])
    burners = [subprocess.Popen([sys.executable, "-c", BURN.format(seconds=120)]) for _ in range(4)]
    try:
        node_processes(started, first, "DomainAgent")[0].kill()
        at = row["step"]
        row = wait_for(state, "hf-gpt2", lambda r: r["step"] >= at + 8)
        assert row["attempts"] == 1, row  # a suspicion the raylet refuted: it trained on
        (raylet,) = node_processes(started, second, "raylet")
        raylet.kill()
        killed_at = time.time()
        wait_for(state, "hf-gpt2", lambda r: r["attempts"] >= 2, timeout_s=60)
    finally:
        for b in burners:
            b.kill()
    done = wait_for(state, "hf-gpt2", lambda r: r["status"] in ("done", "failed"), timeout_s=600)
    events = json.loads(xds("logs", "hf-gpt2", "--json", state=state))["events"]
    cluster_events = live_events(started)
    down = [e for e in cluster_events if e["event"] == "domain_down"]
    suspected = [
        (e["domain"], e["why"][:60]) for e in cluster_events if e["event"] == "domain_suspect"
    ]
    requeued = [e for e in events if e["event"] == "requeued"]
    print(
        f"hf-gpt2 on {first}+{second}; {first}'s agent killed, then {second}'s raylet: "
        f"suspected {suspected}; found down {[(e['domain'], e['evidence']) for e in down]}, "
        f"{down[-1]['time'] - killed_at:.2f} s after the kill; finished on {done['domains']}"
    )
    assert done["status"] == "done" and done["step"] == done["steps"], done
    assert [e["domain"] for e in down] == [second], down  # no false "down"
    # a hang guard, not a speed bound: bench_live_stress times it against 3 s
    assert down[0]["time"] - killed_at < 30.0
    assert first in [d for d, _ in suspected]  # its dead agent: suspected, refuted
    assert [e["domain"] for e in requeued] == [second] and done["attempts"] == 2, requeued
    assert second not in done["domains"] and done["loss"] < done["first_loss"] - 1.0, done
    assert_resumed(events, done["steps"])
    jobs = {j["job"]: j for j in json.loads(xds("jobs", "--json", state=state))["jobs"]}
    assert held_by_nobody(state, jobs) == {}


def live_events(started: dict) -> list[dict]:
    """The cluster's own journal events (domains suspected, found down, back; links)."""
    import requests

    answer = requests.get(f"{started['api']}/live/events", headers=auth_of(started), timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["events"]


def job_domain(row: dict) -> str:
    (domain,) = row["domains"]
    return domain


def node_processes(started: dict, domain: str, name: str) -> list:
    """The processes under `domain`'s Ray node whose command line names `name`."""
    import psutil

    node = next(p["pid"] for p in started["processes"] if p.get("domain") == domain)
    return [
        c for c in psutil.Process(node).children(recursive=True) if name in " ".join(c.cmdline())
    ]


def assert_resumed(events: list[dict], steps: int) -> None:
    """After each requeue, the steps heard go on from the job's last whole checkpoint (every
    10 steps) to where it was next found down, or to the end, each once: none of a run given
    up for lost counts. In any order: the controller takes reports on many threads, and on a
    loaded machine two may cross (step 75 heard before 74).

    A step is heard before its checkpoint is saved, so a run lost at step 30 may have lost
    checkpoint 30 with it: it resumes from 20 then, never from anything older."""
    marks = [i for i, e in enumerate(events) if e["event"] == "requeued"]
    assert marks
    for k, i in enumerate(marks):
        end = marks[k + 1] if k + 1 < len(marks) else len(events)
        last = events[end]["from_step"] if end < len(events) else steps
        lost_at = events[i]["from_step"]
        whole = {lost_at // 10 * 10}
        if lost_at % 10 == 0 and lost_at > 0:  # its own checkpoint may have been cut short
            whole.add(lost_at - 10)
        heard = sorted(e["step"] for e in events[i:end] if e["event"] == "step")
        resumed = heard[0] - 1 if heard else last
        assert resumed in whole, (events[i], heard[:3])
        assert heard == list(range(resumed + 1, last + 1)), (events[i], heard[:3])


@needs_fabric
@pytest.mark.slow
def test_down_stops_exactly_what_up_started(cluster):
    """The module's cluster, after every test that uses it: `xds down` leaves nothing."""
    import psutil

    state, started = cluster
    # the processes still there: the lost-node test killed a node's raylet, and it is gone
    alive = [psutil.Process(p["pid"]) for p in started["processes"] if psutil.pid_exists(p["pid"])]
    assert len(alive) >= 3, started["processes"]  # the head and two domains at least
    tree = {c.pid for p in alive for c in p.children(recursive=True)} | {p.pid for p in alive}
    out = xds("down", state=state)
    assert "removed 3 namespaces" in out and not state.exists()
    assert not os.path.exists(started["temp_dir"])  # the nodes' logs, Ray's sockets
    assert not [
        p
        for p in tree
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"xds{started['tag']}-" not in namespaces


def stop_started(pids: Path | str, own_tmp: str) -> None:
    """Stop the Ray processes of `existing_cluster` listed in `pids` (the head first in it,
    stopped last) and remove their temp folder."""
    from xdscheduler.live.cluster import stop_processes

    started = [int(pid) for pid in Path(pids).read_text().split()]
    stop_processes(started[1:])  # the nodes, then the head
    stop_processes(started[:1])
    shutil.rmtree(own_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def existing_cluster(tmp_path_factory):
    """A multi-node Ray cluster that `xds up` did not start: a head and one node per domain,
    labelled by hand with `ray start --labels` (as KubeRay would), in namespaces of their own."""
    import secrets

    from xdscheduler.network.dynamics import base_matrices
    from xdscheduler.scenario import load_scenario

    scn = load_scenario(LOCAL)
    net = fabric.Fabric.plan(
        [d.name for d in scn.domains], base_matrices(scn)[0], secrets.token_hex(2), "10.251.9"
    )
    fabric.build(net)
    token, port, dash = secrets.token_hex(32), free_port(), free_port()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
    }
    env.pop("RAY_ADDRESS", None)
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    logs = tmp_path_factory.mktemp("existing")
    # its own temp folder, as `xds up` gives its clusters: with Ray's default, `ray start`
    # would point the shared ray_current_cluster at this cluster and leave it there
    # (short: Ray's socket paths live under it)
    own_tmp = tempfile.mkdtemp(prefix="xds-ray-")
    env["RAY_TMPDIR"] = own_tmp  # over the test run's own (conftest)
    started = []
    pids = logs / "pids"  # what a reaper stops, should this test session be killed
    pids.touch()

    def start(args, ns=None, extra=None):
        """`ray start` a node, and wait until it says it runs: `ray start` gives up on a GCS
        that answers slowly, as it does on a busy machine, so one that exits is started
        again (twice at most) rather than left missing from the cluster."""
        cmd = [ray, "start", "--block", "--object-store-memory", str(128 * 2**20), *args]
        log = logs / f"{ns or 'head'}.log"
        for _ in range(3):
            before = log.read_text().count("Ray runtime started") if log.exists() else 0
            with log.open("a") as out:
                node = subprocess.Popen(
                    ["ip", "netns", "exec", ns, *cmd] if ns else cmd,
                    env={**env, **(extra or {})},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            started.append(node.pid)
            pids.write_text(" ".join(map(str, started)))
            deadline = time.monotonic() + 300
            while node.poll() is None and time.monotonic() < deadline:
                if log.read_text().count("Ray runtime started") > before:
                    return
                time.sleep(1)
            node.kill()
        raise AssertionError(f"`ray start` of {ns or 'the head'} never ran: {log.read_text()}")

    head = f"{net.head_ip}:{port}"
    stop = (
        "import sys; from tests.test_live import fabric, stop_started; "
        "stop_started(*sys.argv[1:3]); fabric.sweep_stale(0.0, only={sys.argv[3]})"
    )
    with reaped([sys.executable, "-c", stop, pids, own_tmp, net.tag], cwd=str(REPO)):
        try:
            start(
                [
                    "--head",
                    "--port",
                    str(port),
                    "--node-ip-address",
                    net.head_ip,
                    "--dashboard-host",
                    net.head_ip,
                    "--dashboard-port",
                    str(dash),
                    "--dashboard-agent-listen-port",
                    str(free_port()),
                    "--num-cpus",
                    "1",
                    "--labels",
                    "xds.role=head",
                    "--temp-dir",
                    own_tmp,
                ]
            )
            for i, d in enumerate(net.domains):
                start(
                    [
                        "--address",
                        head,
                        "--node-ip-address",
                        net.ip(i),
                        "--num-cpus",
                        "2",
                        "--labels",
                        f"xds.domain={d}",
                    ],
                    net.namespace(i),
                    {"GLOO_SOCKET_IFNAME": "eth0"},
                )  # one at a time: nodes joining at once race for socket names
            yield head, f"http://{net.head_ip}:{dash}", env, started, logs
        finally:
            stop_started(pids, own_tmp)
            fabric.teardown(net)


@needs_fabric
@pytest.mark.slow
def test_the_same_commands_run_on_a_cluster_given_by_address(existing_cluster, tmp_path):
    address, dashboard, env, started, logs = existing_cluster
    state = tmp_path / "attached.json"
    base = {**env, "XDS_CLUSTER": str(state)}

    def run(*args, timeout=300):
        done = subprocess.run(
            [sys.executable, "-m", "xdscheduler", *args],
            cwd=REPO,
            env=base,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    http = ["--http-port", str(free_port(address.split(":")[0]))]  # never 8000 in a test
    # the trained agents decide here, each step asked of the policy app over HTTP; `up`
    # waits for the nodes as long as a loaded machine may need (it returns once they are in)
    up = ["up", str(LOCAL), "--address", address, *http, "--policy", "ppo", "--wait", "900"]
    try:
        run(*up, timeout=1200)
    except AssertionError as e:  # what each node said of itself, for a failure in CI
        tails = {f.name: f.read_text()[-1500:] for f in sorted(logs.glob("*.log"))}
        raise AssertionError(f"{e}\nnode logs: {json.dumps(tails, indent=1)}") from None
    assert json.loads(state.read_text())["attached"] is True
    run("submit", str(JOBS / "gpt-small.yaml"))
    deadline = time.monotonic() + 300
    while (row := json.loads(run("jobs", "--json").stdout)["jobs"][0])["status"] != "done":
        assert time.monotonic() < deadline and row["status"] != "failed", row
        time.sleep(2)
    assert row["loss"] < row["first_loss"] - 1.0 and len(row["domains"]) == 1
    placed = next(
        e
        for e in json.loads(run("logs", "gpt-small", "--json").stdout)["events"]
        if e["event"] == "placed"
    )
    assert placed["policy"] == "ppo" and placed["reason"].startswith("gpt-small: inside")
    # a `ray job submit` job runs the same commands against the cluster it runs in
    job_env = {k: v for k, v in base.items() if k != "XDS_CLUSTER"}
    submitted = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ray"),
            "job",
            "submit",
            "--address",
            dashboard,
            "--",
            sys.executable,
            "-m",
            "xdscheduler",
            "jobs",
            "--json",
        ],
        env=job_env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    assert '"job": "gpt-small"' in submitted.stdout and '"status": "done"' in submitted.stdout
    out = run("down").stdout
    assert "the cluster runs on" in out and not state.exists()
    # down stopped nothing of the cluster: its head and every node run on
    import psutil

    time.sleep(2)
    assert all(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in started)


def test_a_profile_becomes_a_catalog_entry_of_measured_figures():
    from xdscheduler.catalog import CatalogFile
    from xdscheduler.live.profile import entry
    from xdscheduler.scenario import load_scenario

    scn = load_scenario(LOCAL)
    measured = {
        "domain": "west",
        "accelerators": 2,
        "memory_gbs": 7.5,
        "gemm_tflops": {"fp32_256": 0.031, "fp32_1024": 0.036, "bf16_512": 0.15},
        "reduce_busbw_gbs": {"1": 0.1, "2": 0.2, "4": 0.3},
    }
    e = entry(measured, scn, "CPU-core-west")
    assert (e.fp32_tflops, e.bf16_tflops, e.memory_gbs) == (0.036, 0.15, 7.5)
    assert e.scaleup_gbs == 0.2  # the median bus bandwidth of the domain's reductions
    assert e.gpus_per_node == 2 and "domain west" in e.source and "fp32_1024 0.036" in e.source
    assert "4 MB 0.300" in e.source
    alone = entry({**measured, "reduce_busbw_gbs": {}}, scn, "CPU-core-west")
    assert alone.scaleup_gbs == scn.domains[1].accelerator.scaleup_gbs  # nothing to measure
    CatalogFile.model_validate({"accelerators": [e.model_dump()]})  # a valid catalog file


def test_micro_batches_add_up_to_the_whole_batch_gradient():
    import torch

    from xdscheduler.live.gpt import Gpt, GptShape, MarkovCorpus
    from xdscheduler.live.training import accumulate

    torch.manual_seed(0)
    # in float64, so that the two sums' rounding (1e-8 apart in float32) is far below the bound
    model = Gpt(GptShape(layers=1, hidden=32, heads=4, vocab=64, seq=16)).double()
    tokens = MarkovCorpus(64, 0).batch(6, 16, 0, 0)
    grads = []
    for micro in (0, 4):  # the whole share at once; 4 then 2 samples
        model.zero_grad()
        loss = accumulate(model, tokens, micro)
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        assert float(loss) == pytest.approx(float(model.loss(tokens)), rel=1e-12)
    assert torch.allclose(grads[0], grads[1], rtol=1e-10, atol=1e-14)


def test_reference_trainings_are_runs_calibrate_fits_the_plain_stack_to(tmp_path):
    """xds profile's reference trainings, as CSV rows, read back as plain-dp runs on the
    profiled accelerator: one rank, whole optimizer state, FP32."""
    import csv

    from xdscheduler.costmodel.calibration import load_runs
    from xdscheduler.live.profile import REFERENCES, RUN_COLUMNS, run_rows

    measured = {
        "domain": "east",
        "accelerators": 2,
        "trainings": [
            {
                "layers": layers,
                "hidden": hidden,
                "batch": batch,
                "micro_batch": micro_batch or batch,
                "step_s": 0.01 * (i + 1),
            }
            for i, (layers, hidden, batch, micro_batch) in enumerate(REFERENCES)
        ],
    }
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        out = csv.DictWriter(f, RUN_COLUMNS)
        out.writeheader()
        out.writerows(run_rows(measured, "CPU-core"))
    from xdscheduler.scenario import load_scenario

    load_scenario(LOCAL)  # its CPU-core joins the catalog
    runs, skipped = load_runs(path)
    assert not skipped and len(runs) == len(REFERENCES)
    assert {(r.stack, r.plan.zero, r.plan.dtype, r.gpus, r.gpu.name) for r in runs} == {
        ("plain-dp", 0, "fp32", 1, "CPU-core")
    }
    assert [r.value for r in runs] == [t["step_s"] for t in measured["trainings"]]
    # a pass's own cost shows apart from its samples': some in small micro-batches
    assert {r.plan.micro_batch for r in runs} > {b for _, _, b, mb in REFERENCES if not mb}


def test_the_shipped_local_profile_is_what_calibrate_computes(tmp_path):
    """scenarios/profiles: one `xds profile --out --runs` of local_three_domains on a 2-core
    machine, and the plain-dp profile `xds calibrate` fitted to it."""
    from xdscheduler.costmodel.calibration import Profile

    folder = SCENARIOS / "profiles"
    out = tmp_path / "plain-dp.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xdscheduler.cli",
            "calibrate",
            "scenarios/profiles/local-cpu-runs.csv",
            "--stack",
            "plain-dp",
            "--accelerators",
            "scenarios/profiles/local-cpu-accelerators.yaml",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    shipped, again = Profile.load(folder / "local-cpu-plain-dp.yaml"), Profile.load(out)
    assert again.constants == pytest.approx(shipped.constants, rel=1e-6)


def test_a_live_cluster_plans_with_a_plain_dp_profile_only():
    from xdscheduler.live.cluster import _checked_profile

    assert _checked_profile(str(SCENARIOS / "profiles" / "local-cpu-plain-dp.yaml")).startswith("/")
    with pytest.raises(UserError, match="live jobs train with the plain-dp stack"):
        _checked_profile("fsdp2")


@pytest.mark.skipif(
    not __import__("xdscheduler.live.quota", fromlist=["x"]).available(),
    reason="no CPU cgroups can be made here (not root, or no cpu controller)",
)
def test_a_cpu_quota_holds_a_process_that_joins_it_to_its_share():
    """A worker told its node's group (as a domain's node tells its workers) joins it and runs
    at most a quarter of a core; one not told stays out of it. (Only the bound is checked:
    how much CPU a free process gets depends on what else the machine runs.)"""
    from xdscheduler.live import quota

    name = f"xds-test-{os.getpid()}"
    procs = quota.create(name, 0.25)
    try:
        spin = (
            "from xdscheduler.live import quota\nquota.join()\nimport time\n"
            "t=time.process_time()\nw=time.time()\n"
            "while time.time()-w<1.0: pass\n"
            f"print(time.process_time()-t, {name!r} in open('/proc/self/cgroup').read())"
        )
        told = {**os.environ, quota.ENV: str(procs)}
        (cpu, joined), (_, free_joined) = (
            subprocess.run(
                [sys.executable, "-c", spin],
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
                cwd=REPO,
            ).stdout.split()
            for env in (told, os.environ)
        )
        assert (joined, free_joined) == ("True", "False")
        assert float(cpu) < 0.4  # a quarter of a core over one second of wall time
    finally:
        quota.remove(name)
