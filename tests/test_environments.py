"""Frameworks in environments of their own (MXNet on NumPy 1.26, the rest on NumPy 2):
the registry says which, the suite starts their processes with that interpreter, and
both interpreters make the same initial weights and batches."""
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.facts import registry
from tests.conftest import (ROOT, covered, environment_problems, makefile_envs, run_python,
                            subprocess_env)

# What every framework must see identically, whatever NumPy its interpreter has: each
# model's initial weights (both inits) and state, the batch order of two epochs, the
# synthetic data set and the fingerprint's directions. Printed as one digest per item.
DIGESTS = """
import hashlib, json, sys
import numpy as np
from common import models
from common.facts import data

def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode()); h.update(a.tobytes())
    return h.hexdigest()[:16]

out = {"numpy": np.__version__}
for name in models.NAMES:
    model = models.get(name)
    for init in models.INITS:
        out[f"{name} {init}"] = digest(*model.init_params(0, init))
    out[f"{name} state"] = digest(*model.init_state())
out["batch order"] = digest(*(data.batch_order(60_000, 256, epoch, 0) for epoch in (0, 1)))
d = data.synthetic(0)
out["synthetic"] = digest(d.X_train, d.y_train, d.X_test, d.y_test)
out["fingerprint"] = digest(np.array(models.fingerprint([np.arange(10.0), np.ones((3, 4))])))
print(json.dumps(out))
"""

# A planted difference: one interpreter's generators one draw ahead
PLANT_SEED = """
import numpy.random
_rng = numpy.random.default_rng

def default_rng(seed=None):
    g = _rng(seed)
    g.random()
    return g

numpy.random.default_rng = default_rng
"""

OWN = [n for n in covered() if registry.facts(n).environment]


