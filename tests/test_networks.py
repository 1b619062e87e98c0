"""The network kinds (common/launch/networks.py): every kind in NETWORKS answers the
whole interface, no other file compares a kind's name, the old --launcher option still
works with its one-line note, and records and plans written under the old key are read
as their kind."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.launch import netns, networks, nodes
from tests.conftest import name_uses, planted_uses, uses_but

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
# every name a kind has, or had under --launcher
KIND_NAMES = {*networks.NETWORKS, *networks.OLD_NAMES}


def _options(**given) -> SimpleNamespace:
    """compare's several-machine options, as argparse leaves them."""
    return SimpleNamespace(**{"nodes": 2, "node_rank": None, "master": None,
                              "node_hosts": None, "link": None, **given})


def check_kind(name: str, kind) -> None:
    """One kind against the interface: its names and line, its check's one-line error
    (a NetworkError) on an option it does not take, its nodes, its network brought up
    and taken down (netns where this machine can), what its links carried."""
    assert kind.name == name and kind.about and "\n" not in kind.about, name
    assert not kind.old_name or networks.OLD_NAMES[kind.old_name] == name
    assert isinstance(kind.shares_cores, bool)
    assert isinstance(kind.note, str)
    assert type(kind).check is not networks.Network.check, f"{name} says nothing of its options"
    wrong = _options(link="10mbit", node_rank=0, master="127.0.0.1:1", node_hosts="a")
    with pytest.raises(networks.NetworkError) as e:
        kind.check(wrong)
    assert "\n" not in str(e.value), str(e.value)
    cfg = SimpleNamespace(nodes=2, node_rank=1, master="127.0.0.1:29500", node_hosts=None,
                          link=netns.UNSHAPED, join_timeout=5.0, model="lenet",
                          framework="pytorch", settings=[])
    here = kind.local_nodes(cfg)
    assert here and set(here) <= {0, 1}, here
    assert kind.shares_cores == (len(here) == cfg.nodes), name
    assert isinstance(kind.knows_every_host(cfg), bool)
    if name == networks.Netns.name and netns.unavailable():
        return                      # tests/test_netns.py brings namespaces up where it can
    with kind.up(cfg) as (cluster, link):
        assert isinstance(cluster, nodes.Cluster) and cluster.local_nodes == here
        assert cluster.nodes == cfg.nodes and link["kind"], link
    assert isinstance(kind.carried([None, None], cfg, 1), dict)
    kind.clean_stale()


@pytest.mark.parametrize("name", list(networks.NETWORKS))
def test_every_kind_answers_the_interface(name):
    """Seen failing on the plants below: a kind wrong about sharing the cores, a check
    that takes every option."""
    check_kind(name, networks.NETWORKS[name])


def test_the_default_network_is_a_kind_of_one_machines_own():
    """RunConfig's default network (common.core names it, below the kinds) is a kind, the
    real machines' one, where each node runs on its own cores."""
    assert networks.DEFAULT in networks.NETWORKS
    assert not networks.get(networks.DEFAULT).shares_cores


def test_a_planted_kind_fails_the_interface_check():
    """Planted: a kind that says its nodes have cores of their own while it runs them
    all here; one whose check takes every option; one without `up` (it cannot be made)."""
    class OwnCores(networks.Loopback):
        shares_cores = False
    with pytest.raises(AssertionError, match="loopback"):
        check_kind("loopback", OwnCores())

    class TakesAnything(networks.Loopback):
        def check(self, args):
            pass
    with pytest.raises(BaseException, match="DID NOT RAISE"):
        check_kind("loopback", TakesAnything())

    class NoUp(networks.Network):
        def check(self, args):
            pass
    with pytest.raises(TypeError, match="abstract method 'up'|abstract methods? up"):
        NoUp()


def kind_name_comparisons(path: Path, source: str | None = None) -> list[str]:
    """`file:line` of every comparison in a source file with a kind's name (new or old)
    as a string literal on either side, alone or in a tuple, list or set."""
    return name_uses(path, KIND_NAMES, source)


def test_no_file_but_networks_compares_a_kind_name():
    """Seen failing with runner's `if cfg.get("launcher") == "netns":` planted back in the
    tree ("benchmarks/runner.py:137"); the plants below do it on copies of the source."""
    found = uses_but(kind_name_comparisons, "common/launch/networks.py")
    assert not found, f"a kind's name compared outside common/launch/networks.py: {found}"


@pytest.mark.parametrize("module, line, planted", [
    ("benchmarks/runner.py", "    networks.of(cfg).clean_stale()",
     '    if cfg.get("launcher") == "netns":\n        netns.clean_stale()'),
    ("benchmarks/predict.py", "or networks.of(record).shares_cores",
     'or record.get("network") in ("loopback", "netns")'),
], ids=["runner-netns", "predict-tuple"])
def test_a_planted_kind_comparison_is_found(module, line, planted):
    """The branches this refactor moved into the kinds, planted back: the scan finds each."""
    assert planted_uses(kind_name_comparisons, module, line, planted), module


