"""Each framework's recommended settings (common/facts/settings.py) as data, how a run
applies them (environment from the worker's start, an execution, an in-process switch),
how benchmarks.settings decides on each, how compare --settings runs them labelled as
tuned, and the bad input of both commands. No framework is imported here but in the
subprocesses that check the switches."""
import json
from pathlib import Path

import pytest

from benchmarks import runner, settings as command, tuned
from common import models
from common.reports import decisions
from common.facts import registry, settings
from tests.conftest import run_python, usage_error

# --- the tables ---


@pytest.mark.parametrize("framework", sorted(settings.SETTINGS))
def test_each_tables_settings_are_complete(framework):
    """Every setting names a page of its framework's (or its library's) documentation,
    a kind, where it applies, how it is applied, and an execution the framework has."""
    assert framework in registry.NAMES
    table = settings.SETTINGS[framework]
    assert len({s.name for s in table}) == len(table), "two settings of one name"
    for s in table:
        assert s.source.startswith("https://"), s.name
        assert s.kind in settings.KINDS and s.precision in settings.PRECISION, s.name
        assert set(s.devices) <= {"cpu", "gpu"} and s.devices, s.name
        assert s.env or s.execution or s.hook, f"{s.name} applies nothing"
        if s.execution:
            assert s.execution in registry.facts(framework).executions, s.name


def test_a_setting_with_an_execution_its_framework_lacks_fails_the_table_check(monkeypatch):
    bad = settings.Setting("graph", "no such", "https://example.org", "compile", execution="graph")
    monkeypatch.setitem(settings.SETTINGS, "jax", (bad,))
    with pytest.raises(AssertionError, match="graph"):
        test_each_tables_settings_are_complete("jax")


def test_settings_environments_join_flag_lists_and_refuse_a_conflict():
    a = settings.Setting("a", "", "https://x", "compile", env={"XLA_FLAGS": "--one", "K": "1"})
    b = settings.Setting("b", "", "https://x", "compile", env={"XLA_FLAGS": "--two"})
    c = settings.Setting("c", "", "https://x", "threads", env={"K": "2"})
    assert settings.env_of([a, b]) == {"XLA_FLAGS": "--one --two", "K": "1"}
    with pytest.raises(settings.UnknownSetting, match="K both"):
        settings.env_of([a, c])
    d = settings.Setting("d", "", "https://x", "precision", precision="bfloat16")
    assert settings.precision_of([a, d]) == "bfloat16" and settings.precision_of([]) == "float32"


def test_why_a_setting_cannot_run_here(tmp_path):
    gpu = settings.Setting("g", "", "https://x", "library", ("gpu",), hook=True)
    assert "gpu runs, not cpu" in settings.why_not(gpu, "cpu", set())
    bf16 = settings.Setting("b", "", "https://x", "precision", ("cpu",), hook=True,
                            needs_flags=("avx512_bf16", "amx_bf16"))
    assert "avx512_bf16 or amx_bf16" in settings.why_not(bf16, "cpu", {"avx2"})
    assert settings.why_not(bf16, "cpu", {"avx2", "amx_bf16"}) is None
    # a CPU's flags say nothing of a GPU run: PyTorch's autocast runs on its tensor cores
    both = settings.Setting("b", "", "https://x", "precision", hook=True,
                            needs_flags=("avx512_bf16", "amx_bf16"))
    assert settings.why_not(both, "gpu", {"avx2"}) is None
    assert "avx512_bf16 or amx_bf16" in settings.why_not(both, "cpu", {"avx2"})
    lib = settings.Setting("m", "", "https://x", "allocator", ("cpu",), {"LD_PRELOAD": "x"},
                           needs_file=str(tmp_path / "libnone.so"))
    assert "lacks" in settings.why_not(lib, "cpu", set())


def test_a_communication_setting_runs_across_nodes_only():
    """The exchange across nodes: refused on one node with what to do, applied across
    nodes; benchmarks.settings across nodes tries only those (planted: the kind check
    removed lets DDP's buckets into a one-device group)."""
    (buckets,) = settings.get("pytorch", ["ddp-small-buckets"])
    assert "--nodes 2" in settings.why_not(buckets, "cpu", set(), nodes=1)
    assert settings.why_not(buckets, "cpu", set(), nodes=2) is None
    run, refused = command.arms("pytorch", "native", None, "cpu", nodes=1)
    assert "ddp-small-buckets" not in [a[0] for a in run]
    run, refused = command.arms("pytorch", "native", None, "cpu", nodes=2)
    assert [a[0] for a in run] == ["ddp-small-buckets", "fp16-compress"]
    assert "measured on one device" in next(r["why"] for r in refused if r["setting"] == "compiled")
    # a compression's link carries its share of the gradients' bytes, and no less
    assert settings.wire_share("pytorch", ["fp16-compress", "compiled"]) == 0.5


def test_a_compressed_exchange_is_held_to_its_own_share_of_the_bytes():
    """The links' check of what they carried expects a compression's half of the bytes
    (planted: the full bytes expected of it fail its run as traffic gone elsewhere)."""
    from common import models
    from common.launch import netns
    half = models.param_bytes("lenet") * 8    # 16 steps of a 2-node ring, P/2 a node a step
    counted = [{"tx": half, "rx": half}] * 2
    assert netns.carried(counted, 2, models.get("lenet"), 16, share=0.5)["short"] is None
    assert "did not cross" in netns.carried(counted, 2, models.get("lenet"), 16)["short"]


def test_ddp_takes_the_communication_settings(tmp_path):
    """The options a communication setting gathers reach DDP itself: its bucket cap and
    its communication hook, in a process group of one (planted: build_native_trainer
    without self.comm leaves DDP's 25 MB and no hook)."""
    if "pytorch" not in registry.installed():
        pytest.skip("pytorch is not installed")
    code = "\n".join([
        "import os, torch.distributed as dist",
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='29531')",
        "dist.init_process_group('gloo', rank=0, world_size=1)",
        "from common.facts import registry",
        "from common import models",
        "b = registry.get('pytorch')",
        "b.setup(threads=1)",
        "for name in ('ddp-small-buckets', 'fp16-compress'):\n    b.apply_setting(name)",
        "params = models.get('lenet').init_params(0, 'glorot')",
        # world 2: the trainer wraps DDP (over the group of one: the options, not a peer)
        "t = b.build_native_trainer('lenet', params, ['cpu:0'], 0.1, 'eager', 0, 2, False)",
        "print(t.model.bucket_bytes_cap, t.model.logger._get_ddp_logging_data()"
        ".strs_map.get('comm_hook'))",
        "dist.destroy_process_group()"])
    proc = run_python(["-c", code], framework="pytorch")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cap, hook = proc.stdout.split()[-2:]
    assert int(cap) == 262144 and "fp16_compress_hook" in hook, proc.stdout


