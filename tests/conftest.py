"""Which frameworks the suite covers, and the cached runs that several tests share.

A plain `pytest` covers every installed framework. Under CI (.ci/run sets
DL_COMPARE_REQUIRE=all) every framework is required: one that cannot be imported
fails its tests instead of being skipped. In every run, a framework's own environment
that is built (.venv-mxnet on disk) must give the suite its framework: else the run
fails at its start (environment_problems)."""
from __future__ import annotations

import ast
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.runner import worker_env
from tests.helpers.oracle_cache import SHARED_CACHE
from common.facts import registry
from common.facts.machine import cpu_info, cpu_line

ROOT = Path(__file__).resolve().parent.parent
# Threads of every framework process the tests start: `make test` runs two test files at
# once on 2 cores, so one thread each; with two each, OpenMP threads that spin waiting
# for a descheduled sibling stall (measured: the device experiments' SIGINT test took
# 68 s beside the other file's work, 8 s alone). The checks compare values, not speed.
THREADS = 1


def required() -> list[str]:
    value = os.environ.get("DL_COMPARE_REQUIRE", "").strip()
    return list(registry.NAMES) if value == "all" else [v for v in value.split(",") if v]


def covered() -> list[str]:
    names = set(registry.installed()) | set(required())
    return [n for n in registry.NAMES if n in names]


def having(capability: str) -> list[str]:
    """The covered frameworks that have a capability (no known gap for it)."""
    return [n for n in covered() if not registry.gap(n, capability)]


def lacking(capability: str) -> list[str]:
    """The covered frameworks that list a capability as a known gap."""
    return [n for n in covered() if registry.gap(n, capability)]


def makefile_envs(root: Path = ROOT) -> list[str]:
    """The environments of their own that `make install` builds (the Makefile's ENVS):
    .venv-NAME, with the extras NAME and test."""
    return re.search(r"^ENVS\s*:=(.*)$", (root / "Makefile").read_text(), re.M).group(1).split()


def environment_problems(root: Path = ROOT) -> list[str]:
    """Where a framework's own environment is built (.venv-NAME/bin/python on disk, or the
    interpreter DL_COMPARE_PYTHON_NAME names) but the registry does not find the framework
    through it, one line each saying what to do. Its frameworks are those `make` installs
    there (extra NAME) and those the registry places there: a registry that takes one
    for the main environment's, or looks for the environment in the wrong place, would
    report it not-installed and every one of its tests skipped or never collected."""
    problems = []
    for env in makefile_envs(root):
        variable = f"DL_COMPARE_PYTHON_{env.upper()}"
        own = os.environ.get(variable)
        python = Path(own) if own else root / f".venv-{env}" / "bin" / "python"
        if not python.exists():
            continue                      # not built here: its frameworks are not installed
        where = f"{variable}={own}" if own else f".venv-{env}"
        for f in registry.FRAMEWORKS.values():
            if env not in (f.extra, f.environment):
                continue
            runs = Path(registry.python(f.name))
            if runs.parent.parent.resolve() != python.parent.parent.resolve():
                problems.append(f"{where} is built, but the registry runs {f.name} with {runs}: "
                                f"common/facts/registry.py must start {f.name} there "
                                f"(environment={env!r}, python())")
            elif not registry.is_installed(f.name):
                fix = (f"install {f.name} there, or unset {variable}" if own else
                       f"rebuild it (rm -rf {where} && make install), or remove it to run "
                       f"without {f.name}")
                problems.append(f"{where} is built, but {f.name} is not found in it: {fix}")
    return problems


def pytest_configure(config):
    """Every run, CI's or not, fails at its start on an environment that is built but
    does not give the suite its framework (environment_problems)."""
    problems = environment_problems()
    if problems:
        raise pytest.UsageError("\n".join(problems))


# One compilation cache for the framework processes of a test session, shared by the
# pytest processes that `-n 2` starts (they inherit the variable from the first, which
# made the folder and removes it at its end): the same program, compiled in several
# processes (a ResNet-18 step in the conformance checks and in worker runs), compiles
# once. XLA's cache for JAX (measured: keras-jax's conformance checks 66 s -> 60 s on
# their own; JAX's 2-device ResNet-18 scratch run 11.3 s -> 5.2 s after the conformance
# process); every program, however quick to compile (JAX's default keeps those over 1 s
# only): an eager JAX step compiles each primitive on its own, and the same primitives
# recur in every JAX process (JAX's conformance checks a second time into the same
# cache: 32 s against 72 s with only programs over 0.5 s kept; their first time 82 s
# against 84 s), and torch.compile's (Inductor's) in a folder that starts empty, as on a
# fresh machine: its default folder under /tmp outlives the session, so a second run of
# the suite compiled nothing (PyTorch's conformance checks 26 s warm, 64 s cold;
# keras-torch's 56 s and 81 s). The checks compare values, and a cached program is the
# same program.
if SHARED_CACHE not in os.environ:
    os.environ[SHARED_CACHE] = tempfile.mkdtemp(prefix="dl-compare-tests-cache-")
    atexit.register(shutil.rmtree, os.environ[SHARED_CACHE], True)
