"""A hostile pass over the `xds` command, as a hostile user tries it: bad numbers, NaN and
infinities, huge, binary, device, fifo and symlink inputs and outputs, missing folders, /proc
targets, tampered study folders and journals, Ctrl-C mid-run, planted pickles; then hostile HTTP
bodies to `xds serve`'s routes.

Run: python -m benchmarks.hostile_pass [--code DIR] [--jobs 2] [--only TEXT] [--sample N]
     [--list]

Every invocation is a fresh `python -m xdscheduler` (the `xds` command; the code under DIR,
default this checkout) with a timeout, in a temporary folder that is removed at the end: its
working folder, HOME and Ray's temp folder are there, and every output it is given lies there
(its own fifos, sockets, copies of the null and full devices made with mknod, symlinks to
them), so nothing is written anywhere else. Each is counted as a clean error (exit 2, or 130
when interrupted, the last line of standard error `xds: ...`), a success, a wrong success (0
where bad input must be refused), a wrong refusal, a traceback (or any other exit), a hang, or
not interrupted (a Ctrl-C case over before its Ctrl-C, so it tested nothing); and after each,
whether it wrote through a non-regular file (a special replaced or written into), loaded code
named by a study folder (a planted pickle ran), sent the API token to a URL a study folder
named, or stopped a process a tampered state file named. The first line printed is the verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import pickle
import random
import resource
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._table import print_table

REPO = Path(__file__).resolve().parents[1]
SEED = 36
MEMORY_BYTES = 3 << 30  # address space of a command that starts no Ray: an unbounded read fails
FAST_S, WORK_S, RAY_S = 30.0, 120.0, 240.0  # timeouts: refused at once, some work, a Ray start
BAD_NUMBERS = [
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e308",
    "1e999",
    "0x10",
    "",
    "1_000",
    "99999999999999999999999",
    "\u00bd",
    "1,5",
    "-0",
]
TOKEN = "hostile-pass-token-0123456789abcdef"


@dataclass
class Case:
    """One invocation: its words (Target/Input objects made into paths when it runs), what
    it should do ("refuse", "ok" or "any"), a timeout, and how it is run."""

    command: str  # the table's row
    name: str
    argv: list
    expect: str = "any"
    timeout_s: float = FAST_S
    ray: bool = False  # starts a Ray: no address-space limit
    # (case folder, seconds running) -> send Ctrl-C now
    interrupt: Callable[[Path, float], bool] | None = None
    env: dict = field(default_factory=dict)
    # (case folder) -> specials to watch (or None), before it runs
    setup: Callable[[Path], object] | None = None
    # (case folder) -> list of findings, after it ran
    check: Callable[[Path], list[str]] | None = None


@dataclass(frozen=True)
class Target:
    """An output path made in the case's own folder when the case runs: `kind` says what
    stands there (see `Lab.target`)."""

    kind: str
    name: str = "out.csv"


@dataclass(frozen=True)
class Input:
    """A shared hostile input (`Lab.inputs`), by kind."""

    kind: str
    suffix: str = ".csv"


@dataclass
class Result:
    case: Case
    outcome: str  # one of OUTCOMES
    code: int | None
    seconds: float
    last_line: str
    findings: list[str]


# ---------------------------------------------------------------------------- the lab


class Lab:
    """The temporary folder every invocation runs in, and what it is given to read."""

    def __init__(self, root: Path, code: Path, data: Path | None):
        self.root, self.code, self.data = root, code, data
        self.inputs_dir = root / "in"
        self.inputs_dir.mkdir()
        self.markers = root / "markers"
        self.markers.mkdir()
        self.can_mknod = _can_mknod(root)
        self.sockets: list[socket.socket] = []
        self.readers: dict[Path, int] = {}
        self.lock = threading.Lock()
        self.counter = 0  # case folders made (fixtures' too)
        self.done = 0  # cases run
        self.catcher = TokenCatcher()

    def env(self, extra: dict) -> dict:
        env = {
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "LANG", "LC_ALL", "TERM", "XDS_DATA_DIR")
        }
        env.update(
            PYTHONPATH=str(self.code),
            HOME=str(self.root / "home"),
            RAY_TMPDIR=str(self.root / "ray"),
            TMPDIR=str(self.root / "tmp"),
            RAY_USAGE_STATS_ENABLED="0",
            XDS_API_TOKEN=TOKEN,
            PYTHONUNBUFFERED="1",
            MPLBACKEND="Agg",
        )
        if self.data:
            env["XDS_DATA_DIR"] = str(self.data)
        env.update(extra)
        return env

    def case_dir(self) -> Path:
        with self.lock:
            self.counter += 1
            path = self.root / "cases" / f"{self.counter:04d}"
        (path / "work").mkdir(parents=True)
        return path

    # -- outputs: made per case, checked after it

    def target(self, kind: str, name: str, where: Path) -> tuple[str, list]:
        """A path for an output of kind `kind` in `where`, and the specials to check after."""
        path = where / name
        watch = []
        if kind == "missing-dir":
            return str(where / "no-such-folder" / name), []
        if kind == "proc":
            return f"/proc/self/{name}", []
        if kind == "proc-file":
            return "/proc/version", []
        if kind == "folder":
            path.mkdir()
        elif kind == "regular":
            path.write_text("old\n")
        elif kind == "regular-link":
            (where / f".real-{name}").write_text("old\n")
            path.symlink_to(where / f".real-{name}")
        elif kind == "dangling":
            path.symlink_to(where / "nowhere" / name)
        elif kind in ("fifo", "fifo-link"):
            real = path if kind == "fifo" else where / f".fifo-{name}"
            os.mkfifo(real)
            self.readers[real] = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
            watch.append(real)
            if kind == "fifo-link":
                path.symlink_to(real)
        elif kind in ("null-dev", "full-dev", "dev-link"):
            if not self.can_mknod:
                return str(where / "no-mknod" / name), []
            real = path if kind != "dev-link" else where / f".null-{name}"
            os.mknod(real, stat.S_IFCHR | 0o666, os.makedev(1, 7 if kind == "full-dev" else 3))
            watch.append(real)
            if kind == "dev-link":
                path.symlink_to(real)
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(path))
            self.sockets.append(s)
            watch.append(path)
        else:
            raise ValueError(kind)
        if path.is_symlink():
            watch.append(path)
        return str(path), [(p, _identity(p)) for p in watch]

    def written_through(self, watched: list) -> list[str]:
        out = []
        for path, before in watched:
            if _identity(path) != before:
                out.append(f"{path.name} replaced ({_kind(path)})")
            fd = self.readers.pop(path, None)
            if fd is not None:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    data = b""
                os.close(fd)
                if data:
                    out.append(f"{len(data)} bytes written into the fifo {path.name}")
        return out

    # -- inputs: made once, shared, read-only

    def make_inputs(self) -> None:
        d = self.inputs_dir
        (d / "folder.csv").mkdir()
        for suffix in (".csv", ".yaml", ".json", ".md"):
            stem = d / f"x{suffix}"
            (d / f"binary{suffix}").write_bytes(b"\x00\x01\x02\xff" * 64)
            (d / f"utf16{suffix}").write_bytes("a,b\n1,2\n".encode("utf-16"))
            (d / f"latin1{suffix}").write_bytes("name,caf\xe9\n1,2\n".encode("latin-1"))
            (d / f"empty{suffix}").write_bytes(b"")
            with open(d / f"sparse{suffix}", "wb") as f:  # 2 GiB of holes: no disk used
                f.truncate(2 << 30)
            (d / f"big{suffix}").write_bytes(b"1,2,3,4\n" * (3 << 17))  # 3 MiB of text
            (d / f"zero-link{suffix}").symlink_to("/dev/zero")
            (d / f"dangling{suffix}").symlink_to(d / "nowhere" / "x")
            os.mkfifo(d / f"fifo{suffix}")  # no writer: an open for reading waits for ever
            (d / f"fifo-link{suffix}").symlink_to(d / f"fifo{suffix}")
            del stem
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(d / "socket.csv"))
        self.sockets.append(s)

    def input(self, kind: str, suffix: str) -> str:
        if kind == "missing":
            return str(self.inputs_dir / f"missing{suffix}")
        if kind == "dev-zero":
            return "/dev/zero"
        if kind == "proc":
            return "/proc/self/status"
        if kind == "folder":
            return str(self.inputs_dir / "folder.csv")
        if kind == "socket":
            return str(self.inputs_dir / "socket.csv")
        return str(self.inputs_dir / f"{kind}{suffix}")

    def close(self) -> None:
        for s in self.sockets:
            s.close()
        for fd in self.readers.values():
            os.close(fd)
        self.catcher.close()


INPUT_KINDS = [
    "missing",
    "folder",
    "dev-zero",
    "fifo",
    "fifo-link",
    "binary",
    "utf16",
    "latin1",
    "empty",
    "sparse",
    "big",
    "dangling",
    "zero-link",
    "socket",
    "proc",
]
FOLDER_OUTPUTS = {"run", "compare", "share"}  # commands whose --out is a folder
OUTPUT_KINDS = [
    "missing-dir",
    "proc",
    "proc-file",
    "fifo",
    "fifo-link",
    "null-dev",
    "full-dev",
    "dev-link",
    "dangling",
    "socket",
    "folder",
]


def _identity(path: Path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev


def _kind(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "now missing"
    return "now a regular file" if stat.S_ISREG(mode) else f"now mode {stat.S_IFMT(mode):o}"


def _can_mknod(root: Path) -> bool:
    try:
        os.mknod(root / ".probe", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except (PermissionError, OSError):
        return False
    (root / ".probe").unlink()
    return True


class TokenCatcher:
    """An HTTP server on 127.0.0.1 that records the Authorization headers it is sent: a URL a
    study folder names, which must never receive the user's token."""

    def __init__(self):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self):
                seen.append(self.headers.get("Authorization") or "")
                self.send_response(503)
                self.end_headers()

            do_GET = do_POST = _any

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def leaked(self) -> int:
        return sum(TOKEN in h for h in self.seen)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------------- running


