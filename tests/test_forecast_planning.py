"""The controller's use of the demand forecast: hourly consultations, backup pools sized from
it above the failure-rate floor, holds for announced jobs, and POST /forecast over HTTP."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from xdscheduler.faults.failure_model import FaultEvent
from xdscheduler.forecast.service import ForecastRequest, forecast
from xdscheduler.planner.view import ClusterView
from xdscheduler.registry import make_policy
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import parse_scenario
from xdscheduler.serving.client import ForecastClient
from xdscheduler.sim import demand as planning
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.recovery import Faults

from .conftest import small_scenario

HOURS, SEED = 4.0, 2
LATER_S = 5400.0  # an announced job arriving mid-study


def scenario():
    doc = small_scenario().model_dump()
    doc["jobs"].append({**doc["jobs"][0], "name": "later", "arrival_s": LATER_S})
    return parse_scenario(doc)


def study(url: str | None = None):
    scn = scenario()
    floor = {d.name: 8 for d in scn.domains}
    faults = Faults([FaultEvent(3600.0, "node_crash", "east/n0", 1800.0)], [2.0], floor, 1e-3)
    planner = planning.DemandPlanner(dict(floor), {j.name for j in scn.jobs}, seed=SEED)
    if url:
        planner = planning.DemandPlanner(dict(floor), planner.known, ForecastClient(url), SEED)
    inputs = StudyInputs.drawn(scn, HOURS, SEED, faults=faults, demand=planner)
    res = run_here(inputs, make_policy("planner", scn.weights))
    return res, faults, planner


@pytest.fixture(scope="module")
def planned():
    return study()


def test_the_forecast_is_consulted_every_hour_and_reported(planned):
    res, faults, _ = planned
    block = res.demand.model_dump()
    times = [e["time_s"] for e in block["timeline"]]
    assert times[0] == 0.0
    assert all(b - a >= planning.CONSULT_S for a, b in itertools.pairwise(times))
    assert block["consults"] == len(times) >= HOURS
    assert block["source"] == ["persistence"]  # hours of history: too little to fit a model
    for e in block["timeline"]:
        assert e["hi95_1h_gpus"] >= e["mean_1h_gpus"] >= 0
        assert all(e["pools_gpus"][d] >= n for d, n in faults.floor.items())
    assert res.faults.backup_pool_floor_gpus == faults.floor


def test_an_announced_job_is_held_for_and_starts_on_arrival(planned):
    res, _, planner = planned
    held = res.demand.preallocated["later"].model_dump()
    assert held["released_s"] == LATER_S
    assert LATER_S - planning.PREALLOC_LEAD_S <= held["held_from_s"] < LATER_S
    assert 0 < held["held_gpus"] <= held["wanted_gpus"] == 32
    later = next(r for r in res.jobs if r.spec.name == "later")
    if held["held_gpus"] == held["wanted_gpus"]:
        assert later.start_s == LATER_S  # no queueing behind jobs placed just before it
    assert planner.holding == {}  # every hold given back


def test_pools_grow_only_from_idle_capacity_and_stay_in_bounds():
    class Eng:
        base_view = ClusterView.from_scenario(small_scenario())

    floor = {d.name: 8 for d in Eng.base_view.domains}
    assert planning.pool_targets(Eng, floor, 0.0) == floor
    grown = planning.pool_targets(Eng, floor, 64.0)
    assert sum(grown.values()) > sum(floor.values())
    assert all(v % 8 == 0 for v in grown.values())
    huge = planning.pool_targets(Eng, floor, 1e6)
    assert all(huge[d.name] <= max(floor[d.name], d.total_gpus // 8) for d in Eng.base_view.domains)


class _ForecastHandler(BaseHTTPRequestHandler):
    calls = 0
    series: ClassVar[list[str]] = []  # the demand series of each request, in order

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).series.append(json.loads(body)["series"])
        out = forecast(ForecastRequest.model_validate_json(body), None).model_dump_json()
        type(self).calls += self.path == "/forecast"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out.encode())

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def forecast_server():
    """A stand-in Serve app answering POST /forecast with the real forecast; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ForecastHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_with_a_serve_url_the_controller_asks_over_http(planned):
    with forecast_server() as url:
        res, _, _ = study(url)
    block = res.demand.model_dump()
    assert block["source"] == ["http"] and _ForecastHandler.calls == block["consults"]
    # The endpoint runs the same forecast: the same pools and holds as in process.
    local = planned[0].demand.model_dump()
    strip = [{k: v for k, v in e.items() if k != "source"} for e in block["timeline"]]
    assert strip == [{k: v for k, v in e.items() if k != "source"} for e in local["timeline"]]
    assert json.dumps(block["preallocated"]) == json.dumps(local["preallocated"])


def test_each_policy_of_a_study_sends_a_demand_series_of_its_own():
    """The service fits one model per series: policies sharing one would be answered from
    another policy's history."""
    scn = scenario()
    floor = {d.name: 8 for d in scn.domains}
    with forecast_server() as url:
        shared = planning.DemandPlanner(
            dict(floor), {j.name for j in scn.jobs}, ForecastClient(url), SEED
        )
        sent = {}
        for name in ("planner", "greedy-cross-domain"):
            _ForecastHandler.series = []
            inputs = StudyInputs(
                scn,
                study_jobs(scn, 2.0, SEED),
                study_dynamics(scn, SEED, 2.0),
                2.0,
                faults=Faults([], [], floor, 1e-3),
                demand=shared.for_policy(name),
            )
            run_here(inputs, make_policy(name, scn.weights))
            sent[name] = set(_ForecastHandler.series)
    assert all(len(s) == 1 for s in sent.values()), sent
    assert sent["planner"] != sent["greedy-cross-domain"]
    assert shared.history == []  # each policy's run fills its own copy


def test_a_stalled_job_is_said_to_free_its_accelerators_within_the_forecasts_bounds():
    """Under --faults 1000 a running job can train at rate 0 (every node it had failed): it
    frees its accelerators never, which a forecast request must still be able to say (it
    said 1e9 s, over the request's 1e7 minutes, and `xds run --faults 1000` ended in a
    validation error)."""
    from xdscheduler.forecast.service import KnownJobIn
    from xdscheduler.sim.engine import Engine

    scn = scenario()
    eng = Engine(StudyInputs.drawn(scn, HOURS, SEED), make_policy("planner", scn.weights))
    eng.run(until_s=1800)
    stalled = eng.active[0]
    stalled.rate = 0.0
    jobs = planning.known_jobs(eng, set(), eng.now, 60)
    said = {j.name: KnownJobIn.from_known(j) for j in jobs}[stalled.spec.name]
    assert said.finish_min == planning.NEVER_S / 60 > 60
