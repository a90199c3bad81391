"""A Ray started here is for this machine alone: loopback ports, and gRPC that asks for Ray's
token."""

from __future__ import annotations

import os

import pytest

psutil = pytest.importorskip("psutil")

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def listening_addresses(root_pid: int) -> set[str]:
    """The addresses that a process and everything it started listen on."""
    root = psutil.Process(root_pid)
    found = set()
    for proc in [root, *root.children(recursive=True)]:
        try:
            found |= {c.laddr.ip for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:  # a worker that ended meanwhile
            continue
    return found


def test_a_ray_started_here_listens_on_loopback_only(ray_session):
    addresses = listening_addresses(os.getpid())
    assert addresses, "found no listening socket of the Ray this session started"
    assert addresses <= LOOPBACK, f"Ray listens beyond 127.0.0.1: {sorted(addresses - LOOPBACK)}"


def test_its_grpc_ports_ask_for_the_clusters_token(ray_session):
    """The GCS answers a caller with Ray's token and refuses one without it or with another."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        pytest.skip("RAY_AUTH_MODE is set to something other than token by the user")
    grpc = pytest.importorskip("grpc")
    from ray._raylet import AuthenticationTokenLoader
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    ray = ray_session
    address = ray._private.worker.global_worker.node.gcs_address
    token = AuthenticationTokenLoader.instance().get_raw_token()
    with grpc.insecure_channel(address) as channel:
        nodes = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo

        def ask(metadata):
            return nodes(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=10, metadata=metadata)

        assert len(ask([("authorization", f"Bearer {token}")]).node_info_list) >= 1
        for metadata in ([], [("authorization", "Bearer " + "0" * len(token))]):
            with pytest.raises(grpc.RpcError) as refused:
                ask(metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
