"""The planner on models and clusters nobody here wrote. Hypothesis draws a transformer (any
layer count, heads and grouped KV heads, vocabulary, tied or not), a batch and sequence, a range
of accelerators and a precision, and a drawn cluster (`test_study_fuzz.domains`); `xds plan`'s
search must either give a plan the model can run (finite step, within the accelerators' memory
and the job's range, on what is free) or refuse with a reason, never fail otherwise.

`XDS_FUZZ_EXAMPLES` draws more (derandomised: the same draws every run)."""

from __future__ import annotations

import math

import pytest

from tests.test_study_fuzz import EXAMPLES, domains, links
from xdscheduler.costmodel.plan import DTYPES
from xdscheduler.errors import UserError
from xdscheduler.planner.search import JobSpec, search
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights, parse_scenario

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")


@st.composite
def architectures(draw) -> dict:
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * draw(st.integers(1, 12))
    return {
        "layers": draw(st.integers(1, 97)),
        "hidden": heads * draw(st.sampled_from([32, 64, 128])),
        "ffn_hidden": draw(st.integers(64, 30_000)),
        "heads": heads,
        "kv_heads": kv,
        "vocab": draw(st.integers(100, 260_000)),
        "gated_mlp": draw(st.booleans()),
        "tied_embeddings": draw(st.booleans()),
    }


@st.composite
def planning(draw) -> tuple[JobSpec, ClusterView]:
    doms = draw(domains())
    low = draw(st.sampled_from([1, 3, 8, 17, 64]))
    doc = {
        "name": "drawn",
        "domains": doms,
        "links": draw(links([d["name"] for d in doms])),
        "jobs": [
            {
                "name": "drawn-job",
                "architecture": draw(architectures()),
                "global_batch": draw(st.sampled_from([1, 7, 64, 1000, 4096])),
                "seq_len": draw(st.sampled_from([128, 2048, 8192, 32768])),
                "tokens": 1e9,
                "gpus": {"min": low, "max": low * draw(st.sampled_from([1, 2, 16]))},
                "dtype": draw(st.sampled_from(DTYPES)),
            }
        ],
    }
    scn = parse_scenario(doc, "drawn")
    view = ClusterView.from_scenario(scn)
    busy = {d.name: draw(st.integers(0, d.free_gpus)) for d in view.domains}
    return JobSpec.of(scn.jobs[0]), view.with_free(
        {d.name: d.free_gpus - busy[d.name] for d in view.domains}
    )


@pytest.mark.slow  # dozens of searches
@hypothesis.settings(
    max_examples=max(EXAMPLES * 5, 15),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
)
@hypothesis.given(case=planning())
def test_the_search_gives_a_runnable_plan_or_a_reason(case):
    job, view = case
    try:
        found = search(job, view, Weights())
    except UserError as e:
        assert str(e)
        return
    for p in [found.best, *found.alternatives]:
        est = p.estimated
        assert math.isfinite(est.step_time_s) and est.step_time_s > 0, p
        assert job.gpus_min <= p.total_gpus <= job.gpus_max, p
        for i, n in zip(p.domains, p.gpus, strict=True):
            domain = view.domains[i]
            assert n <= domain.available, p
            assert est.memory_gib_per_gpu <= domain.accelerator.memory_gib, p
