"""The live controller's parts, without a cluster: telling slow from dead (phi-accrual and the
second path over real sockets), the tenants' preemption, a job's shown state, the HTTP client the
commands use, the board's live state rendered by the dashboard, and the bring-your-own training
API on a process group of one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import REPO, SCENARIOS
from xdscheduler.errors import UserError
from xdscheduler.live.health import DomainHealth, second_path
from xdscheduler.live.jobs import LiveJob
from xdscheduler.live.records import JobRecord
from xdscheduler.scenario import load_scenario

LOCAL = SCENARIOS / "local_three_domains.yaml"


# ---- telling slow from dead
@pytest.fixture
def raylet():
    """A listening socket standing for a live raylet's port, and a port nobody listens on."""
    live = socket.socket()
    live.bind(("127.0.0.1", 0))
    live.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: a handshake is refused
    yield live.getsockname()[1], closed.getsockname()[1]
    live.close()
    closed.close()


def node(domain: str, port: int, alive: bool = True) -> dict:
    return {
        "Labels": {"xds.domain": domain},
        "Alive": alive,
        "NodeManagerAddress": "127.0.0.1",
        "NodeManagerPort": port,
    }


def test_the_second_path_finds_a_domain_dead_only_when_no_raylet_of_it_answers(raylet):
    up, gone = raylet
    dead, why = second_path("east", [node("east", up), node("west", gone)])
    assert not dead and "takes a handshake" in why
    dead, why = second_path("west", [node("east", up), node("west", gone)])
    assert dead and "no raylet of west" in why
    dead, why = second_path("east", [node("east", up, alive=False)])
    assert dead and "no alive node" in why
    # one node of a domain answering is enough: the domain is not dead
    assert not second_path("east", [node("east", gone), node("east", up)])[0]


def judge_until(health: DomainHealth, start: float, seconds: float, heard=()) -> list[str]:
    """Run the detector's rounds (0.2 s apart) for `seconds`, the domains in `heard` answering
    every round; every domain found down."""
    lost, now = [], start
    while now < start + seconds:
        for n in heard:
            health.heard(n, now)
        lost += health.judge(now)
        time.sleep(0.02)  # the second path runs on threads of its own
        now += 0.2
    return lost


def test_a_silent_domain_whose_raylet_answers_is_suspected_not_found_down(raylet):
    """The issue's false "down": a healthy domain silent for 3.2 s on a busy machine. Its
    silence makes it suspect (phi), the second path finds its raylet alive, and the domain
    keeps its jobs; once it answers again the suspicion is cleared."""
    up, _ = raylet
    health = DomainHealth(["east", "west"], 0.2, lambda: [node("east", up), node("west", up)])
    now = time.time()
    judge_until(health, now - 10, 10, heard=("east", "west"))
    assert not health.take() and not health.suspects
    lost = judge_until(health, now, 4, heard=("west",))  # east silent for 4 s
    kinds = [(k, r["domain"]) for k, r in health.take()]
    assert lost == [] and not health.down
    assert kinds == [("domain_suspect", "east")]
    assert health.suspects["east"].evidence and "handshake" in health.suspects["east"].evidence
    health.heard("east", now + 4.2)
    assert [k for k, _ in health.take()] == ["domain_cleared"]


def test_a_domain_whose_raylet_is_gone_is_found_down_within_a_second(raylet):
    up, gone = raylet
    health = DomainHealth(["east", "west"], 0.2, lambda: [node("east", gone), node("west", up)])
    now = time.time()
    judge_until(health, now - 10, 10, heard=("east", "west"))
    health.failed("east", "its agent answered RuntimeError: the node's raylet is gone", now)
    lost = judge_until(health, now, 1.0, heard=("west",))
    assert lost == ["east"] and set(health.down) == {"east"}
    events = health.take()
    assert [k for k, _ in events] == ["domain_suspect", "domain_down"]
    assert "no raylet of east" in events[1][1]["evidence"]
    health.heard("east", now + 2)  # its fresh agent on a node come back
    assert [k for k, _ in health.take()] == ["domain_up"] and not health.down


