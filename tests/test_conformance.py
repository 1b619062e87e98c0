"""The contract's checks (tests/helpers/conformance.py), one test per framework, check and
model, each framework in a process of its own. A check whose capability the
framework lists as a known gap shows as skipped with the gap's reason."""
import json
import re

import numpy as np
import pytest

from common import models
from common.facts import registry
from tests.helpers.conformance import check_ids
from tests.conftest import covered, run_python
from tests.test_pipeline import PLANTED_1F1B_FAILS

# ResNet-18 at the conformance checks' size (its CHECK_MODEL: fewer, narrower stages)
RESNET = models.get("resnet18").CHECK_MODEL


@pytest.mark.parametrize("check", check_ids(models.check_models()))
@pytest.mark.parametrize("framework", covered())
def test_conformance(conformance, framework, check):
    result = conformance(framework)[check]
    if result["status"] == "skipped":
        pytest.skip(result["detail"])
    assert result["status"] == "passed", result["detail"]


def test_each_compiled_check_left_out_names_a_compiled_execution_that_exists():
    """COMPILED_NOT_CHECKED (tests/helpers/conformance.py) names a framework, a model it
    trains and its reason; the framework's compiled execution is no gap and not the
    default of the mode it would run in (else the entry would leave out nothing), and
    LeNet's compiled execution, its every-execution model, is never left out."""
    from tests.helpers.conformance import COMPILED_NOT_CHECKED, EVERY_EXECUTION
    for (framework, family), why in COMPILED_NOT_CHECKED.items():
        assert framework in registry.NAMES and family in models.NAMES, (framework, family)
        assert family not in EVERY_EXECUTION and len(why) > 40, (framework, family, why)
        assert not registry.gap(framework, "compiled"), (framework, "compiled")
        first = "native" if registry.gap(framework, "scratch") else "scratch"
        assert registry.default_execution(framework, first) != "compiled", (framework, first)


def test_predict_check_fails_on_a_planted_bug():
    """The evaluation check holds predictions to the oracle's labels, not to the
    trainer's own logits: a predict that is off by one class, or that returns the
    argmax of logits from other weights, fails it; the oracle's own labels pass."""
    from tests.helpers.conformance import _batch, _nontrivial_params, _predict_matches_oracle
    model = models.get("lenet")
    X, _ = _batch(64, seed=7)
    want = model.forward(_nontrivial_params(model), X)
    _predict_matches_oracle(want.argmax(axis=1), want, 1e-4, "oracle")
    with pytest.raises(AssertionError, match="predict gave"):
        _predict_matches_oracle((want.argmax(axis=1) + 1) % 10, want, 1e-4, "off by one")
    other = model.forward(_nontrivial_params(model, seed=4), X)
    with pytest.raises(AssertionError, match="predict gave"):
        _predict_matches_oracle(other.argmax(axis=1), want, 1e-4, "other weights")


class _OracleTrainer:
    """The oracle as a trainer's evaluation: its running statistics those of a trained
    model (away from any one batch's), and an evaluation in BatchNorm's evaluation mode,
    or, planted, in its training mode (each batch normalised by its own statistics)."""

    def __init__(self, model, batch_statistics: bool):
        from tests.helpers.conformance import _nontrivial_params, _rng
        self.model, self.batch_statistics = model, batch_statistics
        self.params = _nontrivial_params(model)
        r = _rng(11)
        self.state = [(0.5 * r.standard_normal(s) if name.endswith("mean") else
                       0.5 + r.random(s)).astype(np.float32)
                      for name, s in zip(model.STATE_NAMES, model.STATE_SHAPES)]

    def replica_params(self):
        return [self.params]

    def replica_state(self):
        return [self.state]

    def logits(self, X):
        state = [s.astype(np.float64) for s in self.state]    # a copy: training would move it
        return self.model.forward(self.params, X, state=state, training=self.batch_statistics)

    def predict(self, X):
        return self.logits(X).argmax(axis=1)


def test_evaluation_check_fails_when_evaluation_uses_batch_statistics():
    """The evaluation check of every trainer (conformance's _evaluation_matches_oracle),
    on ResNet-18: the oracle's evaluation-mode forward passes it; the same forward with
    BatchNorm in training mode (the batch's statistics instead of the running ones, as a
    trainer left in training mode evaluates) fails it."""
    from tests.helpers.conformance import TOLERANCES, _evaluation_matches_oracle
    model = models.get(RESNET)
    _evaluation_matches_oracle(_OracleTrainer(model, False), model, TOLERANCES[RESNET], "eval")
    with pytest.raises(AssertionError, match="evaluation logits vs the oracle's evaluation forward"):
        _evaluation_matches_oracle(_OracleTrainer(model, True), model, TOLERANCES[RESNET],
                                   "planted")


