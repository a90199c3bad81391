"""A live cluster: domains are Ray nodes labelled `xds.domain=<name>`.

`up` starts one on this machine (a Ray head in the host's namespace, each domain's nodes in the
domain's own network namespace, links shaped by `fabric`), or attaches to a running cluster
whose nodes carry the labels already (KubeRay, `ray start --labels`). What it started is written
to a state file (process ids, namespaces, the cluster's token); `down` stops exactly that.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from xdscheduler.errors import UserError
from xdscheduler.live import fabric as fab
from xdscheduler.live import quota
from xdscheduler.live.state import (
    DOMAIN_LABEL,
    HEAD_LABEL,
    NAMESPACE,
    ClusterState,
    LivePolicy,
    Started,
    default_state_path,
    load,
    save,
)
from xdscheduler.scenario import Scenario, load_scenario

log = logging.getLogger("xdscheduler.live")

# The head, every node's Ray daemons and the controller are not held to a quota: the domains'
# quotas leave them half a core, so an accelerator gets its share even when they are busy.
HEAD_CORES = 0.5
NODE_TIMEOUT_S = 120.0  # a node that has not joined by then will not (2 busy cores: ~10 s)
NODE_STARTS = 3  # tries of a node's `ray start` that exits before it joins
# What Ray's daemons do on SIGTERM they finish within 2 s here; the head's actors (the
# controller, Serve's) and `ray start --block` itself hang once the raylet is gone and would
# hold `xds down` for the whole grace: they are killed after it
STOP_GRACE_S = 3.0


def up(
    scenario_path: str,
    state_path: Path,
    address: str | None = None,
    storage: str | None = None,
    profile: str | None = None,
    http_port: int | None = None,
    policy: LivePolicy = "planner",
    wait_s: float = 0.0,
    say=None,
    slower: dict[str, float] | None = None,
) -> tuple[ClusterState, dict[str, int]]:
    """Start a local cluster for the scenario (or attach to the one at `address`, waiting up
    to `wait_s` for a node of every domain to join); jobs checkpoint to `storage` (a folder,
    or any URI Ray Train's storage takes) and are planned with the constants of `profile`
    (`xds calibrate`'s, of the plain-dp stack) by `policy` (planner or ppo); the HTTP apps
    answer on the head at `http_port` (default: a free port here; 8000 on a cluster attached
    to). A local cluster's domain named in `slower` runs its accelerators at 1/factor of their
    share of the cores, as slower hardware would. The state, and the alive nodes of each
    domain; `say(line)` hears what it waits for."""
    if state_path.exists():
        raise UserError(
            f"a cluster is already recorded at {state_path}: `xds down` it first "
            "(or set XDS_CLUSTER to another state file)"
        )
    scn = load_scenario(scenario_path)
    path = str(Path(scenario_path).resolve())
    profile = _checked_profile(profile)
    slower = _checked_slower(slower or {}, scn, attached=bool(address))
    if address:
        state = ClusterState(
            scenario=path,
            address=address,
            attached=True,
            policy=policy,
            token=os.environ.get("RAY_AUTH_TOKEN"),
            profile=profile,
            storage=storage or str(state_path.parent / "storage"),
        )
        counts = wait_labels(state, scn, wait_s, say)
        host = address.split("://")[-1].rpartition(":")[0]
        state = _serve(state, state_path, host, http_port or 8000)
        return state, counts
    tag, subnet = fab.new_tag()
    state = ClusterState(
        scenario=path,
        address="",
        tag=tag,
        subnet=subnet,
        profile=profile,
        policy=policy,
        token=secrets.token_hex(32),
        temp_dir=f"/tmp/xds-ray-{tag}",
        storage=storage or str(state_path.parent / f"storage-{tag}"),
        slower=slower,
    )
    fabric = state.fabric(scn)
    fab.build(fabric)
    state = state.model_copy(
        update={"domains": {n: fabric.ip(i) for i, n in enumerate(fabric.domains)}}
    )
    try:
        from xdscheduler.ray_cluster import free_port

        state = _start_nodes(state, scn, fabric, state_path)
        counts = check_labels(state, scn)
        state = _serve(state, state_path, fabric.head_ip, http_port or free_port(fabric.head_ip))
    except BaseException:
        disconnect()  # a driver whose cluster is stopped under it aborts the process
        # stop what the state file says was started (it is saved after every process)
        stop(load(state_path) if state_path.exists() else state)
        state_path.unlink(missing_ok=True)
        raise
    return state, counts


SLOWER_FORM = "--slower takes DOMAIN=FACTOR, a factor from 1 to 100 (e.g. west=2)"


def _checked_slower(slower: dict[str, float], scn, attached: bool) -> dict[str, float]:
    """`--slower`'s domains, each one of the scenario's held to 1/factor (1 to 100) of its
    share, on a cluster this machine's CPU shares can slow (started here, with cgroups)."""
    if not slower:
        return {}
    outside = {d: f for d, f in slower.items() if not 1.0 <= f <= 100.0}
    if outside:
        raise UserError(
            f"{SLOWER_FORM}; got " + ", ".join(f"{d}={f:g}" for d, f in outside.items())
        )
    if attached:
        raise UserError(
            "--slower holds a local cluster's domains to part of their CPU share: a cluster "
            "attached to (--address) runs at its own hardware's speeds"
        )
    names = [d.name for d in scn.domains]
    unknown = sorted(set(slower) - set(names))
    if unknown:
        raise UserError(
            f"--slower names {', '.join(unknown)}, not a domain of the scenario "
            f"(its domains: {', '.join(names)})"
        )
    if not quota.available():
        raise UserError(
            "--slower needs CPU cgroups (root, with the cpu controller mounted): "
            "this machine has none to hold a domain to"
        )
    return slower


def _serve(state: ClusterState, state_path: Path, host: str, port: int) -> ClusterState:
    """Deploy the HTTP apps on the head (`api`) and record where they answer."""
    from xdscheduler.live import api  # imports ray: after the driver joined with its token

    save(state, state_path)  # an attached cluster: `xds down` undeploys even if this fails
    state = api.deploy(state, host, port)
    save(state, state_path)
    log.info("the HTTP API answers at %s", state.api)
    return state


def _checked_profile(profile: str | None) -> str | None:
    """The profile as the controller will find it (a file's absolute path, or a shipped
    name); UserError when it is not a plain-dp profile."""
    from xdscheduler.costmodel.calibration import Profile

    if profile is None:
        return None
    stack = Profile.load(profile).stack
    if stack != "plain-dp":
        raise UserError(
            f"{profile}: a profile of stack {stack!r}; live jobs train with the "
            f"plain-dp stack (xds calibrate RUNS --stack plain-dp)"
        )
    return str(Path(profile).resolve()) if Path(profile).exists() else profile


def _start_nodes(
    state: ClusterState, scn: Scenario, fabric: fab.Fabric, state_path: Path
) -> ClusterState:
    """The head, then each domain's nodes, each node's work in a CPU cgroup of its
    accelerators' share of this machine's cores (where cgroups can be made), one Ray CPU an
    accelerator."""
    from xdscheduler.ray_cluster import free_port

    temp_dir = state.temp_dir
    assert temp_dir is not None  # `up` names one for every cluster it starts
    cores = max((os.cpu_count() or 1) - HEAD_CORES, 0.1)
    share = min(1.0, cores / sum(d.gpus for d in scn.domains)) if quota.available() else None

    port, dash = free_port(fabric.head_ip), free_port(fabric.head_ip)
    address = f"{fabric.head_ip}:{port}"
    # known before the head starts: every node's processes inherit it (`environment`)
    state = state.model_copy(
        update={"address": address, "dashboard": f"http://{fabric.head_ip}:{dash}"}
    )
    head = _ray_start(
        state,
        [
            "--head",
            "--port",
            str(port),
            "--node-ip-address",
            fabric.head_ip,
            "--dashboard-host",
            fabric.head_ip,
            "--dashboard-port",
            str(dash),
            "--ray-client-server-port",
            str(free_port()),
            # not the agent's default port: another Ray here may hold it
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--num-cpus",
            "1",
            "--labels",
            f"{HEAD_LABEL}=head",
            "--temp-dir",
            temp_dir,
        ],
        None,
    )
    state = state.model_copy(update={"processes": [Started.of(head, role="head")]})
    save(state, state_path)  # from here on, `xds down` can stop what is running
    _wait_nodes(state, 1)
    for i, d in enumerate(scn.domains):
        for group in d.nodes:
            for _ in range(group.count):
                cpus = group.gpus_each
                cgroup = f"xds-{state.tag}-{len(state.processes)}"
                slowed = state.slower.get(d.name, 1.0)
                procs = quota.create(cgroup, cpus * share / slowed) if share else None
                args = [
                    "--address",
                    address,
                    "--node-ip-address",
                    fabric.ip(i),
                    "--num-cpus",
                    str(cpus),
                    "--labels",
                    f"{DOMAIN_LABEL}={d.name}",
                ]
                ns, mine = fabric.namespace(i), cgroup if share else None
                node = partial(_node, state, args, ns, procs, d.name, mine)
                state = _start_node(state, state_path, node)
                log.info("domain %s: a node of %d CPUs joined at %s", d.name, cpus, fabric.ip(i))
    return state


def _node(state, args, namespace, procs, domain: str, cgroup: str | None) -> Started:
    """A domain's node started: its `ray start`, as the state records it."""
    proc = _ray_start(state, args, namespace, procs)
    return Started.of(proc, role="node", domain=domain, cgroup=cgroup)


def _start_node(state: ClusterState, state_path: Path, start) -> ClusterState:
    """A node started (`start()`: its process, recorded) and waited for until it joins, one at
    a time: nodes joining at once race for the session's socket names. On a busy machine a
    node's `ray start` can give up on a head slow to answer and exit: it is started again,
    NODE_STARTS times in all."""
    for attempt in range(1, NODE_STARTS + 1):
        node = start()
        state = state.model_copy(update={"processes": [*state.processes, node]})
        save(state, state_path)
        try:
            _wait_nodes(state, len(state.processes))
            return state
        except NodeExited as e:
            if e.process != node or attempt == NODE_STARTS:
                raise
            log.warning("%s: starting it again (%d of %d)", e, attempt + 1, NODE_STARTS)
            state = state.model_copy(update={"processes": state.processes[:-1]})
            _wait_gone(state, len(state.processes))
    raise AssertionError("unreachable")  # the last attempt returns or raises


def _wait_gone(state: ClusterState, count: int) -> None:
    """Wait (NODE_TIMEOUT_S at most) until at most `count` nodes are alive: a node whose
    `ray start` exited after its raylet registered stays listed as alive until the GCS finds
    it dead, and would make its retry look joined at once, the next node then joining beside
    it."""
    deadline = time.monotonic() + NODE_TIMEOUT_S
    while len(alive_nodes(state)) > count and time.monotonic() < deadline:
        time.sleep(0.5)


def _ray_start(
    state: ClusterState, args: list[str], namespace: str | None, cgroup_procs: Path | None = None
) -> subprocess.Popen:
    """`ray start --block` as the leader of a process group of its own, in the namespace
    given, its workers told which CPU cgroup to join; its output goes to a log beside the
    session."""
    env = {
        **os.environ,
        **state.environment(),
        "GLOO_SOCKET_IFNAME": "eth0" if namespace else os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
    }
    if cgroup_procs:
        env[quota.ENV] = str(cgroup_procs)
    ray = str(Path(sys.executable).with_name("ray"))
    cmd = [
        ray,
        "start",
        "--block",
        "--disable-usage-stats",
        "--object-store-memory",
        str(128 * 2**20),
        *args,
    ]
    if namespace:
        # the network namespace alone: `ip netns exec` would also mount a /sys of its own,
        # without the cgroups the node's workers join
        cmd = ["nsenter", f"--net=/run/netns/{namespace}", "--", *cmd]
    logs = Path(state.temp_dir or "/tmp")
    logs.mkdir(parents=True, exist_ok=True)
    out = (logs / f"ray-start-{namespace or 'head'}-{time.time_ns()}.log").open("w")
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


class NodeExited(UserError):
    """A Ray process `up` started exited before its node joined."""

    def __init__(self, process: Started, message: str):
        super().__init__(message)
        self.process = process


def _wait_nodes(state: ClusterState, count: int) -> None:
    """Wait until `count` nodes are alive (asking the GCS), or say which process died."""
    deadline = time.monotonic() + NODE_TIMEOUT_S
    while time.monotonic() < deadline:
        for p in state.processes:
            if not _alive(p.pid):
                where = f"{p.role} of domain {p.domain}" if p.domain else p.role
                raise NodeExited(
                    p,
                    f"the Ray {where} (pid {p.pid}) exited while starting; its log is in "
                    f"{state.temp_dir}",
                )
        if len(alive_nodes(state)) >= count:
            return
        time.sleep(0.5)
    raise UserError(
        f"only {len(alive_nodes(state))} of {count} Ray nodes joined within "
        f"{NODE_TIMEOUT_S:.0f} s; logs in {state.temp_dir}"
    )


def alive_nodes(state: ClusterState) -> list[dict]:
    """The cluster's alive nodes, as `ray.nodes()` gives them (this process joins as a
    driver on first use; [] while the GCS does not answer yet)."""
    if "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
        if not _listening(state.address):
            return []
        _join(state)
    return [n for n in sys.modules["ray"].nodes() if n["Alive"]]


def wait_labels(state: ClusterState, scn: Scenario, wait_s: float, say=None) -> dict[str, int]:
    """`check_labels`, asked again until it holds or `wait_s` has passed: the nodes of a
    cluster attached to join when they are ready (KubeRay starts the workers after the
    head), and on a busy machine that takes minutes. An address nothing answers at is
    refused at once: that is a wrong address, not a slow node."""
    from xdscheduler.ray_cluster import check_address

    if wait_s <= 0:
        return check_labels(state, scn)
    check_address(state.address)
    deadline = time.monotonic() + wait_s
    said, said_at = "", -math.inf
    while True:
        try:
            return check_labels(state, scn)
        except UserError as e:
            now = time.monotonic()
            if now >= deadline:
                raise UserError(f"after waiting {wait_s:.0f} s (--wait): {e}") from None
            if say and (str(e) != said or now - said_at >= 60):  # news, or once a minute
                say(f"waiting for the nodes ({deadline - now:.0f} s left): {e}")
                said, said_at = str(e), now
            time.sleep(min(5.0, deadline - now))


def check_labels(state: ClusterState, scn: Scenario) -> dict[str, int]:
    """Alive nodes per domain label of the cluster; UserError naming a domain without one."""
    from xdscheduler.ray_cluster import check_address

    check_address(state.address)
    counts: dict[str, int] = {}
    for n in alive_nodes(state):
        name = n.get("Labels", {}).get(DOMAIN_LABEL)
        counts[name] = counts.get(name, 0) + 1
    absent = [d.name for d in scn.domains if not counts.get(d.name)]
    if absent:
        raise UserError(
            f"no alive node labelled {DOMAIN_LABEL}=<name> for domain(s) "
            f"{', '.join(absent)}; label the nodes (`ray start --labels "
            f"{DOMAIN_LABEL}={absent[0]}`) or fix the scenario"
        )
    return {d.name: counts[d.name] for d in scn.domains}


def down(state_path: Path, say=None, keep_logs: bool = False) -> list[str]:
    """Stop what `up` started (by process id) and remove its namespaces and, unless
    `keep_logs`, its Ray temp folder (the nodes' logs); on a cluster it only attached to, stop
    the controller it started there and nothing else. What was done; `say(line)` hears what it
    is doing as it goes. A process that could not be stopped is a UserError, and the state file
    stays to run `down` again."""
    state = load(state_path)
    done, failed = (stop_controller(state), []) if state.attached else stop(state, say)
    if failed:  # the state file names what still runs: kept, so that `down` can be run again
        raise UserError(
            "; ".join(failed) + f". {state_path} is kept: run `xds down` again once that is fixed"
        )
    if state.temp_dir and Path(state.temp_dir).is_dir():
        if keep_logs:
            done.append(f"the nodes' logs stay in {state.temp_dir}")
        else:
            shutil.rmtree(state.temp_dir, ignore_errors=True)
            done.append(f"removed {state.temp_dir} (the nodes' logs; --keep-logs keeps them)")
    state_path.unlink()
    return done


def stop_controller(state: ClusterState) -> list[str]:
    """Kill the controller actor `xds` started on someone else's cluster (its journal stays),
    and delete the HTTP apps it deployed there."""
    _join(state)
    import ray

    from xdscheduler.live.api import undeploy
    from xdscheduler.live.controller import CONTROLLER

    undeploy()

    try:
        ray.kill(ray.get_actor(CONTROLLER, namespace=NAMESPACE))
        done = [f"stopped the controller on {state.address}; the cluster runs on"]
    except ValueError:
        done = [f"no controller on {state.address}; the cluster runs on"]
    disconnect()
    return done


def reshape(state_path: Path, src: str, dst: str, gbps: float, both: bool) -> list[str]:
    """Set the link from `src` to `dst` (and back, `both`) of the cluster `xds up` built to
    `gbps`, as a WAN's bandwidth swings: the domains' agents report the new rate, and the
    controller plans with it."""
    state = load(state_path)
    if not state.tag:
        raise UserError(
            f"the cluster at {state.address} was not built by `xds up`: its links "
            "are not shaped here"
        )
    fabric = state.fabric(load_scenario(state.scenario))
    pairs = [(src, dst), (dst, src)] if both else [(src, dst)]
    commands = [fabric.rate_command(a, b, gbps) for a, b in pairs]  # every one checked first
    for (a, b), cmd in zip(pairs, commands, strict=True):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise UserError(
                f"could not reshape {a} -> {b}: `{' '.join(cmd)}` said "
                f"{done.stderr.strip() or done.returncode}"
            )
    return [f"{a} -> {b}: {gbps:g} Gbit/s" for a, b in pairs]


def stop(state: ClusterState, say=None) -> tuple[list[str], list[str]]:
    """Stop every recorded process and remove the namespaces, whatever fails on the way: what
    was done, and what could not be stopped."""
    done, failed = [], []
    nodes = [p for p in state.processes if p.role != "head"]
    strangers = [p for p in state.processes if _alive(p.pid) and not p.ours()]
    done += [f"pid {p.pid} is not the Ray {p.role} `xds up` started: left alone" for p in strangers]
    for group in (nodes, [p for p in state.processes if p.role == "head"]):  # nodes first
        group = [p for p in group if p not in strangers]
        whats = [f"Ray {p.role} {p.domain or ''} (pid {p.pid})".replace("  ", " ") for p in group]
        if say and whats:
            say(f"stopping {', '.join(whats)} ...")
        try:
            gone = stop_processes([p.pid for p in group])
            done += [
                f"stopped {w}" if g else f"{w} had exited" for w, g in zip(whats, gone, strict=True)
            ]
        except Exception as err:  # go on: the rest must stop all the same
            failed += [f"could not stop {w}: {err}" for w in whats]
        for p in group:
            if p.cgroup:
                quota.remove(p.cgroup)
    if state.tag:
        scn = load_scenario(state.scenario)
        fab.teardown(state.fabric(scn))
        done.append(f"removed {len(scn.domains)} namespaces and bridge xdsbr{state.tag}")
    return done, failed


def stop_processes(pids: list[int]) -> list[bool]:
    """Stop each process of `pids` and every process under it, all at once: SIGTERM, then
    SIGKILL for what is left after the grace. Ray's daemons leave the process group of `ray
    start`, so each tree is taken before anything is signalled. Per pid, False if it was gone
    already."""
    import psutil

    tree, found = [], []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree += [*root.children(recursive=True), root]
            found.append(True)
        except psutil.NoSuchProcess:
            found.append(False)
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(tree, timeout=STOP_GRACE_S)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=STOP_GRACE_S)
    return found


def _listening(address: str) -> bool:
    from xdscheduler.ray_cluster import check_address

    try:
        check_address(address, timeout_s=1.0)
        return True
    except UserError:
        return False


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def connect(state_path: Path | None = None) -> ClusterState:
    """Join the recorded cluster as a driver, with its token; inside a `ray job submit` job
    (RAY_ADDRESS set, no state file here), the cluster the job runs in, whose controller
    holds the state. Ray reads its authentication settings when it is first imported:
    nothing may import ray before this."""
    path = state_path or default_state_path()
    if not path.exists() and os.environ.get("RAY_ADDRESS"):
        return _from_job()
    state = load(path)
    _join(state)
    return state


def _from_job() -> ClusterState:
    _init(None)
    import ray

    from xdscheduler.live.controller import CONTROLLER

    try:
        handle = ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        disconnect()
        raise UserError(
            "this Ray cluster has no xds controller: `xds up SCENARIO --address ADDR` first"
        ) from None
    state_json: ray.ObjectRef[str] = handle.state_json.remote()
    return ClusterState.model_validate_json(ray.get(state_json))


def _join(state: ClusterState) -> None:
    os.environ.update(state.environment())
    import ray

    if not ray.is_initialized():
        _init(state.address)


_stdout = None


def _init(address: str | None) -> None:
    """`ray.init` as a driver of the cluster at `address` (None: RAY_ADDRESS's). Ray prints the
    cluster's warnings to a driver's stdout whatever log_to_driver says; a command's stdout is
    its answer (--json), so they go to stderr until `disconnect`."""
    global _stdout
    import ray

    _stdout, sys.stdout = sys.stdout, sys.stderr
    ray.init(address=address, log_to_driver=False, namespace=NAMESPACE)


def disconnect() -> None:
    """Leave the cluster (if this process joined it) and give stdout back."""
    global _stdout
    if "ray" in sys.modules:
        sys.modules["ray"].shutdown()
    if _stdout is not None:
        sys.stdout, _stdout = _stdout, None
