"""What the suite's commands (compare, devices) share on their command line and in
their results folder: one-line usage errors (exit 2), argument types, and the
--out folder's lock, so that two runs never write one folder at once."""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

LOCK_FILE = ".lock"                # pid of the run writing the folder right now
COMMAND_FILE = "command.txt"       # the command that wrote the folder, for a re-render


class UsageError(Exception):
    """Bad input: main() prints it as one line and exits 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):            # one line, exit code 2
        raise UsageError(message)


def integer(minimum, rule):
    """An argparse type: an integer of at least `minimum`, else `rule` in the message."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{text} must be {rule}")
        return v
    return parse


positive = integer(1, "at least 1")
non_negative = integer(0, "0 or more")


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return v


def names(text: str, valid, what: str) -> list[str]:
    """`all`, or a comma-separated list of names from `valid` (repeats dropped), for
    the option --<what>; anything else is a UsageError naming the choices."""
    if text == "all":
        return list(valid)
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    if not chosen:
        raise UsageError(f"--{what} is empty; give all or a comma-separated list")
    for n in chosen:
        if n not in valid:
            raise UsageError(f"unknown {what} {n!r}; choose from: {', '.join(valid)} (or all)")
    return list(dict.fromkeys(chosen))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_holder(lock: Path) -> int | None:
    """The live pid (not ours) in a lock file, or None for none or a stale one."""
    try:
        pid = int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid != os.getpid() and _pid_alive(pid) else None


def _take_lock(lock: Path, out: Path) -> None:
    """Create the lock file exclusively; a stale one (its pid gone) is taken over."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid = lock_holder(lock)
            if pid:
                raise UsageError(f"--out {out} is being written by another run "
                                 f"(pid {pid}, {lock}); wait for it to end or give another --out")
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        return
    raise UsageError(f"--out {out}: could not take the lock {lock}; try again")


def claim_out(out: Path) -> Path:
    """Create --out (and its parents) and take its lock; on failure remove what was
    created and raise UsageError. Returns the lock file."""
    created = []
    probe = out
    while not probe.exists() and probe != probe.parent:
        created.append(probe)
        probe = probe.parent
    lock = out / LOCK_FILE
    try:
        for d in reversed(created):
            d.mkdir()
        _take_lock(lock, out)
        (out / "logs").mkdir(exist_ok=True)
    except OSError as e:
        for d in created:                # innermost first
            try:
                for child in d.iterdir():
                    child.unlink()
                d.rmdir()
            except OSError:
                pass
        raise UsageError(f"--out {out} cannot be created or written ({e.strerror or e}); "
                         "choose a writable folder") from None
    return lock


def recorded_command(out: Path) -> str:
    """The command that wrote a results folder (for a report rendered again)."""
    path = out / COMMAND_FILE
    return path.read_text().strip() if path.exists() else "(unknown)"
