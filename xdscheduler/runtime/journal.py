"""The controller's journal: an append-only decision log and job table in SQLite, and the last
snapshot of the engine to resume from.

A controller that dies and comes back resumes from its last snapshot and runs on; the
decisions it makes again up to where the log ends must equal the logged ones (the engine is
deterministic), and are not written twice. The log is the truth; the snapshot is a shortcut.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    policy TEXT NOT NULL, idx INTEGER NOT NULL, time_s REAL NOT NULL, job TEXT NOT NULL,
    action TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (policy, idx));
CREATE TABLE IF NOT EXISTS jobs (
    policy TEXT NOT NULL, time_s REAL NOT NULL, job TEXT NOT NULL, status TEXT NOT NULL,
    tokens_done REAL NOT NULL, checkpoint REAL NOT NULL, domains TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    policy TEXT PRIMARY KEY, time_s REAL NOT NULL, decisions INTEGER NOT NULL,
    state BLOB NOT NULL);
"""


class DivergedError(RuntimeError):
    """A resumed controller made a decision different from the one in the log."""


class Journal:
    def __init__(self, path: str | Path, policy: str):
        self.path, self.policy = Path(path), policy
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None)  # autocommit each write
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        self.logged = self.db.execute("SELECT COUNT(*) FROM decisions WHERE policy = ?",
                                      (policy,)).fetchone()[0]

    def record(self, index: int, decision) -> None:
        """Append decision number `index`; one already logged must be the same decision."""
        record = json.dumps(asdict(decision), sort_keys=True)
        if index < self.logged:
            (logged,) = self.db.execute(
                "SELECT record FROM decisions WHERE policy = ? AND idx = ?",
                (self.policy, index)).fetchone()
            if _without_timing(logged) != _without_timing(record):
                raise DivergedError(f"{self.policy}: decision {index} differs from the log")
            return
        self.db.execute("INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?)",
                        (self.policy, index, decision.time_s, decision.job, decision.action,
                         record))
        self.logged = index + 1

    def checkpoint(self, engine) -> None:
        """The job table as of now (appended) and the engine's snapshot (replaced)."""
        rows = [(self.policy, engine.now, r.spec.name, str(r.state), r.done, r.checkpoint,
                 json.dumps({engine.names[i]: n for i, n in r.placement.taken.items()}
                            if r.placement else {})) for r in engine.runs]
        with self.db:
            self.db.executemany("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            self.db.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?)",
                            (self.policy, engine.now, len(engine.decisions),
                             engine.snapshot()))

    def latest(self) -> bytes | None:
        row = self.db.execute("SELECT state FROM snapshots WHERE policy = ?",
                              (self.policy,)).fetchone()
        return row[0] if row else None

    def decisions(self) -> list[dict]:
        rows = self.db.execute("SELECT record FROM decisions WHERE policy = ? ORDER BY idx",
                               (self.policy,))
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        self.db.close()


def _without_timing(record: str) -> dict:
    """A decision without how long it took to make (wall time differs between runs)."""
    d = json.loads(record)
    d.pop("decision_ms", None)
    return d