def test_phi_grants_a_jittery_domain_a_longer_silence():
    """Answers that came 0.2-1.4 s apart make a 1.5 s silence ordinary; regular 0.2 s
    answers make it suspect."""
    import numpy as np

    health = DomainHealth(["steady", "jittery"], 0.2, lambda: [])
    rng = np.random.default_rng(0)
    t_steady = t_jittery = 0.0
    for _ in range(60):
        t_steady += 0.2
        t_jittery += float(rng.uniform(0.2, 1.4))
        health.phi.heartbeat("steady", t_steady)
        health.phi.heartbeat("jittery", t_jittery)
    phi = health.phi.phi(np.array([t_steady + 1.5, t_jittery + 1.5]))
    assert phi[0] >= health.phi.threshold > phi[1]


# ---- a job's life as `xds jobs` shows it
def test_a_running_jobs_shown_state_says_where_it_is_in_its_life():
    rec = JobRecord(LiveJob(name="j"), time.time())
    assert rec.row()["status"] == "queued"
    rec.status = "running"
    assert rec.row()["status"] == "starting"
    rec.hear({"step": 1, "loss": 6.0, "step_time_s": 0.1})
    assert rec.row()["status"] == "running"
    rec.moving = {"domains": {"east": 2}}
    assert rec.shown == "moving"
    rec.preempting = {"why": "x"}
    assert rec.shown == "preempting"
    rec.cancel = True
    assert rec.shown == "cancelling"
    rec.status = "cancelled"
    assert rec.row()["status"] == "cancelled"


def test_a_first_step_heard_after_the_second_still_gives_the_first_loss():
    """The controller runs a run's reports on many threads: two may run out of order."""
    rec = JobRecord(LiveJob(name="j"), time.time())
    rec.status = "running"
    rec.hear({"step": 2, "loss": 5.5, "step_time_s": 0.1})
    rec.hear({"step": 1, "loss": 6.0, "step_time_s": 0.1})
    assert (rec.step, rec.loss) == (2, 5.5)  # the earlier step heard later moves nothing back
    rec.hear({"step": 3, "loss": 5.0, "step_time_s": 0.1})
    assert rec.first_loss == 6.0 and rec.row()["first_loss"] == 6.0
    rec.stepped_at = None  # a new run, as a launch leaves it: it resumed from an earlier step
    rec.hear({"step": 2, "loss": 5.4, "step_time_s": 0.1})
    assert (rec.step, rec.loss, rec.first_loss) == (2, 5.4, 6.0)


def test_a_runs_wall_step_counts_what_it_does_between_steps(monkeypatch):
    """Steps timed at 0.1 s, heard every 0.15 s (its batches, reports and checkpoints between
    them): finishing it takes 0.15 s a step, whatever order its reports arrive in."""
    from xdscheduler.live import records

    rec = JobRecord(LiveJob(name="j"), 0.0)
    rec.status = "running"
    clock = iter([0.15 * k for k in range(1, 41)])
    monkeypatch.setattr(records.time, "time", lambda: next(clock))
    for step in [*range(1, 20), 21, 20, *range(22, 41)]:  # two reports crossed
        rec.hear({"step": step, "loss": 5.0, "step_time_s": 0.1})
    assert rec.wall_step_s() == pytest.approx(0.15, rel=0.05)
    assert rec.measured() == pytest.approx(0.1)
    assert rec.row()["wall_step_s"] == rec.wall_step_s()  # what `xds jobs` shows
    rec.measure_afresh()
    assert rec.wall_step_s() is None and rec.row()["wall_step_s"] is None


def test_a_job_cancelled_while_running_ends_when_a_new_controller_replays_the_journal(tmp_path):
    """Its run stops at its next question, but the controller is lost first: the run dies with
    it, and the controller started after must end the job, not queue it for ever."""
    from xdscheduler.live.jobbook import JobBook

    book = JobBook(tmp_path / "journal.sqlite")
    book.submit({"name": "j"})
    book._event("j", "placed", {"attempt": 1, "domains": {"east": 2}})
    rec = book.jobs["j"]
    rec.status = "running"
    rec.hear({"step": 3, "loss": 6.0, "step_time_s": 0.1})
    assert book.cancel_job("j")["status"] == "cancelling"
    again = JobBook(tmp_path / "journal.sqlite")
    again.replay()
    assert again.job("j")["status"] == "cancelled"
    assert again.events("j")[-1]["event"] == "cancelled"
    again.replay()  # and the one after that finds it ended
    assert again.job("j")["status"] == "cancelled"


