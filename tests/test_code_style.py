"""The code's style as CI checks it: ruff's lint rules and its formatter, over the whole tree
(the settings are pyproject.toml's)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


def ruff(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("ruff") is None:
        pytest.skip("ruff is in the dev extra: pip install -e '.[dev]'")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_ruff_finds_nothing():
    done = ruff("check", ".")
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_tree_is_formatted():
    done = ruff("format", "--check", ".")
    assert done.returncode == 0, f"run `ruff format .`:\n{done.stdout[-3000:]}"
