"""Run one worker process and watch it: `run_worker(argv, log_path, timeout, on_line, env)`.

A minimal version written for benchmarks.devices on branch issue7; the shared
runner (same API) replaces it at merge. The worker starts in a session of its
own, its stdout lines go to `on_line`, its stderr to `log_path`; on time-out the
whole process group is killed (a multi-process worker's ranks too), and SIGINT or
SIGTERM received while it runs kill the group too and are reported as
`interrupted`."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class WorkerExit:
    code: int | None          # exit status; negative: killed by that signal
    timed_out: bool
    interrupted: bool
    log_tail: str             # the last non-empty lines of the worker's log


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join([line for line in text.splitlines() if line.strip()][-lines:])


def run_worker(argv: list[str], log_path: Path, timeout: float,
               on_line: Callable[[str], None], env: dict | None = None) -> WorkerExit:
    """Start `argv` (a full command line), feed its stdout lines to on_line, wait."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    state = {"timed_out": False, "interrupted": False}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                                start_new_session=True)

        def on_timeout():
            state["timed_out"] = True
            _kill_group(proc.pid)

        timer = threading.Timer(timeout, on_timeout)
        timer.daemon = True
        timer.start()
        previous = {}
        in_main = threading.current_thread() is threading.main_thread()

        def on_signal(signum, frame):
            state["interrupted"] = True
            _kill_group(proc.pid)

        if in_main:
            for s in (signal.SIGINT, signal.SIGTERM):
                previous[s] = signal.signal(s, on_signal)
        try:
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
            code = proc.wait()
        finally:
            timer.cancel()
            for s, handler in previous.items():
                signal.signal(s, handler)
            if proc.poll() is None:      # on_line raised: leave nothing behind
                _kill_group(proc.pid)
                proc.wait()
    return WorkerExit(code=code, timed_out=state["timed_out"], interrupted=state["interrupted"],
                      log_tail=_tail(log_path))
