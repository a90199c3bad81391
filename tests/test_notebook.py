"""The sweep notebook runs top to bottom: training under Tune, the Pareto check, the plot."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from .conftest import REPO


@pytest.mark.slow
def test_tune_sweep_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDS_SWEEP_OUT", str(tmp_path / "sweep"))  # not a folder left in /tmp
    nb = nbformat.read(REPO / "notebooks" / "tune_sweep.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "coverage" in printed and "Pareto-optimal choices" in printed
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the front plot is shown"
    assert (tmp_path / "sweep" / "pareto_front.png").is_file()  # the trials went where asked