def _note(capsys, argv: list[str]) -> tuple[str, list[str]]:
    from benchmarks import compare
    args = compare.build_parser().parse_args(argv)
    return args.network, capsys.readouterr().err.strip().splitlines()


def check_old_option(capsys) -> None:
    """--launcher OLD gives --network NEW for every kind, saying so in one line."""
    for old, new in networks.OLD_NAMES.items():
        network, err = _note(capsys, ["--nodes", "2", "--launcher", old])
        assert network == new and len(err) == 1, (old, network, err)
        assert f"--launcher {old} is now --network {new}" in err[0], err
    assert _note(capsys, ["--nodes", "2", "--network", "loopback"]) == ("loopback", [])


def test_the_old_option_maps_to_the_kind_with_one_line(capsys):
    """Seen failing on the plants below: the note left out, the old value unmapped."""
    check_old_option(capsys)


@pytest.mark.parametrize("plant", ["silent", "unmapped"])
def test_a_planted_old_option_fails_its_check(capsys, monkeypatch, plant):
    """Planted: the note left out; the old value stored as it is (argparse's own store)."""
    from benchmarks import compare
    if plant == "silent":
        monkeypatch.setattr(compare.OldNetwork, "__call__", lambda self, p, ns, value, o=None:
                            setattr(ns, self.dest, networks.OLD_NAMES[value]))
    else:
        monkeypatch.setattr(compare.OldNetwork, "__call__", lambda self, p, ns, value, o=None:
                            (print(f"{o} {value} is now --network x", file=sys.stderr),
                             setattr(ns, self.dest, value)))
    with pytest.raises(AssertionError):
        check_old_option(capsys)


def test_a_usage_error_after_the_old_option_is_still_one_line_of_its_own(capsys):
    """The note and the error, each one line (seen failing with OldNetwork planted to
    print a second line)."""
    from benchmarks import compare
    code = compare.main(["--launcher", "local", "--dataset", "synthetic"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2, err
    assert "is now --network loopback" in err[0]
    assert "--network loopback is for runs across machines" in err[1]


def _ignoring_the_old_key(monkeypatch):
    monkeypatch.setattr(networks, "of", lambda record: networks.get(
        record.get("network") or networks.DEFAULT))


def check_old_records() -> None:
    """Committed records and plans that name their kind under "launcher" (old names):
    read as loopback and netns by the kind, the report, predict and the export."""
    from benchmarks import predict
    from common.reports import export, runs
    local = json.loads((RESULTS / "predictor" / "lenet-nodes-b256" /
                        "mxnet-native-2nodes-1dev.json").read_text())
    emulated = json.loads((RESULTS / "links" / "ps" / "n2-ring" /
                           "pytorch-native-2nodes-1dev.json").read_text())
    assert (local["launcher"], emulated["launcher"]) == ("local", "netns")
    assert "network" not in local and local["cluster_launcher"]
    assert networks.of(local).name == "loopback" and networks.of(emulated).name == "netns"
    # 2 nodes of 1 device, simulated here on shared cores: the ideal speed-up is 1
    shared = {**local, "cores_per_device": None}
    assert runs.ideal_speedup(shared) == 1 and predict.shares_machine(local)
    (row,) = export.rows([local])
    assert row["network"] == "loopback" and row["engine_starter"] == local["cluster_launcher"]


def test_old_records_are_read_as_their_kind():
    """Seen failing with networks.of reading "network" only (below)."""
    check_old_records()


def test_old_records_fail_with_the_old_key_unread(monkeypatch):
    """Planted: networks.of reading "network" only."""
    _ignoring_the_old_key(monkeypatch)
    with pytest.raises(AssertionError):
        check_old_records()


def check_old_plan(tmp_path) -> None:
    """A committed comparison's plan (--network netns, stored as launcher netns): --resume
    runs it on netns, and --out beside it takes the same plan as its own."""
    from benchmarks import compare
    folder = tmp_path / "n2-one"
    shutil.copytree(RESULTS / "links" / "ps" / "n2-one", folder)
    assert json.loads((folder / compare.PLAN_FILE).read_text())["run"]["launcher"] == "netns"
    args = compare.build_parser().parse_args(["--resume", str(folder)])
    plan = compare.resume_plan(args, set())
    assert plan.run["network"] == "netns" and {c.network for c in plan.configs()} == {"netns"}
    compare.check_out(folder, plan, resuming=False)


def test_an_old_plan_resumes_on_its_kind(tmp_path):
    """Seen failing with networks.of reading "network" only (below)."""
    check_old_plan(tmp_path)


def test_an_old_plan_fails_with_the_old_key_unread(tmp_path, monkeypatch):
    """Planted: networks.of reading "network" only (the plan then resumes on machines)."""
    _ignoring_the_old_key(monkeypatch)
    with pytest.raises(AssertionError):
        check_old_plan(tmp_path)
