"""GPU-sharing packers: fragmentation worked by hand, candidate placements, the inflation
experiment's invariants, and `xds share bench` on the openb trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_cli import run
from xdscheduler.errors import UserError
from xdscheduler.sharing.fragmentation import Workload, fragmentation
from xdscheduler.sharing.inflation import GRID, at_capacity, inflate
from xdscheduler.sharing.openb import Nodes, Pods, load_nodes, load_pods
from xdscheduler.sharing.packers import PACKERS, Cluster, Pod, choose


def workload(*classes) -> Workload:
    """(cpu, num_gpu, gpu_milli, probability) per class, any GPU model."""
    cpu, n, g, p = (np.array(x) for x in zip(*classes, strict=True))
    return Workload(cpu, n, g, np.array([None] * len(cpu), dtype=object), p.astype(float))


def nodes(*gpus, cpu=32000, memory=262144, model="T4") -> Nodes:
    k = len(gpus)
    return Nodes(
        np.array([f"n{i}" for i in range(k)]),
        np.full(k, cpu),
        np.full(k, memory),
        np.array(gpus),
        np.array([model] * k),
    )


def pods(rows) -> Pods:
    """(cpu, memory, num_gpu, gpu_milli) per pod."""
    cpu, mem, n, g = (np.array(x) for x in zip(*rows, strict=True))
    return Pods(
        np.array([f"p{i}" for i in range(len(cpu))]),
        cpu,
        mem,
        n,
        g,
        np.array([None] * len(cpu), dtype=object),
    )


# A share of half a GPU half the time, one whole GPU a quarter, no GPU a quarter.
WORK = workload((4000, 1, 500, 0.5), (4000, 1, 1000, 0.25), (1000, 0, 0, 0.25))


def test_fragmentation_by_hand():
    left = np.array([[1000, 600, 200, 0]])
    everyone = np.ones((1, 3), dtype=bool)
    # half-GPU pods could not use the 200 left; whole-GPU pods the 600 and 200; pods asking no
    # GPU any of the 1,800: 0.5·200 + 0.25·800 + 0.25·1800
    assert fragmentation(left, np.array([8000]), everyone, WORK)[0] == pytest.approx(750)
    # CPU too short for the GPU pods: every free GPU resource is a fragment
    assert fragmentation(left, np.array([2000]), everyone, WORK)[0] == pytest.approx(1800)
    # a model the GPU pods may not use: the same
    no_gpu_pods = np.array([[False, False, True]])
    assert fragmentation(left, np.array([8000]), no_gpu_pods, WORK)[0] == pytest.approx(1800)


def test_fgd_keeps_room_where_best_fit_strands_a_fragment():
    """A half-GPU pod: best fit takes the tightest GPU (600 left, leaving 100 no half-GPU pod can
    use); FGD takes the node where what is left still fits the workload."""
    half = workload((1000, 1, 500, 1.0))
    cluster = Cluster(nodes(2, 1), half)
    cluster.left[1, 0] = 600
    cluster.frag = fragmentation(cluster.left, cluster.cpu_left, cluster.access, half)
    pod = Pod(1000, 1024, 1, 500)
    opts = cluster.options(pod)
    rng = np.random.default_rng(0)
    assert opts.node[choose(PACKERS["best-fit"], cluster, opts, pod, rng)] == 1
    assert opts.node[choose(PACKERS["fgd"], cluster, opts, pod, rng)] == 0


def test_options_follow_the_request():
    cluster = Cluster(nodes(4, 2), WORK)
    cluster.left[0] = [1000, 300, 300, 1000]  # a slot per GPU of the largest node
    share = cluster.options(Pod(1000, 1024, 1, 200))
    # one candidate per distinct free amount of a node: 1000 and 300 on node 0, 1000 on node 1
    assert sorted(zip(share.node.tolist(), share.gpu.tolist(), strict=True)) == [
        (0, 300),
        (0, 1000),
        (1, 1000),
    ]
    assert (share.take.sum(axis=1) == 200).all()
    whole = cluster.options(Pod(1000, 1024, 2, 1000))
    assert whole.node.tolist() == [0, 1]  # only fully free GPUs count
    assert whole.take[0].tolist() == [1000, 0, 0, 1000]
    assert len(cluster.options(Pod(1000, 1024, 3, 1000))) == 0
    assert len(cluster.options(Pod(64000, 1024, 0, 0))) == 0  # no node has the CPU
    assert len(cluster.options(Pod(1000, 10**7, 0, 0))) == 0  # nor the memory
    only_v100 = cluster.options(Pod(1000, 1024, 1, 200, spec=("V100M32",)))
    assert len(only_v100) == 0


def test_nodes_of_sixteen_gpus_are_packed(tmp_path):
    """Hosts of 16 GPUs are read and packed: a pod of 16 whole GPUs fits only there, a pod of
    9 leaves 7 whole GPUs behind it; beyond MAX_GPUS_PER_NODE a node is refused."""
    (tmp_path / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nbig,64000,524288,16,A100\nsmall,32000,262144,8,A100\n"
    )
    cluster = Cluster(load_nodes(tmp_path / "nodes.csv"), WORK)
    assert cluster.left.shape == (2, 16) and cluster.capacity_milli == 24_000
    assert cluster.options(Pod(1000, 1024, 16, 1000)).node.tolist() == [0]
    opts = cluster.options(Pod(1000, 1024, 9, 1000))
    cluster.place(opts, 0, Pod(1000, 1024, 9, 1000))
    assert (cluster.left[0] == 1000).sum() == 7 and cluster.allocated_milli == 9000
    trace = pods([(4000, 8192, 16, 1000), (4000, 8192, 1, 500), (2000, 4096, 4, 1000)])
    for packer in PACKERS:
        curve = inflate(load_nodes(tmp_path / "nodes.csv"), trace, Workload.of(trace), packer, 1)
        assert 0 <= at_capacity(curve) < 1
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nx,1,1,65,A100\n")
    with pytest.raises(UserError, match="gpu is 65, accepted 0 to 64"):
        load_nodes(tmp_path / "nodes.csv")


@pytest.mark.parametrize("packer", list(PACKERS))
def test_inflation_invariants(packer):
    cluster_nodes = nodes(8, 8, 4, 2, 2, 1)
    trace = pods(
        [
            (4000, 8192, 1, 500),
            (8000, 16384, 1, 1000),
            (2000, 4096, 0, 0),
            (16000, 32768, 4, 1000),
            (4000, 8192, 1, 250),
        ]
    )
    work = Workload.of(trace)
    curve = inflate(cluster_nodes, trace, work, packer, seed=3, until=1.2)
    seen = curve.unallocated[np.isfinite(curve.unallocated)]
    assert seen[0] == 1.0 and (seen >= 0).all()
    assert (np.diff(seen) <= 1e-12).all()  # nothing leaves: allocation only grows
    assert 0 <= at_capacity(curve) < 1
    again = inflate(cluster_nodes, trace, work, packer, seed=3, until=1.2)
    np.testing.assert_array_equal(curve.unallocated, again.unallocated)  # seeded
    assert len(GRID) == len(curve.unallocated)


def _write_small_trace(tmp_path):
    (tmp_path / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"node-{i},32000,262144,{g},T4\n" for i, g in enumerate([8, 8, 4, 2, 2]))
    )
    (tmp_path / "pods.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,4000,8192,1,500,\nb,8000,16384,1,1000,\nc,2000,4096,0,0,\nd,12000,32768,2,1000,\n"
        "e,4000,8192,1,250,\n"
    )


def test_share_bench_cli_writes_its_report(tmp_path, capsys):
    _write_small_trace(tmp_path)
    out = tmp_path / "out"
    code, stdout, _ = run(
        capsys,
        "share",
        "bench",
        "--trace",
        str(tmp_path / "pods.csv"),
        "--nodes",
        str(tmp_path / "nodes.csv"),
        "--seeds",
        "3",
        "--workers",
        "1",
        "--out",
        str(out),
        "--json",
    )
    assert code == 0
    result = json.loads(stdout)
    assert set(result["packers"]) == set(PACKERS)
    for entry in result["packers"].values():
        assert 0 <= entry["unallocated_share_at_capacity"] < 1 and entry["seeds"] == 3
    assert result["ours"] in result["packers"]
    for name in ("share_bench.json", "share_bench.md", "share_bench.csv", "share_bench.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "share_bench.md").read_text().splitlines()[0] == result["headline"]


def test_share_bench_writes_its_readme_section(tmp_path, capsys):
    _write_small_trace(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- share:begin -->\nold\n<!-- share:end -->\nafter\n")
    code, out, _ = run(
        capsys,
        "share",
        "bench",
        "--trace",
        str(tmp_path / "pods.csv"),
        "--nodes",
        str(tmp_path / "nodes.csv"),
        "--seeds",
        "2",
        "--workers",
        "1",
        "--packers",
        "best-fit,fgd",
        "--out",
        str(tmp_path / "o"),
        "--readme",
        str(readme),
    )
    text = readme.read_text()
    assert code == 0 and "old" not in text and text.endswith("after\n")
    assert out.splitlines()[0] in text and "| fgd |" in text
    readme.write_text("no markers\n")
    code, _, err = run(capsys, "share", "bench", "--readme", str(readme))
    assert code == 2 and "share:begin" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--packers", "best-fit,tetris"], "unknown tetris"),
        (["--seeds", "0"], "outside"),
        (["--trace", "no-such-trace"], "neither a trace name"),
    ],
)
def test_share_bench_refuses_bad_arguments(tmp_path, capsys, argv, message):
    _write_small_trace(tmp_path)
    defaults = ["--nodes", str(tmp_path / "nodes.csv"), "--out", str(tmp_path / "o")]
    if "--trace" not in argv:
        defaults += ["--trace", str(tmp_path / "pods.csv")]
    code, _, err = run(capsys, "share", "bench", *defaults, *argv)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("name,cpu_milli,memory_mib,num_gpu\na,1,1,1\n", "no column gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,1500\n", "gpu_milli is 1500"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,2,500\n", "must take them whole"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,x,1,500\n", "must hold numbers"),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,500\nb,1,1,1,500\na,1,1,1,500\n",
            "pods.csv: row 4 repeats name 'a' of row 2",
        ),
    ],
)
def test_bad_pod_lists_are_named(tmp_path, text, message):
    from xdscheduler.errors import UserError

    path = tmp_path / "pods.csv"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_pods(path)


def _bench(capsys, tmp_path, *argv):
    """`xds share bench` on the small trace, one process."""
    files = ["--trace", str(tmp_path / "pods.csv"), "--nodes", str(tmp_path / "nodes.csv")]
    return run(capsys, "share", "bench", *files, "--workers", "1", *argv)


def test_pods_asking_for_absent_gpu_models_are_named(tmp_path, capsys):
    """Pods confined to models no node has are always turned away: a warning says how many and
    which models; where no GPU pod is left to place, the bench is refused."""
    _write_small_trace(tmp_path)
    pods_csv = tmp_path / "pods.csv"
    pods_csv.write_text(
        pods_csv.read_text() + "f,4000,8192,1,500,A100|H100\ng,4000,8192,2,1000,H100\n"
    )
    argv = ["--seeds", "2", "--packers", "best-fit", "--out", str(tmp_path / "o")]
    code, _, err = _bench(capsys, tmp_path, *argv)
    assert code == 0
    assert "2 of 7 pods of" in err and "(40.0% of the GPUs asked)" in err
    assert "GPU models no node has (A100, H100; the nodes have T4)" in err
    pods_csv.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1000,1024,1,500,A100\n"
        "b,1000,1024,0,0,\n"
    )
    code, _, err = _bench(capsys, tmp_path, *argv)
    assert code == 2 and "names only GPU models no node has (A100;" in err
    assert "Traceback" not in err


def test_one_seed_gives_no_interval(tmp_path, capsys):
    _write_small_trace(tmp_path)
    code, out, _ = _bench(capsys, tmp_path, "--seeds", "1", "--out", str(tmp_path / "o"))
    headline, setup = out.splitlines()[:2]
    assert code == 0 and "nan" not in out and "±" not in out
    assert "(one seed, no interval)" in headline and "one seed, no interval" in setup


def test_a_packer_run_alone_is_not_called_the_best(tmp_path, capsys):
    _write_small_trace(tmp_path)
    argv = ["--seeds", "2", "--packers", "best-fit,best-fit", "--out", str(tmp_path / "o")]
    code, out, _ = _bench(capsys, tmp_path, *argv)
    assert code == 0 and out.startswith("best-fit alone (no other packer compared) leaves ")
    assert "fewest" not in out


def test_fgd_beats_best_fit_on_the_openb_trace(data_dir):
    """The published ordering on the real trace, one seed: FGD strands fewer GPUs than best
    fit, which strands fewer than random."""
    folder = data_dir / "sharing"
    cluster_nodes = load_nodes(folder / "openb_node_list_gpu_node.csv")
    trace = load_pods(folder / "openb_pod_list_default.csv")
    work = Workload.of(trace)
    at = {
        p: at_capacity(inflate(cluster_nodes, trace, work, p, seed=11, until=1.0))
        for p in ("random", "best-fit", "fgd")
    }
    assert at["fgd"] < 0.9 * at["best-fit"] < 0.9 * at["random"]


def test_the_shipped_lists_are_found_in_any_case_and_a_node_listed_twice_is_refused(
    tmp_path, monkeypatch
):
    """OpenB_Node_List_GPU_Node.csv and openb_pod_list_default.CSV are the shipped lists; a
    node list pasted twice would read as twice the cluster: it is refused, naming the node."""
    from xdscheduler.sharing.openb import trace_path

    _write_small_trace(tmp_path)
    folder = tmp_path / "sharing"
    folder.mkdir()
    nodes_csv = folder / "OpenB_Node_List_GPU_Node.csv"
    (tmp_path / "nodes.csv").rename(nodes_csv)
    (tmp_path / "pods.csv").rename(folder / "openb_pod_list_default.CSV")
    monkeypatch.setenv("XDS_DATA_DIR", str(tmp_path))
    assert len(load_nodes().name) == 5
    assert trace_path("default") == folder / "openb_pod_list_default.CSV"
    lines = nodes_csv.read_text().splitlines()
    nodes_csv.write_text("\n".join([*lines, lines[1]]) + "\n")
    with pytest.raises(UserError, match=r"GPU_Node\.csv: row 7 repeats sn 'node-0' of row 2"):
        load_nodes()
