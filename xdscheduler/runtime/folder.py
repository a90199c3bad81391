"""A study's output folder: one study at a time, nothing finished overwritten by accident, and
what it takes to resume an interrupted study kept beside its journal.

`StudyFolder(out, mode)` is a context manager held for the whole study. On entry it makes the
folder, checks it can be written (before any work, so a study never runs to be lost), takes an
exclusive lock (a second study into the same folder is refused at once), and checks what the
folder holds against `mode`:

- "new": the folder holds no study (neither a journal nor a report);
- "force": whatever it holds is replaced;
- "resume": it holds an interrupted study, whose parameters (`study.json`) are returned by
  `spec()`; its journal is kept, and the controllers replay to where it reached.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from xdscheduler.errors import UserError
from xdscheduler.runtime.ledger import LEDGER
from xdscheduler.textfile import write_atomic

LOCK = ".xds-lock"
SPEC = "study.json"
JOURNAL = "journal.sqlite"
REPORT = "report.json"
MODES = ("new", "force", "resume")


class StudySpec(BaseModel):
    """What a study was started with: enough to run it again, or on from its journal."""

    model_config = ConfigDict(extra="forbid")
    scenario: dict
    policies: list[str]
    hours: float
    seed: int
    faults: float | None = None
    forecast: bool | None = None
    realtime: bool = False
    speed: float = 1.0
    policy_path: str | None = None
    serve_url: str | None = None


class StudyFolder:
    def __init__(self, out: str | Path, mode: str = "new"):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        self.path, self.mode = Path(out), mode
        self._lock = None

    def __enter__(self) -> StudyFolder:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".xds-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise UserError(f"cannot write the output folder {self.path}: "
                            f"{err.strerror or err}; pick another --out") from None
        self._lock = (self.path / LOCK).open("a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise UserError(f"{self.path} is in use by another study running now; wait for it "
                            f"or pick another --out") from None
        self._check()
        return self

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def _check(self) -> None:
        finished = (self.path / REPORT).exists()
        started = (self.path / JOURNAL).exists()
        if self.mode == "new" and (finished or started):
            what = "a finished study" if finished else "an unfinished study"
            hint = ("" if finished else f"--resume {self.path} to continue it, ")
            raise UserError(f"{self.path} holds {what}: {hint}--force to start over in it, or "
                            f"pick another --out")
        if self.mode == "resume":
            self.resumable()
        if self.mode == "force":
            for name in (REPORT, SPEC, *(f"{db}{end}" for db in (JOURNAL, LEDGER)
                                         for end in ("", "-wal", "-shm"))):
                (self.path / name).unlink(missing_ok=True)

    def resumable(self) -> None:
        """Refuse (UserError) a folder without a study to resume."""
        if not ((self.path / JOURNAL).exists() and (self.path / SPEC).exists()):
            raise UserError(f"{self.path} holds no study to resume (no {JOURNAL} and {SPEC}; "
                            f"studies run with --local keep no journal)")

    def spec(self) -> StudySpec:
        """The parameters the interrupted study was started with."""
        self.resumable()
        path = self.path / SPEC
        try:
            return StudySpec.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError) as err:
            raise UserError(f"{path} is damaged ({str(err).splitlines()[0]}): the study cannot "
                            f"resume; run it again with --force") from None

    def record(self, spec: StudySpec) -> None:
        write_atomic(self.path / SPEC, spec.model_dump_json(indent=2) + "\n")

    @property
    def journal(self) -> Path:
        return (self.path / JOURNAL).resolve()

    @property
    def ledger(self) -> Path:
        return (self.path / LEDGER).resolve()


