"""The crossing bound's variants of the planner and its free WAN (benchmarks/crossing_bound.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import crossing_bound as cb
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.registry import make_policy
from xdscheduler.scenario import load_scenario

FIVE = Path(__file__).resolve().parents[1] / "scenarios" / "five_domains.yaml"


@pytest.fixture(scope="module")
def five():
    scn = load_scenario(FIVE)
    return scn, ClusterView.from_scenario(scn), {j.name: JobSpec.of(j) for j in scn.jobs}


def test_the_free_wan_keeps_the_domains_and_frees_every_link(tmp_path):
    scn = load_scenario(cb.free_wan(FIVE, tmp_path))
    before = load_scenario(FIVE)
    assert scn.name == "five_domains_free_wan" and scn.domains == before.domains
    assert len(scn.links) == len(before.links)
    for link in scn.links:
        assert link.bandwidth_gbps == cb.FREE_GBPS and link.fluctuation == 0
        assert link.price_per_gb == 0


def test_only_a_job_asking_for_more_than_a_domain_may_cross(five):
    scn, view, jobs = five
    # GPT-3 asks 1,024 (its minimum of 256 fits a domain of 512); Llama 3 8B asks 128
    assert cb.asks_more_than_a_domain(jobs["gpt3-175b"], view)
    assert not cb.asks_more_than_a_domain(jobs["llama3-8b-continual"], view)
    spans = {}
    for guarded in (True, False):
        policy = cb.AsksCross(scn.weights, "x", guarded=guarded)
        spans[guarded] = len(policy._best(jobs["gpt3-175b"], view).domains)
        assert len(policy._best(jobs["llama3-8b-continual"], view).domains) == 1
    # on the empty cluster GPT-3 trains faster over two domains than in any one, but keeps
    # less than KEEP_MFU of its best efficiency inside one: only the unguarded variant crosses
    assert spans == {True: 1, False: 2}
    planner = make_policy("planner", scn.weights)
    assert len(planner._best(jobs["gpt3-175b"], view).domains) == 1  # the rule it lifts


def test_a_preemptible_variant_gives_back_only_its_spreads(five):
    scn, view, jobs = five
    kept = cb.AsksCross(scn.weights, "x", guarded=False)
    giving = cb.AsksCross(scn.weights, "x", guarded=False, preemptible=True)
    gpt3, small = jobs["gpt3-175b"], jobs["llama3-8b-continual"]
    spread = giving._best(gpt3, view)
    assert len(spread.domains) == 2 and spread.preemptible
    assert not kept._best(gpt3, view).preemptible
    assert not giving._best(small, view).preemptible  # inside one domain: kept
    placed = {p.job: p for p in giving.decide([gpt3, small], view, 0.0)}
    assert placed["gpt3-175b"].preemptible and not placed["llama3-8b-continual"].preemptible


@pytest.mark.parametrize("preemptible", [False, True])
def test_the_variants_are_registered_in_this_process_only(five, preemptible):
    scn, _, _ = five
    names = cb.variants(preemptible)
    assert len(names) == 2 and all(n.endswith("-preemptible") == preemptible for n in names)
    cb.register(preemptible)
    try:
        for name, guarded in zip(names, (True, False), strict=True):
            policy = make_policy(name, scn.weights)
            assert isinstance(policy, cb.AsksCross) and policy.guarded is guarded
            assert policy.name == name and policy.preemptible is preemptible
    finally:
        for name in names:
            cb.policies.POLICIES.pop(name, None)


def test_an_unknown_wan_is_refused_with_what_is_accepted(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["crossing_bound", "--wan", "leased,fast"])
    with pytest.raises(SystemExit) as exit_:
        cb.main()
    assert exit_.value.code == 2 and "accepted are leased, free" in capsys.readouterr().err


def test_the_table_reads_the_paired_changes_and_says_when_a_class_is_empty():
    def paired(policy, figure, mean, half, significant=False):
        return {
            "load": 0.9,
            "policy": policy,
            "figure": figure,
            "mean": mean,
            "half_width": half,
            "significant": significant,
        }

    doc = {"grid": {"loads": [0.9]}, "paired": [], "summary": []}
    for policy in cb.VARIANTS:
        doc["summary"].append({"load": 0.9, "policy": policy, "figure": "giant_crossed", "mean": 2})
        doc["paired"] += [
            paired(policy, "giant_mean_jct_s", -0.173, 0.069, True),
            paired(policy, "fit_mean_jct_s", None, None),
            paired(policy, "mean_jct_s", 0.004, float("nan")),
        ]
    rows = cb.rows_of(doc, "leased")
    assert rows[0] == [
        "leased",
        "0.9",
        cb.VARIANTS[0],
        "2.0",
        "-17.3% ± 6.9%*",
        "–",
        "+0.4% ± 0.0%",
    ]