def test_gradient_check_fails_on_a_wrong_small_gradient():
    """The oracle checks' gradient comparison (conformance's _grads_close), on ResNet-18:
    the oracle's own gradients in float32 pass it; the same with one small tensor's
    gradient wrong (the last block's first BatchNorm shift: zeroed, or 20% too large) or a
    conv bias before BatchNorm handed back a non-zero gradient fail it, where the old
    comparison, 5e-2 of the model's largest gradient, passed all three."""
    from tests.helpers.conformance import (ORACLE_BATCH, TOLERANCES, _batch, _close, _grads_close,
                                   _nontrivial_params)
    model, tol = models.get(RESNET), TOLERANCES[RESNET]
    X, y = _batch(ORACLE_BATCH[RESNET])
    want = model.loss_and_grads(_nontrivial_params(model), X, y)[2]
    got = [w.astype(np.float32) for w in want]
    _grads_close(model, got, want, tol)
    largest = max(np.abs(w).max() for w in want)
    last = model.BLOCKS[-1]["name"]
    beta = model.PARAM_NAMES.index(f"{last}.bn1.beta")
    bias = model.BLOCKS[-1]["conv1"]["bias"]
    # the third hands the conv bias its BatchNorm's beta gradient: what a BatchNorm
    # backward that left out the batch mean would, up to gamma / std
    for i, wrong, what in ((beta, 0 * got[beta], f"{last}.bn1.beta"),
                           (beta, 1.2 * got[beta], f"{last}.bn1.beta"),
                           (bias, got[beta], fr"{last}.conv1.bias \(zero in theory\)")):
        planted = list(got)
        planted[i] = wrong
        _close("the old comparison", planted[i], want[i], 5e-2, largest)
        with pytest.raises(AssertionError, match=f"d loss / d {what}"):
            _grads_close(model, planted, want, tol)


def test_parameter_check_fails_on_a_wrong_small_update():
    """The oracle checks' parameter comparison (conformance's _updates_close), on
    ResNet-18 after its one SGD step: the oracle's own parameters in float32 pass it; the
    same with one small tensor's update wrong (the last block's first BatchNorm shift:
    left where it started, or stepped twice as far) or a conv bias before BatchNorm moved
    by its BatchNorm's shift's update fail it, where the old comparison, 5e-2 of the
    model's largest update, passed all three."""
    from tests.helpers.conformance import (CHECK_LR, ORACLE_BATCH, TOLERANCES, _batch, _close,
                                   _nontrivial_params, _updates_close)
    model, tol = models.get(RESNET), TOLERANCES[RESNET]
    X, y = _batch(ORACLE_BATCH[RESNET])
    start = _nontrivial_params(model)
    grads = model.loss_and_grads(start, X, y)[2]
    want = [p - CHECK_LR * g / len(y) for p, g in zip(start, grads)]
    got = [w.astype(np.float32) for w in want]
    _updates_close(model, "float32", got, want, start, tol)
    largest = max(np.abs(w - p).max() for w, p in zip(want, start))
    last = model.BLOCKS[-1]["name"]
    beta = model.PARAM_NAMES.index(f"{last}.bn1.beta")
    bias = model.BLOCKS[-1]["conv1"]["bias"]
    step = got[beta] - start[beta]
    for i, wrong, what in ((beta, start[beta], f"{last}.bn1.beta"),
                           (beta, start[beta] + 2 * step, f"{last}.bn1.beta"),
                           (bias, start[bias] + step, fr"{last}.conv1.bias's update \(zero")):
        planted = list(got)
        planted[i] = wrong
        _close("the old comparison", planted[i], want[i], 5e-2, largest)
        with pytest.raises(AssertionError, match=f"planted: {what}"):
            _updates_close(model, "planted", planted, want, start, tol)


# The 1F1B check (model_mode_1f1b_equals_gpipe) with its planted bugs
# (tests/test_pipeline.py's PLANTED_1F1B) on a framework's stages: one framework is
# enough (the loop is the same for all), the cheapest start-up of those whose gradient
# sums start at `first` (MXNet; else TensorFlow or JAX).
FIRST_KEEPERS = [f for f in ("mxnet", "tensorflow", "jax") if f in covered()
                 and not registry.gap(f, "model")][:1]
PLANTED_1F1B_RUN = """
import json, sys
from common import models
from common.facts import registry
from tests.helpers.conformance import model_mode_1f1b_equals_gpipe, model_mode_matches_oracle
from tests.test_pipeline import PLANTED_1F1B
b = registry.get(sys.argv[1])
b.setup(cpu_devices=2, threads=1)
def outcome(check=lambda: model_mode_1f1b_equals_gpipe(b, "lenet")):
    try:
        check()
        return "passed"
    except AssertionError as e:
        return f"failed: {e}"
results = {"none": outcome()}
for name, plant in PLANTED_1F1B.items():
    undo = plant()
    results[name] = outcome()
    undo()
# ResNet-18's (at its check size) 1F1B against the oracle per micro-batch (the check itself passed in this
# framework's conformance run), with the tapes taken as a stack
undo = PLANTED_1F1B["tape stack"]()
results["resnet18 tape stack"] = outcome(lambda: model_mode_matches_oracle(
    b, models.get("resnet18").CHECK_MODEL, schedules=("1f1b",)))
undo()
print(json.dumps(results))
"""


