"""A Ray started here is for this machine alone: loopback ports, and gRPC that asks for Ray's
token."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")
grpc = pytest.importorskip("grpc")

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
# Serve 2.60 binds each replica's inter-deployment gRPC server to [::]:0 (hard-coded); Ray's
# token interceptor guards it.
SERVE_REPLICA = "ray::ServeReplica"


def listening_sockets(root_pid: int) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every socket a process and everything it started
    listen on."""
    root = psutil.Process(root_pid)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            found += [
                (proc.name(), c.laddr.ip, c.laddr.port)
                for c in proc.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            ]
        except psutil.NoSuchProcess:  # a worker that ended meanwhile
            continue
    return found


def beyond_loopback(root_pid: int) -> list[tuple[str, str, int]]:
    return [s for s in listening_sockets(root_pid) if s[1] not in LOOPBACK]


def ray_token() -> str:
    from ray._raylet import AuthenticationTokenLoader

    return AuthenticationTokenLoader.instance().get_raw_token()


def needs_token_auth():
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        pytest.skip("RAY_AUTH_MODE is set to something other than token by the user")


def refusals(address: str, method: str, request: bytes) -> list[grpc.StatusCode]:
    """The status codes of one call without a token and one with a wrong token."""
    codes = []
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
        for metadata in ([], [("authorization", "Bearer " + "0" * 64)]):
            try:
                call(request, timeout=10, metadata=metadata)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as err:
                codes.append(err.code())
    return codes


def test_a_ray_started_here_listens_on_loopback_only(ray_session):
    assert listening_sockets(os.getpid()), "no listening socket of the Ray this session started"
    wide = [s for s in beyond_loopback(os.getpid()) if not s[0].startswith(SERVE_REPLICA)]
    assert not wide, f"Ray listens beyond 127.0.0.1: {wide}"


def test_the_test_runs_ray_keeps_its_session_in_the_runs_own_folder(ray_session):
    """Not in Ray's default /tmp/ray, which keeps every session's logs and sockets for good:
    in the folder the test run removes at its end (conftest)."""
    session = ray_session._private.worker.global_worker.node.get_session_dir_path()
    assert Path(session).is_relative_to(os.environ["RAY_TMPDIR"])


def test_its_grpc_ports_ask_for_the_clusters_token(ray_session):
    """The GCS answers a caller with Ray's token and refuses one without it or with another."""
    needs_token_auth()
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    address = ray_session._private.worker.global_worker.node.gcs_address
    with grpc.insecure_channel(address) as channel:
        nodes = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo
        answer = nodes(
            gcs_service_pb2.GetAllNodeInfoRequest(),
            timeout=10,
            metadata=[("authorization", f"Bearer {ray_token()}")],
        )
        assert len(answer.node_info_list) >= 1
    method = "/ray.rpc.NodeInfoGcsService/GetAllNodeInfo"
    assert refusals(address, method, b"") == [grpc.StatusCode.UNAUTHENTICATED] * 2


def test_a_serve_replicas_wide_port_asks_for_the_token(serve_port):
    """The one port beyond loopback (Serve's, see SERVE_REPLICA) refuses a caller without
    Ray's token."""
    needs_token_auth()
    from ray import serve

    @serve.deployment
    class Probe:
        def __call__(self, request):
            return "ok"

    serve.run(Probe.bind(), name="port-probe", route_prefix="/port-probe")
    try:
        wide = [s for s in beyond_loopback(os.getpid()) if s[0].startswith(SERVE_REPLICA)]
        assert wide, "expected Serve's inter-deployment port on every interface; is it gone?"
        for _, _, port in wide:
            codes = refusals(f"127.0.0.1:{port}", "/ray.serve.ASGIService/HandleRequest", b"")
            assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 2, (port, codes)
    finally:
        serve.delete("port-probe")


def test_a_local_node_that_does_not_come_up_is_one_clean_error(monkeypatch):
    """Ray raises a bare Exception when its node times out starting (a busy machine): the
    commands that start a local Ray say so in one line, not a traceback."""
    import ray

    from xdscheduler.errors import UserError
    from xdscheduler.ray_cluster import start_local

    def slow_node(**_):
        raise Exception("The current node timed out during startup. This could happen ...")

    monkeypatch.setattr(ray, "init", slow_node)
    with pytest.raises(UserError, match="did not start in time"):
        start_local()