def _rank_engines(tmp_path, framework: str, names: list[str], plant: str | None = None
                  ) -> list[dict]:
    """What the engine object of each of 2 ranks holds (Paddle's DataParallel,
    TensorFlow's strategy), the settings applied as a run's rank applies them
    (tests/helpers/comm_ranks.py); with `plant`, a sitecustomize."""
    import json
    out = tmp_path / "ranks"
    out.mkdir(parents=True)
    extra = None
    if plant:
        (tmp_path / "plant").mkdir()
        (tmp_path / "plant" / "sitecustomize.py").write_text(plant)
        extra = str(tmp_path / "plant")
    proc = run_python(["-m", "tests.helpers.comm_ranks", framework, str(out), *names],
                      extra_path=extra, framework=framework, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_paddles_data_parallel_takes_the_communication_settings(tmp_path):
    """small-buffers reaches the engine object on every rank: DataParallel's gradient
    buffers of 0.25 MB, against its 25 MB and 1 MB without it (issue 53: only DDP's was
    checked). Planted: build_native_trainer without self.comm, the defaults on a run
    labelled tuned."""
    if "paddle" not in registry.installed():
        pytest.skip("paddle is not installed")
    small = {"comm_buffer_size": 262144, "last_comm_buffer_size": 262144}
    assert _rank_engines(tmp_path / "set", "paddle", ["small-buffers"]) == [small, small]
    plant = ("from frameworks.paddle import native\n"
             "_init = native.DataParallelTrainer.__init__\n"
             "def __init__(self, layer, lr, rank, world, execution='eager', **comm):\n"
             "    _init(self, layer, lr, rank, world, execution)\n"
             "native.DataParallelTrainer.__init__ = __init__\n")
    (tmp_path / "planted").mkdir()
    assert _rank_engines(tmp_path / "planted", "paddle", ["small-buffers"], plant) == [
        {"comm_buffer_size": 26214400, "last_comm_buffer_size": 1048576}] * 2


def test_tensorflows_strategy_takes_the_communication_settings(tmp_path):
    """collective-packs reaches the engine on every worker (two, joined by TF_CONFIG):
    the MultiWorkerMirroredStrategy the trainer runs on, its CollectiveAllReduce and
    that one's launcher hold packs of 256 KiB, against TensorFlow's 0 (one pack) without
    it (issue 53). Planted: join without self.comm, the defaults on a run labelled tuned.
    (What the packs group: this trainer all-reduces each SUM variable's update alone,
    and TensorFlow logs every one as "1 all_reduces ... num_packs = 1" with the
    setting or without: measured, LeNet, TensorFlow 2.21.)"""
    if "tensorflow" not in registry.installed():
        pytest.skip("tensorflow is not installed")

    def engine(pack):
        return {"strategy": "CollectiveAllReduceStrategy", "bytes_per_pack": pack,
                "all_reduce_bytes_per_pack": pack, "launchers_bytes_per_pack": [pack]}
    assert _rank_engines(tmp_path / "set", "tensorflow", ["collective-packs"]) == [
        engine(262144)] * 2
    plant = ("from frameworks.tensorflow import native\n"
             "_join = native.Workers.join\n"
             "def join(self, rank, timeout=None):\n"
             "    self.comm = {}\n"
             "    return _join(self, rank, timeout)\n"
             "native.Workers.join = join\n")
    assert _rank_engines(tmp_path / "planted", "tensorflow", ["collective-packs"], plant) == [
        engine(0)] * 2


# A planted bug: MXNet's workers, the processes whose KVStore cuts each key into the
# servers' pieces (kvstore_dist.h's EncodeDefaultKey), never see the setting's variable.
BOUND_NOT_IN_WORKERS = """
import os
if os.environ.get("DMLC_ROLE") == "worker":
    os.environ.pop("MXNET_KVSTORE_BIGARRAY_BOUND", None)
"""


@pytest.mark.skipif("mxnet" not in registry.installed(), reason="mxnet is not installed")
def test_mxnets_servers_each_receive_a_piece_of_the_big_arrays(tmp_path):
    """split-big-arrays reaches the engine: across 2 nodes, each of the 2 servers receives
    LeNet's 102,400-element dense weight as pushes of half its bytes and neither the whole,
    in the servers' own log of what they received (issue 53: the variable was only seen
    set). Planted: the variable kept from the workers, one server gets it whole."""
    from tests.helpers import ps_lite
    whole = ps_lite.big_key_bytes()
    (setting,) = settings.get("mxnet", ["split-big-arrays"])
    assert int(setting.env["MXNET_KVSTORE_BIGARRAY_BOUND"]) < whole // 4

    def split(seen):
        for server, pushes in enumerate(ps_lite.pushed(seen)):
            assert whole // 2 in pushes and whole not in pushes, (
                f"server {server} received the dense weight's pushes as {sorted(pushes)} bytes, "
                f"not halves of {whole}")
    record, seen = ps_lite.run(tmp_path / "set", settings=["split-big-arrays"])
    # --servers' default, one a node (tests/test_engines.py's servers check relies on it)
    assert ps_lite.servers_seen(record, seen) == [0, 1]
    split(seen)
    _, planted = ps_lite.run(tmp_path / "planted", settings=["split-big-arrays"],
                             plant=BOUND_NOT_IN_WORKERS)
    with pytest.raises(AssertionError, match=f"not halves of {whole}"):
        split(planted)


def test_unknown_settings_are_named_with_the_frameworks_own():
    with pytest.raises(settings.UnknownSetting, match="pytorch has no setting 'fast'.*tf32"):
        settings.get("pytorch", ["tf32", "fast"])


# --- how a run applies them ---