@pytest.mark.parametrize("framework", FIRST_KEEPERS)
def test_1f1b_check_fails_on_planted_bugs_in_a_framework(framework):
    """The check holds on the framework's stages and fails, on the parameters, with a 1F1B
    that drops micro-batch M-1's backward, with `first` given at GPipe's first backward
    (1F1B's last) and with its tapes taken as a stack (a backward paired with another
    micro-batch's activations); on the tapes alive at once (the framework's tapes,
    watched), with every tape kept to the end of the step. ResNet-18's 1F1B against the
    oracle per micro-batch (model_mode_matches_oracle) fails with the tapes a stack."""
    proc = run_python(["-c", PLANTED_1F1B_RUN, framework], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["none"] == "passed", results["none"]
    for plant, says in PLANTED_1F1B_FAILS.items():
        assert re.match(f"failed: (M=4: )?.*{says}", results[plant]), (plant, results[plant])
    assert re.match(r"failed: M=2, 1f1b: .*after 1 steps vs the oracle",
                    results["resnet18 tape stack"]), results["resnet18 tape stack"]


# A batch copied to every device instead of split over them, where the numbers are the same
# either way: JAX's mesh trainer handed its inputs replicated, or handed them split and
# gathering them whole inside its program; Keras on JAX given a replicated data layout by
# its DataParallel; Keras on TensorFlow, whose loss is scaled by 1 / replicas, fed every
# batch once per replica by MirroredStrategy. Each with how the check fails.
ROWS = "the devices held [64, 64] rows of the step's 64 images, not 32 each"
GATHERED = """
import jax, numpy as np
from frameworks.jax import native
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
_fn = native.training_step_fn
def training_step_fn(ops):
    f, whole = _fn(ops), NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P())
    return lambda p, s, X, y: f(p, s, *jax.lax.with_sharding_constraint((X, y), whole))
native.training_step_fn = training_step_fn
"""
EVERY_REPLICA = """
import tensorflow as tf
tf.distribute.MirroredStrategy.experimental_distribute_dataset = (
    lambda self, ds, options=None: self.distribute_datasets_from_function(lambda ctx: ds.flat_map(
        lambda *b: tf.data.Dataset.from_tensors(b).repeat(ctx.num_replicas_in_sync))))
"""
REPLICATED_BATCH = {
    "jax replicated": ("jax", "from frameworks.jax import native\nnative.MeshTrainer._shard = "
                              "lambda self, a: native.jax.device_put(a, self.replicated)", ROWS),
    "jax gathered": ("jax", GATHERED, "one device ran 0.99 of the step's FLOPs, not 1/2"),
    "keras-jax": ("keras-jax", "import keras\n"
                  "keras.distribution.DataParallel.get_data_layout = lambda self, shape: "
                  "keras.distribution.TensorLayout([None] * len(shape), self.device_mesh)", ROWS),
    "keras-tensorflow": ("keras-tensorflow", EVERY_REPLICA, ROWS),
}
PLANTED_PLACEMENT_RUN = """
import sys
from common.facts import registry
from tests.helpers.conformance import native_trainer_matches_oracle
b = registry.get(sys.argv[1])
b.setup(cpu_devices=2, threads=1)
exec(sys.argv[2])
try:
    native_trainer_matches_oracle(b, "lenet")
    print("passed")
except AssertionError as e:
    print(f"failed: {e}")
"""


@pytest.mark.parametrize("plant", [p for p, (f, *_) in REPLICATED_BATCH.items() if f in covered()])
def test_native_check_fails_when_the_batch_is_copied_to_every_device(plant):
    """native_trainer_matches_oracle (2 devices) with the batch whole on both devices: its
    losses and parameters still equal the oracle's (the check gets past them), and where
    the batch went fails it. The check as the code is passes in test_conformance."""
    framework, source, message = REPLICATED_BATCH[plant]
    proc = run_python(["-c", PLANTED_PLACEMENT_RUN, framework, source], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = proc.stdout.strip().splitlines()[-1]
    assert result.startswith(f"failed: native default: {message}"), result



# The same check on the send/recv path: stages in processes of their own (PyTorch and
# Paddle on a CPU; tests/helpers/pipeline_ranks.py runs GPipe, 1F1B and 1F1B with planted bugs
# in one start-up of the ranks), every parameter of the 1F1B run against the GPipe run's
# (the worker's records carry fingerprints only). Measured (2 steps): step losses 0 to
# 1.0e-7 apart, parameters 2.5e-9 to 6.9e-8 of a tensor's largest value, in both; with
# the tapes taken as a stack, losses 1.0e-4 and every tensor 7.5e-5 (b4) to 2.3e-2 (W2),
# W1 1.4e-3: ONE_F_ONE_B's bounds (1e-6, 1e-5) sit between.
RANKED_STAGES = [f for f in covered() if registry.facts(f).native_processes
                 and not registry.gap(f, "model")]


@pytest.fixture(scope="module")
def rank_runs(tmp_path_factory):
    """framework -> tests/helpers/pipeline_ranks.py's runs, run once per framework: per run the
    losses, peaks, the record's gathered spans (and ResNet-18's report), the parameters
    and statistics of both ranks' stages ("RUN/INDEX", "RUN/state/INDEX" -> array), each
    rank's own spans per run, and ResNet-18's oracle."""
    cache = {}

    def get(framework):
        if framework not in cache:
            folder = tmp_path_factory.mktemp(f"ranks-{framework}")
            proc = run_python(["-m", "tests.helpers.pipeline_ranks", framework, str(folder)],
                              framework=framework)
            assert proc.returncode == 0, proc.stderr[-3000:]
            params, spans = {}, {}
            for rank in (0, 1):
                with np.load(folder / f"rank{rank}.npz") as saved:
                    params.update(saved)
                spans[rank] = json.loads((folder / f"rank{rank}.json").read_text())
            with np.load(folder / "oracle.npz") as saved:
                oracle = dict(saved)
            cache[framework] = (json.loads((folder / "runs.json").read_text()), params, spans,
                                oracle)
        return cache[framework]
    return get


def _ranked_1f1b_equals_gpipe(runs, params, run):
    """The 1F1B run `run` against the GPipe run, as model_mode_1f1b_equals_gpipe holds
    them in one process: every parameter (first, so that a failure names the first tensor
    that differs), the step losses and the tapes alive at once."""
    from tests.helpers.conformance import ONE_F_ONE_B, _close
    model, M = models.get("lenet"), ONE_F_ONE_B["micro_batches"]
    assert runs["gpipe"]["peak"] == [M, M], runs["gpipe"]["peak"]
    for i, pname in enumerate(model.PARAM_NAMES):
        _close(f"M={M}: {pname}, 1F1B vs GPipe (a process per stage)", params[f"{run}/{i}"],
               params[f"gpipe/{i}"], ONE_F_ONE_B["params"])
    _close(f"M={M}: step losses, 1F1B vs GPipe (a process per stage)", runs[run]["losses"],
           runs["gpipe"]["losses"], ONE_F_ONE_B["loss"])
    assert runs[run]["peak"] == [2, 1], (
        f"1f1b: tapes alive at once peaked at {runs[run]['peak']}, not the formula's [2, 1]")


@pytest.mark.parametrize("framework", RANKED_STAGES)
def test_1f1b_equals_gpipe_with_a_process_per_stage(framework, rank_runs):
    """1F1B with a rank per stage equals GPipe with a rank per stage in every parameter;
    it fails on a weight (not only on a bias grown from zero, as the comparison with one
    device through fingerprints would) with 1F1B's tapes taken as a stack (stage 0's
    backwards paired with another micro-batch's activations), and on the tapes alive at
    once with every tape kept to the end of the step."""
    runs, params, _, _ = rank_runs(framework)
    _ranked_1f1b_equals_gpipe(runs, params, "1f1b")
    with pytest.raises(AssertionError, match=r"M=4: W1, 1F1B vs GPipe \(a process per stage\)"):
        _ranked_1f1b_equals_gpipe(runs, params, "1f1b, tape stack")
    with pytest.raises(AssertionError, match=PLANTED_1F1B_FAILS["tapes kept"]):
        _ranked_1f1b_equals_gpipe(runs, params, "1f1b, tapes kept")


def _ranked_spans(runs, spans, run) -> None:
    """check_every_stage on a run with a process per stage: each rank's own spans (its
    stage's alone), then the record's, both ranks' gathered."""
    from tests.helpers.pipeline_ranks import MICRO_BATCHES, RUNS
    from tests.test_pipeline import check_every_stage, record_spans_by_stage, spans_by_stage
    name, schedule, _ = RUNS[run]
    M = MICRO_BATCHES[name]
    for rank in (0, 1):
        check_every_stage(spans_by_stage(spans[rank][run]), schedule, 2, M, stages=[rank],
                          what=f"{run}, rank {rank}'s own")
    check_every_stage(record_spans_by_stage(runs[run]["spans"]), schedule, 2, M,
                      what=f"{run}, gathered")


@pytest.mark.parametrize("framework", RANKED_STAGES)
def test_every_stage_spans_with_a_process_per_stage(framework, rank_runs):
    """Each rank's spans of the last step, and the record's gathered from both, are its
    stage's schedule exactly (GPipe and 1F1B, LeNet, M = 4); planted in both ranks, stage
    1's last backward kept as no span fails rank 1's own spans; the last rank's part of
    the gathered block read without its last row fails the gathered spans alone."""
    from tests.test_pipeline import PLANTED_SPANS_FAILS
    runs, _, spans, _ = rank_runs(framework)
    for run in ("gpipe", "1f1b"):
        _ranked_spans(runs, spans, run)
    with pytest.raises(AssertionError, match="1f1b, last backward unspanned, rank 1's own: "
                       + PLANTED_SPANS_FAILS["last backward unspanned"]):
        _ranked_spans(runs, spans, "1f1b, last backward unspanned")
    with pytest.raises(AssertionError, match="1f1b, gathered part cut, gathered: "
                       + PLANTED_SPANS_FAILS["gathered part cut"]):
        _ranked_spans(runs, spans, "1f1b, gathered part cut")


# ResNet-18 with a process per stage (tests/helpers/pipeline_ranks.py: M = 2, one step) against
# the oracle micro-batch by micro-batch, as model_mode_matches_oracle holds one process's
# stages: the step loss, every parameter's update and the running statistics (the
# ranks' own tensors), then what the run reports of them (its fingerprint, gathered, as
# a record carries it, held as tests/test_training.py holds a record's) and its loss
# after the step. Measured (2-core AMD EPYC; PyTorch, Paddle with its biased variance):
# updates within 8.6e-3, 2.7e-5 of their own size (9.7e-3, 2.2e-5 through the
# fingerprint), statistics 1.5e-7, 3.7e-7 of their largest value (4.3e-7, 3.9e-7 of
# their update through the fingerprint); the loss after the step (2.2e4: the weights
# blow up at lr 0.2) 4.2e-4, 1e-7 from the oracle's, 2e-7, 1e-8 from the oracle's
# forward of the run's own tensors. Planted (PLANTED_STATE): statistics reported as they
# started, off by 1.7 of their update; written at each stage's own row numbers, 11.
RANKED_FINAL_LOSS = {"oracle": 2e-3, "own tensors": 1e-5}


def _ranked_resnet18_matches_oracle(runs, params, oracle, run) -> None:
    from tests.helpers.conformance import (ORACLE_BATCH, TOLERANCES, _batch, _close,
                                   _nontrivial_params, _updates_close)
    from tests.test_training import UPDATE_RTOL, _update_errors
    model, tol = models.get(RESNET), TOLERANCES[RESNET]
    n, what = len(model.PARAM_NAMES), f"{run} (a process per stage) vs the oracle per micro-batch"
    initial, start = _nontrivial_params(model), model.init_state()
    got = [params[f"{run}/{i}"] for i in range(n)]
    state = [params[f"{run}/state/{j}"] for j in range(len(model.STATE_NAMES))]
    want = [oracle[f"params/{i}"] for i in range(n)]
    want_state = [oracle[f"state/{j}"] for j in range(len(model.STATE_NAMES))]
    _close(f"{what}: step losses", runs[run]["losses"], oracle["losses"], tol["step_loss"])
    _updates_close(model, what, got, want, initial, tol)
    for sname, st, w in zip(model.STATE_NAMES, state, want_state):
        _close(f"{what}: {sname}", st, w, tol["state"])
    # what the run reports: the gathered fingerprint, parameters then statistics
    # (its fingerprints made once for every run: 0.3 s each)
    fingerprints = oracle.setdefault("fingerprints", {"initial": [*initial, *start],
                                                      "tensors": [*want, *want_state]})
    off = _update_errors({"param_fingerprint": runs[run]["fingerprint"]}, RESNET, fingerprints)
    bad = {name: f"{e:.1e}" for name, e in zip([*model.PARAM_NAMES, *model.STATE_NAMES], off)
           if e > UPDATE_RTOL[RESNET]}
    assert not bad, f"{what}: the reported updates differ from the oracle's, of their own size: {bad}"
    X, y = _batch(ORACLE_BATCH[RESNET], seed=0)        # the step's batch
    own = model.cross_entropy(model.forward(
        [np.asarray(p, np.float64) for p in got], X,
        state=[np.asarray(s, np.float64) for s in state], training=False), y).mean()
    for against, value in (("oracle", oracle["final_loss"]), ("own tensors", own)):
        _close(f"{what}: the loss after the step, vs the {against}'s", runs[run]["final_loss"],
               value, RANKED_FINAL_LOSS[against])


PLANTED_STATE_FAILS = {"statistics as they started": r"running_(mean|var): max error",
                       "local state rows": r"the reported updates differ .*running_"}


@pytest.mark.parametrize("framework", RANKED_STAGES)
def test_resnet18_with_a_process_per_stage_matches_the_oracle(framework, rank_runs):
    """GPipe's and 1F1B's runs hold; with the statistics read back as they started, or
    the gathered report's statistics written at each stage's own row numbers, they fail."""
    runs, params, _, oracle = rank_runs(framework)
    for run in ("resnet18 gpipe", "resnet18 1f1b"):
        _ranked_resnet18_matches_oracle(runs, params, oracle, run)
    for plant, says in PLANTED_STATE_FAILS.items():
        with pytest.raises(AssertionError, match=f"resnet18, {plant} .*{says}"):
            _ranked_resnet18_matches_oracle(runs, params, oracle, f"resnet18, {plant}")


# scratch_two_devices_match_oracle runs the framework's default scratch execution: its
# replicas carry it (Backend.bind_train_batch sets it on them). Before they did, JAX's replicas ran eagerly
# (op by op: 588 small programs for ResNet-18, 26 s against 11.5 s) while the check
# named "compiled", so a broken compiled step passed. Planted: every shard's loss 1.5x
# where the replica runs in the default execution.
PLANTED_DEFAULT_EXECUTION_RUN = """
import sys
from common.facts import registry
from tests.helpers.conformance import scratch_two_devices_match_oracle
b = registry.get(sys.argv[1])
b.setup(cpu_devices=2, threads=1)
default = registry.default_execution(b.name, "scratch")
shard = type(b).shard_loss_and_grads
def planted(self, replica, X, y):
    loss, logits = shard(self, replica, X, y)
    return (loss * 1.5 if replica.execution == default else loss), logits
type(b).shard_loss_and_grads = planted
try:
    scratch_two_devices_match_oracle(b, "lenet")
    print("passed")
except AssertionError as e:
    print(f"failed: {e}")
"""
NOT_EAGER_SCRATCH = [f for f in covered() if not registry.gap(f, "scratch")
                     and registry.default_execution(f, "scratch") == "compiled"]


@pytest.mark.parametrize("framework", NOT_EAGER_SCRATCH)
def test_scratch_check_runs_the_default_execution(framework):
    proc = run_python(["-c", PLANTED_DEFAULT_EXECUTION_RUN, framework], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = proc.stdout.strip().splitlines()[-1]
    assert result.startswith("failed: step 0 loss vs the per-shard oracle"), result


def test_the_oracle_cache_answers_only_the_same_question(tmp_path, monkeypatch):
    """The conformance processes share the oracle's results (tests/helpers/oracle_cache.py):
    the same call is read back with the running statistics it left, and a call that
    differs in any input (an option, the initial state, one weight) computes anew. Seen
    failing: with the options left out of the key, the unbiased variance's call was
    answered with the biased one's."""
    from tests.helpers import oracle_cache
    from tests.helpers.conformance import _batch, _nontrivial_params
    monkeypatch.setenv(oracle_cache.SHARED_CACHE, str(tmp_path))
    model = models.get("resnet18")
    params, batches = _nontrivial_params(model), [_batch(2, seed=0)]
    calls = []
    real = models.sgd_steps
    monkeypatch.setattr(models, "sgd_steps", lambda *a, **k: calls.append(k) or real(*a, **k))

    def run(params=params, unbiased=True, state=None):
        state = state or [s.astype(np.float64) for s in model.init_state()]
        losses, after = oracle_cache.sgd_steps(model, params, batches, 0.1, state=state,
                                               unbiased_running_var=unbiased)
        return losses, after, state

    first = run()
    again = run()
    assert len(calls) == 1, "the same call computed twice"
    for a, b in zip([first[0], *first[1], *first[2]], [again[0], *again[1], *again[2]]):
        np.testing.assert_array_equal(a, b)
    biased = run(unbiased=False)
    assert len(calls) == 2 and not np.array_equal(biased[2][1], first[2][1]), (
        "a call with another option was answered from the cache")
    other = [p.copy() for p in params]
    other[0][0, 0, 0, 0] += 1
    run(params=other)
    run(state=[s.astype(np.float64) + 1 for s in model.init_state()])
    assert len(calls) == 4, "a call with another weight or state was answered from the cache"


# Sharded mode's two collectives, each planted away in a framework process: the
# reduce-scatter leaves each device its own rows of its own gradient (a shard's gradient
# not reduced), the all-gather leaves every device's work copy as it was (the shards'
# updates never reach the forward pass). And the gradients' bytes read off the whole work
# copy's gradient instead of the reduce-scattered rows each device updates with (what a
# ZeRO-1 step, every device keeping the whole gradient, would hold). The check must fail on
# each.
PLANTED_SHARDED_RUN = """
import json, sys
from common.core import sharded
from common.facts import registry
from tests.helpers.conformance import run_checks
b = registry.get(sys.argv[1], profiled=False)
b.setup(cpu_devices=2, threads=1)
keep = sharded.reduce_scatter, sharded.all_gather

class Whole:          # a reduced gradient that says it has the whole gradient's shape
    def __init__(self, g, shape):
        self.g, self.shape = g, shape
    def __mul__(self, s):
        return self.g * s

plants = {"none": {},
          "no reduce-scatter": {"reduce_scatter": lambda b, grads, bounds, devices: [
              b.rows(g, lo, hi) for g, (lo, hi) in zip(grads, bounds)]},
          "no all-gather": {"all_gather": lambda b, shards, targets: None},
          "gradients whole": {"reduce_scatter": lambda b, grads, bounds, devices: [
              Whole(g, tuple(grads[0].shape)) for g in keep[0](b, grads, bounds, devices)]}}
results = {}
for plant, swap in plants.items():
    sharded.reduce_scatter, sharded.all_gather = keep
    for name, fn in swap.items():
        setattr(sharded, name, fn)
    r = run_checks(b, ["lenet"], only={"sharded_two_devices_match_oracle"})
    (res,) = r.values()
    results[plant] = res["status"] + ": " + res["detail"][:300]
print(json.dumps(results))
"""


@pytest.mark.parametrize("framework", [f for f in ("pytorch", "paddle", *covered())
                                       if f in covered() and (f, "sharded") not in registry.KNOWN_GAPS][:1])
def test_sharded_check_fails_without_either_collective(framework):
    """sharded_two_devices_match_oracle holds as the code is, and fails with the
    reduce-scatter's sum planted away, with the all-gather planted away, and with each
    device's gradients counted whole."""
    proc = run_python(["-c", PLANTED_SHARDED_RUN, framework], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["none"] == "passed: ", results["none"]
    for plant in ("no reduce-scatter", "no all-gather"):
        assert re.match(r"failed: AssertionError: sharded step losses vs the oracle \(2 shards\)",
                        results[plant]), (plant, results[plant])
    assert re.match(r"failed: AssertionError: the devices update their rows with \[516272, 516272\] "
                    r"bytes of gradients, not their rows' \[258136, 258136\]",
                    results["gradients whole"]), results["gradients whole"]


# Tensor mode's two all-reduces, each planted away in a framework process: g after a
# row-parallel layer (each device goes on with its own heads' or columns' part of the
# attention's and the MLP's output), and f's backward (each device's LayerNorm gets only
# its own part of its output's gradient). The check must fail on both.
PLANTED_TENSOR_RUN = """
import json, sys
from common.core import tensor
from common.facts import registry
from common.models import vit
from tests.helpers.conformance import run_checks
vit.variant("tiny")
b = registry.get(sys.argv[1], profiled=False)
b.setup(cpu_devices=2, threads=1)
keep = tensor.g_forward, tensor.f_backward
own = lambda b, parts, devices, log: list(parts)
results = {}
for plant, swap in {"none": {}, "no all-reduce after a row-parallel layer": {"g_forward": own},
                    "no all-reduce of the column-parallel input's gradient": {"f_backward": own}}.items():
    tensor.g_forward, tensor.f_backward = keep
    for name, fn in swap.items():
        setattr(tensor, name, fn)
    (res,) = run_checks(b, ["vit_tiny"], only={"tensor_two_devices_match_oracle"}).values()
    results[plant] = res["status"] + ": " + res["detail"][:300]
print(json.dumps(results))
"""


@pytest.mark.parametrize("framework", [f for f in ("pytorch", "paddle", *covered())
                                       if f in covered() and (f, "tensor") not in registry.KNOWN_GAPS][:1])
def test_tensor_check_fails_without_either_all_reduce(framework):
    """tensor_two_devices_match_oracle holds as the code is, and fails with the forward
    all-reduce after the row-parallel layers planted away, and with the backward one of
    the column-parallel layers' input gradient planted away."""
    proc = run_python(["-c", PLANTED_TENSOR_RUN, framework], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["none"] == "passed: ", results["none"]
    for plant in ("no all-reduce after a row-parallel layer",
                  "no all-reduce of the column-parallel input's gradient"):
        assert results[plant].startswith("failed: AssertionError: tensor"), (plant, results[plant])


# The framework's own sharded data parallelism (fsdp mode) and tensor parallelism (tp mode)
# with their parameters left whole on every device (JAX's mesh trainer placing them
# replicated): the same numbers, so only the shards' shapes can show it.
PLANTED_FSDP_RUN = """
import json
from frameworks.jax import native
from common.facts import registry
from common.models import vit
from tests.helpers.conformance import run_checks
vit.variant("tiny")
b = registry.get("jax", profiled=False)
b.setup(cpu_devices=2, threads=1)
def both():
    return {**run_checks(b, ["lenet"], only={"fsdp_two_devices_match_oracle"}),
            **run_checks(b, ["vit_tiny"], only={"tp_two_devices_match_oracle"})}
results = {"none": both()}
if b.name != "tensorflow":     # the gradients read from the compiled step: rows, not whole
    from common.results import hlo
    read = hlo.update_gradient_bytes
    hlo.update_gradient_bytes = lambda text, whole, first=0: [w // 2 for w in whole]
    results["gradients in rows"] = both()
    hlo.update_gradient_bytes = read
native.MeshTrainer._param_sharding = lambda self, shape, i: self.replicated
results["replicated"] = both()
print(json.dumps({k: {c: r["status"] + ": " + r["detail"][:300] for c, r in v.items()}
                  for k, v in results.items()}))
"""


# The same plant in TensorFlow's DTensor trainer: every DVariable laid out replicated;
# before it, with the parameters laid out, its gradients' parts (figures' grad_bytes, which
# it reads) counted whole on every device
PLANTED_DTENSOR_RUN = PLANTED_FSDP_RUN.replace('"jax"', '"tensorflow"').replace(
    "from frameworks.jax import native", "from frameworks.tensorflow import native\n"
    "from tensorflow.experimental import dtensor").replace(
    "native.MeshTrainer._param_sharding = lambda self, shape, i: self.replicated", """\
read = native.DTensorTrainer._grad_bytes
native.DTensorTrainer._grad_bytes = lambda self, X, y: [
    sum(int(v.shape.num_elements()) * v.dtype.size for v in self.vars)] * self.mesh.size
results["gradients whole"] = both()
native.DTensorTrainer._grad_bytes = read
native.DTensorTrainer._layout = lambda self, shape, i: dtensor.Layout.replicated(self.mesh, len(shape))""")
# ... and in Keras's ModelParallel on JAX: a LayoutMap left empty, every weight whole
PLANTED_KERAS_LAYOUT_RUN = PLANTED_FSDP_RUN.replace('"jax"', '"keras-jax"').replace(
    "from frameworks.jax import native\n", "").replace(
    "native.MeshTrainer._param_sharding = lambda self, shape, i: self.replicated",
    "from frameworks.keras.backends import jax as keras_jax\n"
    "keras_jax.LaidOutPlacement.lay_out = lambda self, path, axes: None")
# framework -> (its plant, the first cut parameter fsdp's check names on LeNet, what tp's
# check says of the first cut ViT weight). TensorFlow's and Keras's LeNet filters are
# HWIO (first axis 3 or 5): the first parameter sharded is b1; Keras's query kernel is
# (width, heads, head width), cut by heads
WHOLE_PLANTS = {
    "jax": (PLANTED_FSDP_RUN, r"\([\d, ]+\) of W1 ", r"\(8, 8\) of block1.attn.q.weight \(8, 8\), not \(8, 4\)"),
    "tensorflow": (PLANTED_DTENSOR_RUN, r"\(20,\) of b1 \(20,\), not rows 0:10",
                   r"\(8, 8\) of block1.attn.q.weight \(8, 8\), not \(8, 4\)"),
    "keras-jax": (PLANTED_KERAS_LAYOUT_RUN, r"\(20,\) of b1 \(20,\), not rows 0:10",
                  r"\(8, 2, 4\) of block1.attn.q.weight \(8, 2, 4\), not \(8, 1, 4\)")}


@pytest.mark.parametrize("framework", sorted(WHOLE_PLANTS))
def test_fsdp_and_tp_checks_fail_with_the_parameters_whole_on_every_device(framework):
    """fsdp_two_devices_match_oracle and tp_two_devices_match_oracle hold on each
    framework's own sharded parameters (JAX's shardings, TensorFlow's DTensor layouts,
    Keras's ModelParallel on JAX) and fail when each device holds them whole, although
    every number is the same."""
    if framework not in covered():
        pytest.skip(f"needs {framework}")
    plant, fsdp_says, tp_says = WHOLE_PLANTS[framework]
    proc = run_python(["-c", plant], framework=framework)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results["none"].values()) == {"passed: "}, results["none"]
    planted = results["replicated"]
    assert re.match(r"failed: AssertionError: device 0 holds " + fsdp_says,
                    planted["fsdp_two_devices_match_oracle[lenet]"]), planted
    assert re.match(r"failed: AssertionError: device 0 holds " + tp_says,
                    planted["tp_two_devices_match_oracle[vit_tiny]"]), planted
    if framework != "tensorflow":      # XLA:CPU's whole gradients read as rows
        planted = results["gradients in rows"]
        assert re.match(r"failed: AssertionError: the devices update their rows with \[258136, 258136\] "
                        r"bytes of gradients, not the whole gradient's \[516272, 516272\]",
                        planted["fsdp_two_devices_match_oracle[lenet]"]), planted
    else:                              # TensorFlow's gradients' parts counted whole
        planted = results["gradients whole"]
        assert re.match(r"failed: AssertionError: the devices update their rows with \[516272, 516272\] "
                        r"bytes of gradients, not their rows' \[308496, 308496\]",
                        planted["fsdp_two_devices_match_oracle[lenet]"]), planted
        assert re.match(r"failed: AssertionError: the devices' gradients are \[9192, 9192\] bytes, "
                        r"not those of their parts \[8136, 8136\]",
                        planted["tp_two_devices_match_oracle[vit_tiny]"]), planted
