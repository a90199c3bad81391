"""The live jobs as the CLI and the jobs API see them: the job table, and the journal of their
events (SQLite) that a controller started later replays to rebuild it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from xdscheduler.errors import UserError
from xdscheduler.live.jobs import LiveJob
from xdscheduler.live.records import FINAL, JobRecord
from xdscheduler.runtime.journal import open_log

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    idx INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, job TEXT NOT NULL,
    kind TEXT NOT NULL, record TEXT NOT NULL);
"""


class JobBook:
    """The live jobs as the CLI and the jobs API see them: the job table, and the journal of
    their events that a controller started later replays. The controller is one (it also
    places and runs what it holds); a JobBook alone answers the API in a process of its own."""

    def __init__(self, journal: Path):
        self.db = open_log(journal, SCHEMA, threads=True)
        self.lock = threading.RLock()
        self.jobs: dict[str, JobRecord] = {}

    def submit(self, spec: dict) -> dict:
        job = LiveJob.model_validate(spec)
        with self.lock:
            if job.name in self.jobs:
                raise UserError(f"a job named {job.name!r} exists already; pick another name")
            self.jobs[job.name] = self._admitted(job)
            self._event(job.name, "submitted", job.model_dump())
        return self.jobs[job.name].row()

    def _admitted(self, job: LiveJob) -> JobRecord:
        """The job's record, once it may queue (a controller checks its tenant and plans)."""
        return self._record(job, time.time())

    def list_jobs(self) -> list[dict]:
        with self.lock:
            return [r.row() for r in self.jobs.values()]

    def job(self, name: str) -> dict | None:
        with self.lock:
            rec = self.jobs.get(name)
            return rec.row() if rec else None

    def events(self, name: str) -> list[dict]:
        with self.lock:
            rows = self.db.execute(
                "SELECT time, kind, record FROM events WHERE job = ? ORDER BY idx", (name,)
            ).fetchall()
        return [{**json.loads(r), "time": t, "event": k} for t, k, r in rows]

    def cancel_job(self, name: str) -> dict | None:
        """Cancel a job in any state: a queued one, or one still starting, ends now (its
        placement group removed); a running one at its next question, or by force after
        `controller.CANCEL_GRACE_S`. Its row."""
        with self.lock:
            rec = self.jobs.get(name)
            if rec is None:
                return None
            if rec.status in FINAL or rec.cancel:
                return rec.row()
            rec.cancel, rec.cancel_at = True, time.time()
            self._event(name, "cancel", {"status": rec.shown})
            if rec.status == "queued" or rec.stepped_at is None:
                self._end(rec, "cancelled", {"while": "queued" if rec.run is None else "starting"})
            return rec.row()

    def _end(self, rec: JobRecord, status: str, record: dict) -> None:
        rec.status = status
        self._event(rec.job.name, status, {"step": rec.step, **record})

    def _record(self, job: LiveJob, submitted: float) -> JobRecord:
        """A replayed job's record (a controller adds its tenant's priority)."""
        return JobRecord(job, submitted)

    def replay(self) -> None:
        """Rebuild the job table from the journal (a controller started after a lost one): a
        job that was running queues again and resumes from its last checkpoint when placed;
        one cancelled before the loss ends now: its run died with the controller."""
        rows = self.db.execute("SELECT time, job, kind, record FROM events ORDER BY idx")
        for t, name, kind, record in rows.fetchall():
            self._replay_event(t, name, kind, json.loads(record))
        for rec in self.jobs.values():
            if rec.status != "queued":
                continue
            rec.placement, rec.stepped_at = {}, None
            if rec.cancel:
                done = rec.step >= rec.job.steps
                self._end(rec, "done" if done else "cancelled", {"while": "replayed"})

    def _replay_event(self, t: float, name: str, kind: str, data: dict) -> None:
        if kind == "submitted":
            self.jobs[name] = self._record(LiveJob.model_validate(data), t)
        elif name in self.jobs:
            rec = self.jobs[name]
            if kind == "step":
                rec.hear(data)
            elif kind == "placed":
                rec.placement, rec.attempts = data, int(data["attempt"])
                rec.status = "queued"  # its run died with the controller before this one
            elif kind in FINAL:
                rec.status, rec.step = kind, max(rec.step, int(data.get("step") or 0))
            elif kind == "cancel":
                rec.cancel, rec.cancel_at = True, t

    def _event(self, job: str, kind: str, record: dict) -> None:
        with self.lock:
            self.db.execute(
                "INSERT INTO events (time, job, kind, record) VALUES (?, ?, ?, ?)",
                (time.time(), job, kind, json.dumps(record, default=str)),
            )
