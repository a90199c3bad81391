"""The controller's journal: an append-only decision log and job table in SQLite.

A controller that dies and comes back replays the study from its start, without the wall
clock, to where the journal last reached, and runs on: the engine is deterministic, so every
decision it makes again must equal the logged one (a log that differs, damaged or tampered
with, stops it with `DivergedError`), and none is written twice. The journal holds data only:
nothing in it is ever executed or unpickled.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

from xdscheduler.errors import UserError
from xdscheduler.textfile import checked_input

SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    policy TEXT NOT NULL, idx INTEGER NOT NULL, time_s REAL NOT NULL, job TEXT NOT NULL,
    action TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (policy, idx));
CREATE TABLE IF NOT EXISTS jobs (
    policy TEXT NOT NULL, time_s REAL NOT NULL, job TEXT NOT NULL, status TEXT NOT NULL,
    tokens_done REAL NOT NULL, checkpoint REAL NOT NULL, domains TEXT NOT NULL);
"""


MAX_LOG_BYTES = 4 << 30  # a month of decisions is tens of MB; SQLite reads it page by page
RERUN = "the study cannot resume: run it again with --force (or in a new output folder)"


class DivergedError(UserError):
    """A resumed controller made a decision different from the one in the log, or the log
    lacks one it made."""


def check_log(path: Path, what: str) -> None:
    """Refuse (UserError naming the file, and the decision where one is wrong) a log that is
    not a regular file, that SQLite finds damaged (a truncated file), or whose decisions skip
    a number (a row deleted) or do not parse (edited): before any controller starts on it."""
    checked_input(path, what, MAX_LOG_BYTES)
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            (verdict,) = db.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                raise UserError(f"{what} {path} is damaged (SQLite: {verdict}); {RERUN}")
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'decisions'").fetchone():
                _check_decisions(db, path, what)
    except sqlite3.DatabaseError as err:
        raise UserError(f"{what} {path} is damaged ({err}); {RERUN}") from None


def _check_decisions(db: sqlite3.Connection, path: Path, what: str) -> None:
    expected: dict[str, int] = {}
    for policy, idx, record in db.execute(
        "SELECT policy, idx, record FROM decisions ORDER BY policy, idx"
    ):
        want = expected.get(policy, 0)
        if idx != want:
            raise UserError(
                f"{what} {path}: {policy}'s decision {want} is missing (deleted?); {RERUN}"
            )
        try:
            json.loads(record)
        except (TypeError, ValueError):
            raise UserError(
                f"{what} {path}: {policy}'s decision {idx} is not a record "
                f"(damaged or edited); {RERUN}"
            ) from None
        expected[policy] = want + 1


def open_log(
    path: Path, schema: str, threads: bool = False, replayed: bool = False
) -> sqlite3.Connection:
    """An append-only log in SQLite: each write committed at once, readers never blocked.
    `threads`: the connection is used from several threads (the caller serialises them).
    `replayed`: a resumed run makes the log's records again (a study's decisions and usage),
    so a commit need not reach the disk before the next step: one the machine's crash loses
    is made again, and a process's crash loses none. Flushing each took 0.8 s of a 2 s study
    (benchmarks/bench_study_logs.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=not threads)
    db.execute("PRAGMA journal_mode=WAL")
    if replayed:
        db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    return db


class Journal:
    def __init__(self, path: str | Path, policy: str):
        self.path, self.policy = Path(path), policy
        self.db = open_log(self.path, SCHEMA, replayed=True)
        self.logged = self.db.execute(
            "SELECT COUNT(*) FROM decisions WHERE policy = ?", (policy,)
        ).fetchone()[0]

    def record(self, index: int, decision) -> None:
        """Append decision number `index`; one already logged must be the same decision."""
        record = json.dumps(asdict(decision), sort_keys=True)
        if index < self.logged:
            row = self.db.execute(
                "SELECT record FROM decisions WHERE policy = ? AND idx = ?", (self.policy, index)
            ).fetchone()
            try:
                same = row is not None and _without_timing(row[0]) == _without_timing(record)
            except (TypeError, ValueError):  # not JSON: damaged
                same = False
            if not same:
                raise DivergedError(
                    f"{self.policy}: decision {index} differs from the log in "
                    f"{self.path} (damaged, edited, or from another study); "
                    f"{RERUN}"
                )
            return
        self.db.execute(
            "INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?)",
            (self.policy, index, decision.time_s, decision.job, decision.action, record),
        )
        self.logged = index + 1

    def checkpoint(self, engine) -> None:
        """The job table as of now, appended: where the study has reached."""
        rows = [
            (
                self.policy,
                engine.now,
                r.spec.name,
                str(r.state),
                r.done,
                r.checkpoint,
                json.dumps(
                    {engine.names[i]: n for i, n in r.placement.taken.items()}
                    if r.placement
                    else {}
                ),
            )
            for r in engine.runs
        ]
        with self.db:
            self.db.executemany("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def reached(self) -> float:
        """The study time of the last checkpoint (0: none yet)."""
        (t,) = self.db.execute(
            "SELECT MAX(time_s) FROM jobs WHERE policy = ?", (self.policy,)
        ).fetchone()
        return t or 0.0

    def decisions(self) -> list[dict]:
        rows = self.db.execute(
            "SELECT record FROM decisions WHERE policy = ? ORDER BY idx", (self.policy,)
        )
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        self.db.close()


def _without_timing(record: str) -> dict:
    """A decision without how long it took to make (wall time differs between runs)."""
    d = json.loads(record)
    d.pop("decision_ms", None)
    return d
