from xdscheduler.network.dynamics import Dynamics
from xdscheduler.perception.indicators import INDICATORS, Sample, rejection, sample
from xdscheduler.sim.domain import LocalDomains, accepted

from .conftest import small_scenario


def test_twelve_indicators_in_four_dimensions():
    dims = [d for d, *_ in INDICATORS.values()]
    assert len(INDICATORS) == 12
    assert {d: dims.count(d) for d in dims} == {
        "compute": 3,
        "storage": 3,
        "network": 3,
        "state": 3,
    }


def test_bad_samples_are_rejected_with_a_reason():
    assert rejection(sample("utilization", 0.5, "d", 100.0), 110.0) is None
    assert "outside" in rejection(sample("utilization", 1.5, "d", 100.0), 110.0)
    assert "old" in rejection(sample("latency", 20, "d", 0.0), 1000.0)
    assert "expected 'ms'" in rejection(Sample("latency", 20, "s", "d", 0.0), 0.0)
    assert "unknown" in rejection(Sample("colour", 1, "x", "d", 0.0), 0.0)


def test_a_domain_reports_every_indicator_and_its_links():
    scn = small_scenario(hours_of_jobs=False)
    domains = LocalDomains(scn.domains, Dynamics.generate(scn, 0, 3600))
    domains.apply("j", {0: 64}, 0.0)
    report = domains.reports(60.0)[0]
    good, reasons = accepted(report, 60.0)
    assert {s.name for s in good} == set(INDICATORS) and not reasons
    values = {s.name: s.value for s in report.samples}
    assert values["utilization"] == 64 / 128 and set(report.links) == {"west", "north"}
    assert all(s.source == "domain:east" and s.time_s == 60.0 for s in report.samples)
