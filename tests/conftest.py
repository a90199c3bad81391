"""Shared fixtures: the repository's scenarios, and the shared measurement data when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"


def shared_data_dir() -> Path | None:
    """The folder of public measurements beside the repository, if this checkout has it."""
    env = os.environ.get("XDS_DATA_DIR")
    for candidate in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data"]:
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture
def default_scenario_path() -> Path:
    return SCENARIOS / "five_domains.yaml"


@pytest.fixture
def data_dir() -> Path:
    found = shared_data_dir()
    if found is None:
        pytest.skip("shared measurement data not present (set XDS_DATA_DIR to its folder)")
    return found