# ---- tenants and preemption
def running_jobs(n: int, priority: int):
    """`n` two-worker jobs placed by the live planner on the three local domains."""
    from xdscheduler.live.planning import LIVE_OPTIONS
    from xdscheduler.planner.policies import PlannerPolicy
    from xdscheduler.planner.view import ClusterView

    scn = load_scenario(LOCAL)
    recs = [
        JobRecord(LiveJob(name=f"low{i}", workers={"min": 2, "max": 2}), 0.0, priority=priority)
        for i in range(n)
    ]
    placed = PlannerPolicy(scn.weights, "planner", LIVE_OPTIONS).decide(
        [r.job.spec(0.0) for r in recs], ClusterView.from_scenario(scn), 0.0
    )
    for i, (r, p) in enumerate(zip(recs, placed, strict=True)):
        r.status, r.chosen = "running", p
        r.placement = {"domains": dict(zip(p.names, p.gpus, strict=True))}
        r.step, r.checkpointed, r.step_times = 25 + 10 * i, 20, [0.1] * 20
    return scn, recs


def test_a_priority_job_preempts_the_running_job_that_loses_least_once():
    from xdscheduler.live.tenancy import LiveTenancy, as_run

    scn, low = running_jobs(3, priority=1)
    tenancy = LiveTenancy(scn)  # no tenancy: one tenant, priorities still preempt
    names = [d.name for d in scn.domains]
    urgent = JobRecord(
        LiveJob(name="urgent", workers={"min": 2, "max": 2}, priority=5),
        0.0,
        priority=tenancy.priority("default", 5),
    )
    active = [as_run(r, 0.0, names) for r in low]
    chosen = tenancy.victims([as_run(urgent, 0.0, names)], active, [0, 0, 0], 10.0)
    # low0 is 5 steps past its checkpoint, low1 and low2 15 and 25: low0 loses least
    assert list(chosen) == ["low0"], chosen
    assert chosen["low0"].startswith("preempted for urgent (priority 5 over 1)")
    assert "saves a checkpoint" in chosen["low0"]
    # a queued job makes room once: asked again, nobody else goes
    assert tenancy.victims([as_run(urgent, 0.0, names)], active, [0, 0, 0], 11.0) == {}
    # an equal priority preempts nobody
    same = JobRecord(LiveJob(name="same", workers={"min": 2, "max": 2}), 0.0, priority=1)
    assert tenancy.victims([as_run(same, 0.0, names)], active, [0, 0, 0], 12.0) == {}


def test_a_job_of_an_unknown_tenant_is_refused_naming_the_tenants():
    from xdscheduler.live.tenancy import LiveTenancy

    with pytest.raises(ValueError, match="tenant 'lab' is not one of the scenario's: default"):
        LiveTenancy(load_scenario(LOCAL)).check("lab")
    tenants = LiveTenancy(load_scenario(SCENARIOS / "three_tenants.yaml"))
    tenants.check(tenants.names[0])
    floor = tenants.state.quotas.tenant(tenants.names[-1]).priority
    if floor is not None:
        assert tenants.priority(tenants.names[-1], 0) == floor


