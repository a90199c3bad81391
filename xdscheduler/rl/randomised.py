"""Randomised clusters to train the agents on, so that one policy serves clusters it never saw.

Each draw is a scenario of its own: 3 to MAX_NODES domains (the agents' padded graph; larger
clusters are decided by the same modules, padded wider), each of one accelerator class and
32 to 512 accelerators, every pair of domains joined by a link drawn from the measured WAN
links the shipped scenarios carry (the Skyplane inter-region measurements and the leased links
between China's computing hubs: bandwidth both ways, RTT, price, fluctuation), and a workload
at an offered load drawn from 0.5 to 1.3. Training on one scenario taught the agents its
accelerator mix and sizes: on a held-out one they kept jobs off fast accelerators that nothing
else needed.
"""

from __future__ import annotations

import functools
from itertools import combinations

import numpy as np

from xdscheduler.perception.graph import MAX_NODES
from xdscheduler.scenario import (
    Domain,
    Link,
    Location,
    NodeGroup,
    Scenario,
    Workload,
    default_scenario_path,
    load_scenario,
)

MIN_DOMAINS = 3
# Classes of the shipped scenarios, with the hourly prices the default scenario gives them
# (A100-80GB: as the A800, its export variant).
PRICES = {
    "H100-SXM": 2.0,
    "H800": 2.2,
    "A800": 1.4,
    "A100-80GB": 1.4,
    "H20": 1.0,
    "Ascend-910B": 1.2,
}
NODES = (4, 8, 16, 32, 64)  # nodes of the class's own size (8 accelerators): 32 to 512
LOADS = (0.5, 1.3)
NAMES = tuple(f"d{i}" for i in range(MAX_NODES))  # a drawn cluster's domains, in order
# The scenarios whose links are measurements, not assumptions.
MEASURED = ("five_domains.yaml", "skyplane_six_regions.yaml")


@functools.cache
def measured_links() -> tuple[Link, ...]:
    """Every link of the shipped scenarios built from measurements."""
    folder = default_scenario_path().parent
    return tuple(link for name in MEASURED for link in load_scenario(folder / name).links)


def random_scenario(rng: np.random.Generator, template: Scenario) -> Scenario:
    """A cluster drawn by `rng`, with `template`'s objective weights and workload source."""
    k = int(rng.integers(MIN_DOMAINS, MAX_NODES + 1))
    classes = list(PRICES)
    domains = []
    for i in range(k):
        acc = classes[int(rng.integers(len(classes)))]
        domains.append(
            Domain(
                name=NAMES[i],
                location=Location(region=f"random:{i}"),
                nodes=[NodeGroup(accelerator=acc, count=int(rng.choice(NODES)))],
                intra_domain_gbps=float(rng.choice((200.0, 400.0))),
                price_per_gpu_hour=PRICES[acc],
            )
        )
    pool = measured_links()
    links = [
        pool[int(rng.integers(len(pool)))].model_copy(update={"a": a.name, "b": b.name})
        for a, b in combinations(domains, 2)
    ]
    spec = template.workload or Workload()
    load = float(rng.uniform(*LOADS))
    return Scenario(
        name=f"random-{k}",
        weights=template.weights,
        domains=domains,
        links=links,
        workload=spec.model_copy(update={"load": load}),
    )
