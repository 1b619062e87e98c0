"""What the suite's commands (compare, devices) share on their command line and in
their results folder: one-line usage errors (exit 2), argument types, and the
--out folder's lock, so that two runs never write one folder at once."""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

from common import models
from common.facts import registry

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


def int_list(option: str, example: str, rule: str, least: int = 1):
    """An argparse type: comma-separated integers of 1 or more (batch sizes and the like),
    sorted, repeats dropped, at least `least` of them; `example` and `rule` word the
    messages ("{option} takes {example}", "{option} {rule}")."""
    def parse(text):
        try:
            values = sorted({int(x) for x in text.split(",")})
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} takes {example}; got {text!r}") from None
        if len(values) < least or values[0] < 1:
            raise argparse.ArgumentTypeError(f"{option} {rule}; got {text!r}")
        return values
    return parse


def names(text: str, valid, option: str, groups: dict | None = None) -> list[str]:
    """A comma-separated list of names from `valid` (or "all": every one), repeats
    dropped, order kept; a name of `groups` stands for its list. One rule for every list
    option of every command: an empty name (a doubled, leading or trailing comma) is an
    error, as is an unknown name."""
    if text.strip() == "all":
        return list(valid)
    groups = groups or {}
    given = [n.strip() for n in text.split(",")]
    if "" in given:
        raise UsageError(f"--{option} {text!r} has an empty name; give all or names separated "
                         f"by single commas, e.g. {','.join(list(valid)[:2])}")
    for n in given:
        if n not in valid and n not in groups:
            raise UsageError(f"unknown {option} {n!r}; choose from: "
                             f"{', '.join([*valid, *groups])} (or all)")
    return list(dict.fromkeys(m for n in given for m in groups.get(n, [n])))


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return v


def command_parser(module: str, doc: str) -> Parser:
    """The parser of `python -m module` with the suite's first option, --framework."""
    p = Parser(prog=f"python -m {module}", description=doc.split("\n\n")[0],
               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--framework", default="all",
                   help=f"all, or a comma-separated list of: {', '.join(registry.NAMES)}")
    return p


def add_models(p: argparse.ArgumentParser, default: str) -> None:
    """The --model option of a command that takes several models (read back by
    names(args.model, models.NAMES, "model")), its help naming every model."""
    p.add_argument("--model", default=default,
                   help="a comma-separated list of: " + ", ".join(models.NAMES) + " (or all)")


def fraction(text):
    """An argparse type: a number above 0 and at most 1 (an accuracy)."""
    v = positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"{text} must be at most 1 (a fraction, e.g. 0.7)")
    return v


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


def results_dir(given: str | None, prefix: str = "") -> Path:
    """A command's results folder, absolute: --out as given, else results/<prefix><time>
    under the current directory (never inside the installed package)."""
    if given:
        return Path(given).resolve()
    return Path.cwd() / "results" / time.strftime(f"{prefix}%Y%m%d-%H%M%S")


def run_command(name: str, parser: Parser, argv, resolve, out_prefix: str, measure) -> int:
    """main() of a command that writes a results folder: parse argv and resolve(args)
    (bad input: one line on stderr, exit 2, nothing written), claim --out (the one step
    that creates something), then measure(args, resolved, out) holding its lock."""
    try:
        args = parser.parse_args(argv)
        resolved = resolve(args)
        out = results_dir(args.out, out_prefix)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out} is a file, not a folder; give a folder")
        lock = claim_out(out)
    except UsageError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2
    try:
        return measure(args, resolved, out)
    finally:
        lock.unlink(missing_ok=True)


def finish(prog: str, argv, out: Path, records: list[dict], render, as_json: bool,
           interrupted: bool, stop, err) -> int:
    """The end of a run of a command that writes records (devices, device_scopes):
    render(command) its report where anything was recorded, the records as JSON on
    stdout with --json, and the exit code: 130/143 when interrupted (what finished is
    kept), 1 when a record failed, else 0."""
    command = f"python -m {prog} " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    if records:
        render(command)
    if as_json:
        print(json.dumps(records, indent=1))
    if interrupted:
        err.print(f"interrupted: the records finished so far are in {out}")
        return stop.exit_code or 130
    return 1 if any(r["status"] == "failed" for r in records) else 0
