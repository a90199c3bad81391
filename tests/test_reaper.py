"""The reaper behind the live fixtures: their clean-up runs when the test process is killed,
and only then."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.conftest import REPO
from tests.reaper import POLL_S

# a test process: the clean-up (writing a file) set up, then killed or left normally
OWNER = """
import os, signal, sys
from tests.reaper import reaped
write = "import sys; open(sys.argv[1], 'w').write('done')"
with reaped([sys.executable, "-c", write, sys.argv[1]]):
    print("ready", flush=True)
    if sys.argv[2] == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
"""


def owner(marker, how: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(marker), how],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_a_killed_test_process_has_its_clean_up_run(tmp_path):
    marker = tmp_path / "cleaned"
    owner(marker, "killed").wait()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the reaper never ran the clean-up"
        time.sleep(0.2)
    assert marker.read_text() == "done"


def test_a_clean_up_done_by_the_fixture_is_not_run_again(tmp_path):
    marker = tmp_path / "cleaned"
    assert owner(marker, "left").wait() == 0
    time.sleep(2 * POLL_S + 0.5)  # a reaper left running would have seen its owner gone
    assert not marker.exists()
