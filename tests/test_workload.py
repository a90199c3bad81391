from pathlib import Path

import numpy as np
import pytest

from xdscheduler.catalog import MODELS
from xdscheduler.errors import UserError
from xdscheduler.scenario import Workload
from xdscheduler.workload import RUN_LIMITS_S, JobStats, generate_jobs, job_stats, summary_path


def test_reproducible_and_ordered():
    a, b = generate_jobs(12, 2304, 3), generate_jobs(12, 2304, 3)
    assert [j.model_dump() for j in a] == [j.model_dump() for j in b]
    arrivals = [j.arrival_s for j in a]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0 and arrivals[-1] < 12 * 3600


def test_requests_are_powers_of_two_within_bounds():
    jobs = generate_jobs(24, 2304, 1)
    sizes = np.array([j.gpus.max for j in jobs])
    assert np.all(sizes >= 8) and np.all(sizes <= 1024)
    assert np.all((sizes & (sizes - 1)) == 0)
    assert all(j.gpus.min <= j.gpus.max for j in jobs)


def test_offered_load_matches_the_target():
    total, hours, peak = 2304, 72, 989.4
    jobs = generate_jobs(hours, total, 2, load=0.8)
    # accelerator-seconds offered: tokens back to run time at the generator's 40% of peak
    offered = sum(j.tokens * 6 * MODELS[j.model].params / (0.4 * peak * 1e12) for j in jobs)
    assert offered / (total * hours * 3600) == pytest.approx(0.8, rel=0.25)


def test_bigger_jobs_train_bigger_models_and_run_times_are_bounded():
    jobs = generate_jobs(48, 2304, 4)
    small = [MODELS[j.model].params for j in jobs if j.gpus.max <= 32]
    large = [MODELS[j.model].params for j in jobs if j.gpus.max >= 256]
    assert max(small) < min(large)
    for j in jobs:
        run = j.tokens * 6 * MODELS[j.model].params / (0.4 * 989.4e12) / j.gpus.max
        assert RUN_LIMITS_S[0] * 0.999 <= run <= RUN_LIMITS_S[1] * 1.001


def test_a_cluster_too_small_is_refused():
    with pytest.raises(UserError, match="cannot hold jobs of 8"):
        generate_jobs(1, 4, 0)


HEADER = "id,gpu_job_num,avg_gpu_num,med_gpu_num,avg_run_time_gpu,med_run_time_gpu,max_gpu\n"


def _summary(monkeypatch, tmp_path, *rows: str):
    """A data folder whose Acme summary holds `rows` (none: a folder without the summary)."""
    (tmp_path / "workload").mkdir()
    if rows:
        (tmp_path / "workload" / "acme_cluster_summary.csv").write_text(HEADER + "".join(rows))
    monkeypatch.setenv("XDS_DATA_DIR", str(tmp_path))


def test_without_the_summary_the_shipped_statistics_are_used(monkeypatch, tmp_path):
    _summary(monkeypatch, tmp_path)
    assert job_stats("Kalos") == JobStats(26.77, 1.0, 1259.689, 124.0, 1024)
    with pytest.raises(
        UserError, match="unknown cluster 'orion': known seren, kalos; another needs"
    ):
        generate_jobs(6, 2304, 0, cluster="orion")


def test_any_cluster_of_the_summary_can_be_named(monkeypatch, tmp_path):
    """A held-out summary of another cluster: its sizes and run times are drawn from; the
    shipped clusters stay known beside it, and an unknown one is told what the file has."""
    _summary(monkeypatch, tmp_path, "Orion,500,12.0,2.0,3000.0,300.0,64.0\n")
    assert job_stats("orion") == JobStats(12.0, 2.0, 3000.0, 300.0, 64.0)
    sizes = [j.gpus.max for j in generate_jobs(24, 2304, 0, cluster="orion")]
    assert (
        sizes
        and max(sizes) <= 64
        and max(sizes) < max(j.gpus.max for j in generate_jobs(24, 2304, 0))
    )
    assert job_stats("kalos").mean_gpus == 26.77
    with pytest.raises(
        UserError, match=r"unknown cluster 'vega': .* has Orion; shipped: seren, kalos"
    ):
        job_stats("vega")
    assert Workload(cluster="orion").cluster == "orion"  # the schema leaves it to the file


@pytest.mark.parametrize(
    "row, message",
    [
        ("Orion,500,2.0,2.0,3000.0,300.0,64\n", r"avg_gpu_num \(2\) must be above med_gpu_num"),
        ("Orion,500,12.0,2.0,abc,300.0,64\n", "row 2, avg_run_time_gpu: 'abc' is not a finite"),
        ("Orion,500,12.0,2.0,,300.0,64\n", "cluster 'orion' has no avg_run_time_gpu"),
        (
            "Orion,500,12.0,2.0,3000.0,300.0,4\n",
            "no job of 8 accelerators or more to draw: orion's largest takes 4",
        ),
    ],
)
def test_a_bad_summary_row_is_named(monkeypatch, tmp_path, row, message):
    _summary(monkeypatch, tmp_path, row)
    with pytest.raises(UserError, match=message):
        generate_jobs(6, 2304, 0, cluster="orion")


def test_the_real_summary_gives_the_shipped_jobs(monkeypatch, tmp_path, data_dir):
    """The shipped figures are the file's: a study draws the same jobs with it as without."""

    def drawn(folder: Path, cluster: str, read: bool) -> tuple[JobStats, list[dict]]:
        monkeypatch.setenv("XDS_DATA_DIR", str(folder))
        assert (summary_path() is not None) == read
        jobs = generate_jobs(6, 2304, 1, cluster=cluster)
        return job_stats(cluster), [j.model_dump() for j in jobs]

    for cluster in ("kalos", "seren"):
        assert drawn(data_dir, cluster, True) == drawn(tmp_path, cluster, False)
