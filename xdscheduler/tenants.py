"""Tenants sharing the cluster: nominal quotas, cohorts that lend and borrow, priorities
(the scenario's `tenancy:`), and the quota arithmetic admission and preemption use.

Kueue's model, on accelerators: each tenant has a nominal quota per accelerator class (an
accelerator name, or `all` for any); tenants of one cohort tree lend what they leave idle of
their quota (up to their `lending_limit`) and borrow it (up to their `borrowing_limit`). A
tenant using more than its nominal quota is borrowing, and gives the excess back when a tenant
of its cohort needs its own quota (reclaim). A tenant's `priority` is a floor for its jobs'.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Annotated

from pydantic import Field, model_validator

from xdscheduler.schema import FileModel, Name, NonNegative, unique

ALL = "all"  # the quota key for accelerators of any class
Count = Annotated[int, Field(ge=0, le=10_000_000)]


class Tenant(FileModel):
    """A team: what it may take, with whom it shares, how much it counts."""

    name: Name = Field(max_length=200)
    quota: dict[str, Count] = Field(min_length=1, max_length=64)  # class -> accelerators
    cohort: str | None = Field(default=None, max_length=200)
    borrowing_limit: Count | None = None  # the most it may borrow (None: what the cohort lends)
    lending_limit: Count | None = None  # the most of its idle quota others may use (None: all)
    weight: float = Field(default=1.0, gt=0, le=1000)  # its fair share against the others'
    priority: int | None = Field(default=None, ge=0, le=1000)  # its jobs' priority at least

    @model_validator(mode="after")
    def _lends_what_it_has(self) -> Tenant:
        owned = self.quota.get(ALL, sum(self.quota.values()))
        if self.lending_limit is not None and self.lending_limit > owned:
            raise ValueError(
                f"lending_limit {self.lending_limit} is more than its quota "
                f"{owned}: a tenant lends only what it owns"
            )
        return self


class Cohort(FileModel):
    name: str = Field(max_length=200)
    parent: str | None = Field(default=None, max_length=200)


class Preemption(FileModel):
    grace_s: NonNegative = Field(default=0.0, le=86400.0)  # victims checkpoint meanwhile
    protect_s: NonNegative = Field(default=3600.0, le=30 * 86400.0)  # after two in a row


class Tenancy(FileModel):
    tenants: list[Tenant] = Field(min_length=1, max_length=1000)
    cohorts: list[Cohort] = Field(default=[], max_length=1000)
    overcommit: float = Field(default=1.0, ge=1.0, le=10.0)  # nominal quotas over capacity
    preemption: Preemption = Preemption()

    @model_validator(mode="after")
    def _consistent(self) -> Tenancy:
        unique([t.name for t in self.tenants], "tenant")
        cohorts = {c.name: c.parent for c in self.cohorts}
        for i, c in enumerate(self.cohorts):
            if c.parent is not None and c.parent not in cohorts:
                raise ValueError(f"cohorts[{i}].parent: unknown cohort {c.parent!r}")
            seen, at = {c.name}, c.parent
            while at is not None:
                if at in seen:
                    raise ValueError(
                        f"cohorts[{i}]: the cohorts' parents form a cycle through {c.name!r}"
                    )
                seen.add(at)
                at = cohorts[at]
        for i, t in enumerate(self.tenants):
            if t.cohort is not None and cohorts and t.cohort not in cohorts:
                raise ValueError(
                    f"tenants[{i}].cohort: unknown cohort {t.cohort!r}; "
                    f"cohorts: {', '.join(cohorts)}"
                )
        return self

    def root(self, cohort: str | None) -> str | None:
        """The top of a cohort's tree: tenants under one root lend to each other."""
        parents = {c.name: c.parent for c in self.cohorts}
        while cohort is not None and parents.get(cohort) is not None:
            cohort = parents[cohort]
        return cohort

    def check_against(self, classes: dict[str, int], where: str = "tenancy") -> None:
        """Quota keys are the cluster's accelerator classes (or `all`), and the nominal quotas
        of each class stay within `overcommit` times what the cluster has of it."""
        capacity = {**classes, ALL: sum(classes.values())}
        for i, t in enumerate(self.tenants):
            for key in t.quota:
                if key not in capacity:
                    raise ValueError(
                        f"{where}.tenants[{i}].quota: unknown accelerator class "
                        f"{key!r}; the cluster has {', '.join(capacity)}"
                    )
        for key, have in capacity.items():
            asked = sum(t.quota.get(key, 0) for t in self.tenants)
            if asked > self.overcommit * have:
                raise ValueError(
                    f"{where}: the tenants' nominal {key} quotas add up to {asked}, "
                    f"over {self.overcommit:g} x the {have} the cluster has "
                    f"(raise overcommit to allow it)"
                )


@dataclass(frozen=True)
class Quotas:
    """Quota arithmetic over what each tenant holds now: `used[tenant][key]`, accelerators per
    class and in all (`ALL`)."""

    tenancy: Tenancy

    @cached_property
    def _by_name(self) -> dict[str, Tenant]:
        return {t.name: t for t in self.tenancy.tenants}

    def tenant(self, name: str) -> Tenant:
        return self._by_name[name]

    def nominal(self, name: str, key: str) -> int | None:
        """Its quota of `key` (None: no limit on that key)."""
        q = self.tenant(name).quota
        if key in q:
            return q[key]
        return None if key == ALL else (0 if ALL not in q else None)

    def borrowed(self, used: dict, name: str, key: str) -> int:
        q = self.nominal(name, key)
        return 0 if q is None else max(used.get(name, {}).get(key, 0) - q, 0)

    def lendable(self, used: dict, name: str, key: str) -> int:
        """What it leaves idle of its quota of `key` and lets others use."""
        t, q = self.tenant(name), self.nominal(name, key)
        idle = 0 if q is None else max(q - used.get(name, {}).get(key, 0), 0)
        return idle if t.lending_limit is None else min(idle, t.lending_limit)

    def peers(self, name: str) -> list[str]:
        """The other tenants of its cohort tree."""
        root = self.tenancy.root(self.tenant(name).cohort)
        if root is None:
            return []
        return [
            t.name
            for t in self.tenancy.tenants
            if t.name != name and self.tenancy.root(t.cohort) == root
        ]

    def headroom(self, used: dict, name: str, key: str) -> int | None:
        """How many more accelerators of `key` it may take now: its idle quota, then what its
        cohort lends that others do not already borrow, within its borrowing limit (None: no
        limit)."""
        q = self.nominal(name, key)
        if q is None:
            return None
        have, peers = used.get(name, {}).get(key, 0), self.peers(name)
        mine = self.borrowed(used, name, key)
        # what the cohort lends, less what its members (this one included) borrow already
        pool = (
            sum(self.lendable(used, p, key) for p in peers)
            - sum(self.borrowed(used, p, key) for p in peers)
            - mine
        )
        limit = self.tenant(name).borrowing_limit
        room = pool if limit is None else min(pool, limit - mine)
        return max(q - have, 0) + max(room, 0)

    def lent(self, used: dict, key: str) -> dict[str, float]:
        """Who lends what the borrowers of each cohort borrow, in proportion to what each
        leaves idle."""
        out = {t.name: 0.0 for t in self.tenancy.tenants}
        for t in self.tenancy.tenants:
            owed = self.borrowed(used, t.name, key)
            lenders = {p: self.lendable(used, p, key) for p in self.peers(t.name)}
            total = sum(lenders.values())
            for p, idle in lenders.items():
                if total > 0:
                    out[p] += owed * idle / total
        return out
