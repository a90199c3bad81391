"""What a study's journal and ledger cost: their commits left to reach the disk lazily against
each flushed to it.

Run: python -m benchmarks.bench_study_logs [--hours 12] [--seed 7] [--policy planner]
Baseline, in the same run: the same logs with every commit flushed to the disk (SQLite's
`synchronous=FULL`, as before). A resumed study makes both logs' records again, so a commit a
machine's crash loses is made again; a process's crash loses none. Each variant runs the default
scenario's study in this process, its decisions into a journal and its usage into a ledger, the
journal's job table kept every simulated hour (as the controller keeps it); the logs go to a
temporary folder on the disk the study folders use (the current one).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks._table import print_table
from xdscheduler.registry import make_policy
from xdscheduler.runtime.journal import Journal
from xdscheduler.runtime.ledger import Ledger
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs


def timed(args, inputs: StudyInputs, logs: str, folder: Path) -> tuple[float, int, list]:
    """Seconds to run the study of `inputs` with `logs` (none, lazy or flushed), the records
    logged, and every job's (start, end)."""
    eng = Engine(inputs, make_policy(args.policy, inputs.scn.weights))
    journal = ledger = None
    if logs != "none":
        journal = Journal(folder / f"{logs}.journal", args.policy)
        ledger = Ledger(folder / f"{logs}.ledger", args.policy)
        if logs == "flushed":
            for log in (journal, ledger):
                log.db.execute("PRAGMA synchronous=FULL")
        eng.recorder.subscribe(journal.record)
        eng.recorder.meter_to(ledger.record)
    start = time.perf_counter()
    for hour in range(1, int(args.hours) + 1):
        eng.run(until_s=hour * 3600.0)
        if journal:
            journal.checkpoint(eng)
    eng.run()
    seconds = time.perf_counter() - start
    records = journal.logged + ledger.kept if journal and ledger else 0
    for opened in (journal, ledger):
        if opened:
            opened.close()
    return seconds, records, [(r.start_s, r.end_s) for r in eng.runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=12.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--policy", default="planner")
    args = ap.parse_args()
    inputs = StudyInputs.drawn(load_scenario(default_scenario_path()), args.hours, args.seed)
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        runs = {logs: timed(args, inputs, logs, Path(tmp)) for logs in ("none", "flushed", "lazy")}
    none_s = runs["none"][0]
    flushed_s = runs["flushed"][0]
    rows = []
    for logs, (seconds, records, jobs) in runs.items():
        per = (seconds - none_s) / records * 1e3 if records else 0.0
        rows.append(
            [
                logs,
                f"{seconds:.2f}",
                records,
                f"{per:.2f}",
                f"{flushed_s / seconds:.2f}x",
                "yes" if jobs == runs["none"][2] else "NO",
            ]
        )
    print_table(
        f"A study's journal and ledger, {args.policy}, {args.hours:g} h of the default "
        f"scenario, seed {args.seed}",
        ["logs", "study s", "records", "ms a record", "vs flushed", "same study"],
        rows,
        note="ms a record: the study's seconds over those without logs, per record logged. "
        "flushed: every commit reaches the disk (the baseline); lazy: the journal and ledger now.",
    )


if __name__ == "__main__":
    main()
