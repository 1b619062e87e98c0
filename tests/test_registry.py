"""The facts table (names, gaps, executions, the files of a framework package), and
that importing common or benchmarks imports no framework."""
from pathlib import Path

import pytest

from common.facts import registry
from tests.conftest import run_python


def test_importing_common_and_benchmarks_imports_no_framework():
    # every module of common and benchmarks (walked, so a new one is covered too) but
    # benchmarks/reference/: plain framework programs that the suite's rows are set against
    code = ("import importlib, pkgutil, sys, common, benchmarks\n"
            "for pkg in (common, benchmarks):\n"
            "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
            "        if not m.name.startswith('benchmarks.reference.'):\n"
            "            importlib.import_module(m.name)\n"
            "common.facts.registry.installed(), common.facts.machine.env_info()\n"
            "imports = {m for f in common.facts.registry.FRAMEWORKS.values() for m in f.imports}\n"
            "loaded = [m for m in sorted(imports | {'jax'}) if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    proc = run_python(["-c", code])
    assert proc.returncode == 0, proc.stderr


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(registry.UnknownFramework) as e:
        registry.get("caffe")
    for name in registry.NAMES:
        assert name in str(e.value)


def test_known_but_missing_names_the_pip_extra(monkeypatch):
    monkeypatch.setattr(registry, "is_installed", lambda name: False)
    with pytest.raises(registry.NotInstalled, match=r"pip install -e '\.\[paddle\]'"):
        registry.get("paddle")


def test_every_known_gap_names_a_framework_and_capability():
    from common.core.modes import MODES
    from common.facts.registry import EXECUTIONS, FEATURES
    for (framework, capability), reason in registry.KNOWN_GAPS.items():
        assert framework in registry.NAMES and capability in (*MODES, *EXECUTIONS, *FEATURES) and reason


def test_every_framework_names_how_it_runs_each_execution_it_has():
    """Each execution is either the framework's (with its mechanism named) or a listed
    gap, never both; every mode's default execution is one it has."""
    from common.core.modes import MODES
    from common.facts.registry import EXECUTIONS, default_execution
    for name, f in registry.FRAMEWORKS.items():
        for e in EXECUTIONS:
            assert (e in f.executions) != ((name, e) in registry.KNOWN_GAPS), (name, e)
        assert set(f.executions) <= set(EXECUTIONS)
        for mode in MODES:
            assert default_execution(name, mode) in f.executions, (name, mode)


def test_the_facts_table_is_the_one_list_of_frameworks():
    assert registry.NAMES == tuple(registry.FRAMEWORKS)
    for name, f in registry.FRAMEWORKS.items():
        # Keras's rows (keras-tensorflow, keras-jax, ...) share the package frameworks.keras
        assert f.name == name and f.package == "frameworks." + name.split("-")[0]
        assert f.imports and f.dists and f.extra and f.native
        assert registry.install_hint(name).endswith(f"-e '.[{f.extra}]'")


def test_every_framework_package_has_the_same_files():
    import frameworks
    root = Path(frameworks.__file__).parent
    for name, f in registry.FRAMEWORKS.items():
        package = root / f.package.split(".")[-1]
        files = {p.name for p in package.glob("*.py")}
        assert files == set(frameworks.FILES), (name, sorted(files ^ set(frameworks.FILES)))
