"""The device-scopes model's checks for one framework, run in a process of its own:

    python -m tests.helpers.scopes_checks FRAMEWORK OUT_JSON

Measures, and writes to OUT_JSON, what tests/test_device_scopes.py judges (the
tolerances live there, beside their reasons): the framework's forward and backward
pass against the NumPy oracle on both placements (short sequences, and once the
chapter's T=140), a few SGD steps on each placement against the oracle's and against
each other, and where the framework says each part ran. Where the framework has one
CPU device (PyTorch, Paddle) the two-branch placement is one device; the
"two-branch-replica" variant then forces branch b onto a copy of the shared weights
(the cross-device code path, on the CPU), and "two-branch-unshared" plants the bug the
check exists for (branch b's gradient never reaches the shared weights), which the
oracle checks must catch."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

import numpy as np

from common.core.contract import NotApplicable
from common.experiments import scopes

SMALL = {"seq_len": 8, "n": 4}           # cheap: the oracle's and every framework's BPTT
FULL = {"seq_len": scopes.T, "n": 2}     # the chapter's sequences, a small batch
STEPS, LR = 3, scopes.DEFAULT_LR


def rel(got, want) -> float:
    """Largest difference relative to the largest value compared."""
    want = np.asarray(want, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))


def oracle_errors(s: scopes.Scopes, params, seq_len: int, n: int) -> dict:
    Xa, Xb, y = scopes.batch(1, 0, n, seq_len)
    loss, p, grads = scopes.loss_and_grads(params, Xa, Xb, y)
    got_p, got_loss, got_grads = s.forward_backward(Xa, Xb, y)
    assert [g.shape for g in got_grads] == [g.shape for g in grads], [g.shape for g in got_grads]
    return {"probs": rel(got_p, p), "loss": abs(got_loss - loss) / abs(loss),
            "grads": {name: rel(g, w) for name, g, w in zip(scopes.PARAM_NAMES, got_grads, grads)}}


def sgd(s: scopes.Scopes, params, batches) -> tuple[list[float], list[np.ndarray]]:
    losses = [s.value(s.step(Xa, Xb, y, LR)) for Xa, Xb, y in batches]
    return losses, s.read_params()


def unshared(s: scopes.Scopes) -> scopes.Scopes:
    """The framework's Scopes with a planted bug: branch b trains on its own copy of the
    LSTM weights, whose gradient never reaches the shared ones."""
    base = type(s)

    class Unshared(base):
        def _branch_b_weights(self):                     # PyTorch: detached copies
            return {k: v.detach() for k, v in base._branch_b_weights(self).items()}

        def _with_replica_grads(self, grads):            # Paddle: b's share dropped
            return grads
    planted = Unshared(s.backend)
    planted.__dict__.update(s.__dict__)
    return planted


def run(framework: str) -> dict:
    try:
        s = scopes.load(framework)
    except NotApplicable as e:          # a known gap: test_device_scopes checks the reason
        return {"not_applicable": str(e)}
    s.setup(threads=int(os.environ.get("OMP_NUM_THREADS", "1")))
    params = scopes.init_params(0)
    batches = [scopes.batch(2, i, SMALL["n"], SMALL["seq_len"]) for i in range(STEPS)]
    want_losses, want_params = scopes.sgd_steps(params, batches, LR)
    out = {"placements": {}, "oracle_losses": want_losses.tolist()}
    variants = dict(s.placements())
    two = variants["two-branch"]
    forced = hasattr(s, "replicate") and not isinstance(two, str) and len(two.devices()) == 1
    if forced:    # the copy for branch b that distinct devices would make, on one CPU device
        variants["two-branch-replica"] = variants["two-branch-unshared"] = two
    finals = {}
    for name, placement in variants.items():
        if isinstance(placement, str):
            out["placements"][name] = {"not_applicable": placement}
            continue
        if name == "two-branch-unshared":
            s = unshared(s)
        s.replicate = True if name != "one-device" and forced else None
        s.build(params, placement)
        small = oracle_errors(s, params, **SMALL)
        full = oracle_errors(s, params, **FULL) if name == "two-branch" else None
        s.load_params(params)
        losses, final = sgd(s, params, batches)
        finals[name] = (losses, final)
        Xa, Xb, _ = batches[0]
        out["placements"][name] = {
            "placement": asdict(placement), "placed": s.placed(Xa[:2], Xb[:2]),
            "small": small, "full": full, "losses": losses,
            "loss_vs_oracle": float(np.max(np.abs(np.subtract(losses, want_losses)))),
            "params_vs_oracle": max(rel(p, w) for p, w in zip(final, want_params))}
    if "one-device" in finals and "two-branch" in finals:
        (l1, p1), (l2, p2) = finals["one-device"], finals["two-branch"]
        out["two_vs_one"] = {"losses": float(np.max(np.abs(np.subtract(l1, l2)))),
                             "params": max(float(np.max(np.abs(a - b))) for a, b in zip(p1, p2))}
    return out


if __name__ == "__main__":
    result = run(sys.argv[1])
    with open(sys.argv[2], "w") as f:
        json.dump(result, f, indent=1)