# ---- the HTTP client of `xds jobs`, `logs`, `cancel`, `domains`, `submit`
class FakeApi(BaseHTTPRequestHandler):
    """Answers as the jobs API does, for the client's error paths."""

    def _answer(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer right":
            return self._answer(401, {"detail": "no token"})
        if self.path == "/jobs":
            return self._answer(200, {"jobs": [{"job": "a"}]})
        return self._answer(404, {"detail": "no job named 'x'"})

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self._answer(
            422,
            {
                "detail": [
                    {
                        "type": "value_error",
                        "loc": ["body", "steps"],
                        "msg": "Input should be greater than 0",
                    }
                ]
            },
        )

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_client_says_what_the_api_refused_in_one_line(fake_api):
    from xdscheduler.live.client import LiveClient

    api = LiveClient(fake_api, "right")
    assert api.jobs() == [{"job": "a"}]
    assert api.job("x") is None and api.events("x") is None
    with pytest.raises(UserError, match=r"^job.yaml: steps: Input should be greater than 0$"):
        api.submit({"name": "x", "steps": 0}, "job.yaml")
    with pytest.raises(UserError, match="api_token is not this cluster's"):
        LiveClient(fake_api, "wrong").jobs()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    with pytest.raises(UserError, match="does not answer"):
        LiveClient(f"http://127.0.0.1:{closed.getsockname()[1]}", "right").jobs()
    closed.close()


def xds(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "xdscheduler", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_http_commands_need_neither_ray_nor_the_rest_of_the_package(tmp_path, fake_api):
    state = tmp_path / "cluster.json"
    state.write_text(json.dumps({"api": fake_api, "api_token": "right"}))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from xdscheduler.entry import main; "
            "code = main(['jobs', '--json', '--state', sys.argv[1]]); "
            "heavy = [m for m in ('ray', 'torch', 'numpy', 'pydantic', 'xdscheduler.cli') "
            "if m in sys.modules]; print(heavy, file=sys.stderr); sys.exit(code)",
            str(state),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"jobs": [{"job": "a"}]}
    assert done.stderr.strip() == "[]"
    missing = xds("jobs", "--state", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "no cluster recorded at" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = tmp_path / "job.yaml"
    bad.write_text("name: x\nsteps: 0\n")
    refused = xds("submit", str(bad), "--state", str(state))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip() == f"xds: error: {bad}: steps: Input should be greater than 0"


# ---- the live cluster on the studies' dashboard
def test_the_live_state_renders_in_the_studies_dashboard():
    import numpy as np

    from xdscheduler.live.board import LiveBoard, domains_state, job_state, links_state
    from xdscheduler.monitor import views
    from xdscheduler.monitor.metrics import StudyMetrics

    scn = load_scenario(LOCAL)
    names = [d.name for d in scn.domains]
    _, recs = running_jobs(2, priority=1)
    board = LiveBoard(0.0)
    board.decided(
        1.0, "low0", "placed", {"domains": {"east": 2}, "reason": "why here", "decision_ms": 3.0}
    )
    board.decided(2.0, "low0", "step", {"step": 1})  # not a decision
    bw = np.array([[0, 1.0, 0.5], [1.0, 0, 0.25], [0.5, 0.25, 0]])
    state = {
        "policy": "live",
        "live": True,
        "scenario": scn.name,
        "now_s": 65.0,
        "horizon_s": 0.0,
        "finished": False,
        "domains": domains_state(
            scn,
            names,
            {},
            {"east": 0, "west": 0, "north": 2},
            {"east": 2, "west": 2, "north": 0},
            {"east": "up", "west": "suspect", "north": "down"},
        ),
        "links": links_state(names, bw * 0.9, bw, {("east", "west"): 0.1}),
        "jobs": [job_state(r.row(), 0.0, 1024) for r in recs],
        "queue": [],
        "decisions": board.decisions,
        "decisions_total": board.total,
        "faults": {"outages": [{"domain": "north", "down_s": 60.0, "up_s": None}], "incidents": []},
    }
    shown = views.fragments(state)
    assert "the live cluster, up" in shown["status"]
    assert 'data-job="low0"' in shown["jobs"] and 'data-state="running"' in shown["jobs"]
    assert "why here" in shown["decisions"] and "north" in shown["faults"]
    assert all(f'data-domain="{n}"' in shown["graph"] for n in names)
    metrics = StudyMetrics({"live": state})
    metrics.observe("live", state["decisions"])
    assert (
        b'xds_domain_up{accelerator="CPU-core",domain="north",policy="live"} 0.0' in metrics.text()
    )


# ---- bring your own training code
@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """A process group of one (gloo), as Ray Train sets up for a worker."""
    import torch.distributed as dist

    where = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{where}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize(
    "entrypoint", ["xdscheduler.live.gpt:train", "xdscheduler.live.examples.hf_gpt2:train"]
)
def test_both_shipped_trainings_learn_through_the_plan_api(one_rank, entrypoint):
    """The built-in GPT and the Hugging Face GPT-2 example, each given a worker's plan (no
    controller, no storage: nothing asked, nothing checkpointed), learn the corpus."""
    import torch

    from xdscheduler.live.plan import entrypoint as code_of
    from xdscheduler.live.plan import make_plan
    from xdscheduler.live.training import TrainConfig

    if "hf_gpt2" in entrypoint:
        pytest.importorskip("transformers", reason="the hf extra is not installed")
    torch.manual_seed(0)
    cfg = TrainConfig(
        job="byo",
        steps=30,
        global_batch=8,
        entrypoint=entrypoint,
        seed=1,
        shape={"layers": 1, "hidden": 32, "heads": 2, "vocab": 32, "seq": 16},
        micro_batch=4,
        lr=1e-2,
    )
    plan = make_plan(cfg, 0, 1, 0, "local", torch.device("cpu"), {})
    code_of(cfg)(plan)
    assert len(plan.losses) == 30 and plan.domains == {"local": [0]}
    first, last = sum(plan.losses[:5]) / 5, sum(plan.losses[-5:]) / 5
    assert last < first - 0.5, (first, last)


# ---- xds down


def ray_lookalike() -> subprocess.Popen:
    """A process whose command line names Ray, once /proc shows it: a parent woken from
    vfork may read the child's command line before exec has set it (empty), more so on a
    loaded machine."""
    import psutil

    node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    deadline = time.monotonic() + 30
    while "ray" not in psutil.Process(node.pid).cmdline():
        assert time.monotonic() < deadline, "the process never showed its command line"
        time.sleep(0.01)
    return node


def test_a_process_read_a_second_later_than_recorded_is_still_ours(monkeypatch):
    """psutil's start time of one process moves by a whole second now and then (Linux's boot
    time is recomputed on every read): still the node `up` started. One started seconds apart
    under a reused pid is not."""
    import psutil

    from xdscheduler.live.state import Started

    node = ray_lookalike()
    try:
        started = Started.of(node, role="node", domain="east")
        assert started.started_at is not None
        # shifted from the recorded time, not from a fresh read: that one may itself be a
        # second off, and a shift on top of it would test two seconds
        for shift, ours in ((1.0, True), (-1.0, True), (5.0, False)):
            read = started.started_at + shift
            monkeypatch.setattr(psutil.Process, "create_time", lambda p, t=read: t)
            assert started.ours() is ours, shift
    finally:
        node.kill()


def test_down_keeps_the_state_file_when_a_process_could_not_be_stopped(tmp_path, monkeypatch):
    """What still runs stays named: `down` fails in one line and can be run again."""
    from xdscheduler.live import cluster
    from xdscheduler.live.state import ClusterState, Started, save

    node = ray_lookalike()
    try:
        path = tmp_path / "cluster.json"
        save(
            ClusterState(
                scenario=str(SCENARIOS / "local_three_domains.yaml"),
                address="127.0.0.1:1",
                processes=[Started.of(node, role="node", domain="east")],
            ),
            path,
        )

        def refused(pids):
            raise PermissionError("operation not permitted")

        monkeypatch.setattr(cluster, "stop_processes", refused)
        with pytest.raises(UserError, match=r"could not stop Ray node east .*kept"):
            cluster.down(path)
        assert path.exists() and node.poll() is None
        monkeypatch.undo()
        assert cluster.down(path) == [f"stopped Ray node east (pid {node.pid})"]
        assert not path.exists() and node.wait(timeout=10) is not None
    finally:
        node.kill()


# ---- when a running job moves
def test_a_move_pays_only_within_the_horizon_a_swing_may_last():
    """A 10% faster placement for a job with hours left: counted over the whole rest, it
    would pay for any start-up (the old rule, which moved a job at nearly every swing of its
    links); within MOVE_HORIZON_S it saves 30 s, short of twice a 26 s start-up. A domain
    slowed threefold still pays at once."""
    from xdscheduler.live.controller import MOVE_GAIN, MOVE_HORIZON_S, move_gain_s

    startup = 26.0
    small = move_gain_s(0.5, 0.45, steps_left=100_000)
    assert small == pytest.approx(MOVE_HORIZON_S / 0.5 * 0.05)
    assert small < MOVE_GAIN * startup < 100_000 * 0.05  # not worth it; the old rule moved
    assert move_gain_s(1.5, 0.5, steps_left=100_000) > MOVE_GAIN * startup  # a domain slowed 3x
    assert move_gain_s(0.5, 0.49, steps_left=100_000) == 0.0  # within the model's noise
    assert move_gain_s(1.0, 0.5, steps_left=10) == pytest.approx(5.0)  # ends sooner: its rest
