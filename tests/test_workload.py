import numpy as np
import pytest

from xdscheduler.catalog import MODELS
from xdscheduler.errors import UserError
from xdscheduler.workload import RUN_LIMITS_S, generate_jobs


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
