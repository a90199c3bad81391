"""A study's output folder: one study at a time, nothing finished overwritten by accident, and
what it takes to resume an interrupted study kept beside its journal.

`StudyFolder(out, mode)` is a context manager held for the whole study. On entry it makes the
folder, checks it can be written (before any work, so a study never runs to be lost), takes an
exclusive lock (a second study into the same folder is refused at once), and checks what the
folder holds against `mode`:

- "new": the folder holds no study (neither a journal nor a report), nor any file the study
  writes (a user's own report.html is not written over);
- "force": whatever it holds is replaced;
- "resume": it holds an interrupted study, whose parameters (`study.json`) are returned by
  `spec()`; its journal is kept (checked first), and the controllers replay to where it
  reached.

A study folder is data, which a user may have received from anyone: nothing it names that runs
as code (a trained policy) is loaded, nor any endpoint it names sent the API token, unless the
command line names it again or, for the policy, its digest is what it was when the study began
(`trusted`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from functools import partial
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from xdscheduler.errors import UserError
from xdscheduler.runtime.journal import check_log
from xdscheduler.runtime.ledger import LEDGER
from xdscheduler.schema import said
from xdscheduler.textfile import (
    output_file,
    output_folder,
    read_text,
    unclaimed,
    write_atomic,
)

LOCK = ".xds-lock"
SPEC = "study.json"
JOURNAL = "journal.sqlite"
REPORT = "report.json"
MODES = ("new", "force", "resume")
MAX_SPEC_BYTES = 4 << 20  # the scenario is in it: scenario files are read up to 1 MiB of YAML
MAX_POLICY_BYTES = 1 << 30  # a trained policy's files, hashed: the shipped ones are 3 MB


class StudySpec(BaseModel):
    """What a study was started with: enough to run it again, or on from its journal."""

    model_config = ConfigDict(extra="forbid")
    scenario: dict
    policies: list[str] = Field(min_length=1, max_length=100)
    hours: float = Field(gt=0, le=24 * 30)
    seed: int = Field(ge=0, lt=2**32)
    faults: float | None = Field(default=None, gt=0, le=1000)
    forecast: bool | None = None
    realtime: bool = False
    speed: float = Field(default=1.0, gt=0, le=86400)
    policy_path: str | None = None
    policy_sha256: str | None = None  # of policy_path's files when the study began
    serve_url: str | None = None

    @model_validator(mode="after")
    def _paced_only_when_live(self) -> StudySpec:
        if self.speed != 1.0 and not self.realtime:
            raise ValueError(f"speed {self.speed:g} paces a live study, and realtime is false")
        return self


def digest(path: str | Path) -> str:
    """SHA-256 over a file, or a folder's files (their relative names and contents, symlinks
    by where they point): what a policy's folder held."""
    path = Path(path)
    h, total = hashlib.sha256(), 0
    files = (
        [path]
        if not path.is_dir()
        else sorted(Path(root) / f for root, _, names in os.walk(path) for f in names)
    )
    for f in files:
        h.update(f.relative_to(path).as_posix().encode() + b"\0" if f != path else b"")
        if f.is_symlink():
            h.update(b"-> " + os.readlink(f).encode())
        elif f.is_file():  # never a fifo or a device: opening one may wait for ever
            total += f.stat().st_size
            if total > MAX_POLICY_BYTES:
                raise UserError(f"{path} holds over {MAX_POLICY_BYTES:,} bytes: not a policy")
            with f.open("rb") as data:
                for block in iter(partial(data.read, 1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def trusted(
    spec: StudySpec, out: str | Path, policy_path: str | None, serve_url: str | None
) -> None:
    """Refuse to resume with a policy or an endpoint named by `spec` alone (UserError), unless
    the command line names it again (`policy_path`, `serve_url`) or the policy's files are
    those hashed when the study began."""
    where = Path(out) / SPEC
    if policy_path is not None and (
        spec.policy_path is None or Path(policy_path).resolve() != Path(spec.policy_path).resolve()
    ):
        raise UserError(
            f"--policy-path {policy_path} is not the policy {where} names "
            f"({spec.policy_path or 'the shipped one'}): a study resumes with what "
            f"it began with"
        )
    if serve_url is not None and serve_url != spec.serve_url:
        raise UserError(
            f"--serve-url {serve_url} is not the endpoint {where} names "
            f"({spec.serve_url or 'none'}): a study resumes with what it began with"
        )
    if spec.policy_path and policy_path is None and not _unchanged(spec):
        raise UserError(
            f"{where} names the policy {spec.policy_path}, whose files are not "
            f"those hashed when the study began; a policy is code, and a study "
            f"folder may come from anyone: to load it, name it again (--policy-path "
            f"{spec.policy_path})"
        )
    if spec.serve_url and serve_url is None:
        raise UserError(
            f"{where} names the endpoint {spec.serve_url}, which would be sent your "
            f"API token; to use it, name it again (--serve-url {spec.serve_url})"
        )


def _unchanged(spec: StudySpec) -> bool:
    path = spec.policy_path
    if path is None or spec.policy_sha256 is None or not Path(path).exists():
        return False
    return digest(path) == spec.policy_sha256


class StudyFolder:
    def __init__(self, out: str | Path, mode: str = "new"):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        self.path, self.mode = Path(out), mode
        self._lock: TextIO | None = None  # held while the study runs

    def __enter__(self) -> StudyFolder:
        output_folder(self.path)
        try:
            probe = self.path / f".xds-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise UserError(
                f"cannot write the output folder {self.path}: "
                f"{err.strerror or err}; pick another --out"
            ) from None
        self._lock = lock = output_file(self.path / LOCK, "lock file").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise UserError(
                f"{self.path} is in use by another study running now; wait for it "
                f"or pick another --out"
            ) from None
        self._check()
        return self

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def _check(self) -> None:
        from xdscheduler.report.writer import FILES

        outputs = (*FILES, SPEC, "decisions.jsonl", JOURNAL, LEDGER)
        finished = (self.path / REPORT).exists()
        started = (self.path / JOURNAL).exists()
        if self.mode == "new" and (finished or started):
            what = "a finished study" if finished else "an unfinished study"
            hint = "" if finished else f"--resume {self.path} to continue it, "
            raise UserError(
                f"{self.path} holds {what}: {hint}--force to start over in it, or "
                f"pick another --out"
            )
        if self.mode == "new":
            unclaimed(self.path, outputs, "the study")
        if self.mode == "resume":
            self.resumable()
            check_log(self.path / JOURNAL, "journal")
            if (self.path / LEDGER).exists():
                check_log(self.path / LEDGER, "ledger")
        if self.mode == "force":
            for name in (
                REPORT,
                SPEC,
                *(f"{db}{end}" for db in (JOURNAL, LEDGER) for end in ("", "-wal", "-shm")),
            ):
                _remove_file(self.path / name)
        # what the study writes there, checked before it runs (SQLite writes its logs in place)
        for name in outputs:
            output_file(self.path / name)

    def resumable(self) -> None:
        """Refuse (UserError) a folder without a study to resume."""
        if not ((self.path / JOURNAL).exists() and (self.path / SPEC).exists()):
            raise UserError(
                f"{self.path} holds no study to resume (no {JOURNAL} and {SPEC}; "
                f"studies run with --local keep no journal)"
            )

    def spec(self) -> StudySpec:
        """The parameters the interrupted study was started with."""
        self.resumable()
        path = self.path / SPEC
        text = read_text(path, "study record", MAX_SPEC_BYTES, "JSON")
        try:
            return StudySpec.model_validate_json(text)
        except ValidationError as err:
            first = err.errors()[0]
            why = (
                f"{'.'.join(map(str, first['loc']))}: {said(first)}"
                if first["loc"]
                else said(first)
            )
            raise UserError(
                f"{path} is damaged ({why}): the study cannot resume; run it again with --force"
            ) from None

    def record(self, spec: StudySpec) -> None:
        write_atomic(self.path / SPEC, spec.model_dump_json(indent=2) + "\n")

    @property
    def journal(self) -> Path:
        return (self.path / JOURNAL).resolve()

    @property
    def ledger(self) -> Path:
        return (self.path / LEDGER).resolve()


def _remove_file(path: Path) -> None:
    """Unlink a regular file, or a symlink to one (or to nothing); a device, fifo or socket
    planted there, or a symlink to one, is left for `output_file` to refuse (--force starts a
    study over, it replaces no special file)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(path.lstat().st_mode) or (
            path.is_symlink() and (path.is_file() or not path.exists())
        ):
            path.unlink()
