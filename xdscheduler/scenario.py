"""Scenario files: the domains, links and jobs of a study, validated at the boundary."""

from __future__ import annotations

import itertools
import logging
import re
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import TypeVar

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from xdscheduler import catalog
from xdscheduler.costmodel.plan import Precision
from xdscheduler.errors import UserError
from xdscheduler.schema import FileModel, Name, NonNegative, Positive, said, unique
from xdscheduler.tenants import Tenancy
from xdscheduler.yamlfile import read_yaml

log = logging.getLogger("xdscheduler.scenario")
_SAID: set[tuple[str, str]] = set()  # (resolved path, domain): a mixed domain's pools, said

MAX_DOMAIN_GPUS = 1_000_000  # accelerators in one domain (and asked by one job)
MAX_DOMAINS = 256
MAX_LINK_GBPS = 10_000.0
# The round trip between two accelerator types of one data centre: tens of microseconds.
FABRIC_RTT_MS = 0.05
MAX_LOAD = 3.0  # offered load: three times what the domains hold is already a queue for ever
YEAR_S = 365 * 86400.0
M = TypeVar("M", bound=BaseModel)


class Location(FileModel):
    """Where a domain is: a city and coordinates, or a cloud region."""

    city: str | None = None
    region: str | None = None
    lat: float | None = Field(default=None, ge=-90, le=90)
    lon: float | None = Field(default=None, ge=-180, le=180)

    @model_validator(mode="after")
    def _named(self) -> Location:
        if self.city is None and self.region is None:
            raise ValueError("give a 'city' or a cloud 'region'")
        return self


class NodeGroup(FileModel):
    """Identical nodes of one accelerator type."""

    accelerator: str
    count: int = Field(gt=0, le=100_000)  # nodes
    gpus_per_node: int | None = Field(default=None, gt=0, le=128)

    @field_validator("accelerator")
    @classmethod
    def _known_accelerator(cls, name: str) -> str:
        try:
            return catalog.accelerator(name).name
        except UserError as err:
            raise ValueError(str(err)) from None

    @property
    def spec(self) -> catalog.Accelerator:
        return catalog.accelerator(self.accelerator)

    @property
    def gpus_each(self) -> int:
        return self.gpus_per_node or self.spec.gpus_per_node


class Storage(FileModel):
    capacity_tb: Positive = Field(default=1000.0, le=1e7)
    io_gbps: Positive = Field(default=200.0, le=1e5)


