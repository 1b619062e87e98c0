"""Worker processes, run so that a person can stop them: each worker starts in a
session of its own (its ranks and children with it), its stdout lines are read by a
daemon thread (never one that keeps the command alive), and a time-out, SIGINT or
SIGTERM kills the whole session within a fraction of a second.

    with Interrupts() as stop:
        result = run_worker(argv, log_path, timeout, on_line, stop=stop)

Every entry point starts its workers here: run_worker for any worker module,
run_config for one run of benchmarks.workers.run (a RunConfig's record).
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common.facts import registry, settings
from common.launch import networks
from common.launch.launcher import ROOT, child_env, log_tail

from .workers.run import QUIET_ENV


POLL = 0.2        # seconds between looks at the clock and the stop flag


@dataclass
class WorkerExit:
    code: int | None          # the worker's exit code (negative: killed by that signal)
    timed_out: bool
    interrupted: bool
    log_tail: str             # its last log lines, for the record


class Interrupts:
    """Within this block SIGINT and SIGTERM set `signum` instead of raising, so the
    command can kill its worker, keep what finished and write its report."""

    def __init__(self):
        self.signum: int | None = None

    def __enter__(self):
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for s, handler in self._old.items():
            signal.signal(s, handler)

    @property
    def exit_code(self) -> int:
        """128 + the signal, as a shell reports it: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum if self.signum else 0


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_worker(argv: list[str], log_path: Path, timeout: float, on_line: Callable[[str], None],
               env: dict | None = None, cwd: Path | None = None,
               stop: Interrupts | None = None, python: str | None = None) -> WorkerExit:
    """Run `python argv...` with stderr to log_path, calling on_line for each stdout line,
    until it exits, `timeout` seconds pass or `stop` catches a signal. `python`: the
    interpreter (a framework's: common.facts.registry.python), this one by default."""
    lines: queue.Queue = queue.Queue()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([python or sys.executable, *argv], stdout=subprocess.PIPE,
                                stderr=log, text=True, env=env, cwd=cwd, start_new_session=True)

        def read():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)               # end of output

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        timed_out = interrupted = False
        while True:
            try:
                line = lines.get(timeout=POLL)
                if line is None:
                    break
                on_line(line)
            except queue.Empty:
                pass
            if stop is not None and stop.signum:
                interrupted = True
            elif time.monotonic() > deadline:
                timed_out = True
            if interrupted or timed_out:
                _kill(proc)
                break
        code = proc.wait()
    return WorkerExit(code, timed_out, interrupted, log_tail(log_path))


def worker_env(threads: int, **extra: str) -> dict:
    """A worker's environment: common.launch.launcher.child_env with quiet C++ logs."""
    return child_env(threads, **QUIET_ENV, **extra)


def run_config(cfg: dict, out_path: Path, timeout: float, log_path: Path | None = None,
               on_line: Callable[[str], None] = lambda line: None, stop: Interrupts | None = None,
               env: dict | None = None,
               read: Callable[[Path], dict] = lambda path: json.loads(path.read_text())
               ) -> tuple[dict | None, WorkerExit]:
    """One run (a RunConfig as a dict) in a benchmarks.workers.run process of its own: its record
    (None where the worker wrote none: a crash, a time-out, an interrupt) and how it ended.
    The log goes beside the record unless log_path says where; `read` reads the record
    (a ValueError there counts as no record, its message in the log tail)."""
    out_path = Path(out_path)
    out_path.unlink(missing_ok=True)
    env = dict(env or worker_env(cfg.get("threads") or os.cpu_count() or 1))
    # a setting's environment from the process's start (LD_PRELOAD acts only then); a list
    # of flags joins what is set already (a kernel path's XLA cap stays under ynn-fusion-off)
    for k, v in settings.env_of(settings.get(cfg["framework"], cfg.get("settings") or [])).items():
        env[k] = settings.JOINED[k].join([env[k], v]) if k in settings.JOINED and env.get(k) else v
    log_path = Path(log_path or out_path.with_suffix(".log"))
    log_path.parent.mkdir(parents=True, exist_ok=True)   # a command's subfolder's first run
    done = run_worker(["-m", "benchmarks.workers.run", json.dumps(cfg), str(out_path)],
                      log_path, timeout, on_line,
                      env=env,
                      cwd=ROOT, stop=stop, python=registry.python(cfg["framework"]))
    # a killed worker could not take its network down (emulated nodes' namespaces)
    networks.of(cfg).clean_stale()
    record = None
    if out_path.exists() and not (done.timed_out or done.interrupted):
        try:
            record = read(out_path)
        except ValueError as e:
            done.log_tail += f" | {e}"
    return record, done
