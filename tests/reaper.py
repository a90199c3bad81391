"""A clean-up that runs even when the test session is killed.

A pytest stopped by SIGTERM (a timeout, a `kill`) or SIGKILL runs no fixture's teardown, and an
xdist worker is killed by its controller without one. A live cluster left so keeps its Ray
nodes, ports and namespaces until someone runs `xds down`, and `fabric.sweep_stale` keeps a
fabric whose processes still run. So a fixture that starts one also starts a reaper: a process
of its own session that waits for the test process to end and then runs the clean-up, unless
the fixture's own teardown ran first and stopped it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

POLL_S = 1.0

_WAIT_THEN_RUN = """
import subprocess, sys, time
import psutil
try:
    owner = psutil.Process(int(sys.argv[1]))
    while owner.status() != psutil.STATUS_ZOMBIE:
        time.sleep(float(sys.argv[2]))
except psutil.NoSuchProcess:
    pass
subprocess.run(sys.argv[3:], timeout=600)
"""


@contextlib.contextmanager
def reaped(argv: list[str], env: dict | None = None, cwd: str | None = None) -> Iterator[None]:
    """Inside the block, `argv` is run once this process ends (however it ends) unless the
    block is left first: put the fixture's start and its own teardown inside."""
    reaper = subprocess.Popen(
        [sys.executable, "-c", _WAIT_THEN_RUN, str(os.getpid()), str(POLL_S), *map(str, argv)],
        env=env,
        cwd=cwd,
        start_new_session=True,  # a signal to the test's process group does not reach it
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        reaper.kill()
        reaper.wait()