class Domain(FileModel):
    """One data centre: nodes joined by a fast fabric."""

    name: Name
    location: Location
    nodes: list[NodeGroup] = Field(min_length=1)
    intra_node_gbps: Positive | None = Field(default=None, le=1e5)  # scale-up per GPU per
    # direction; None: the catalog's
    intra_domain_gbps: Positive = Field(default=200.0, le=3200)  # scale-out per GPU
    # what one connection between accelerators of two nodes gets (a cloud VM's NIC serves
    # several at once, each below its whole rate); None: no cap beyond intra_domain_gbps
    flow_gbps: Positive | None = Field(default=None, le=3200)
    storage: Storage = Storage()
    price_per_gpu_hour: NonNegative = Field(default=2.0, le=1000)

    @model_validator(mode="after")
    def _bounded(self) -> Domain:
        if self.gpus > MAX_DOMAIN_GPUS:
            raise ValueError(
                f"{self.gpus:,} accelerators; a domain holds at most {MAX_DOMAIN_GPUS:,}"
            )
        return self

    @cached_property  # a scenario is immutable; asked at every report of every domain
    def gpus(self) -> int:
        return sum(g.count * g.gpus_each for g in self.nodes)

    @cached_property
    def accelerator(self) -> catalog.Accelerator:
        """The accelerator most of the domain has: its only one in a scenario read, where a
        mixed domain is a pool per type."""
        return self._main_group.spec

    @cached_property
    def gpus_per_node(self) -> int:
        """Accelerators per node of that main group (the scenario's, else the catalog's)."""
        return self._main_group.gpus_each

    @cached_property
    def _main_group(self) -> NodeGroup:
        return max(self.nodes, key=lambda g: g.count * g.gpus_each)

    @cached_property
    def kinds(self) -> dict[str, int]:
        """Accelerators by type, the largest group's first."""
        count: Counter[str] = Counter()
        for g in self.nodes:
            count[g.spec.name] += g.count * g.gpus_each
        return dict(count.most_common())

    def pools(self) -> list[Domain]:
        """The domain as one pool per accelerator type, each named `domain.TYPE` and holding
        its share of the storage; itself where it has one type."""
        if len(self.kinds) < 2:
            return [self]
        whole, out = self.model_dump(), []
        for kind, gpus in self.kinds.items():
            share = gpus / self.gpus
            pool = {
                # spelt as a domain's name is: '+' as '-', which the catalog already holds to be
                # the same name (its keys ignore both), so no two types get one pool name
                "name": f"{self.name}.{kind.replace('+', '-')}",
                "nodes": [
                    whole["nodes"][i] for i, g in enumerate(self.nodes) if g.spec.name == kind
                ],
                "storage": {k: v * share for k, v in whole["storage"].items()},
            }
            out.append(Domain.model_validate({**whole, **pool}))
        return out

    def fabric(self, x: Domain, y: Domain) -> Link:
        """The link between two of its pools: its own network, every node pair at a node's
        scale-out rate at once, a data centre's round trip, no egress price, no swings."""
        node_gbps = self.intra_domain_gbps * min(x.gpus_per_node, y.gpus_per_node)
        return Link.model_validate(
            {
                "a": x.name,
                "b": y.name,
                "bandwidth_gbps": float(min(node_gbps, MAX_LINK_GBPS)),
                "rtt_ms": FABRIC_RTT_MS,
                "fluctuation": 0.0,
                "per_node_pair": True,
                "flow_gbps": self.flow_gbps,
                "source": f"domain {self.name}'s own network, between its accelerator types",
            }
        )


class Link(FileModel):
    """A WAN link between two domains; bandwidth per direction."""

    a: str
    b: str
    bandwidth_gbps: Positive = Field(le=MAX_LINK_GBPS)
    bandwidth_gbps_ba: Positive | None = Field(default=None, le=MAX_LINK_GBPS)  # b->a if it differs
    rtt_ms: NonNegative = Field(le=2000)
    price_per_gb: NonNegative = Field(default=0.0, le=100)
    # bound on |epsilon(t)| in B0 (1 + epsilon(t)): measured WAN pairs swing by half or more;
    # at 0.9 a link keeps a tenth of B0 at its lowest (at 1 it would reach 0, a divisor)
    fluctuation: float = Field(default=0.2, ge=0, le=0.9)
    # true: the bandwidth is what one pair of nodes gets (a cloud's per-VM cap, measured
    # between two VMs), and every node pair of a job across the link gets it in parallel;
    # false: it is the whole link's, shared by everything that crosses it (a leased line)
    per_node_pair: bool = False
    # what one connection between two accelerators across the link gets, the slower way;
    # None: no cap beyond the link's bandwidth
    flow_gbps: Positive | None = Field(default=None, le=MAX_LINK_GBPS)
    source: str | None = None

    @model_validator(mode="after")
    def _two_ends(self) -> Link:
        if self.a == self.b:
            raise ValueError(f"a link needs two different domains, got {self.a!r} twice")
        return self


class Architecture(FileModel):
    """An explicit transformer, for models not in the catalog."""

    layers: int = Field(gt=0, le=1024)
    hidden: int = Field(gt=0, le=1 << 17)
    ffn_hidden: int = Field(gt=0, le=1 << 20)
    heads: int = Field(gt=0, le=4096)
    kv_heads: int | None = Field(default=None, gt=0, le=4096)
    vocab: int = Field(gt=0, le=1 << 24)
    gated_mlp: bool = True
    tied_embeddings: bool = False


