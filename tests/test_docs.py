"""The documentation against the code: README.md and every page under docs/.

- Every line of a fenced code block that runs `python -m benchmarks.X ...` (also
  `.venv/bin/python -m ...`, with environment assignments in front) names a module that
  exists, and its arguments are accepted by that command's own argument parser, checked
  in process by its `build_parser()` (every command has one), so that no benchmark
  runs. `--help` of every command runs once in a subprocess too.
- Every `make TARGET ...` line names a target of the Makefile; where the target's recipe
  runs a benchmarks command with `$(ARGS)`, the ARGS given are parsed as above.
- A block that is a synopsis rather than a command is marked by the line
  `<!-- docs-test: template (the reason) -->` just before its fence, and skipped with
  that reason.
- Every relative Markdown link resolves to a file of the repository (and a `#heading`
  to a heading of that page); every command under benchmarks/ is named in README.md;
  README.md is at most 10,000 bytes.

The checks are seen failing: the tests at the end plant a bad option, a missing target,
a broken link, and assert that each check rejects it.

Only `benchmarks.<module>` is imported here, never a framework (checked in a subprocess).
"""
from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_BYTES = 10_000
MAKEFILE = ROOT / "Makefile"
BENCHMARKS = ROOT / "benchmarks"
# modules under benchmarks/ that users do not run: the commands start them
INTERNAL = {"__init__", "cli", "runner", "tuned", "probe", "rendering"}
FRAMEWORK_IMPORTS = ("torch", "tensorflow", "mxnet", "paddle", "keras", "jax")

TEMPLATE = re.compile(r"^\s*<!--\s*docs-test:\s*template\s*\((?P<reason>.+)\)\s*-->\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
# a line that may run a command: assignments, then python / .venv/bin/python / make
COMMAND_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*=\S*\s+)*(?:\S*/)?(?:python3?|make)(?:\s|$)")
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
PUNCTUATION = set("();<>|&")


def docs() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---------------------------------------------------------------- fenced commands


@dataclass(frozen=True)
class Command:
    doc: Path
    line: int                      # 1-based line of the command's first line
    text: str                      # as written, continuation lines joined
    kind: str                      # "module" or "make"
    name: str                      # benchmarks module, or make target ("" for the default)
    args: tuple[str, ...]          # the module's arguments, or make's VAR=value assignments
    template: str | None = None    # why the block is skipped, if it is a template

    @property
    def id(self) -> str:
        return f"{rel(self.doc)}:{self.line}:{self.kind}:{self.name or 'default'}"


def fenced_lines(text: str):
    """(line number, logical line, template reason or None) for every line inside a fenced
    code block, backslash continuations joined."""
    lines = text.splitlines()
    fence, template, last_outside = None, None, ""
    pending, start = "", 0
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                t = TEMPLATE.match(last_outside)
                template = t.group("reason") if t else None
            elif line.strip():
                last_outside = line
            continue
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line.strip()[len(m.group(1)):].strip():
            fence, last_outside = None, ""
            continue
        if not pending:
            start = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line, template
        pending = ""