def test_serves_controller_waits_for_a_proxy_slow_to_start(serve_port):
    """A Ray started here gives Serve's HTTP proxy 60 s to become ready, not Serve's 5 s after
    which its controller kills it and `serve.start` fails (what a busy machine did to `xds
    serve`): Serve's own processes read the setting."""
    import ray

    controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    pid = ray.get(controller.get_pid.remote())
    assert psutil.Process(pid).environ()["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] == "60"


def test_a_proxy_its_controller_gave_up_on_is_one_clean_error(monkeypatch):
    from ray import serve
    from ray.exceptions import ActorDiedError

    from xdscheduler.errors import UserError
    from xdscheduler.serving.app import start_proxy

    def killed(**_):
        raise ActorDiedError()

    monkeypatch.setattr(serve, "start", killed)
    with pytest.raises(UserError, match="did not become ready"):
        start_proxy(http_options={"port": 1})


def test_joining_ray_gives_back_a_commands_sigterm_handler(monkeypatch):
    """`ray.init` puts its own handler under SIGTERM (a stack dump, then the process dies): a
    command that made SIGTERM a Ctrl-C (`xds serve`, stopped by a service manager while it
    starts) has it back once it joined Ray."""
    import signal

    import ray

    from xdscheduler import ray_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(
        ray_cluster, "start_local", lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)
    )
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        ray_cluster.connect(None)
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_attaching_waits_for_a_domains_nodes_and_says_what_it_waits_for(ray_session):
    """`xds up --address --wait`: asked again while a domain has no labelled node, then refused
    naming it and the wait; a wrong address is refused at once, with nothing waited for."""
    from tests.conftest import SCENARIOS
    from xdscheduler.errors import UserError
    from xdscheduler.live.cluster import wait_labels
    from xdscheduler.live.state import ClusterState
    from xdscheduler.scenario import load_scenario

    scn = load_scenario(SCENARIOS / "local_three_domains.yaml")
    here = ray_session.get_runtime_context().gcs_address
    heard: list[str] = []
    with pytest.raises(
        UserError, match=r"after waiting 2 s \(--wait\): no alive node .* east, west"
    ):
        wait_labels(ClusterState(scenario="s", address=here, attached=True), scn, 2.0, heard.append)
    assert heard and all(h.startswith("waiting for the nodes (") for h in heard)
    with pytest.raises(UserError, match=r"^no alive node labelled"):  # not asked to wait
        wait_labels(ClusterState(scenario="s", address=here, attached=True), scn, 0.0)
    heard.clear()
    with pytest.raises(UserError, match=r"no Ray cluster answers at 127\.0\.0\.1:9"):
        wait_labels(ClusterState(scenario="s", address="127.0.0.1:9"), scn, 60.0, heard.append)
    assert heard == []


def exited_node(domain: str = "west"):
    """A node whose `ray start` has already given up, as `_start_node` records one."""
    import subprocess
    import sys

    from xdscheduler.live.state import Started

    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = Started.of(proc, role="node", domain=domain)
    proc.wait()
    return started


def test_a_node_whose_ray_start_keeps_exiting_is_tried_three_times_then_named(
    tmp_path, monkeypatch
):
    from xdscheduler.live import cluster
    from xdscheduler.live.cluster import NODE_STARTS, NodeExited, _start_node
    from xdscheduler.live.state import ClusterState, load

    # between tries it waits for the dead try's entry to leave the cluster's list: where this
    # process has joined another cluster (the session's), that list is not this state's
    monkeypatch.setattr(cluster, "NODE_TIMEOUT_S", 1.0)

    path, tries = tmp_path / "cluster.json", []
    state = ClusterState(scenario="s", address="127.0.0.1:9", temp_dir=str(tmp_path))
    with pytest.raises(NodeExited, match=r"the Ray node of domain west \(pid \d+\) exited while"):
        _start_node(state, path, lambda: tries.append(1) or exited_node())
    assert len(tries) == NODE_STARTS == 3
    assert len(load(path).processes) == 1  # the last try, for `down` (it stops only its own)


def test_a_node_whose_ray_start_exits_is_started_again_and_joins(
    ray_session, tmp_path, xds_log, monkeypatch
):
    """On a busy machine a node's `ray start` can give up on a slow head: `xds up` starts it
    again, and records only the node that runs (here the session's cluster has its one node,
    so the second try counts as joined; before it, the wait for the dead try's entry to leave
    the GCS ends at its bound, 2 s here: the session's node is not this state's)."""
    import subprocess
    import sys

    from xdscheduler.live import cluster
    from xdscheduler.live.cluster import _start_node

    monkeypatch.setattr(cluster, "NODE_TIMEOUT_S", 2.0)
    from xdscheduler.live.state import ClusterState, Started, load

    here = ray_session.get_runtime_context().gcs_address
    state = ClusterState(scenario="s", address=here, temp_dir=str(tmp_path))
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    tries = iter([exited_node, lambda: Started.of(running, role="node", domain="west")])
    try:
        after = _start_node(state, tmp_path / "cluster.json", lambda: next(tries)())
    finally:
        running.kill()
        running.wait()
    assert [p.pid for p in after.processes] == [running.pid]
    assert load(tmp_path / "cluster.json").processes == after.processes
    said = [r.getMessage() for r in xds_log.records if "starting it again" in r.getMessage()]
    assert len(said) == 1 and "node of domain west" in said[0] and "(2 of 3)" in said[0]