class GpuRequest(FileModel):
    min: int = Field(default=8, gt=0, le=MAX_DOMAIN_GPUS)
    max: int = Field(default=1024, gt=0, le=MAX_DOMAIN_GPUS)

    @model_validator(mode="after")
    def _ordered(self) -> GpuRequest:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is larger than max {self.max}")
        return self


class Job(FileModel):
    """A training job: what it trains, how much, and who asks."""

    name: str = Field(min_length=1, max_length=200)
    model: str | None = None
    architecture: Architecture | None = None
    global_batch: int = Field(gt=0, le=1 << 24)  # sequences per step
    seq_len: int | None = Field(default=None, gt=0, le=1 << 24)
    tokens: Positive = Field(le=1e16)  # tokens to train
    tenant: str = Field(default="default", min_length=1, max_length=200)
    priority: int = Field(default=1, ge=0, le=1000)
    arrival_s: NonNegative = Field(default=0.0, le=YEAR_S)
    gpus: GpuRequest = GpuRequest()
    # the precision it trains in (fp16 on accelerators without BF16, such as V100); None: the
    # planner's default, BF16
    dtype: Precision | None = None

    @model_validator(mode="after")
    def _one_model(self) -> Job:
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give exactly one of 'model' (a catalog name) or 'architecture'")
        if self.model is not None:
            try:
                catalog.model(self.model)
            except UserError as err:
                raise ValueError(str(err)) from None
        try:
            self.arch.validate()
        except UserError as err:  # as a ValueError, the error names the file and the job
            raise ValueError(str(err)) from None
        return self

    @property
    def arch(self) -> catalog.ModelArch:
        if self.model is not None:
            base = catalog.model(self.model)
            if self.seq_len is None:
                return base
            return catalog.ModelArch(**{**base.__dict__, "seq_len": self.seq_len})
        a = self.architecture
        assert a is not None
        return catalog.ModelArch(
            self.name,
            a.layers,
            a.hidden,
            a.ffn_hidden,
            a.heads,
            a.kv_heads or a.heads,
            a.vocab,
            self.seq_len or 2048,
            a.gated_mlp,
            a.tied_embeddings,
        )


class Weights(FileModel):
    """R = efficiency·w1 + utilisation·w2 − cost·w3."""

    efficiency: NonNegative = Field(default=1.0, le=1000)
    utilization: NonNegative = Field(default=0.3, le=1000)
    cost: NonNegative = Field(default=0.3, le=1000)

    @model_validator(mode="after")
    def _some_weight(self) -> Weights:
        if not (self.efficiency or self.utilization or self.cost):
            raise ValueError(
                "every weight is 0: R would rank every plan alike; give at least one weight above 0"
            )
        return self


class Workload(FileModel):
    """Jobs generated on top of the listed ones, from published LLM-cluster statistics."""

    load: float = Field(default=0.9, gt=0, le=MAX_LOAD)  # offered accelerator-time / capacity
    # a cluster of the Acme summary (kalos, seren shipped); checked against it when jobs are drawn
    cluster: str = Field(default="kalos", min_length=1, max_length=100)
    min_gpus: int = Field(default=8, gt=0, le=MAX_DOMAIN_GPUS)
    dtype: Precision | None = None  # the generated jobs' precision, as a job's `dtype`


