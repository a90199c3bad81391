"""The documentation: the site builds strictly (links, anchors and included files checked), the
README stays a short front page whose test command is CI's, and the results page keeps the
markers `xds compare` and `xds share bench` write between."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xdscheduler.report.readme import check_readme

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the dev extra's mkdocs builds the site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice, not about this site
    done = subprocess.run(  # from elsewhere: every path is the config file's own
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    page = (tmp_path / "site" / "getting-started" / "index.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))  # code is highlighted token by token
    assert 'pip install -e ".[dev]" && mypy && python -m pytest' in text  # the README's


def test_the_readme_is_a_short_front_page_whose_test_command_ci_runs():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    command = next(line for line in readme.splitlines() if line.endswith("python -m pytest"))
    ci = [
        line
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == [command]


@pytest.mark.parametrize("section", ["compare", "share"])
def test_the_results_page_holds_each_generated_section_once(section):
    check_readme(REPO / "docs" / "results.md", section)  # UserError unless one pair of markers
