"""Run `xds compare` from a benchmark, and write its paired changes as table cells."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import yaml

from xdscheduler.cli import main as xds
from xdscheduler.errors import UserError
from xdscheduler.scenario import parse_scenario
from xdscheduler.yamlfile import read_yaml


def run_compare(
    scenario: Path,
    policies: list[str],
    seeds: int,
    loads: str,
    hours: float,
    out: Path,
    local: bool,
    baseline: str | None = None,
) -> dict:
    """`xds compare` of `policies` on one scenario (in this process with `local`; against
    `baseline`, by default the command's own): its JSON."""
    args = ["compare", str(scenario), "--policies", ",".join(policies), "--seeds", str(seeds)]
    args += ["--baseline", baseline] if baseline else []
    args += ["--loads", loads, "--hours", str(hours), "--out", str(out), "--force"]
    code = xds(args + (["--local"] if local else []))
    if code:
        raise SystemExit(code)
    return json.loads((out / "compare.json").read_text())


def scenario_variant(path: Path, out: Path, suffix: str, links: Callable[[dict], dict]) -> Path:
    """The scenario at `path` with each link rewritten by `links` and `suffix` added to its
    name, written to `out`; a clear exit where `path` is not a scenario."""
    try:
        doc = read_yaml(path, "scenario")
        parse_scenario(doc, str(path))  # checked as `xds` checks it
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    assert isinstance(doc, dict)  # a valid scenario is a mapping
    doc["name"] = f"{doc['name']}_{suffix}"
    doc["links"] = [links(link) for link in doc.get("links", [])]
    target = out / f"{doc['name']}.yaml"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


def by_cell(doc: dict) -> tuple[dict, dict]:
    """A comparison's paired changes and its summaries, each by (load, policy, figure)."""

    def index(part: str) -> dict:
        return {(r["load"], r["policy"], r["figure"]): r for r in doc[part]}

    return index("paired"), index("summary")


def change_cell(p: dict) -> str:
    """A paired change as `-12.3% ± 4.5%*` (* significant); – where the class has no job."""
    if p["mean"] is None:
        return "–"
    half = 0.0 if p["half_width"] is None or math.isnan(p["half_width"]) else p["half_width"]
    star = "*" if p["significant"] else ""
    return f"{100 * p['mean']:+.1f}% ± {100 * half:.1f}%{star}"
