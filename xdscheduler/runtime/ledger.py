"""The ledger: every usage record of a study, append-only in SQLite beside its journal.

A controller that dies and resumes replays its study and makes the same records again, with the
same numbers; those already in the ledger are not written twice, so a bill after a crash is the
bill of an uninterrupted run (the journal checks the replayed decisions). `xds bill` reads it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.runtime.journal import MAX_LOG_BYTES, open_log
from xdscheduler.sim.metering import Usage
from xdscheduler.textfile import checked_input

LEDGER = "ledger.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    policy TEXT NOT NULL, idx INTEGER NOT NULL, kind TEXT NOT NULL, t0_s REAL NOT NULL,
    t1_s REAL NOT NULL, job TEXT NOT NULL, tenant TEXT NOT NULL, domain TEXT NOT NULL,
    accelerator TEXT NOT NULL, quantity REAL NOT NULL, usd REAL NOT NULL,
    PRIMARY KEY (policy, idx));
"""


class Ledger:
    """One policy's usage records."""

    def __init__(self, path: str | Path, policy: str):
        self.path, self.policy = Path(path), policy
        self.db = open_log(self.path, SCHEMA, replayed=True)
        (self.kept,) = self.db.execute(
            "SELECT COUNT(*) FROM usage WHERE policy = ?", (policy,)
        ).fetchone()

    def record(self, usages: list[Usage]) -> None:
        """Append records in one transaction; those already kept (a replay) are left as they
        are."""
        new = [
            (
                self.policy,
                u.index,
                u.kind,
                u.t0_s,
                u.t1_s,
                u.job,
                u.tenant,
                u.domain,
                u.accelerator,
                u.quantity,
                u.usd,
            )
            for u in usages
            if u.index >= self.kept
        ]
        if new:
            with self.db:
                self.db.execute("BEGIN")
                self.db.executemany(
                    "INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", new
                )
            self.kept = new[-1][1] + 1

    def close(self) -> None:
        self.db.close()


def read_ledger(folder: Path) -> pd.DataFrame:
    """Every record of the study in `folder`."""
    path = Path(folder) / LEDGER
    if not path.exists():
        raise UserError(
            f"{folder} holds no ledger ({LEDGER}): not a study folder, or a study "
            f"made before metering"
        )
    checked_input(path, "ledger", MAX_LOG_BYTES)
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return pd.read_sql_query("SELECT * FROM usage ORDER BY policy, idx", db)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as e:
        raise UserError(f"{path} is damaged ({e})") from None