class Scenario(FileModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    seed: int = Field(default=0, ge=0, lt=2**32)
    weights: Weights = Weights()
    domains: list[Domain] = Field(min_length=1, max_length=MAX_DOMAINS)
    links: list[Link] = Field(default=[], max_length=MAX_DOMAINS * (MAX_DOMAINS - 1) // 2)
    jobs: list[Job] = Field(default=[], max_length=10_000)
    workload: Workload | None = None
    tenancy: Tenancy | None = None  # tenants, quotas and preemption (None: one queue for all)
    # accelerators of the scenario's own (another SKU, measured figures), added to the catalog
    accelerators: list[catalog.AcceleratorEntry] = Field(default=[], max_length=100)
    _sites: dict[str, str] = PrivateAttr(default_factory=dict)  # a pool -> the domain it is of

    @model_validator(mode="before")
    @classmethod
    def _own_accelerators(cls, data):
        """The scenario's accelerators join the catalog before its domains name them."""
        entries = data.get("accelerators") if isinstance(data, dict) else None
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            try:
                catalog.register(
                    catalog.AcceleratorEntry.model_validate(entry), f"accelerators[{i}]"
                )
            except ValidationError as err:
                first = err.errors()[0]
                where = ".".join(str(x) for x in first["loc"])
                raise ValueError(f"accelerators[{i}].{where}: {said(first)}") from None
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [d.name for d in self.domains]
        unique(names, "domain")
        seen = set()
        for i, link in enumerate(self.links):
            for end in (link.a, link.b):
                if end not in names:
                    raise ValueError(
                        f"links[{i}] names unknown domain {end!r}; domains: {', '.join(names)}"
                    )
            pair = frozenset((link.a, link.b))
            if pair in seen:
                raise ValueError(f"links[{i}]: a second link between {link.a} and {link.b}")
            seen.add(pair)
        unique([j.name for j in self.jobs], "job")
        total = sum(d.gpus for d in self.domains)
        if self.workload is not None and self.workload.min_gpus > total:
            raise ValueError(
                f"workload.min_gpus: {self.workload.min_gpus} is more than the "
                f"{total} accelerators of all the domains together"
            )
        self._split_mixed()
        if self.tenancy is not None:
            self._tenants_known(self.tenancy)
        return self

    def _split_mixed(self) -> None:
        """Each domain of several accelerator types becomes a pool per type, linked to each
        other by the domain's own network and to the other domains as the domain is: every
        plan then runs each accelerator at its own speed (before, a mixed domain was planned
        as its largest group's type, its other accelerators at that type's speed)."""
        pools = {d.name: d.pools() for d in self.domains}
        if all(len(p) == 1 for p in pools.values()):
            return
        names = [p.name for ps in pools.values() for p in ps]
        taken = sorted(n for n, times in Counter(names).items() if times > 1)
        if taken:
            raise ValueError(
                f"domain {taken[0]!r} is also the name of a mixed domain's pool (a domain of "
                "several accelerator types is planned as a pool per type, named DOMAIN.TYPE); "
                "rename the domain"
            )
        if len(names) > MAX_DOMAINS:
            raise ValueError(
                f"{len(names)} domains once mixed domains are split into a pool per "
                f"accelerator type; at most {MAX_DOMAINS}"
            )
        links = [
            Link.model_validate({**link.model_dump(), "a": x.name, "b": y.name})
            for link in self.links
            for x in pools[link.a]
            for y in pools[link.b]
        ]
        for d in self.domains:
            links += [d.fabric(x, y) for x, y in itertools.combinations(pools[d.name], 2)]
        self._sites = {p.name: site for site, ps in pools.items() if len(ps) > 1 for p in ps}
        object.__setattr__(self, "domains", [p for ps in pools.values() for p in ps])
        object.__setattr__(self, "links", links)  # validated; frozen to the rest of the code

    @property
    def pooled(self) -> dict[str, str]:
        """Each domain of several accelerator types, and in words the pools it became."""
        by_name = {d.name: d for d in self.domains}
        return {
            site: _pooling(site, [by_name[n] for n in names], self.links)
            for site, names in self.sites.items()
            if len(names) > 1
        }

    def site(self, domain: str) -> str:
        """The data centre a domain is: the one written, for a pool of a mixed one."""
        return self._sites.get(domain, domain)

    def line(self, a: str, b: str) -> frozenset[str]:
        """The line between two domains' data centres, which the copies of it to each pool of a
        mixed one share (a single site: that domain's own network)."""
        return frozenset((self.site(a), self.site(b)))

    @property
    def sites(self) -> dict[str, list[str]]:
        """Each data centre as written, and its domains (its pools, or itself), in order. Its
        pools fail together, and each WAN line between two is one line however many pools it
        serves: the faults and the network's swings are drawn per site."""
        out: dict[str, list[str]] = {}
        for d in self.domains:
            out.setdefault(self.site(d.name), []).append(d.name)
        return out

    def _tenants_known(self, tenancy: Tenancy) -> None:
        classes: dict[str, int] = {}
        for d in self.domains:
            classes[d.accelerator.name] = classes.get(d.accelerator.name, 0) + d.gpus
        tenancy.check_against(classes)
        names = [t.name for t in tenancy.tenants]
        for i, job in enumerate(self.jobs):
            if job.tenant not in names:
                raise ValueError(
                    f"jobs[{i}].tenant: unknown tenant {job.tenant!r}; tenants: {', '.join(names)}"
                )

    def job(self, name: str | None = None) -> Job:
        if not self.jobs:
            raise UserError(f"scenario {self.name!r} has no jobs")
        if name is None:
            return self.jobs[0]
        for job in self.jobs:
            if job.name == name:
                return job
        names = [j.name for j in self.jobs]
        raise UserError(
            f"no job {name!r} in scenario {self.name!r}"
            f"{catalog.did_you_mean(name, names)}; jobs: {', '.join(names)}"
        )


def _pooling(site: str, pools: list[Domain], links: list[Link]) -> str:
    fabric = next(x for x in links if {x.a, x.b} == {pools[0].name, pools[1].name})
    return (
        f"domain {site} mixes {', '.join(f'{p.gpus} {p.accelerator.name}' for p in pools)}: it is "
        f"planned as {len(pools)} pools, {', '.join(p.name for p in pools)}, joined by its own "
        f"network ({fabric.bandwidth_gbps:g} Gbit/s a node pair) and linked to the other "
        "domains as it is"
    )


TOP = "(top level)"


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or TOP


def parse_scenario(data: object, source: str = "scenario") -> Scenario:
    """Validate a parsed YAML document; raise UserError naming the first bad field."""
    return validated(Scenario, data, source, "scenario")


def validated(model: type[M], data: object, source: str, what: str) -> M:
    """`data` as a `model`; UserError naming the first bad field and what is accepted."""
    if data is None:
        raise UserError(f"{source}: the file is empty (a {what} is a YAML mapping of fields)")
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = _where(tuple(p for p in first["loc"] if p not in ("function-after",)))
        msg = said(first)
        if first["type"] == "extra_forbidden":
            msg = f"unknown field (not part of the {what} schema)"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        if where == TOP and re.match(r"[a-z_]+(\[\d+\][ .:]|[.:])", msg):
            where = ""  # a check of the whole file that names the field itself
        raise UserError(f"{source}: {where + ': ' if where else ''}{msg}{more}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file; what became of a domain of mixed accelerators
    is said (once a file and domain: studies read their scenario many times)."""
    scn = parse_scenario(read_yaml(path, "scenario"), str(path))
    for name, pools in scn.pooled.items():
        if (key := (str(Path(path).resolve()), name)) not in _SAID:
            _SAID.add(key)
            log.info("%s: %s", path, pools)
    return scn


def default_scenario_path() -> Path:
    """The scenario `xds` uses when none is given: five domains at national computing hubs."""
    here = Path("scenarios") / "five_domains.yaml"
    if here.is_file():
        return here
    repo = Path(__file__).resolve().parents[1] / "scenarios" / "five_domains.yaml"
    if repo.is_file():
        return repo
    raise UserError("no scenario given and scenarios/five_domains.yaml not found; pass a path")
