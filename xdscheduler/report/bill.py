"""A tenant's bill from the study's ledger: itemised per job and accelerator class, over a
window of study time, with totals that reconcile with the report's metered usage.

A usage record spans the time since its job's previous one (at most one network sample, five
minutes); a window that cuts it takes the share of it that falls inside, as if used evenly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.sim.metering import ACCELERATORS


@dataclass(frozen=True)
class Bill:
    tenant: str
    policy: str
    start_s: float
    end_s: float
    items: pd.DataFrame  # job, kind, domain, accelerator, quantity, unit, usd
    totals: pd.DataFrame  # kind, accelerator, quantity, unit, usd

    @property
    def total_usd(self) -> float:
        return float(self.items["usd"].sum())

    def as_dict(self) -> dict:
        return {
            "tenant": self.tenant,
            "policy": self.policy,
            "from_s": self.start_s,
            "to_s": self.end_s,
            "total_usd": self.total_usd,
            "totals": self.totals.to_dict(orient="records"),
            "items": self.items.to_dict(orient="records"),
        }


def bill(
    records: pd.DataFrame, tenant: str, policy: str, start_s: float = 0.0, end_s: float = np.inf
) -> Bill:
    """The tenant's usage under `policy` between `start_s` and `end_s`, priced."""
    if records.empty:
        raise UserError("the ledger holds no usage records")
    policies = sorted(records["policy"].unique())
    if policy not in policies:
        raise UserError(f"no policy {policy!r} in the ledger; it has {', '.join(policies)}")
    mine = records[records["policy"] == policy]
    tenants = sorted(mine["tenant"].unique())
    if tenant not in tenants:
        raise UserError(
            f"no tenant {tenant!r} in the ledger of {policy}; it has {', '.join(tenants)}"
        )
    if end_s <= start_s:
        raise UserError(f"--to ({end_s / 3600:g} h) must be after --from ({start_s / 3600:g} h)")
    mine = mine[mine["tenant"] == tenant]
    t0, t1 = mine["t0_s"].to_numpy(), mine["t1_s"].to_numpy()
    span = t1 - t0
    overlap = np.minimum(t1, end_s) - np.maximum(t0, start_s)
    inside = np.where(
        span > 0,
        np.clip(overlap / np.where(span > 0, span, 1), 0, 1),
        ((t1 >= start_s) & (t1 <= end_s)).astype(float),
    )
    priced = mine.assign(quantity=mine["quantity"] * inside, usd=mine["usd"] * inside)
    priced = priced[inside > 0]
    accel = priced["kind"] == ACCELERATORS
    priced = priced.assign(
        quantity=np.where(accel, priced["quantity"] / 3600, priced["quantity"]),
        unit=np.where(accel, "accelerator-hours", "GB"),
    )
    keys = ["job", "kind", "domain", "accelerator", "unit"]
    items = (
        priced.groupby(keys, as_index=False)[["quantity", "usd"]]
        .sum()
        .sort_values(["job", "kind", "domain"], ignore_index=True)
    )
    totals = priced.groupby(["kind", "accelerator", "unit"], as_index=False)[
        ["quantity", "usd"]
    ].sum()
    return Bill(tenant, policy, start_s, end_s, items, totals)


def render(b: Bill) -> str:
    """The bill as text: a line per item, subtotals per class, the total."""
    to = "the end" if not np.isfinite(b.end_s) else f"{b.end_s / 3600:g} h"
    lines = [
        f"{b.tenant} under {b.policy}: ${b.total_usd:,.2f} from {b.start_s / 3600:g} h to "
        f"{to} of the study",
        "",
        f"{'job':<28} {'item':<24} {'quantity':>14} {'usd':>12}",
    ]
    for row in b.items.itertuples():
        what = f"{row.accelerator} in {row.domain}" if row.kind == ACCELERATORS else "WAN"
        lines.append(
            f"{row.job:<28} {what:<24} {row.quantity:>10,.2f} "
            f"{'GPU-h' if row.kind == ACCELERATORS else 'GB':<3} {row.usd:>12,.2f}"
        )
    lines.append("")
    for row in b.totals.itertuples():
        what = row.accelerator if row.kind == ACCELERATORS else "WAN"
        lines.append(f"{'total ' + what:<53} {row.usd:>12,.2f}")
    lines.append(f"{'TOTAL':<53} {b.total_usd:>12,.2f}")
    return "\n".join(lines)
