"""What a model brings, written down once and checked when the model is registered
(common.models.get loads it): torchtitan's TrainSpec is the anchor, one entry that
carries everything a model brings, so that adding a model is its file here and its
entry in each frameworks/<name>/models.py, nothing else.

A model is a module of common/models with the names of INTERFACE; `check` says what a
module lacks or gets wrong, in one line each, before any command runs it."""
from __future__ import annotations

from types import ModuleType

import numpy as np

CALLABLE = "callable"

# name -> (its type, what it holds)
INTERFACE: dict[str, tuple[type | str, str]] = {
    "NAME": (str, "the name on the command line (--model NAME)"),
    "PARAM_NAMES": (tuple, "the parameters, in the common order"),
    "PARAM_SHAPES": (tuple, "their shapes in the common layout (images NCHW, conv weights "
                            "OIHW, dense weights (in, out))"),
    "STATE_NAMES": (tuple, "what training updates besides the parameters (BatchNorm's "
                           "running statistics; empty where there is none)"),
    "STATE_SHAPES": (tuple, "their shapes"),
    "IMAGE_SHAPE": (tuple, "one input image, (channels, height, width)"),
    "NUM_CLASSES": (int, "the logits per image"),
    "DROPOUT": (float, "the dropout rate training uses, which every record names: 0 in every "
                       "model here (an oracle cannot follow six frameworks' random streams)"),
    "INIT_SCALE": (float, "the chapter's initial weights' standard deviation"),
    "init_params": (CALLABLE, "init_params(seed, init): the initial parameters every "
                              "framework starts from, float32 (init: a name in INITS)"),
    "init_state": (CALLABLE, "init_state(): the initial state, float32"),
    "forward": (CALLABLE, "forward(params, X, state=None, training=False): the NumPy "
                          "oracle's logits, float64"),
    "cross_entropy": (CALLABLE, "cross_entropy(logits, y): each image's loss"),
    "loss_and_grads": (CALLABLE, "loss_and_grads(params, X, y, state=None, "
                                 "unbiased_running_var=True): the summed loss, the logits and "
                                 "the gradient of the sum, training mode (the oracle's "
                                 "backward; updates `state` in place when given)"),
    "TRAIN_FLOPS_PER_IMAGE": (int, "a training step's FLOPs per image, counted from the "
                                   "layer shapes"),
    "LAYERS": (tuple, "the layers in forward order (common/models/costs.py): the profile's "
                      "op classes and their roofline bounds"),
    "UNITS": (tuple, "what model mode may cut between, in forward order: (name, parameter "
                     "indices, state indices, output shape per image)"),
    "UNIT_COST": (tuple, "each unit's cost, which stage cuts balance"),
    "COMMANDS": (dict, "the defaults of every command that runs it (COMMAND_KEYS)"),
    "CHANNELS_LAST": (tuple, "(common -> channels-last, channels-last -> common): the "
                             "parameters as TensorFlow's and Keras's layers take them"),
    "CHECK_MODEL": (str, "the model the conformance checks train: its own name, or a small "
                         "size of it (the ViT's vit_tiny), so that every framework's checks "
                         "of every mode stay within the suite's time"),
    "KEY_ORDER": (tuple, "the parameters in the order a layered network registers them "
                         "(MXNet's gluon KVStore keys: each block's convolutions, then its "
                         "BatchNorms)"),
}

# what a model may bring besides (checked where it does): name -> (its type, what it holds)
OPTIONAL: dict[str, tuple[type | str, str]] = {
    "TENSOR_SPLIT": (tuple, "tensor mode's cut (common/core/tensor.py): per parameter the "
                            "axis its devices' parts are cut along, None where each holds it "
                            "whole; a model without it has no blocks to split"),
    "tensor_problem": (CALLABLE, "tensor_problem(k): why k devices cannot split the model "
                                 "(one line), or None"),
}