def split_command(line: str) -> list[str]:
    """Shell words of the line's first command: comments dropped, cut at the first
    redirection, pipe or separator."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    words = []
    for word in lex:
        if set(word) <= PUNCTUATION:
            break
        words.append(word)
    return words


def parse_command(doc: Path, n: int, line: str, template: str | None = None) -> Command | None:
    """The command a fenced line runs, if it is `python -m benchmarks.X` or `make`."""
    if not COMMAND_LINE.match(line):
        return None
    words = split_command(line)
    while words and ASSIGNMENT.match(words[0]):
        words.pop(0)
    if not words:
        return None
    program, rest = Path(words[0]).name, words[1:]
    if program == "make":
        targets = [w for w in rest if not ASSIGNMENT.match(w) and not w.startswith("-")]
        assigns = tuple(w for w in rest if ASSIGNMENT.match(w))
        return Command(doc, n, line.strip(), "make", targets[0] if targets else "", assigns, template)
    if len(rest) >= 2 and rest[0] == "-m" and rest[1].startswith("benchmarks."):
        return Command(doc, n, line.strip(), "module", rest[1].split(".", 1)[1], tuple(rest[2:]),
                       template)
    return None             # python running something else (pytest, a script)


def commands_in(doc: Path, text: str | None = None) -> list[Command]:
    text = doc.read_text() if text is None else text
    found = (parse_command(doc, n, line, template) for n, line, template in fenced_lines(text))
    return [c for c in found if c is not None]


def all_commands() -> list[Command]:
    return [c for d in docs() for c in commands_in(d)]


def as_params(commands: list[Command]):
    return [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=f"template: {c.template}")]
                         if c.template else []) for c in commands]


# ---------------------------------------------------------------- argument check


class Rejected(AssertionError):
    """A documented command whose arguments its parser does not accept."""


def check_arguments(module_name: str, args) -> None:
    """Raise Rejected unless `python -m benchmarks.<module_name> args` parses."""
    args = list(args)
    module = importlib.import_module(f"benchmarks.{module_name}")
    err = io.StringIO()
    shown = f"python -m benchmarks.{module_name} {shlex.join(args)}".strip()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build = getattr(module, "build_parser", None)
            if build is None:
                raise Rejected(f"benchmarks.{module_name} has no build_parser(): every "
                               "command builds its parser apart from running it")
            build().parse_args(args)
    except Rejected:
        raise
    except SystemExit as e:
        if e.code not in (0, None):
            said = err.getvalue().strip().splitlines() or [""]
            raise Rejected(f"{shown}: exit {e.code}: {said[-1]}") from None
    except Exception as e:              # the suite's parsers raise a UsageError (exit 2)
        raise Rejected(f"{shown}: {type(e).__name__}: {e}") from None


def module_exists(name: str) -> bool:
    return (BENCHMARKS / f"{name}.py").is_file()


# ---------------------------------------------------------------- the Makefile


def make_rules(text: str | None = None) -> dict[str, list[str]]:
    """Target -> recipe lines (continuations joined); variables and special targets out."""
    text = (MAKEFILE.read_text() if text is None else text).replace("\\\n", " ")
    rules: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("\t"):
            if current is not None:
                current.append(line.strip())
            continue
        current = None
        m = re.match(r"^([^\s:=#][^:=#]*?)\s*::?(?![=])(.*)$", line)
        if m and not re.match(r"^\S+\s*[:?+!]?=", line):
            current = []
            for target in m.group(1).split():
                if not target.startswith(".") and "$" not in target:
                    rules[target] = current
    return rules


def make_default_target(rules: dict[str, list[str]]) -> str:
    return next(iter(rules))


def make_benchmark(command: Command, rules: dict[str, list[str]]) -> tuple[str, list[str]] | None:
    """The benchmarks command (module, arguments) that `make TARGET ARGS=...` runs, if
    its recipe runs one."""
    assigns = dict(a.split("=", 1) for a in command.args)
    for line in rules.get(command.name or make_default_target(rules), []):
        m = re.search(r"-m\s+benchmarks\.(\w+)(.*)$", line)
        if not m:
            continue
        args = []
        for word in shlex.split(m.group(2)):
            var = re.fullmatch(r"\$[({](\w+)[)}]", word)
            if var:
                args += shlex.split(assigns.get(var.group(1), ""))
            elif "$" not in word:
                args.append(word)
        return m.group(1), args
    return None


def check_make(command: Command, rules: dict[str, list[str]] | None = None) -> None:
    """Raise Rejected unless the target exists (and what its recipe runs parses)."""
    rules = make_rules() if rules is None else rules
    target = command.name or make_default_target(rules)
    if target not in rules:
        raise Rejected(f"{command.text}: no target {target!r} in the Makefile "
                       f"(targets: {', '.join(rules)})")
    runs = make_benchmark(command, rules)
    if runs is not None:
        check_arguments(*runs)


# ---------------------------------------------------------------- links


LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
                  r"|!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced blocks, inline code spans blanked."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if fence is None:
            out.append((n, re.sub(r"(`+)(.+?)\1", lambda s: " " * len(s.group(0)), line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fence = None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m:
            fence = m.group(1) if fence is None else (None if m.group(1)[0] == fence[0] else fence)
            continue
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fence is None and h:
            s = slug(h.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(doc: Path, text: str | None = None) -> list[str]:
    """Every relative link of `doc` that does not resolve: a missing file, a file outside
    the repository, or a #heading the page lacks."""
    text = doc.read_text() if text is None else text
    problems = []
    for n, line in prose(text):
        targets = [a or b for a, b in LINK.findall(line)]
        ref = REFERENCE.match(line)
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            if re.match(r"^[a-zA-Z][\w+.-]*:", target):      # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (doc.parent / path).resolve() if path else doc
            where = f"{rel(doc)}:{n}: {target}"
            if ROOT not in resolved.parents and resolved != ROOT:
                problems.append(f"{where}: outside the repository")
            elif not resolved.exists():
                problems.append(f"{where}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
                problems.append(f"{where}: no heading #{anchor} in {rel(resolved)}")
    return problems


# ---------------------------------------------------------------- the tests


COMMANDS = all_commands()
MODULE_COMMANDS = [c for c in COMMANDS if c.kind == "module"]
MAKE_COMMANDS = [c for c in COMMANDS if c.kind == "make"]


def entry_points() -> list[str]:
    return sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem not in INTERNAL)