def run_case(lab: Lab, case: Case) -> Result:
    where = lab.case_dir()
    watched: list = []
    argv = []
    for word in case.argv:
        if isinstance(word, Target):
            path, watch = lab.target(word.kind, word.name, where)
            watched += watch
            argv.append(path)
        elif isinstance(word, Input):
            argv.append(lab.input(word.kind, word.suffix))
        else:
            argv.append(str(word).replace("{case}", str(where)))
    if case.setup:
        made = case.setup(where)
        watched += made if isinstance(made, list) else []
    leaked_before = lab.catcher.leaked()
    limit = None if case.ray else MEMORY_BYTES

    def limits():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "xdscheduler", *argv],
        cwd=where / "work",
        env=lab.env({k: v.replace("{case}", str(where)) for k, v in case.env.items()}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=limits,
    )
    _, err, hung, interrupted = _wait(proc, case, where, started)
    seconds = time.monotonic() - started
    text = err.decode("utf-8", "replace")
    lines = [x for x in text.splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    findings = lab.written_through(watched)
    findings += [f"planted code ran: {m.name}" for m in lab.markers.glob(f"{where.name}-*")]
    if lab.catcher.leaked() > leaked_before:
        findings.append("the API token was sent to a URL the study folder named")
    if case.check:
        findings += case.check(where)
    outcome = _outcome(case, proc.returncode, text, last, hung)
    if case.interrupt and (not (interrupted or hung) or proc.returncode == 0):
        # it ended before its Ctrl-C, or the Ctrl-C came after its work was done and written
        # (xds then exits 0): either way the case tested nothing
        outcome = "not interrupted"
    return Result(case, outcome, proc.returncode, seconds, last[:200], findings)


def _wait(proc, case: Case, where: Path, started: float):
    """Standard output and error of `proc`, whether it hung and whether it was interrupted;
    Ctrl-C sent to its process group (as a terminal sends it) when the case says."""
    deadline = started + case.timeout_s
    sent = False
    while case.interrupt and not sent and proc.poll() is None and time.monotonic() < deadline:
        if case.interrupt(where, time.monotonic() - started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            sent = True
            break
        time.sleep(0.05)
    try:
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        return out, err, False, sent
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return out, err, True, sent


def _outcome(case: Case, code: int | None, err: str, last: str, hung: bool) -> str:
    if hung:
        return "hang"
    if "Traceback (most recent call last)" in err or code not in (0, 2, 130):
        return "traceback"
    if code == 0:
        return "wrong success" if case.expect == "refuse" else "success"
    if not last.startswith("xds:"):
        return "traceback"  # a refusal must end in one line of ours
    return "wrong refusal" if case.expect == "ok" else "clean error"


# ---------------------------------------------------------------------------- the cases


def xds_cases(lab: Lab, studies: Studies) -> list[Case]:
    rng = random.Random(SEED)
    cases: list[Case] = []

    def add(command, name, argv, **kw):
        cases.append(Case(command, name, list(argv), **kw))

    small = str(studies.scenario)
    run = [
        "run",
        small,
        "--local",
        "--policies",
        "planner",
        "--hours",
        "0.25",
        "--out",
        "{case}/out",
    ]
    compare = [
        "compare",
        small,
        "--local",
        "--policies",
        "planner,planner-single-domain",
        "--seeds",
        "1",
        "--loads",
        "0.5",
        "--hours",
        "0.25",
        "--out",
        "{case}/cmp",
    ]
    estimate = [
        "estimate",
        "--gpu",
        "H100-SXM",
        "--model",
        "llama2-7b",
        "--gpus",
        "8",
        "--global-batch",
        "8",
    ]
    share = [
        "share",
        "bench",
        "--seeds",
        "1",
        "--until",
        "1.0",
        "--workers",
        "1",
        "--packers",
        "random,best-fit",
        "--out",
        "{case}/share",
    ]

    # 1. numbers: every numeric flag, each hostile value
    numeric = {
        "run": (run, ["--hours", "--seed", "--faults", "--dashboard"]),
        "compare": (compare, ["--hours", "--seeds", "--loads"]),
        "plan": (
            ["plan", small, "--top", "1"],
            ["--top", "--diloco", "--budget", "--min-throughput", "--weights"],
        ),
        "estimate": (
            estimate,
            ["--gpus", "--tp", "--pp", "--global-batch", "--micro-batch", "--seq"],
        ),
        "index": (["index", "--model", "llama2-7b"], ["--gpus"]),
        "faults": (["faults", "bench", "--n", "50"], ["--n", "--seed", "--loss"]),
        "share": (share, ["--seeds", "--until", "--workers"]),
        "bill": (
            ["bill", str(studies.local), "--tenant", "big-lab", "--csv", "{case}/b.csv"],
            ["--from", "--to"],
        ),
        "train": (["train", "--samples", "0"], ["--iterations", "--states"]),
        "serve": (["serve", small], ["--port"]),
        "scenario": (
            [
                "scenario",
                "from-measurements",
                "--regions",
                "aws:us-east-1,aws:us-west-2",
                "--out",
                "{case}/s.yaml",
            ],
            ["--nodes"],
        ),
        "forecast": (["forecast", "backtest", str(studies.demand)], ["--seed"]),
    }
    for command, (base, flags) in numeric.items():
        for flag in flags:
            values = (
                BAD_NUMBERS
                if flag in ("--hours", "--faults", "--weights", "--loads", "--gpus", "--seeds")
                else rng.sample(BAD_NUMBERS, 7)
            )
            for value in values:
                if value == "1_000" and flag in ("--port", "--seeds", "--n"):
                    continue  # a port that parses starts serving; 1,000 seeds is a long
                    # run; 1,000 faults is the bench's default, minutes on a loaded machine
                add(command, f"{flag} {value!r}", _with(base, flag, value), timeout_s=WORK_S)
    # 2. the cases of the report, by name
    add(
        "run",
        "--faults 1000 (the documented maximum)",
        [
            "run",
            "--local",
            "--policies",
            "planner",
            "--hours",
            "3",
            "--seed",
            "7",
            "--faults",
            "1000",
            "--out",
            "{case}/out",
        ],
        expect="ok",
        timeout_s=300,
    )
    add(
        "run",
        "--hours 0.2 (a drain limit off the sampling grid)",
        _with(run, "--hours", "0.2"),
        expect="ok",
        timeout_s=WORK_S,
    )
    add("plan", "--weights 0,0,0", ["plan", small, "--weights", "0,0,0"], expect="refuse")
    for mark in ("\u200f", "\u200b", "\u202e", "\t", "\x1b[31m"):
        add(
            "estimate",
            f"--gpu with {mark!r}",
            _with(estimate, "--gpu", f"H100{mark}-SXM"),
            expect="refuse",
        )
        add(
            "index",
            f"--gpu with {mark!r}",
            ["index", "--model", "llama2-7b", "--gpu", f"{mark}H100-SXM"],
            expect="refuse",
        )
    add(
        "estimate",
        "--model with a right-to-left mark",
        _with(estimate, "--model", "llama2\u200f-7b"),
        expect="refuse",
    )
    for flag, value in (
        ("--serve-url", "http://127.0.0.1:9"),
        ("--address", "127.0.0.1:9"),
        ("--policy-path", "{case}/nowhere"),
    ):
        add("run", f"--local {flag}", [*run, flag, value], expect="refuse")
    for loads in ("nan", "inf", "0.5,nan", "-inf,1", "1e308"):
        add("compare", f"--loads {loads}", _with(compare, "--loads", loads), expect="refuse")
    add(
        "share",
        "every pod asks 0 GPUs",
        [*share, "--trace", str(studies.zero_pods)],
        expect="refuse",
        timeout_s=60,
    )
    add("train", "--config /dev/zero", ["train", "--config", "/dev/zero"], expect="refuse")

    # 3. every input a user names, each hostile kind
    inputs: dict[str, tuple[list[str | Input], str]] = {
        "scenario": (["scenario", "check", Input("{}", ".yaml")], ".yaml"),
        "plan": (["plan", Input("{}", ".yaml")], ".yaml"),
        "run": (["run", Input("{}", ".yaml"), *run[2:]], ".yaml"),
        "compare": (["compare", Input("{}", ".yaml"), *compare[2:]], ".yaml"),
        "serve": (["serve", Input("{}", ".yaml"), "--port", "1"], ".yaml"),
        "up": (["up", Input("{}", ".yaml"), "--state", "{case}/state.json"], ".yaml"),
        "catalog": (["catalog", "--accelerators", Input("{}", ".yaml")], ".yaml"),
        "estimate": ([*estimate, "--profile", Input("{}", ".yaml")], ".yaml"),
        "calibrate": (
            [
                "calibrate",
                Input("{}", ".csv"),
                "--stack",
                "megatron-core",
                "--out",
                "{case}/p.yaml",
            ],
            ".csv",
        ),
        "forecast": (["forecast", "backtest", Input("{}", ".csv")], ".csv"),
        "phases": (["phases", Input("{}", ".csv")], ".csv"),
        "share": ([*share, "--trace", Input("{}", ".csv")], ".csv"),
        "train": (["train", "--config", Input("{}", ".yaml")], ".yaml"),
        "submit": (["submit", Input("{}", ".yaml"), "--state", "{case}/none.json"], ".yaml"),
        "jobs": (["jobs", "--state", Input("{}", ".json")], ".json"),
        "down": (["down", "--state", Input("{}", ".json")], ".json"),
    }
    for command, (words_in, suffix) in inputs.items():
        for kind in INPUT_KINDS:
            argv_in = [Input(kind, suffix) if isinstance(w, Input) else w for w in words_in]
            add(command, f"input {kind}", argv_in, expect="refuse", timeout_s=60)
    for kind in ("dev-zero", "fifo", "sparse", "binary", "zero-link", "folder", "missing"):
        flagged = {  # (command, the flag naming the file): its arguments, the file's suffix
            ("compare", "--readme"): (compare, ".md"),
            ("share", "--readme"): (share, ".md"),
            ("share", "--nodes"): (share, ".csv"),
            ("forecast", "--lucid"): (
                ["forecast", "backtest", str(studies.demand), "--target", "arrivals"],
                ".csv",
            ),
        }
        for (command, flag), (base, suffix) in flagged.items():
            add(
                command,
                f"{flag} {kind}",
                [*base, flag, Input(kind, suffix)],
                expect="refuse",
                timeout_s=60,
            )
        add(
            "catalog",
            f"XDS_ACCELERATORS={kind}",
            ["catalog"],
            expect="refuse",
            env={"XDS_ACCELERATORS": lab.input(kind, ".yaml")},
        )
        add(
            "compare",
            f"--from a folder holding {kind}",
            ["compare", "--from", "{case}/saved"],
            expect="refuse",
            timeout_s=60,
            setup=_saved_compare(studies, kind, lab),
        )
        add(
            "tenants",
            f"report.json {kind}",
            ["tenants", "{case}/study"],
            expect="refuse",
            setup=_study_with(studies.local, "report.json", kind, lab),
        )
        add(
            "bill",
            f"ledger.sqlite {kind}",
            ["bill", "{case}/study", "--tenant", "big-lab"],
            expect="refuse",
            setup=_study_with(studies.local, "ledger.sqlite", kind, lab),
        )
    live = {
        "domains": ["domains"],
        "links": ["links", "probe"],
        "links set": ["links", "set", "east", "west", "nan"],
        "profile": ["profile"],
        "logs": ["logs", "job"],
        "cancel": ["cancel", "job"],
    }
    for command, words in live.items():
        for kind in ("missing", "fifo", "binary", "sparse", "dev-zero"):
            add(
                command.split()[0],
                f"{command} --state {kind}",
                [*words, "--state", Input(kind, ".json")],
                expect="refuse",
            )
    for kind in ("folder", "dev-zero", "fifo", "missing"):
        add("tenants", f"study {kind}", ["tenants", Input(kind, ".csv")], expect="refuse")
        add(
            "bill", f"study {kind}", ["bill", Input(kind, ".csv"), "--tenant", "x"], expect="refuse"
        )
        add("run", f"--resume {kind}", ["run", "--resume", Input(kind, ".csv")], expect="refuse")

    # 4. every output a user names, each hostile kind
    outputs: dict[str, list[str | Target]] = {
        "bill": ["bill", str(studies.local), "--tenant", "big-lab", "--csv", Target("", "b.csv")],
        "calibrate": [
            "calibrate",
            str(REPO / "benchmarks" / "published_runs.csv"),
            "--stack",
            "megatron-core",
            "--out",
            Target("", "p.yaml"),
            "--force",
        ],
        "forecast": ["forecast", "plot", str(studies.demand), "--out", Target("", "f.png")],
        "run": [*run[:-2], "--out", Target("", "out")],
        "compare": [*compare[:-2], "--out", Target("", "cmp")],
        "share": [*share[:-2], "--out", Target("", "share")],
        "compare --readme": [*compare, "--readme", Target("", "README.md")],
        "share --readme": [*share, "--readme", Target("", "README.md")],
        "scenario": [
            "scenario",
            "from-measurements",
            "--regions",
            "aws:us-east-1,aws:us-west-2",
            "--out",
            Target("", "s.yaml"),
            "--force",
        ],
    }
    for command, words_out in outputs.items():
        for kind in OUTPUT_KINDS:
            argv_out = [Target(kind, w.name) if isinstance(w, Target) else w for w in words_out]
            # a study's --out is a folder: made with its parents, or an empty one used
            made = command in FOLDER_OUTPUTS and kind in ("missing-dir", "folder")
            expect = "ok" if made else "refuse"
            add(
                command.split()[0],
                f"{command} -> {kind}",
                argv_out,
                expect=expect,
                timeout_s=WORK_S,
            )
    for name in (
        "report.json",
        "report.html",
        "metrics.parquet",
        "jct.png",
        "decisions.jsonl",
        "study.json",
    ):
        for kind in ("fifo-link", "dev-link", "full-dev"):
            add(
                "run",
                f"out/{name} -> {kind}",
                [*run, "--force"],
                expect="refuse",
                timeout_s=WORK_S,
                setup=_planted_out("out", name, kind, lab),
            )
    for name in ("compare.json", "compare.md", "compare.parquet"):
        add(
            "compare",
            f"out/{name} -> dev-link",
            compare,
            expect="refuse",
            timeout_s=WORK_S,
            setup=_planted_out("cmp", name, "dev-link", lab),
        )
    for name in ("share_bench.csv", "share_bench.png"):
        add(
            "share",
            f"out/{name} -> fifo-link",
            share,
            expect="refuse",
            timeout_s=WORK_S,
            setup=_planted_out("share", name, "fifo-link", lab),
        )

    # 5. CSV inputs that make no sense
    for name, change in CALIBRATE_ROWS:
        add(
            "calibrate",
            f"a row with {name}",
            ["calibrate", "{case}/runs.csv", "--stack", "megatron-core", "--out", "{case}/p.yaml"],
            expect="refuse",
            setup=_runs_csv(change),
            check=lambda where: (
                ["wrote a profile from a nonsense row"] if (where / "p.yaml").exists() else []
            ),
        )
    for name, text in FORECAST_CSVS:
        add(
            "forecast",
            f"series with {name}",
            ["forecast", "backtest", "{case}/s.csv"],
            expect="refuse",
            setup=_text_file("s.csv", text),
            timeout_s=60,
        )
        add(
            "phases",
            f"curve with {name}",
            ["phases", "{case}/s.csv"],
            expect="refuse",
            setup=_text_file("s.csv", text.replace("time,active", "step,loss")),
        )
    for name, text in POD_CSVS:
        add(
            "share",
            f"pods with {name}",
            [*share, "--trace", "{case}/p.csv"],
            expect="refuse",
            setup=_text_file("p.csv", text),
            timeout_s=60,
        )

    # 6. study folders and journals, tampered with
    for name, tamper in TAMPERINGS:
        add(
            "run",
            f"--resume: {name}",
            ["run", "--resume", "{case}/study"],
            ray=True,
            expect="refuse",
            timeout_s=RAY_S,
            setup=_tampered(studies, tamper, lab),
        )
    add(
        "run",
        "--resume with policy_path edited to a policy not hashed at the start",
        ["run", "--resume", "{case}/study"],
        ray=True,
        expect="refuse",
        timeout_s=RAY_S,
        setup=_tampered(studies, "copied", lab),
    )
    add(
        "run",
        "--resume naming that policy again with --policy-path",
        ["run", "--resume", "{case}/study", "--policy-path", "{case}/copied"],
        ray=True,
        expect="ok",
        timeout_s=RAY_S,
        setup=_tampered(studies, "copied", lab),
    )
    add(
        "run",
        "--resume of an intact interrupted study",
        ["run", "--resume", "{case}/study"],
        ray=True,
        expect="ok",
        timeout_s=RAY_S,
        setup=_tampered(studies, "intact", lab),
    )
    add(
        "down",
        "a state file naming a process down did not start",
        ["down", "--state", "{case}/state.json"],
        expect="ok",  # left alone, and said so: after a reboot the pid is someone else's
        setup=_state_with_canary,
        check=_canary_alive,
        timeout_s=60,
    )

    # 7. Ctrl-C in the middle of long commands
    after = _after_seconds
    add(
        "run",
        "Ctrl-C (--local)",
        # ~20 s of work: 24 h of the small scenario took 2 s, over before its Ctrl-C at 3 s
        [*run[:-4], "--hours", "240", "--out", "{case}/out"],
        interrupt=after(3),
        timeout_s=WORK_S,
        check=_one_line_interrupt,
    )
    add(
        "run",
        "Ctrl-C (Ray, journal started)",
        [
            "run",
            small,
            "--policies",
            "planner",
            "--hours",
            "6",
            "--realtime",
            "--speed",
            "1800",
            "--out",
            "{case}/out",
        ],
        interrupt=_journal_started,
        ray=True,
        timeout_s=RAY_S,
        check=_one_line_interrupt,
    )
    # Ctrl-C after the command has begun its work: one line, exit 130
    interrupted = {
        # 24 h of 5 seeds: on a quiet machine 24 h of one seed was over before the Ctrl-C
        "compare": (_with(_with(compare, "--hours", "24"), "--seeds", "5"), 4),
        "share": (_with(share, "--seeds", "50"), 4),
        "forecast": (["forecast", "backtest", str(studies.demand)], 1.2),
        # plan's work takes a fifth of a second: its Ctrl-C may fall in its imports
        "plan": (["plan", "--top", "50"], 0.25),
        "calibrate": (
            [
                "calibrate",
                str(REPO / "benchmarks" / "published_runs.csv"),
                "--stack",
                "megatron-core",
                "--out",
                "{case}/p.yaml",
            ],
            0.6,
        ),
    }
    for command, (argv, seconds) in interrupted.items():
        add(
            command,
            "Ctrl-C",
            argv,
            interrupt=after(seconds),
            timeout_s=WORK_S,
            check=_one_line_interrupt,
        )
    return cases


def _with(argv: list, flag: str, value: str) -> list:
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


def _after_seconds(s: float):
    return lambda where, running: running >= s


def _journal_started(where: Path, running: float) -> bool:
    path = where / "out" / "journal.sqlite"
    if not path.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            (n,) = db.execute("SELECT COUNT(*) FROM jobs").fetchone()
        return n > 0
    except sqlite3.Error:
        return False


def _one_line_interrupt(where: Path) -> list[str]:
    return []  # the outcome says it: 130 with one line of ours is a clean error


def _text_file(name: str, text: str):
    return lambda where: (where / name).write_text(text)


def _copy_study(src: Path, where: Path) -> Path:
    dst = where / "study"
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(".xds-lock"))
    return dst


def _replace(path: Path, kind: str, lab: Lab) -> None:
    """Put an input of `kind` where `path` is."""
    if path.exists() or path.is_symlink():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if kind == "missing":
        return
    src = Path(lab.input(kind, path.suffix if path.suffix in (".yaml", ".json") else ".csv"))
    if kind == "folder":
        path.mkdir()
    elif kind in (
        "dev-zero",
        "fifo",
        "fifo-link",
        "zero-link",
        "dangling",
        "socket",
        "proc",
        "sparse",
    ):
        path.symlink_to(src)
    else:
        shutil.copyfile(src, path)


def _study_with(study: Path, name: str, kind: str, lab: Lab):
    def setup(where: Path) -> None:
        _replace(_copy_study(study, where) / name, kind, lab)

    return setup


def _saved_compare(studies: Studies, kind: str, lab: Lab):
    def setup(where: Path) -> None:
        shutil.copytree(studies.compare, where / "saved")
        _replace(
            where / "saved" / ("compare.parquet" if kind != "big" else "compare.json"), kind, lab
        )

    return setup


def _planted_out(folder: str, name: str, kind: str, lab: Lab):
    """An output folder holding a special where the command writes `name`."""

    def setup(where: Path) -> list:
        (where / folder).mkdir()
        return lab.target(kind, name, where / folder)[1]

    return setup


# Rows of a runs CSV that make no sense, from a valid megatron-core row of the shipped file.
CALIBRATE_ROWS = [
    ("value nan", {"value": "nan"}),
    ("value inf", {"value": "inf"}),
    ("value 0", {"value": "0"}),
    ("value -5", {"value": "-5"}),
    ("gpu_count 0", {"gpu_count": "0", "dp": "0"}),
    ("gpu_count -8", {"gpu_count": "-8"}),
    ("global_batch 1.5", {"global_batch": "1.5"}),
    ("global_batch nan", {"global_batch": "nan"}),
    ("micro_batch 1e9", {"micro_batch": "1e9"}),
    ("micro_batch 0", {"micro_batch": "0"}),
    ("kv_heads 7 of 32 heads", {"kv_heads": "7"}),
    ("heads 0", {"heads": "0"}),
    ("seq inf", {"seq": "inf"}),
    ("hidden -4096", {"hidden": "-4096"}),
    ("tp 0", {"tp": "0"}),
    ("layers 1e30", {"layers": "1e30"}),
]
FORECAST_CSVS = [
    (
        "nan",
        "time,active\n"
        + "".join(
            f"2020-01-01 {h:02d}:{m:02d}:00,{'nan' if h == 5 else 10}\n"
            for h in range(24)
            for m in range(0, 60, 10)
        ),
    ),
    (
        "inf",
        "time,active\n"
        + "".join(
            f"2020-01-01 {h:02d}:{m:02d}:00,{'inf' if m == 30 else 10}\n"
            for h in range(24)
            for m in range(0, 60, 10)
        ),
    ),
    (
        "negative",
        "time,active\n"
        + "".join(
            f"2020-01-01 {h:02d}:{m:02d}:00,-{h}\n" for h in range(24) for m in range(0, 60, 10)
        ),
    ),
    ("one row", "time,active\n2020-01-01 00:00:00,3\n"),
    (
        "times out of order",
        "time,active\n2020-01-02 00:00:00,3\n2020-01-01 00:00:00,3\n2020-01-03 00:00:00,3\n",
    ),
]
POD_CSVS = [
    ("nan", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,100,nan,1000\n"),
    ("negative", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,100,-1,1000\n"),
    ("inf", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,inf,100,1,1000\n"),
    ("text", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,x,100,1,1000\n"),
]
# study.json and journal edits, each applied to a copy of an interrupted Ray study
TAMPERINGS = [
    ("policy_path edited to a planted pickle", "planted"),
    ("serve_url edited to a stranger's server", "serve_url"),
    ("a decision row deleted", "delete-decision"),
    ("a decision edited", "edit-decision"),
    ("the journal truncated", "truncate-journal"),
    ("the journal replaced by a fifo", "fifo-journal"),
    ("the journal replaced by random bytes", "random-journal"),
    ("study.json truncated", "truncate-spec"),
    ("study.json a symlink to /dev/zero", "zero-spec"),
    ("study.json with hours nan", "nan-hours"),
    ("study.json with a scenario of 1e9 nodes", "huge-scenario"),
    ("study.json with an unknown policy", "unknown-policy"),
    ("study.json pacing a study that is not live", "paced-not-live"),
]


def _runs_csv(change: dict):
    def setup(where: Path) -> None:
        import csv

        with open(REPO / "benchmarks" / "published_runs.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        good = [r for r in rows if "nemo" in r["source"].lower() and r["layers"]]
        rows = [*good[:6], {**good[0], **change}]
        with open(where / "runs.csv", "w", newline="") as f:
            out = csv.DictWriter(f, list(rows[0]))
            out.writeheader()
            out.writerows(rows)

    return setup


class _Planted:
    """A pickle that, loaded, leaves a marker file: code from a study folder ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def plant_policy(folder: Path, marker: Path) -> None:
    """A copy of the shipped policy whose modules' pickles leave `marker` when loaded."""
    shutil.copytree(REPO / "xdscheduler" / "rl" / "trained" / "study", folder)
    for pkl in folder.rglob("*.pkl"):
        pkl.write_bytes(pickle.dumps(_Planted(marker)))


def _tampered(studies: Studies, how: str, lab: Lab):
    def setup(where: Path) -> None:
        study = _copy_study(studies.interrupted, where)
        spec_path = study / "study.json"
        spec = json.loads(spec_path.read_text())
        journal = study / "journal.sqlite"
        # an interrupted study's decisions may still lie in its write-ahead log: into the file
        with contextlib.closing(sqlite3.connect(journal)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for extra in ("journal.sqlite-wal", "journal.sqlite-shm"):
            (study / extra).unlink(missing_ok=True)
        if how == "intact":
            return
        if how == "planted":
            plant_policy(where / "planted", lab.markers / f"{where.name}-pickle")
            spec |= {"policy_path": str(where / "planted"), "policies": ["ppo", "planner"]}
        elif how == "copied":  # the shipped policy, but not what the study started with
            shutil.copytree(REPO / "xdscheduler" / "rl" / "trained" / "study", where / "copied")
            spec |= {
                "policy_path": str(where / "copied"),
                "policies": ["planner", "ppo"],
                "realtime": False,  # the rest at the simulator's pace, not the wall clock's
                "speed": 1.0,
            }
        elif how == "serve_url":
            spec["serve_url"] = lab.catcher.url
        elif how in ("delete-decision", "edit-decision"):
            with contextlib.closing(sqlite3.connect(journal)) as db:
                # the middle placement: an edit of a record that names no placement (a re-plan,
                # a switch) would change nothing, and the resume would rightly succeed
                placed = "SELECT idx FROM decisions WHERE record LIKE '%\"place\"%' ORDER BY idx"
                rows = [idx for (idx,) in db.execute(placed)]
                if not rows:
                    raise RuntimeError(f"{journal}: no placement among its decisions to edit")
                sql = (
                    "DELETE FROM decisions WHERE idx = ?"
                    if how == "delete-decision"
                    else "UPDATE decisions SET record = replace(record, '\"place\"', '\"moved\"') "
                    "WHERE idx = ?"
                )
                db.execute(sql, (rows[len(rows) // 2],))
                db.commit()
        elif how == "truncate-journal":
            data = journal.read_bytes()
            journal.write_bytes(data[: len(data) // 3])
        elif how == "fifo-journal":
            journal.unlink()
            os.mkfifo(journal)
        elif how == "random-journal":
            journal.write_bytes(random.Random(SEED).randbytes(8192))
        elif how == "truncate-spec":
            spec_path.write_text(spec_path.read_text()[:100])
            return
        elif how == "zero-spec":
            spec_path.unlink()
            spec_path.symlink_to("/dev/zero")
            return
        elif how == "nan-hours":
            spec_path.write_text(
                json.dumps(spec).replace(f'"hours": {spec["hours"]}', '"hours": NaN')
            )
            return
        elif how == "huge-scenario":
            spec["scenario"]["domains"][0]["nodes"][0]["count"] = 10**9
        elif how == "unknown-policy":
            spec["policies"] = ["planner", "__import__('os')"]
        elif how == "paced-not-live":
            spec |= {"realtime": False, "speed": 600.0}
        spec_path.write_text(json.dumps(spec))

    return setup


_CANARIES: dict[str, subprocess.Popen] = {}


def _state_with_canary(where: Path) -> None:
    """A state file whose processes are a sleep this pass started (never anyone else's)."""
    canary = subprocess.Popen(["sleep", "600"], start_new_session=True)
    _CANARIES[str(where)] = canary
    (where / "state.json").write_text(
        json.dumps(
            {
                "scenario": str(REPO / "scenarios" / "local_three_domains.yaml"),
                "address": "127.0.0.1:1",
                "processes": [{"pid": canary.pid, "role": "head"}],
            }
        )
    )


def _canary_alive(where: Path) -> list[str]:
    canary = _CANARIES.pop(str(where))
    alive = canary.poll() is None
    canary.kill()
    canary.wait()
    return [] if alive else ["stopped a process a tampered state file named"]


# ---------------------------------------------------------------------------- fixtures


@dataclass
class Studies:
    scenario: Path
    local: Path  # a finished --local study with tenants
    interrupted: Path  # a Ray study stopped mid-way (it has a journal)
    compare: Path  # a finished compare folder
    demand: Path  # a demand series CSV
    zero_pods: Path


def make_studies(lab: Lab) -> Studies:
    """What the cases start from, made with the code under test (each is one invocation)."""

    base = lab.root / "fixtures"
    base.mkdir()
    scenario = base / "small.yaml"
    scenario.write_text((REPO / "scenarios" / "three_domains.yaml").read_text())
    tenants = str(REPO / "scenarios" / "three_tenants.yaml")
    demand = base / "series.csv"
    demand.write_text(
        "time,active\n"
        + "".join(
            f"2020-01-{1 + i // 144:02d} {(i % 144) // 6:02d}:{(i % 6) * 10:02d}:00,"
            f"{50 + 30 * ((i % 144) / 144) + (i * 7919) % 11}\n"
            for i in range(144 * 14)  # two weeks: a backtest needs one before its window
        )
    )
    zero = base / "zero_pods.csv"
    zero.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"p{i},1000,1000,0,0\n" for i in range(50))
    )
    steps = [
        (
            "local",
            [
                "run",
                tenants,
                "--local",
                "--policies",
                "planner,fifo-single-domain",
                "--hours",
                "0.5",
                "--out",
                str(base / "local"),
            ],
            False,
            None,
        ),
        (
            "compare",
            [
                "compare",
                str(scenario),
                "--local",
                "--policies",
                "planner,planner-single-domain",
                "--seeds",
                "1",
                "--loads",
                "0.5",
                "--hours",
                "0.25",
                "--out",
                str(base / "compare"),
            ],
            False,
            None,
        ),
        (
            "interrupted",
            [
                "run",
                str(scenario),
                "--policies",
                "planner",
                "--hours",
                "6",
                "--realtime",
                "--speed",
                "1800",
                "--out",
                str(base / "interrupted"),
            ],
            True,
            lambda where, s: _journal_reached(base / "interrupted"),
        ),
    ]
    for name, argv, ray, interrupt in steps:
        case = Case("fixture", name, argv, ray=ray, interrupt=interrupt, timeout_s=RAY_S)
        res = run_case(lab, case)
        print(
            f"fixture {name}: {res.outcome} in {res.seconds:.0f} s ({res.last_line})",
            file=sys.stderr,
        )
    return Studies(scenario, base / "local", base / "interrupted", base / "compare", demand, zero)


def _journal_reached(out: Path) -> bool:
    path = out / "journal.sqlite"
    if not path.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            (t,) = db.execute("SELECT MAX(time_s) FROM jobs").fetchone()
        return (t or 0) >= 2 * 3600
    except sqlite3.Error:
        return False


# ---------------------------------------------------------------------------- HTTP


def http_pass(lab: Lab, studies: Studies) -> list[tuple[str, str]]:
    """Start `xds serve` on a free port, send each hostile request, stop it with Ctrl-C.
    (route, what came back) per request; a 5xx, a dropped connection or a time-out is a
    finding."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    where = lab.case_dir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xdscheduler",
            "serve",
            str(studies.scenario),
            "--port",
            str(port),
        ],
        cwd=where / "work",
        env=lab.env({}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    results = []
    try:
        if not _answering(url + "/healthz", proc, RAY_S):
            return [("xds serve", "did not start")]
        for route, body, headers, name in http_requests():
            results.append((f"{route} {name}", _send(url + route, body, headers)))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return results


def _answering(url: str, proc, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return True
        time.sleep(1)
    return False


def http_requests():
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    rng = random.Random(SEED)
    values = [None, True, -1, 0, 1e308, "nan", "x" * 1000, [], {}, [[[]]], -(2**70)]
    bodies = [
        b"",
        b"{",
        b"null",
        b"[]",
        b'{"a": NaN}',
        b"\x00\xff" * 100,
        json.dumps({"history": [1.0] * 10, "end_time": "0001-01-01T00:00:00"}).encode(),
        json.dumps({"history": [float("inf")]}).encode(),
        json.dumps({"history": [1.0], "step_min": 10**12}).encode(),
        json.dumps(
            {"history": [1.0], "known_jobs": [{"name": "a", "gpus": 1, "finish_min": 1e300}]}
        ).encode(),
        json.dumps({"history": [1.0], "end_time": "9999-12-31T23:59:59"}).encode(),
    ]
    bodies += [
        json.dumps(
            {
                "job": rng.choice(values),
                "view": rng.choice(values),
                "queue_length": rng.choice(values),
            }
        ).encode()
        for _ in range(6)
    ]
    for route in ("/policy/act", "/policy/decide", "/forecast"):
        for i, body in enumerate(bodies):
            yield route, body, auth, f"body {i}"
        yield route, b"{}", {}, "no token"
        yield route, b"{" * 100_000, auth, "deep"
        yield route, b" " * (3 << 20), auth, "3 MiB"
    for route in (
        "/healthz",
        "/metrics",
        "/",
        "/api/state",
        "/api/view",
        "/docs",
        "/policy/example",
        "/../../etc/passwd",
    ):
        yield route, None, auth, "GET"


def _send(url: str, body: bytes | None, headers: dict) -> str:
    req = urllib.request.Request(
        url, data=body, headers=headers, method="GET" if body is None else "POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return str(r.status)
    except urllib.error.HTTPError as e:
        return str(e.code)
    except (TimeoutError, OSError) as e:
        return f"no answer ({type(e).__name__})"


# ---------------------------------------------------------------------------- report


OUTCOMES = (
    "clean error",
    "success",
    "wrong success",
    "wrong refusal",
    "traceback",
    "hang",
    "not interrupted",
)
FINDINGS = OUTCOMES[2:]


def report(results: list[Result], http: list[tuple[str, str]], wall_s: float) -> None:
    outcomes = Counter(r.outcome for r in results)
    through = sum(any("replaced" in f or "into the fifo" in f for f in r.findings) for r in results)
    code = sum(any("planted code" in f for f in r.findings) for r in results)
    token = sum(any("API token" in f for f in r.findings) for r in results)
    killed = sum(any("stopped a process" in f for f in r.findings) for r in results)
    http_bad = [(n, s) for n, s in http if s[:1] not in ("2", "4")]
    early = outcomes["not interrupted"]
    bad = outcomes["traceback"] + outcomes["hang"] + early + through + code + token + killed
    verdict = "PASS" if bad == 0 else "FAIL"
    print(
        f"hostile pass: {verdict}: {outcomes['traceback']} tracebacks, {outcomes['hang']} "
        f"hangs, {early} Ctrl-C cases over before their Ctrl-C, {through} writes through "
        f"non-regular files, {code} code loaded from a study folder, {token} tokens sent "
        f"where a study folder said, {killed} processes stopped "
        f"from a tampered file; {outcomes['wrong success']} wrong successes, "
        f"{outcomes['wrong refusal']} wrong refusals, {outcomes['clean error']} clean errors, "
        f"{outcomes['success']} successes in {len(results)} invocations "
        f"({wall_s / 60:.1f} min); HTTP: {len(http_bad)} of {len(http)} requests answered "
        f"5xx or not at all"
    )
    by: dict[str, Counter[str]] = {}
    for r in results:
        row = by.setdefault(r.case.command, Counter())
        row[r.outcome] += 1
        row["non-regular"] += any("replaced" in f or "into the fifo" in f for f in r.findings)
        row["study code"] += any("planted code" in f or "API token" in f for f in r.findings)
    cols = [*OUTCOMES, "non-regular", "study code"]
    rows = [
        [cmd, sum(c[k] for k in OUTCOMES), *[c[k] for k in cols]] for cmd, c in sorted(by.items())
    ]
    rows.append(["all", len(results), *[sum(by[c][k] for c in by) for k in cols]])
    print_table("\ninvocations by command", ["command", "runs", *cols], rows)
    findings = [r for r in results if r.outcome in FINDINGS or r.findings]
    if findings:
        print("\nfindings:")
        for r in findings:
            extra = "; ".join(r.findings)
            print(
                f"  {r.outcome:<13} {r.case.command} {r.case.name}: exit {r.code}, "
                f"{r.seconds:.1f} s: {r.last_line}{' [' + extra + ']' if extra else ''}"
            )
    if http_bad:
        print("\nHTTP requests answered 5xx or not at all:")
        for name, status in http_bad:
            print(f"  {status:<12} {name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--code",
        type=Path,
        default=REPO,
        help="the checkout whose xdscheduler is tried (default: this one)",
    )
    p.add_argument("--jobs", type=int, default=2, help="invocations at once (default 2)")
    p.add_argument("--only", help="run only the cases whose command or name holds this text")
    p.add_argument("--list", action="store_true", help="list the cases and run nothing")
    p.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="run a seeded sample of N of the cases that start no Ray, and every "
        "case that does (the same cases for any --code)",
    )
    p.add_argument("--no-http", action="store_true", help="leave out the HTTP probe")
    args = p.parse_args(argv)
    # a pass stopped with SIGTERM still removes its temp folder and the Ray it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    data = os.environ.get("XDS_DATA_DIR") or next(
        (str(d) for d in (REPO.parent / "shared" / "data",) if d.is_dir()), None
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xds-hostile-") as tmp:
        root = Path(tmp)
        for sub in ("home", "ray", "tmp"):
            (root / sub).mkdir()
        lab = Lab(root, args.code.resolve(), Path(data) if data else None)
        try:
            lab.make_inputs()
            studies = (
                Studies(
                    *(
                        root / "fixtures" / n
                        for n in (
                            "small.yaml",
                            "local",
                            "interrupted",
                            "compare",
                            "series.csv",
                            "zero_pods.csv",
                        )
                    )
                )
                if args.list
                else make_studies(lab)
            )
            cases = xds_cases(lab, studies)
            if args.only:
                cases = [c for c in cases if args.only in f"{c.command} {c.name}"]
            light_at = [i for i, c in enumerate(cases) if not c.ray]
            if args.sample and args.sample < len(light_at):  # every Ray case is kept
                keep = set(random.Random(SEED).sample(light_at, args.sample))
                cases = [c for i, c in enumerate(cases) if i in keep or c.ray]
            if args.list:
                for c in cases:
                    print(f"{c.command:<10} {c.name}")
                print(f"{len(cases)} invocations")
                return 0
            light = [c for c in cases if not c.ray]
            with ThreadPoolExecutor(args.jobs) as pool:
                results = list(pool.map(lambda c: _logged(lab, c, len(cases)), light))
            results += [_logged(lab, c, len(cases)) for c in cases if c.ray]  # one Ray at once
            http = [] if args.no_http or args.only else http_pass(lab, studies)
        finally:
            lab.close()
            _stop_leftovers(root)
    report(results, http, time.monotonic() - started)
    return 0


def _logged(lab: Lab, case: Case, total: int) -> Result:
    """`run_case`, each outcome on standard error as it comes (a pass stopped early still
    says what it found)."""
    result = run_case(lab, case)
    with lab.lock:
        lab.done += 1
        done = lab.done
    extra = f" [{'; '.join(result.findings)}]" if result.findings else ""
    print(
        f"case {done}/{total}: {result.outcome}: {case.command} {case.name}: "
        f"exit {result.code}, {result.seconds:.1f} s{extra}",
        file=sys.stderr,
        flush=True,
    )
    return result


def _stop_leftovers(root: Path) -> None:
    """Ray daemons started by a killed invocation (their command lines name this pass's temp
    folder): stopped, so the pass leaves nothing running."""
    import psutil

    mine = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        with contextlib.suppress(psutil.Error):
            words = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
            if str(root) in words or str(root) in env.get("RAY_TMPDIR", ""):
                mine.append(proc)
    for proc in mine:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(mine, timeout=10)


if __name__ == "__main__":
    sys.exit(main())
