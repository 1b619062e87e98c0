
import pytest

from common import registry
from tests.conftest import run_python


def test_importing_common_and_benchmarks_imports_no_framework():
    code = ("import sys, common, common.contract, common.data, common.launcher, common.modes, "
            "common.models, common.models.lenet, common.registry, "
            "common.report, common.results, common.scratch, common.training, "
            "common.scopes, common.pipeline, benchmarks.compare, benchmarks.worker, "
            "benchmarks.device_scopes, benchmarks.device_scopes_worker, benchmarks.pipeline\n"
            "common.registry.installed(), common.results.env_info()\n"
            "imports = {m for f in common.registry.FRAMEWORKS.values() for m in f.imports}\n"
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
    from common.modes import EXECUTIONS, MODES
    for (framework, capability), reason in registry.KNOWN_GAPS.items():
        assert framework in registry.NAMES and capability in (*MODES, *EXECUTIONS, "sync-bn") and reason


def test_every_framework_names_how_it_runs_each_execution_it_has():
    """Each execution is either the framework's (with its mechanism named) or a listed
    gap, never both; every mode's default execution is one it has."""
    from common.modes import EXECUTIONS, MODES, execution
    for name, f in registry.FRAMEWORKS.items():
        for e in EXECUTIONS:
            assert (e in f.executions) != ((name, e) in registry.KNOWN_GAPS), (name, e)
        assert set(f.executions) <= set(EXECUTIONS)
        for mode in MODES:
            assert execution(name, mode, None) in f.executions, (name, mode)


def test_the_facts_table_is_the_one_list_of_frameworks():
    assert registry.NAMES == tuple(registry.FRAMEWORKS)
    for name, f in registry.FRAMEWORKS.items():
        assert f.name == name and f.package == f"frameworks.{name}"
        assert f.imports and f.dists and f.extra and f.native
        assert registry.install_hint(name) == f"pip install -e '.[{f.extra}]'"
