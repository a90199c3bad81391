"""The test tiers of tests/conftest.py: every test it names still exists, and the guard fails
a unit test that starts Ray."""

from __future__ import annotations

import ast
import os
from functools import cache

import pytest

from tests.conftest import BY_NAME, REPO

pytest_plugins = ("pytester",)


@cache
def functions_in(path: str) -> set[str]:
    tree = ast.parse((REPO / "tests" / path).read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_every_test_the_tiers_name_exists(name):
    path, _, function = name.partition("::")
    assert (REPO / "tests" / path).is_file(), f"tests/conftest.py names {path}: gone?"
    assert not function or function in functions_in(path), (
        f"tests/conftest.py names {name}: renamed? (then it runs as a unit test again)"
    )


@pytest.mark.integration  # a pytest of its own in a subprocess: seconds of imports
def test_a_unit_test_that_starts_ray_fails_saying_so(pytester, monkeypatch):
    """The guard itself: a test needing no fixture of Ray is a unit test, and calling ray.init
    (as Serve, Tune and `ray.get` do when no Ray runs) fails it before Ray starts."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    )
    pytester.makeconftest("from tests.conftest import *  # the hook and the guard\n")
    pytester.makepyfile(
        test_guarded="""
        import ray

        def test_quick():
            assert 1 + 1 == 2

        def test_starts_ray():
            ray.init(address="local", num_cpus=1, include_dashboard=False)
        """
    )
    result = pytester.runpytest_subprocess("-m", "unit", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_starts_ray is a unit test and started Ray*"])