def test_a_runs_settings_environment_reaches_its_worker_from_the_start(monkeypatch, tmp_path):
    """LD_PRELOAD acts only from a process's start: the runner starts the worker with the
    settings' environment (planted: the worker alone setting it would come too late)."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)      # a kernel path's cap, where one runs
    seen = {}

    def fake(args, log, timeout, on_line, env, cwd, stop, python):
        seen.update(env)
        return runner.WorkerExit(code=0, timed_out=False, interrupted=False, log_tail="")
    monkeypatch.setattr(runner, "run_worker", fake)
    runner.run_config({"framework": "jax", "mode": "native", "devices": 1, "threads": 1,
                       "settings": ["ynn-fusion-off"]}, tmp_path / "r.json", 10)
    assert seen["XLA_FLAGS"] == "--xla_cpu_experimental_ynn_fusion_type="
    # a list of flags set already (make test-kernel-paths' XLA cap) is joined, not replaced
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    runner.run_config({"framework": "jax", "mode": "native", "devices": 1, "threads": 1,
                       "settings": ["ynn-fusion-off"]}, tmp_path / "r.json", 10)
    assert seen["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2 --xla_cpu_experimental_ynn_fusion_type="
    monkeypatch.delenv("XLA_FLAGS")
    seen.clear()
    runner.run_config({"framework": "jax", "mode": "native", "devices": 1, "threads": 1},
                      tmp_path / "r.json", 10)
    assert "XLA_FLAGS" not in seen or "ynn" not in seen["XLA_FLAGS"]


def test_two_kept_settings_are_measured_together_in_their_own_folder(monkeypatch, tmp_path):
    """Both settings faster: the kept ones run together, under together/, whose logs
    folder the runner makes at its first run (planted: without it, the first run together
    ended the whole command with FileNotFoundError, as a real ResNet-18 run did; every
    worker here is a fake that writes its log and a record as the real one does)."""
    runs = []

    def fake(argv, log, timeout, on_line, env, cwd, stop, python):
        cfg, out = json.loads(argv[2]), Path(argv[3])
        log.open("w").close()                    # the real run_worker opens it so
        secs = (10.0 if not cfg["settings"] else 7.0 if len(cfg["settings"]) == 1 else 5.0)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**_record(secs + 0.01 * len(runs)), "error": None}))
        runs.append(cfg["settings"])
        return runner.WorkerExit(code=0, timed_out=False, interrupted=False, log_tail="")
    monkeypatch.setattr(runner, "run_worker", fake)
    out = tmp_path / "out"
    code = command.main(["--framework", "pytorch", "--mode", "native", "--settings",
                         "pytorch:compiled+omp-affinity", "--dataset", "synthetic",
                         "--repeat", "2", "--out", str(out)])
    assert code == 0
    assert runs[-2:] == [[], ["compiled", "omp-affinity"]], runs
    (g,) = json.loads((out / command.DECISIONS).read_text())["groups"]
    assert g["best"] == ["compiled", "omp-affinity"], g
    assert sorted(p.name for p in (out / command.TOGETHER / "logs").iterdir()) == [
        f"lenet-pytorch-native-{label}-r{r}.log" for label in ("default", "together")
        for r in (0, 1)]


# Each in-process switch's effect, read back in its framework's process: (the import,
# {setting: an expression true once it is applied}). Keras's switch is one method for its
# three backends, probed on one of them.
PROBES = {
    "pytorch": ("import torch", {
        "tf32": "torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32",
        "cudnn-benchmark": "torch.backends.cudnn.benchmark",
        "bf16-autocast": "all(torch.is_autocast_enabled(t) and torch.get_autocast_dtype(t) "
                         "== torch.bfloat16 for t in ('cpu', 'cuda')) "
                         "and not torch.is_autocast_cache_enabled()",
        # DDP's options, gathered for the trainer (test_ddp_takes_the_communication_settings)
        "ddp-small-buckets": "b.comm.get('bucket_cap_mb') == 0.25",
        "fp16-compress": "b.comm.get('comm_hook') == 'fp16'"}),
    "tensorflow": ("import tensorflow as tf", {
        "onednn-bf16": "bool(tf.config.optimizer.get_experimental_options()"
                       ".get('auto_mixed_precision_onednn_bfloat16'))",
        "collective-packs": "b.comm == {'bytes_per_pack': 262144}"}),
    "paddle": ("import paddle", {
        "small-buffers": "b.comm == {'comm_buffer_size': 0.25, 'last_comm_buffer_size': 0.25}"}),
    "keras-torch": ("import keras", {
        "mixed-bf16": "keras.config.dtype_policy().name == 'mixed_bfloat16'"}),
}
SAME_CODE = {"keras-tensorflow": "keras-torch", "keras-jax": "keras-torch"}


def test_every_in_process_switch_has_a_probe():
    hooks = {(f, s.name) for f, table in settings.SETTINGS.items() for s in table if s.hook}
    assert hooks and all(name in PROBES[SAME_CODE.get(f, f)][1] for f, name in hooks), hooks


@pytest.mark.parametrize("framework", sorted(PROBES))
def test_in_process_switches_take_effect(framework):
    """Each switch's probe is false before it is applied and true after (planted: a
    switch that does nothing, or bf16-autocast's cache left on, fails it); a name the
    framework has no switch for is NotApplicable."""
    if framework not in registry.installed():
        pytest.skip(f"{framework} is not installed")
    imports, probes = PROBES[framework]
    code = "\n".join([
        # the framework first: Keras's facts set its backend before Keras loads
        f"from common.facts import registry\nb = registry.get({framework!r})\n{imports}",
        *(f"print({name!r}, bool({probe}), end=' ')\nb.apply_setting({name!r})\n"
          f"print(bool({probe}))" for name, probe in probes.items()),
        "from common.core.contract import NotApplicable",
        "try:\n    b.apply_setting('channels-last')\nexcept NotApplicable as e:\n    print(e)"])
    proc = run_python(["-c", code], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-len(probes) - 1:] == [
        *(f"{name} False True" for name in probes),
        f"{registry.facts(framework).name} has no in-process switch 'channels-last'"]


@pytest.mark.skipif(not registry.is_installed("pytorch"), reason="needs pytorch")
def test_bf16_autocast_logits_reach_numpy():
    """Under PyTorch's bfloat16 autocast ResNet-18's native logits (an nn.Linear's) are
    bfloat16, which NumPy cannot hold: the evaluation reads them as float32 (planted: the
    cast removed fails every ResNet-18 native run with "unsupported ScalarType BFloat16",
    as benchmarks.settings' first ResNet-18 run with it did)."""
    code = "\n".join([
        "import numpy as np",
        "from common import models\nfrom common.facts import registry",
        "b = registry.get('pytorch'); b.setup(threads=1); b.apply_setting('bf16-autocast')",
        "for name in ('lenet', 'resnet18'):",
        "    m = models.get(name)",
        "    params = m.init_params(0, models.DEFAULT_INIT)",
        "    t = b.native_trainer(name, params, ['cpu:0'], 0.1, 'eager')",
        "    X = np.zeros((2, *m.IMAGE_SHAPE), np.float32)",
        "    print(name, t.predict(X).shape)"])
    proc = run_python(["-c", code], framework="pytorch")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["lenet", "(2,)", "resnet18", "(2,)"], proc.stdout


# --- benchmarks.settings' decisions ---

def _record(secs, losses=None, acc=0.80, status="ok"):
    return {"status": status, "sec_per_epoch": [secs, secs], "test_accuracy": acc,
            "step_losses": losses or [2.3 - 0.1 * i for i in range(12)], "error": "boom"}


DEFAULT = [_record(10.0 + 0.1 * i) for i in range(4)]


@pytest.mark.parametrize("arm, decision", [
    ([_record(7.0 + 0.1 * i) for i in range(4)], "kept"),
    ([_record(13.0 + 0.1 * i) for i in range(4)], "slower"),
    ([_record(10.0 + 0.1 * i) for i in range(4)], "no difference"),
    ([_record(7.0, losses=[2.3 - 0.1 * i + 0.05 for i in range(12)]) for _ in range(4)],
     "wrong numbers"),
    ([_record(7.0 + 0.1 * i, acc=0.70) for i in range(4)], "wrong numbers"),
    ([_record(7.0, status="failed")] * 4, "cannot run here"),
], ids=["faster", "slower", "same", "losses-off", "accuracy-lost", "failed"])
def test_a_setting_is_kept_only_when_faster_and_its_numbers_agree(arm, decision):
    d = decisions.decide("compiled", ["compiled"], arm, DEFAULT, "pytorch", 0.05, "lenet")
    assert d["decision"] == decision, d


def test_a_lower_precision_is_judged_at_its_own_tolerance():
    """bfloat16 losses 2 % off the defaults' are within its tolerance, not float32's."""
    arm = [_record(7.0 + 0.1 * i, losses=[(2.3 - 0.1 * i) * 1.02 for i in range(12)])
           for i in range(4)]
    assert decisions.decide("bf16-matmul", ["bf16-matmul"], arm, DEFAULT, "jax", 0.05,
                          "lenet")["decision"] == "kept"
    assert decisions.decide("ynn-fusion-off", ["ynn-fusion-off"], arm, DEFAULT, "jax",
                          0.05, "lenet")["decision"] == "wrong numbers"


def test_a_model_whose_trajectory_parts_sooner_is_held_to_fewer_steps():
    """ResNet-18's float32 trajectory parts after its second step (two correct kernels'
    losses 4e-3 apart at the third, 10 % by the sixth), so its settings are held to its
    first 2 losses, LeNet's to 10 (planted: the model's count ignored rejects every
    ResNet-18 setting as wrong numbers)."""
    parted = [_record(7.0 + 0.1 * i, losses=[2.3, 2.2] + [(2.1 - 0.1 * k) * 1.05 for k in range(10)])
              for i in range(4)]
    assert decisions.agree_steps("resnet18") == 2 and decisions.agree_steps("lenet") == 10
    assert decisions.decide("compiled", ["compiled"], parted, DEFAULT, "pytorch", 0.05,
                          "resnet18")["decision"] == "kept"
    assert decisions.decide("compiled", ["compiled"], parted, DEFAULT, "pytorch", 0.05,
                          "lenet")["decision"] == "wrong numbers"
    early = [_record(7.0, losses=[2.3, 2.2 * 1.01] + [2.1] * 10) for _ in range(4)]
    assert decisions.decide("compiled", ["compiled"], early, DEFAULT, "pytorch", 0.05,
                          "resnet18")["decision"] == "wrong numbers"


# --- the commands' bad input, and compare's tuned rows ---

@pytest.mark.parametrize("argv, says", [
    (["--framework", "pytorch", "--settings", "pytorch:fast"], "pytorch has no setting 'fast'"),
    (["--framework", "pytorch", "--settings", "jax:ynn-fusion-off"], "with a framework of --framework"),
    (["--framework", "pytorch", "--settings", "pytorch:tf32", "--mode", "native"],
     "no setting to measure"),
    (["--framework", "pytorch", "--link", "10mbit"], "--link is the emulated nodes' link"),
    (["--framework", "pytorch", "--nodes", "2", "--link", "fast"], "fast"),
])
def test_settings_commands_bad_input_writes_nothing(tmp_path, argv, says):
    out = tmp_path / "out"
    assert says in usage_error(["-m", "benchmarks.settings", *argv, "--dataset", "synthetic",
                                "--out", str(out)])
    assert not out.exists()


@pytest.mark.parametrize("setting, says", [
    ("pytorch:fast", "pytorch has no setting 'fast'"),
    ("pytorch:tf32", "tf32 cannot apply here"),
])
def test_compare_refuses_a_setting_it_cannot_apply_and_writes_nothing(tmp_path, setting, says):
    out = tmp_path / "out"
    assert says in usage_error(["-m", "benchmarks.compare", "--framework", "pytorch",
                                "--settings", setting, "--dataset", "synthetic", "--out", str(out)])
    assert not out.exists()


def test_a_tuned_row_takes_its_settings_execution_file_and_label():
    from benchmarks.compare import Plan, build_parser
    from common.reports import runs
    from common.results.record import new_record, record_filename
    args = build_parser().parse_args(["--framework", "pytorch", "--settings",
                                      "pytorch:compiled+omp-affinity", "--dataset", "synthetic"])
    plan = Plan.from_args(args, ["pytorch"], ["native"], [1])
    (cfg,) = plan.configs()
    assert cfg.settings == ["compiled", "omp-affinity"] and cfg.execution == "compiled"
    record = new_record(cfg)
    assert record_filename(record) == "pytorch-native-compiled-tuned-compiled+omp-affinity-1dev.json"
    assert runs.mode_label(record) == "native tuned (compiled+omp-affinity)"
    assert plan.to_dict()["settings"] == {"pytorch": ["compiled", "omp-affinity"]}


def test_the_settings_page_shows_each_decision_and_the_best(tmp_path):
    from common.reports import settings as page
    results = {"machine_kind": "k", "env": {}, "command": "python -m benchmarks.settings",
               "noise": 0.05, "repeat": 3, "epochs": 2, "measured": "2026-11-26",
               "groups": [{"framework": "pytorch", "model": "lenet", "mode": "native",
                           "best": ["compiled"], "decisions": [
                               decisions.decide("compiled", ["compiled"],
                                              [_record(7.0 + 0.1 * i) for i in range(4)],
                                              DEFAULT, "pytorch", 0.05, "lenet"),
                               {"setting": "tf32", "decision": "cannot run here",
                                "why": "tf32 applies to gpu runs, not cpu"}]}]}
    text = page.markdown(results)
    assert "| pytorch | lenet | native | compiled | compile | float32 | 10.15 | 7.15 | 0.70 | kept |" in text
    assert "| pytorch | lenet | native | compiled | 10.15 | 7.15 | 1.42x |" in text
    assert "cannot run here | tf32 applies to gpu runs, not cpu |" in text
    assert Path(settings.BEST_DIR).name == "settings"


def _group(framework, mode, default_sec, arm_sec, name="compiled"):
    """A judged group whose one setting ran at arm_sec against defaults at default_sec."""
    default = [_record(default_sec + 0.1 * i) for i in range(4)]
    d = decisions.decide(name, [name], [_record(arm_sec + 0.1 * i) for i in range(4)], default,
                       framework, 0.05, "lenet")
    return {"framework": framework, "model": "lenet", "mode": mode, "decisions": [d],
            "best": [name] if d["decision"] == "kept" else []}


def test_the_settings_page_sets_each_best_against_the_fastest_best():
    """Each row's best divided by the run's fastest best, and whether it is within the
    goal (planted: a row 1.6x the fastest best read as within 1.5x)."""
    from common.reports import settings as page
    groups = [_group("tensorflow", "native", 8.0, 5.0, "xla"),
              _group("jax", "native", 30.0, 7.4, "ynn-fusion-off"),
              _group("paddle", "native", 8.3, 13.0, "onednn")]
    lines = page.against_fastest(groups)
    assert "The fastest best: tensorflow native (xla) at 5.15 s/epoch" in "\n".join(lines)
    assert "| tensorflow | native | xla | 5.15 | 1.00 | yes | 8.15 | 1.00 |" in lines
    assert "| jax | native | ynn-fusion-off | 7.55 | 1.47 | yes | 30.15 | 3.70 |" in lines
    assert "| paddle | native | the defaults | 8.45 | 1.64 | no | 8.45 | 1.04 |" in lines
    assert page.against_fastest(groups[:1]) == [], "one framework has no fastest to be set against"


def test_runs_of_one_kind_merge_into_each_rows_fastest_best(tmp_path, monkeypatch, capsys):
    """--best-file: of two runs of a row, the best that cut more from its own defaults
    (a float32 run's 0.6x over a bfloat16 run's 0.8x); runs of two kinds are refused."""
    import json

    f32 = {"machine_kind": "k", "env": {}, "command": "a", "measured": "1",
           "groups": [_group("pytorch", "native", 10.0, 6.0),
                      _group("jax", "native", 30.0, 40.0, "ynn-fusion-off")]}
    bf16 = {**f32, "command": "b", "measured": "2",
            "groups": [_group("pytorch", "native", 10.0, 8.0, "bf16-autocast")]}
    best = decisions.merged([f32, bf16])
    assert {(g["framework"], g["mode"]): g["best"] for g in best["groups"]} == {
        ("pytorch", "native"): ["compiled"], ("jax", "native"): []}
    assert best["measured"] == "1 and 2" and [r["command"] for r in best["runs"]] == ["a", "b"]
    with pytest.raises(decisions.SeveralKinds, match="several machine kinds"):
        decisions.merged([f32, {**bf16, "machine_kind": "other"}])
    monkeypatch.setattr(settings, "BEST_DIR", tmp_path / "best")
    assert command.main(["--best-file", str(tmp_path / "none")]) == 2
    assert command.main(["--best-file", ","]) == 2
    assert "names no folder" in capsys.readouterr().err
    assert not (tmp_path / "best").exists()
    for name, run in (("a", f32), ("b", bf16)):
        (tmp_path / name).mkdir()
        (tmp_path / name / command.DECISIONS).write_text(json.dumps({**run, "noise": 0.05}))
    monkeypatch.setattr(command, "judged", lambda results, out: results)
    assert command.main(["--best-file", f"{tmp_path / 'a'},{tmp_path / 'b'}"]) == 0
    written = json.loads((tmp_path / "best" / "k.json").read_text())
    assert [g["best"] for g in written["groups"]] == [["compiled"], []]


def test_the_report_shows_the_best_known_settings_of_its_machine_kind(tmp_path, monkeypatch):
    """A compare report whose records come from a machine kind with measured settings
    shows each default row's kept settings and their times as measured in the row's own
    configuration; a tuned row shows none; another machine kind's records, one line that
    none were measured there (planted: the kind read from this machine instead of the
    records' would show the H100's settings on any CPU's report)."""
    import json

    from common.reports import settings as page
    env = {"cpu_model": "CPU Z", "cpu_count": 2, "cpu_flags": ["avx2", "avx512f"],
           "gpu_model": None}
    kind = settings.machine_kind(env)
    assert kind == "cpu-z-2core-avx512"
    group = {"framework": "jax", "model": "lenet", "mode": "native", "best": ["ynn-fusion-off"],
             "decisions": [decisions.decide("ynn-fusion-off", ["ynn-fusion-off"],
                                          [_record(7.0 + 0.1 * i) for i in range(4)],
                                          DEFAULT, "jax", 0.05, "lenet")]}
    (tmp_path / f"{kind}.json").write_text(json.dumps(
        {"machine_kind": kind, "measured": "2026-11-26", "groups": [group]}))
    monkeypatch.setattr(settings, "BEST_DIR", tmp_path)
    row = {"framework": "jax", "model": "lenet", "mode": "native", "devices": 1, "env": env}
    lines = page.best_known_lines([row, {**row, "settings": ["ynn-fusion-off"]}])
    assert "| jax | lenet | native | ynn-fusion-off | 10.15 | 7.15 |" in lines
    assert sum(line.startswith("| jax") for line in lines) == 1
    assert not any("for: " in line for line in lines)
    lines = page.best_known_lines([row, {**row, "framework": "pytorch"},
                                   {**row, "framework": "keras-jax", "mode": "scratch",
                                    "status": "not-applicable"}])
    assert "| jax | lenet | native | ynn-fusion-off | 10.15 | 7.15 |" in lines
    assert f"No settings measured on this machine kind for: pytorch native (one node)." in lines
    other = page.best_known_lines([{**row, "env": {**env, "cpu_count": 4}}])
    assert other == [f"Best known settings: none measured on this machine kind (`cpu-z-4core-avx512`; "
                     f"measured: {kind}).", ""]
    # a run across nodes is set beside the row measured across nodes in its own network
    # and at its own link rate, never the one-device row nor another link's (planted: the
    # configuration left out of the key shows ynn-fusion-off's times for it)
    def across_lines(**r):
        lines = page.best_known_lines([{**row, "nodes": 2, **r}])
        return [line for line in lines if line.startswith("| jax") or "for: " in line]
    netns_10 = {"network": "netns", "link": {"rate": "10mbit"}}
    assert across_lines(**netns_10) == [f"Best known settings: none measured on this machine kind "
                                        f"(`{kind}`) for: jax native (2 nodes on netns at 10mbit)."]
    across = {**group, "nodes": 2, "link": "10mbit", "best": []}
    (tmp_path / f"{kind}.json").write_text(json.dumps(
        {"machine_kind": kind, "measured": "2026-11-26", "groups": [group, across]}))
    assert across_lines(**netns_10) == [
        "| jax | lenet | native, 2 nodes at 10mbit | the defaults | 10.15 | 10.15 |"]
    for elsewhere in ({"network": "slurm"}, {"network": "netns", "link": {"rate": "1gbit"}},
                      {**netns_10, "nodes": 3}):
        got = across_lines(**elsewhere)
        assert len(got) == 1 and "none measured on this machine kind" in got[0], (elsewhere, got)


def test_compare_settings_best_needs_this_machine_kinds_decisions(tmp_path, monkeypatch):
    """--settings best applies what benchmarks.settings kept on this machine kind in the
    run's configuration, and refuses (one line, naming what was measured) on a kind never
    measured or in a configuration never measured: nothing applied from elsewhere."""
    import json

    from benchmarks.cli import UsageError
    monkeypatch.setattr(settings, "BEST_DIR", tmp_path)
    (tmp_path / "another-kind.json").write_text("{}")
    with pytest.raises(UsageError, match=f"no settings measured on this machine kind "
                       f"\\({settings.machine_kind()}; measured: another-kind\\)") as e:
        tuned.resolve("best", ["jax"], ["native"], "lenet")
    assert "\n" not in str(e.value)
    (tmp_path / f"{settings.machine_kind()}.json").write_text(json.dumps({"groups": [
        {"framework": "jax", "model": "lenet", "mode": "native", "best": ["ynn-fusion-off"]},
        {"framework": "jax", "model": "resnet18", "mode": "native", "best": ["ynn-fusion-off"]}]}))
    got = tuned.resolve("best", ["jax"], ["native", "scratch"], "lenet")
    assert got == {"jax/lenet/native": ["ynn-fusion-off"]}
    with pytest.raises(UsageError, match="in this configuration \\(2 nodes on slurm\\); "
                                         "measured: one node$"):
        tuned.resolve("best", ["jax"], ["native"], "lenet", nodes=2, network="slurm")


def test_across_nodes_each_step_is_set_against_max_t1_t2(tmp_path):
    """A group across nodes: t1, t2 and its steps from its records and probes alone, and
    the page's verdict against max(t1, t2) at 1.15x (planted: a step 1.2x read as within)."""
    import json

    from common.reports import settings as page
    g = {"framework": "pytorch", "model": "lenet", "mode": "native", "nodes": 2,
         "link": "10mbit", "batch": 256, "refused": [],
         "arms": [("ddp-small-buckets", ["ddp-small-buckets"], "eager")]}
    (tmp_path / "records").mkdir()
    (tmp_path / "probes").mkdir()

    def put(label, sec, rep):       # 8 steps an epoch
        rec = {**_record(8 * sec), "steps_per_epoch": [8, 8]}
        (tmp_path / "records" / f"{command._tag(g)}-{label}-r{rep}.json").write_text(json.dumps(rec))
    for rep in range(4):
        put("default", 0.52 + 0.001 * rep, rep)
        put("ddp-small-buckets", 0.47 + 0.001 * rep, rep)
        put(command.T1, 0.04, rep)
        (tmp_path / "probes" / f"{command._tag(g)}-r{rep}.json").write_text(json.dumps(
            {"ranks": [{"times": [0.44, 0.45, 0.46]}, {"times": [0.45, 0.45, 0.45]}]}))
    decisions, best, error = command.decisions_of(tmp_path, g, 0.05)
    assert best == ["ddp-small-buckets"] and error is None
    lim = command.limits(tmp_path, {**g, "decisions": decisions, "best": best})
    assert lim["t1"] == pytest.approx(0.04) and lim["t2"] == pytest.approx(0.45)
    assert lim["step_default"] == pytest.approx(0.5215) and lim["step_best"] == pytest.approx(0.4715)
    row = page.against_limits([{**g, "best": best, "limits": lim}])[-1]
    assert row == ("| pytorch | lenet | 2, 10mbit | 40 | 450 | 522 | 1.16 | ddp-small-buckets | "
                   "472 | 1.05 | yes |")
    slow = page.against_limits([{**g, "best": [], "limits": {**lim, "step_best": 0.54}}])[-1]
    assert slow.endswith("| the defaults | 540 | 1.20 | no |")
    assert page.against_limits([{**g, "nodes": 1}]) == [], "no limits: not a group across nodes"


def _planted_command(old: str, new: str):
    """A copy of benchmarks.settings with one line of its source replaced (a plant)."""
    import types
    source = Path(command.__file__).read_text()
    assert source.count(old) == 1, f"the plant no longer applies: {old!r}"
    planted = types.ModuleType("benchmarks.settings_planted")
    planted.__package__ = "benchmarks"
    exec(compile(source.replace(old, new), command.__file__, "exec"), planted.__dict__)
    return planted


def _across_nodes_runs(monkeypatch, out: Path, cmd) -> list[tuple[str, dict]]:
    """(label, config) of every worker a 2-node settings command starts, as the worker
    is handed them (each a fake that writes an ok record; the link probe, t2, left out)."""
    runs = []

    def fake(argv, log, timeout, on_line, env, cwd, stop, python):
        path = Path(argv[3])
        log.open("w").close()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**_record(8.0), "steps_per_epoch": [8, 8], "error": None}))
        runs.append((path.stem.rsplit("-r", 1)[0].rsplit("-", 1)[1], json.loads(argv[2])))
        return runner.WorkerExit(code=0, timed_out=False, interrupted=False, log_tail="")
    monkeypatch.setattr(runner, "run_worker", fake)
    monkeypatch.setattr(cmd, "can_emulate", lambda: None)
    monkeypatch.setattr(cmd, "probe", lambda *args, **kwargs: None)
    assert cmd.main(["--framework", "pytorch", "--mode", "native", "--settings",
                     "pytorch:ddp-small-buckets", "--nodes", "2", "--dataset", "synthetic",
                     "--repeat", "2", "--out", str(out)]) == 0
    return runs