def test_the_docs_hold_commands():
    """The scan finds what it must check (a broken scan would pass everything)."""
    assert {"compare", "devices", "device_scopes"} <= {c.name for c in MODULE_COMMANDS}
    assert {"compare", "test"} <= {c.name for c in MAKE_COMMANDS if c.doc == README}


@pytest.mark.parametrize("command", as_params(MODULE_COMMANDS))
def test_documented_command_parses(command: Command):
    assert module_exists(command.name), f"{command.id}: no module benchmarks/{command.name}.py"
    check_arguments(command.name, command.args)


@pytest.mark.parametrize("command", as_params(MAKE_COMMANDS))
def test_documented_make_target_exists(command: Command):
    check_make(command)


@pytest.mark.parametrize("module", sorted(set(entry_points()) |
                                          {c.name for c in MODULE_COMMANDS if module_exists(c.name)}))
def test_help_runs(module: str):
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("module", entry_points())
def test_every_command_is_in_the_readme(module: str):
    assert re.search(rf"`{module}[` ]", README.read_text()), \
        f"benchmarks/{module}.py is a command missing from README.md's table " \
        f"(or add it to INTERNAL in {rel(Path(__file__))} if users do not run it)"


@pytest.mark.parametrize("doc", docs(), ids=rel)
def test_links_resolve(doc: Path):
    assert broken_links(doc) == []


def test_readme_is_short():
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_no_framework_is_imported():
    """The checks above import benchmarks modules and build their parsers in process:
    that must import no framework (run here in a fresh process)."""
    code = ("import sys, tests.test_docs as t\n"
            "for c in t.MODULE_COMMANDS:\n"
            "    try: t.check_arguments(c.name, c.args)\n"
            "    except (t.Rejected, ImportError): pass   # the tests above say so\n"
            f"loaded = sorted(m for m in {FRAMEWORK_IMPORTS!r} if m in sys.modules)\n"
            "assert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ------------------------------------------------ the checks, seen failing


@pytest.mark.parametrize("module", sorted({c.name for c in MODULE_COMMANDS
                                           if module_exists(c.name) and not c.template}))
def test_parser_check_rejects_a_planted_bad_option(module: str):
    """A documented command of each module with a bad option planted in a copy: the check
    must reject it."""
    command = next(c for c in MODULE_COMMANDS if c.name == module and not c.template)
    check_arguments(module, command.args)
    with pytest.raises(Rejected, match="no-such-option"):
        check_arguments(module, [*command.args, "--no-such-option"])


def test_scan_finds_commands_and_skips_templates():
    text = ("Some prose with `python -m benchmarks.compare --nope` inline: not checked.\n\n"
            "```sh\n"
            "OPENBLAS_CORETYPE=SkylakeX .venv/bin/python -m benchmarks.devices --quick  # note\n"
            "python -m benchmarks.compare --nodes 2 \\\n    --network loopback > out.txt\n"
            "python -m pytest -q\n"
            "make compare ARGS=\"--epochs 10\"\n"
            "```\n\n"
            "<!-- docs-test: template (a synopsis) -->\n"
            "```sh\npython -m benchmarks.devices [--out DIR]\n```\n")
    found = commands_in(ROOT / "docs" / "example.md", text)
    assert [(c.line, c.kind, c.name, c.args, c.template) for c in found] == [
        (4, "module", "devices", ("--quick",), None),
        (5, "module", "compare", ("--nodes", "2", "--network", "loopback"), None),
        (8, "make", "compare", ("ARGS=--epochs 10",), None),
        (13, "module", "devices", ("[--out", "DIR]"), "a synopsis"),
    ]


def test_make_check_rejects_a_missing_target_and_bad_args():
    rules = make_rules()
    check_make(Command(README, 1, "make compare", "make", "compare", ("ARGS=--epochs 10",)), rules)
    with pytest.raises(Rejected, match="no target"):
        check_make(Command(README, 1, "make no-such-target", "make", "no-such-target", ()), rules)
    with pytest.raises(Rejected, match="no-such-option"):
        check_make(Command(README, 1, "make compare", "make", "compare",
                           ("ARGS=--no-such-option",)), rules)


def test_link_check_rejects_broken_links():
    doc = ROOT / "docs" / "example.md"
    good = "[compare](compare.md), [top](../README.md#commands), [web](https://example.org)\n"
    assert broken_links(doc, good) == []
    bad = ("[gone](no-such-page.md) [anchor](compare.md#no-such-heading) "
           "[outside](../../shared/DESIGN.md)\n"
           "```sh\n[in a block](not-a-link.md)\n```\n")
    problems = broken_links(doc, bad)
    assert len(problems) == 3, problems
    assert "no such file" in problems[0] and "no heading" in problems[1] \
        and "outside the repository" in problems[2]