def _digests(framework=None, extra_path=None) -> dict:
    proc = run_python(["-c", DIGESTS], framework=framework, extra_path=extra_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _own_interpreter(framework: str) -> str:
    python = registry.python(framework)
    if python == sys.executable:
        if registry.is_installed(framework):
            pytest.skip(f"{framework} is installed in this interpreter (its environment "
                        f".venv-{registry.facts(framework).environment} is not built): one NumPy")
        pytest.fail(registry.not_installed(framework))
    return python


@pytest.mark.parametrize("framework", OWN)
def test_weights_and_batches_are_the_same_in_every_interpreter(framework, tmp_path):
    _own_interpreter(framework)
    main, own = _digests(), _digests(framework)
    assert main.pop("numpy") != own.pop("numpy"), "the two interpreters have one NumPy"
    assert main == own, {k: (main[k], own[k]) for k in main if main[k] != own.get(k)}
    # planted: a generator that differs in one interpreter is seen
    (tmp_path / "sitecustomize.py").write_text(PLANT_SEED)
    planted = _digests(framework, extra_path=str(tmp_path))
    planted.pop("numpy")
    assert planted != main and planted["batch order"] != main["batch order"]


@pytest.mark.parametrize("framework", OWN)
def test_a_framework_of_its_own_environment_runs_there(framework):
    """Its interpreter finds it (none imported), this one is told to start it there, and
    its numpy is the environment's."""
    python = _own_interpreter(framework)
    assert registry.is_installed(framework)
    code = ("import sys; from common.facts import registry; registry.get(sys.argv[1])")
    proc = run_python(["-c", code, framework])
    assert proc.returncode != 0 and "runs in an environment of its own" in proc.stderr
    proc = run_python(["-c", code, framework], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    numpy = subprocess.run([python, "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True).stdout.strip()
    assert numpy.startswith("1."), numpy


def test_a_missing_environment_is_not_installed_with_the_command_that_builds_it(monkeypatch,
                                                                               tmp_path):
    """Without its environment (and not installed beside the others), a framework is
    not-installed, and the message names the command that builds the environment."""
    name = next(n for n in registry.NAMES if registry.facts(n).environment)
    env = registry.facts(name).environment
    monkeypatch.setenv(f"DL_COMPARE_PYTHON_{env.upper()}", str(tmp_path / "no-python"))
    assert registry.python(name) == sys.executable
    message = registry.not_installed(name)
    assert f"python3 -m venv .venv-{env}" in message and f"constraints-{env}.txt" in message
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda m: None)
    assert not registry.is_installed(name)


def test_the_running_interpreter_is_its_own_environment_under_any_name(monkeypatch):
    """An environment named by another path to this very interpreter (bin/python3 for
    bin/python) is this one: its framework is imported here, not refused (planted: a
    comparison of the path strings alone refuses it)."""
    name = next(n for n in registry.NAMES if registry.facts(n).environment)
    env = registry.facts(name).environment
    other = Path(sys.prefix) / "bin" / ("python3" if not sys.executable.endswith("3") else "python")
    assert str(other) != sys.executable and other.exists()
    monkeypatch.setenv(f"DL_COMPARE_PYTHON_{env.upper()}", str(other))
    assert registry.python(name) == sys.executable
    monkeypatch.setattr(registry, "_running", lambda python: str(python) == sys.executable)
    assert registry.python(name) == str(other)


def test_each_environment_is_built_by_make_from_its_own_constraints():
    """Every environment the registry names is in the Makefile's ENVS, has its
    constraints file and an extra for each of its frameworks; the main constraints
    hold NumPy 2 and no framework of another environment."""
    environments = {f.environment for f in registry.FRAMEWORKS.values()} - {""}
    assert set(makefile_envs()) == environments
    pyproject = (ROOT / "pyproject.toml").read_text()
    main = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^numpy==2\.", main, re.M)
    for f in registry.FRAMEWORKS.values():
        assert re.search(rf"^{re.escape(f.extra)} = \[", pyproject, re.M), f.extra
        if f.environment:
            own = (ROOT / f"constraints-{f.environment}.txt").read_text()
            for dist in f.dists[:1]:
                pinned = rf"^{dist}=="
                assert re.search(pinned, own, re.M) and not re.search(pinned, main, re.M)


def test_the_report_names_each_environment_s_library_versions():
    """The Libraries line is every run's own: MXNet's NumPy 1 beside the others' NumPy 2,
    and MXNet's version, which only its environment has (planted: the first record's
    environment alone, as the line once read, misses both)."""
    from common.reports.runs import libraries_line, machine_lines

    def record(framework, libraries, status="ok"):
        return {"framework": framework, "status": status,
                "env": {"python": "3.11.7", "libraries": libraries}}
    records = [record("pytorch", {"numpy": "2.4.6", "torch": "2.13.0"}),
               record("jax", {"numpy": "2.4.6", "jax": "0.10.2"}),
               record("mxnet", {"numpy": "1.26.4", "mxnet": "1.9.1"}),
               # written by the command in the main environment: not the run's own
               record("paddle", {"numpy": "2.4.6", "paddlepaddle": "3.3.1"}, "failed")]
    line = machine_lines(records)[1]
    assert line.startswith("Libraries: numpy 2.4.6 (1.26.4: mxnet), torch 2.13.0, "
                           "jax 0.10.2, mxnet 1.9.1;"), line
    planted = libraries_line(records[:1])
    assert "mxnet" not in planted and "1.26.4" not in planted


def _fake_python(path: Path, finds: bool) -> Path:
    """An environment's interpreter that finds every module, or none (as _importable asks)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nexit {0 if finds else 1}\n")
    path.chmod(0o755)
    return path


def test_a_built_environment_that_misses_its_framework_fails_every_run(monkeypatch, tmp_path):
    """A framework's environment on disk (here a repository of its own: the Makefile and a
    .venv-NAME) whose framework the registry does not find there is a problem of every
    run, with what to do: the environment without the framework, and the planted
    registries that take the framework for the main environment's or look for its
    environment elsewhere (each made every test of it skip: "got empty parameter set").
    With no such environment on disk, the framework is only not installed, as before."""
    name = next(f.name for f in registry.FRAMEWORKS.values() if f.environment)
    env = registry.facts(name).environment
    monkeypatch.delenv(f"DL_COMPARE_PYTHON_{env.upper()}", raising=False)
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text())
    monkeypatch.setattr(registry, "ROOT", tmp_path)
    python = tmp_path / f".venv-{env}" / "bin" / "python"

    def problems(finds: bool | None) -> list[str]:
        registry._importable.cache_clear()
        if finds is None:
            python.unlink(missing_ok=True)
        else:
            _fake_python(python, finds)
        return environment_problems(tmp_path)
    assert problems(finds=True) == [] and registry.is_installed(name)
    assert problems(finds=False) == [f".venv-{env} is built, but {name} is not found in it: "
                                     f"rebuild it (rm -rf .venv-{env} && make install), or remove "
                                     f"it to run without {name}"]
    assert problems(finds=None) == [] and not registry.is_installed(name)     # not built
    # planted: the registry looking for the environment elsewhere, or placing the
    # framework in the main one
    for plant in (lambda: monkeypatch.setattr(registry, "ROOT", tmp_path / "elsewhere"),
                  lambda: monkeypatch.setitem(registry.FRAMEWORKS, name, dataclasses.replace(
                      registry.facts(name), environment=""))):
        plant()
        assert problems(finds=True) == [
            f".venv-{env} is built, but the registry runs {name} with {sys.executable}: "
            f"common/facts/registry.py must start {name} there (environment={env!r}, python())"]


def test_a_run_stops_at_its_start_on_an_environment_without_its_framework(tmp_path):
    """The whole of a plain pytest run (no DL_COMPARE_REQUIRE), not one test: an
    environment named by DL_COMPARE_PYTHON_NAME whose interpreter finds nothing stops it
    before it collects a test, with the one line that says what to do."""
    name = next(f.name for f in registry.FRAMEWORKS.values() if f.environment)
    variable = f"DL_COMPARE_PYTHON_{registry.facts(name).environment.upper()}"
    python = _fake_python(tmp_path / "bin" / "python", finds=False)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "tests/test_docs.py"], cwd=ROOT, capture_output=True, text=True,
                          env={**subprocess_env(), variable: str(python), "DL_COMPARE_REQUIRE": ""},
                          timeout=120)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert lines == [f"ERROR: {variable}={python} is built, but {name} is not found in it: "
                     f"install {name} there, or unset {variable}"], lines