# the commands whose defaults a model brings, and the keys of each
COMMAND_KEYS = {"profile": {"batch", "steps"}, "pipeline": {"batch", "steps"},
                "settings": {"agree_steps"},
                "links": {"batch", "compute_batches", "rates", "steps"}}


class ModelError(ValueError):
    """A model module that does not answer INTERFACE."""


def _kind_ok(value, kind) -> bool:
    return callable(value) if kind == CALLABLE else isinstance(value, kind)


def problems(m: ModuleType, values: bool = False) -> list[str]:
    """What a model module lacks or gets wrong, one line each (empty: nothing): its names,
    their types and how they fit together; with `values`, also its initial values
    (computed: ResNet-18's take a tenth of a second, which no process pays on load)."""
    out = [f"{name} is missing ({what})" for name, (kind, what) in INTERFACE.items()
           if not hasattr(m, name)]
    out += [f"{name} is not a {kind if isinstance(kind, str) else kind.__name__}"
            for name, (kind, _) in INTERFACE.items()
            if hasattr(m, name) and not _kind_ok(getattr(m, name), kind)]
    out += [f"{name} is not a {kind if isinstance(kind, str) else kind.__name__}"
            for name, (kind, _) in OPTIONAL.items()
            if hasattr(m, name) and not _kind_ok(getattr(m, name), kind)]
    if out:
        return out
    if hasattr(m, "TENSOR_SPLIT") and len(m.TENSOR_SPLIT) != len(m.PARAM_SHAPES):
        out.append("TENSOR_SPLIT has not one entry per parameter")
    if len(m.PARAM_NAMES) != len(m.PARAM_SHAPES) or len(m.STATE_NAMES) != len(m.STATE_SHAPES):
        out.append("PARAM_NAMES/STATE_NAMES and their SHAPES differ in length")
    for what, n, column in (("parameter", len(m.PARAM_SHAPES), 1), ("state", len(m.STATE_SHAPES), 2)):
        held = sorted(i for u in m.UNITS for i in u[column])
        if held != list(range(n)):
            out.append(f"UNITS do not hold every {what} exactly once")
    if len(m.UNIT_COST) != len(m.UNITS):
        out.append("UNIT_COST has not one cost per unit")
    if m.UNITS and tuple(m.UNITS[-1][3]) != (m.NUM_CLASSES,):
        out.append("the last unit's output is not the logits (NUM_CLASSES,)")
    if {k: set(v) for k, v in m.COMMANDS.items()} != COMMAND_KEYS:
        out.append(f"COMMANDS' keys are not {COMMAND_KEYS}")
    if sorted(m.KEY_ORDER) != list(range(len(m.PARAM_SHAPES))):
        out.append("KEY_ORDER does not name every parameter once")
    if values and not out:
        out += value_problems(m)
    return out


def value_problems(m: ModuleType) -> list[str]:
    """The initial values against the shapes, float32, and CHANNELS_LAST both ways."""
    out = []
    params, state = m.init_params(0, "glorot"), m.init_state()
    if [tuple(p.shape) for p in params] != [tuple(s) for s in m.PARAM_SHAPES]:
        out.append("init_params' shapes are not PARAM_SHAPES")
    if [tuple(s.shape) for s in state] != [tuple(s) for s in m.STATE_SHAPES]:
        out.append("init_state's shapes are not STATE_SHAPES")
    if any(np.asarray(x).dtype != np.float32 for x in (*params, *state)):
        out.append("initial values are not float32")
    to_last, to_first = m.CHANNELS_LAST
    if any(not np.array_equal(a, b) for a, b in zip(params, to_first(to_last(params)))):
        out.append("CHANNELS_LAST there and back is not the identity")
    return out


def check(m: ModuleType) -> ModuleType:
    """The module, once it answers INTERFACE; else ModelError with every problem."""
    found = problems(m)
    if found:
        raise ModelError(f"model {getattr(m, 'NAME', m.__name__)!r} does not answer the "
                         f"model interface (common/models/spec.py): {'; '.join(found)}")
    return m