def _t1_is_one_nodes_share(runs: list[tuple[str, dict]]) -> None:
    """Every round's t1 run: the defaults on one device, one core, one node, at the node
    runs' batch per node (their global batch over their nodes: the links page's batch)."""
    across = [cfg for label, cfg in runs if label != command.T1]
    t1 = [cfg for label, cfg in runs if label == command.T1]
    assert len(t1) == 2 and across, runs
    share = {cfg["batch_size"] // cfg["nodes"] for cfg in across}
    assert share == {models.get("lenet").COMMANDS["links"]["batch"]}, share
    for cfg in t1:
        assert (cfg["nodes"], cfg["devices"], cfg["cores_per_device"], cfg["settings"]) == (
            1, 1, 1, []), cfg
        assert cfg["steps_per_epoch"] == across[0]["steps_per_epoch"], cfg
        assert cfg["batch_size"] in share, f"t1 runs at batch {cfg['batch_size']}, not {share}"


def test_the_t1_run_computes_one_nodes_share_of_the_batch(monkeypatch, tmp_path):
    """Across nodes, the t1 run of each round (one node's compute, the across-nodes page's
    t1) is handed a node's share of the node runs' batch (issue 53: no test ran it; the
    configurations the workers receive). Planted: t1 at the global batch."""
    _t1_is_one_nodes_share(_across_nodes_runs(monkeypatch, tmp_path / "as-is", command))
    planted = _planted_command('"batch_size": g["batch"] // g["nodes"]}', '"batch_size": g["batch"]}')
    with pytest.raises(AssertionError, match=r"t1 runs at batch 256, not \{128\}"):
        _t1_is_one_nodes_share(_across_nodes_runs(monkeypatch, tmp_path / "planted", planted))


def test_rows_across_nodes_are_kept_apart_from_one_devices(tmp_path, monkeypatch):
    """A row measured on one device and across nodes keeps both in the kind file, and
    compare --settings best applies each to its own runs (planted: the nodes left out of
    the merge's key drops one)."""
    import json

    one = _group("pytorch", "native", 10.0, 6.0)
    nodes = {**_group("pytorch", "native", 4.0, 3.0, "ddp-small-buckets"), "nodes": 2,
             "link": "10mbit"}
    best = decisions.merged([{"machine_kind": "k", "env": {}, "command": "a", "measured": "1",
                            "groups": [one, nodes]}])
    assert [g["best"] for g in best["groups"]] == [["compiled"], ["ddp-small-buckets"]]
    monkeypatch.setattr(settings, "BEST_DIR", tmp_path)
    (tmp_path / f"{settings.machine_kind()}.json").write_text(json.dumps(best))
    assert tuned.resolve("best", ["pytorch"], ["native"], "lenet") == {
        "pytorch/lenet/native": ["compiled"]}
    assert tuned.resolve("best", ["pytorch"], ["native"], "lenet", nodes=2, network="netns",
                           link="10mbit") == {"pytorch/lenet/native": ["ddp-small-buckets"]}


def exchanges(hlo: str) -> tuple[list[int], int]:
    """The entry computation's all-reduces: how many arrays each carries, and whether
    the last of them comes after every convolution in XLA's order (-1 when none)."""
    entry = hlo[hlo.index("ENTRY"):].splitlines()
    reduces = [(i, line) for i, line in enumerate(entry) if " all-reduce(" in line
               or " all-reduce-start(" in line]
    # a convolution, or a fusion XLA made of one (its op_name, JAX's conv_general_dilated)
    convs = [i for i, line in enumerate(entry) if " convolution(" in line
             or (" fusion(" in line and "conv_general_dilated" in line)]
    arrays = [line.split(" all-reduce")[0].count("f32[") for _, line in reduces]
    return arrays, int(bool(reduces) and reduces[0][0] > max(convs, default=-1))


JAX_STEP_HLO = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import numpy as np
from common import models
from common.facts import registry
from frameworks.jax.native import MeshTrainer
b = registry.get("jax")
b.setup(cpu_devices=2, threads=1)
t = MeshTrainer(b, "lenet", models.get("lenet").init_params(0, "glorot"), ["cpu:0", "cpu:1"],
                0.1, "compiled")
X, y = t._shard(np.zeros((16, 1, 28, 28), np.float32)), t._shard(np.zeros(16, np.int32))
print(t._step.lower(t.params, t.state, X, y).compile().as_text())
"""


def test_jax_exchanges_every_gradient_in_one_all_reduce_after_the_backward_pass():
    """What the across-nodes page says keeps JAX's exchange from overlapping its backward
    pass on a CPU: XLA combines every gradient (and the loss) into one all-reduce, which
    its schedule puts after the last convolution of the backward pass (its GPU
    scheduler's flags have no CPU counterpart). Planted: that all-reduce moved before a
    convolution, or split in two, fails the reading."""
    if "jax" not in registry.installed():
        pytest.skip("jax is not installed")
    proc = run_python(["-c", JAX_STEP_HLO], framework="jax")
    assert proc.returncode == 0, proc.stderr[-2000:]
    hlo = proc.stdout
    assert exchanges(hlo) == ([9], 1), exchanges(hlo)
    lines = hlo[hlo.index("ENTRY"):].splitlines()
    at = next(i for i, line in enumerate(lines) if " all-reduce(" in line)
    conv = next(i for i, line in enumerate(lines) if " convolution(" in line)
    moved = lines[:conv] + [lines[at]] + lines[conv:at] + lines[at + 1:]
    assert exchanges("\n".join(moved))[1] == 0
    split = "\n".join(lines + [lines[at].replace("%all-reduce", "%all-reduce.x")])
    assert exchanges(split)[0] == [9, 9]


# --- issue 53: each decision held to its meaning ---

def _judged_group(tmp_path, singles: dict, together: float | None = None) -> tuple:
    """A group's decisions and best from records on disk: the defaults at 10 s, each
    setting of `singles` at its seconds, the kept ones together at `together` (against
    defaults of their own at 10 s), or no together arm."""
    import json
    g = {"framework": "pytorch", "model": "lenet", "mode": "native", "refused": [],
         "arms": [(name, [name], "eager") for name in singles]}

    def put(folder, label, sec):
        (folder / "records").mkdir(parents=True, exist_ok=True)
        for rep in range(4):
            (folder / "records" / f"{command._tag(g)}-{label}-r{rep}.json").write_text(
                json.dumps(_record(sec + 0.1 * rep)))
    put(tmp_path, "default", 10.0)
    for name, sec in singles.items():
        put(tmp_path, name, sec)
    if together is not None:
        g["together"] = (command.TOGETHER, list(singles), "eager")
        put(tmp_path / command.TOGETHER, command.TOGETHER, together)
        put(tmp_path / command.TOGETHER, "default", 10.0)
    return command.decisions_of(tmp_path, g, 0.05)


@pytest.mark.parametrize("singles, together, best", [
    ({"omp-affinity": 8.0, "jemalloc": 7.0}, None, ["jemalloc"]),
    ({"jemalloc": 7.0, "omp-affinity": 8.0}, 7.5, ["jemalloc"]),
    ({"omp-affinity": 8.0, "jemalloc": 7.0}, 6.0, ["omp-affinity", "jemalloc"]),
    ({"omp-affinity": 8.0, "jemalloc": 13.0}, None, ["omp-affinity"]),
], ids=["fastest-second", "together-slower", "together-faster", "one-kept"])
def test_the_best_is_the_fastest_kept_arm(tmp_path, singles, together, best):
    """Of two kept settings the faster one, whichever came first, unless the kept ones
    together beat it (issue 53: the choice among several kept singles was never held)."""
    _, chosen, error = _judged_group(tmp_path, singles, together)
    assert error is None and chosen == best


def test_a_best_that_is_the_first_kept_fails(tmp_path, monkeypatch):
    """Planted: the first kept setting taken for the best (a min without its key)."""
    monkeypatch.setattr(command, "min", lambda xs, key=None, **kw: list(xs)[0], raising=False)
    _, chosen, _ = _judged_group(tmp_path, {"omp-affinity": 8.0, "jemalloc": 7.0})
    assert chosen == ["omp-affinity"] != ["jemalloc"]


def _one_step_off(scale):
    losses = [2.3 - 0.1 * i for i in range(12)]
    losses[3] *= scale
    return [_record(7.0 + 0.1 * i, losses=losses) for i in range(4)]


def test_losses_parting_at_one_step_alone_are_wrong_numbers():
    """One step 1 % off, the other eleven exact: float32 allows 2e-3 at every step, so
    it is wrong numbers; 1e-3 off at that step is within (issue 53: every planted
    disagreement was off at every step or on average)."""
    assert decisions.decide("compiled", ["compiled"], _one_step_off(1.01), DEFAULT, "pytorch",
                            0.05, "lenet")["decision"] == "wrong numbers"
    assert decisions.decide("compiled", ["compiled"], _one_step_off(1.001), DEFAULT, "pytorch",
                            0.05, "lenet")["decision"] == "kept"


def test_an_agreement_on_average_fails_that_check():
    """Planted: the steps' differences averaged instead of the worst taken."""
    import inspect
    worst = "max(abs(x - y) / abs(y) for x, y in zip(la, ld))"
    source = inspect.getsource(decisions)
    assert worst in source
    planted = {"__name__": "planted"}
    exec(source.replace(worst, "statistics.mean(" + worst[4:]), planted)
    assert planted["decide"]("compiled", ["compiled"], _one_step_off(1.01), DEFAULT, "pytorch",
                             0.05, "lenet")["decision"] == "kept"


def test_of_two_runs_at_the_same_ratio_the_later_one_is_kept():
    """The kind file's choice between runs of equal ratio: the later run (issue 53: only
    the float-for-float comparison held it). Planted: `<` for `<=` keeps the earlier."""
    import inspect
    first = {**_group("pytorch", "native", 10.0, 6.0), "run": "first"}
    later = {**_group("pytorch", "native", 10.0, 6.0), "run": "later"}
    runs = [{"machine_kind": "k", "env": {}, "command": c, "measured": c, "groups": [g]}
            for c, g in (("a", first), ("b", later))]
    assert [g["run"] for g in decisions.merged(runs)["groups"]] == ["later"]
    source = inspect.getsource(decisions.merged)
    assert "ratio <= chosen[key][0]" in source
    namespace = dict(vars(decisions))
    exec(source.replace("ratio <= chosen[key][0]", "ratio < chosen[key][0]"), namespace)
    assert [g["run"] for g in namespace["merged"](runs)["groups"]] == ["first"]