COMPILE_CACHES = {"JAX_COMPILATION_CACHE_DIR": os.path.join(os.environ[SHARED_CACHE], "xla"),
                  "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                  "TORCHINDUCTOR_CACHE_DIR": os.path.join(os.environ[SHARED_CACHE], "inductor")}


def subprocess_env(threads: int = THREADS, extra_path: str | None = None) -> dict:
    """A worker's environment (benchmarks.runner.worker_env), with `extra_path` first on
    the module path (fault injection: a fake framework, a planted bug)."""
    env = worker_env(threads, **COMPILE_CACHES)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([extra_path, env["PYTHONPATH"]])
    return env


def run_python(args: list[str], timeout: int = 600, threads: int = THREADS,
               extra_path: str | None = None, framework: str | None = None
               ) -> subprocess.CompletedProcess:
    """`python args` in the repository; with `framework`, the interpreter of that
    framework's environment (MXNet's is not the one running the tests)."""
    python = registry.python(framework) if framework else sys.executable
    return subprocess.run([python, *args], capture_output=True, text=True, cwd=ROOT,
                          env=subprocess_env(threads, extra_path), timeout=timeout)


def usage_error(args: list[str]) -> str:
    """Run `python args`, which must reject its input the suite's way: exit 2, one line
    on stderr, nothing on stdout. Returns that line."""
    proc = run_python(args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", proc.stderr
    return lines[0]


def interrupt(args: list[str], out: Path, ready, settle: float, env: dict | None = None) -> str:
    """Start `python args` (in `env`, subprocess_env's by default), wait until ready()
    holds (300 s at most) and `settle` seconds more, then send SIGINT: it must stop within
    a few seconds with exit 130 and leave no process naming `out` alive. Returns its
    stderr."""
    import signal
    import time
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env or subprocess_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(settle)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10, "took more than a few seconds to stop"
    assert proc.returncode == 130, stderr[-2000:]
    time.sleep(1)
    alive = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert not [p for p in alive if int(p) != os.getpid()], "a worker outlived the run"
    return stderr


def incomplete_subclass_error(module: str, base: str, defined: str) -> str:
    """The TypeError that instantiating a subclass of module.base defining only the
    method `defined` gives (an incomplete framework must fail loudly, naming what it
    lacks), printed by a fresh process."""
    code = (f"from {module} import {base}\n"
            f"class Half({base}):\n"
            f"    def {defined}(self, *args): return None\n"
            "class B: name = 'half'\n"
            "try:\n"
            "    Half(B())\n"
            "except TypeError as e:\n"
            "    print(e)\n")
    proc = run_python(["-c", code])
    return proc.stdout + proc.stderr


def name_uses(path: Path, names: set[str], source: str | None = None,
              lookups: bool = False) -> list[str]:
    """`file:line` of every comparison in a source file (`source`, else the file's text)
    with one of `names` as a string literal on either side, alone or in a tuple, list or
    set, or as a match case; with `lookups`, also every table of them: a tuple, list or
    set holding one, a dict literal keyed by one, `table["name"]`, `table.get("name")`. A
    registry's name compared (or listed) outside its own module is a second source of
    truth."""
    tree = ast.parse(source if source is not None else path.read_text())
    found = []

    def named(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False
    for node in ast.walk(tree):
        hit = ((isinstance(node, ast.Compare) and any(named(n) for n in (node.left, *node.comparators)))
               or (isinstance(node, ast.match_case) and named(getattr(node.pattern, "value", None))))
        if lookups and not hit:
            hit = ((isinstance(node, (ast.Tuple, ast.List, ast.Set)) and named(node))
                   or (isinstance(node, ast.Dict) and any(named(k) for k in node.keys if k))
                   or (isinstance(node, ast.Subscript) and named(node.slice))
                   or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                       and node.func.attr == "get" and node.args and named(node.args[0])))
        if hit:
            line = node.pattern.lineno if isinstance(node, ast.match_case) else node.lineno
            found.append(f"{path.relative_to(ROOT)}:{line}")
    return list(dict.fromkeys(found))


def uses_but(scan, own: str) -> list[str]:
    """What `scan(path)` finds in every source file of common/, benchmarks/ and
    frameworks/ but `own` (a registry's module, the one place its names are compared)."""
    return [hit for part in ("common", "benchmarks", "frameworks")
            for p in sorted((ROOT / part).rglob("*.py")) if p != ROOT / own for hit in scan(p)]


def planted_uses(scan, module: str, line: str, planted: str) -> list[str]:
    """What `scan(path, source)` finds in `module` with its `line` replaced by `planted`
    (a copy of its source: the tree is left as it is)."""
    source = (ROOT / module).read_text()
    assert line in source, (module, line)
    return scan(ROOT / module, source.replace(line, planted))


def per_framework(tmp_path_factory, module: str, threads: int = THREADS, timeout: int = 600):
    """framework -> the JSON that `python -m module FRAMEWORK OUT_JSON` writes, run once
    per framework, each in its own process."""
    cache = {}

    def get(framework):
        if framework not in cache:
            if not registry.is_installed(framework):
                pytest.fail(f"{framework} is required here but not installed "
                            f"({registry.install_hint(framework)})")
            out = tmp_path_factory.mktemp(module.rpartition(".")[2]) / f"{framework}.json"
            proc = run_python(["-m", module, framework, str(out)], threads=threads, timeout=timeout,
                              framework=framework)
            if proc.returncode != 0 or not out.exists():
                pytest.fail(f"{framework}: {module} process failed (exit {proc.returncode}):\n"
                            + proc.stderr[-3000:])
            cache[framework] = json.loads(out.read_text())
        return cache[framework]
    return get


def planted_run(tmp_path: Path, plant: str, cfg: dict) -> dict:
    """The record of a worker run (a RunConfig as a dict) with a bug planted in every
    process of the run: `plant`, the source of a sitecustomize module on the path, runs
    at the start of the worker and of every rank and node process it starts."""
    folder = tmp_path / "plant"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(plant)
    out = tmp_path / "planted.json"
    proc = run_python(["-m", "benchmarks.workers.run", json.dumps({"threads": THREADS, **cfg}), str(out)],
                      extra_path=str(folder), framework=cfg["framework"])
    assert proc.returncode == 0 and out.exists(), proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def conformance(tmp_path_factory):
    """framework -> {check: result}, each framework's checks run once, in its own process."""
    return per_framework(tmp_path_factory, "tests.helpers.conformance")


# The batch and learning rate of the tests' worker runs, per model: LeNet's are the
# chapter's; ResNet-18 (about 200x LeNet's cost per image) runs on small batches at
# the chapter's one-device learning rate.
# ResNet-18's runs are short: its losses agree only over the first steps (see
# tests/test_training.py), and each step costs about 200x LeNet's per image.
# The chapter's initialisation (not the runs' default, Glorot's): the loss bounds of
# tests/test_training.py were measured from it; the checks that need every parameter to
# matter (model mode, nodes) give init="glorot" themselves.
# The checks read no accuracy, so evaluation is capped: it still runs (every trainer's
# evaluation is held to the oracle in tests/helpers/conformance.py). ResNet-18's losses are
# compared over their first 2 steps, all they run, after one warm-up step (compile_sec,
# which needs two, is checked on LeNet).
RUN_SHAPE = {"lenet": {"batch_size": 256, "lr": 0.2, "steps_per_epoch": 20, "init": "chapter",
                       "eval_samples": 512},
             "resnet18_tiny": {"batch_size": 8, "lr": 0.1, "eval_samples": 32, "steps_per_epoch": 2,
                          "warmup_steps": 1, "init": "chapter"},
             # the ViT's checks train its tiny size (CHECK_MODEL), as LeNet's from Glorot
             "vit_tiny": {"batch_size": 32, "lr": 0.2, "steps_per_epoch": 3, "init": "glorot",
                          "eval_samples": 64}}


class WorkerServer:
    """tests/helpers/worker_server.py for one framework at a time: the worker runs of
    worker_record that need nothing at their process's start (`served`) share its
    start-up. A request for another framework ends the one running (the tests of
    tests/test_training.py come grouped by framework: pytest_collection_modifyitems);
    a server that dies is reported with its log and started again on the next request."""

    def __init__(self, folder: Path):
        self.folder, self.framework, self.proc, self.log = folder, None, None, None

    def run(self, framework: str, cfg: dict, out: Path, timeout: int = 600) -> str | None:
        """None once the record is written, else why not."""
        import threading
        from tests.helpers.worker_server import DONE
        if self.framework != framework or self.proc is None or self.proc.poll() is not None:
            self.close()
            self.framework, self.log = framework, self.folder / f"{framework}.log"
            self.proc = subprocess.Popen(
                [registry.python(framework), "-m", "tests.helpers.worker_server", framework], cwd=ROOT,
                env=subprocess_env(THREADS), text=True, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.log.open("w"))
        watchdog = threading.Timer(timeout, self.proc.kill)
        watchdog.start()
        try:
            self.proc.stdin.write(json.dumps({"cfg": cfg, "out": str(out)}) + "\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:         # a framework's own prints pass by
                if line.startswith(DONE):
                    return None
        except BrokenPipeError:
            pass
        finally:
            watchdog.cancel()
        code = self.proc.wait()
        self.proc = None
        return f"{framework}'s worker server ended (exit {code}):\n{self.log.read_text()[-3000:]}"

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


def served(cfg: dict) -> bool:
    """Whether a worker run can share a process with others (WorkerServer): not one whose
    setting's environment, pinned cores or planted module act at its process's start."""
    return not (cfg.get("settings") or cfg.get("cores_per_device"))


@pytest.fixture(scope="session")
def worker_record(tmp_path_factory):
    """(framework, mode, devices, model, steps, sync_bn, execution, micro_batches, **more
    RunConfig fields) -> the record of a real worker run on synthetic data, run once and
    shared by the tests that need it."""
    cache = {}
    server = WorkerServer(tmp_path_factory.mktemp("servers"))

    def get(framework, mode, devices, model="lenet", steps=None, sync_bn=False, execution=None,
            micro_batches=1, **extra):
        key = (framework, mode, devices, model, steps, sync_bn, execution, micro_batches,
               tuple(sorted(extra.items())))
        if key not in cache:
            if not registry.is_installed(framework):
                pytest.fail(f"{framework} is required here but not installed")
            out = tmp_path_factory.mktemp("runs") / f"{framework}-{mode}-{devices}.json"
            cfg = {"framework": framework, "mode": mode, "devices": devices, "model": model,
                   "execution": execution,
                   "dataset": "synthetic", "epochs": 1, "sync_bn": sync_bn, "threads": THREADS,
                   "micro_batches": micro_batches,
                   **RUN_SHAPE[model], **extra}
            if steps is not None:
                cfg["steps_per_epoch"] = steps
            if served(cfg):
                why = server.run(framework, cfg, out)
                assert why is None and out.exists(), why
            else:
                proc = run_python(["-m", "benchmarks.workers.run", json.dumps(cfg), str(out)],
                                  threads=THREADS, framework=framework)
                assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
            cache[key] = json.loads(out.read_text())
            if cache[key].get("trace"):     # a traced run's timeline, beside its record
                cache[key]["trace"]["path"] = str(out.parent / cache[key]["trace"]["file"])
        return cache[key]
    yield get
    server.close()


def pytest_report_header(config):
    """Where the tests ran, first thing in the output: a red run on an unfamiliar machine
    names its CPU, its vector extensions and the kernel-path variables that were set,
    which decide float rounding (docs/testing.md, "CPU kinds and kernel paths")."""
    return "CPU: " + cpu_line(cpu_info())


# The longest test files go first: `make test` runs a file at a time in each of two
# processes, and a long file started last would run alone at the end while the other
# process idles (measured on 2 cores: test_training.py takes about 500 s of a 700 s
# suite, test_conformance.py about 330 s). test_conformance.py stays one file in one
# process: its framework processes compile (XLA, torch.compile) at full tilt, and split
# a framework per unit over both pytest processes, two of them at once, the suite's CPU
# time grew by about 200 s and its wall time with it (fresh-clone CI on a 2-core AMD EPYC
# with AVX-512: 783 s against 696 s with the file whole; one run each, and the later runs
# with the file whole took 840-856 s in a slower spell of the machine, so the split's
# cost is not settled). Note that xdist's loadfile orders files by their count of tests
# (--loadscope-reorder, its default), not by this order; within a file it is kept.
LONGEST_FIRST = ("test_training.py", "test_conformance.py")
# test_training.py's tests come grouped by framework, in registry order, those of no one
# framework last: each framework's worker runs then share one WorkerServer's start-up.
GROUPED_BY_FRAMEWORK = ("test_training.py",)


def _order(item) -> tuple[int, int]:
    file = LONGEST_FIRST.index(item.path.name) if item.path.name in LONGEST_FIRST else len(LONGEST_FIRST)
    framework = item.callspec.params.get("framework") if hasattr(item, "callspec") else None
    grouped = item.path.name in GROUPED_BY_FRAMEWORK and framework in registry.NAMES
    return file, registry.NAMES.index(framework) if grouped else len(registry.NAMES)


def pytest_collection_modifyitems(items):
    items.sort(key=_order)
