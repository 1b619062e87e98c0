"""A setting's decision, the rule benchmarks.settings keeps or rejects it by, and a
machine kind's settings file made from several runs' decisions. A setting is kept when
the suite's verdict (Welch on the repeats' log sec/epoch, verdict.py, band --noise) says
faster AND its run agrees: its first step losses within its precision's tolerance of the
defaults' on the same weights and batches, and its test accuracy within its margin of the
defaults' (common.facts.settings.PRECISION). Rejected settings say why."""
from __future__ import annotations

import statistics

from common import models
from common.facts import settings
from common.results.timing import timing
from common.reports.verdict import TOO_FEW, says, verdict
from common.results.record import nodes_of


class SeveralKinds(ValueError):
    """Runs of several machine kinds given to one settings file."""


def agree_steps(model: str) -> int:
    """How many first step losses a setting's run is held to the defaults' by: the
    model's own count (its COMMANDS["settings"]), fewer where its float32 trajectory
    parts sooner."""
    return models.get(model).COMMANDS["settings"]["agree_steps"]


def agreement(arm: list[dict], default: list[dict], names_: list[str], framework: str,
              model: str) -> str | None:
    """Why the arm's numbers are wrong, or None: its first step losses (the model's
    count: agree_steps) against the defaults' (first repeat of each) at its
    precision's tolerance, and its test accuracy."""
    precision = settings.precision_of(settings.get(framework, names_),
                                      default[0].get("device_kind") or "cpu")
    tol = settings.PRECISION[precision]
    n = agree_steps(model)

    def apart(a: dict, d: dict) -> float | None:
        la, ld = a["step_losses"][:n], d["step_losses"][:n]
        return (max(abs(x - y) / abs(y) for x, y in zip(la, ld))
                if len(la) == len(ld) == n else None)
    worst = apart(arm[0], default[0])
    if worst is None:
        return f"fewer than {n} step losses to compare"
    # a GPU's defaults need not agree with themselves (atomics, auto-tuned kernels): no
    # setting is held closer than twice the defaults' own repeats are apart
    own = [x for x in (apart(r, default[0]) for r in default[1:] if r.get("status") == "ok")
           if x is not None]
    allowed = max([tol["step_loss"], *(2 * x for x in own)])
    if worst > allowed:
        return (f"its first {n} step losses differ from the defaults' by up to {worst:.1e} "
                f"(relative; {precision} allows {tol['step_loss']:.0e}"
                + (f", the defaults' own repeats {max(own):.1e}" if own else "") + ")")
    acc_a = statistics.median(r["test_accuracy"] for r in arm if r.get("status") == "ok")
    acc_d = statistics.median(r["test_accuracy"] for r in default if r.get("status") == "ok")
    if acc_a < acc_d - tol["accuracy"]:
        return (f"test accuracy {acc_a:.4f} against the defaults' {acc_d:.4f} "
                f"({precision} allows {tol['accuracy']} less)")
    return None


def decide(label: str, names_: list[str], arm: list[dict], default: list[dict],
           framework: str, band: float, model: str) -> dict:
    """An arm's decision: kept, or rejected with the reason."""
    failed = [r for r in arm if r.get("status") != "ok"]
    out = {"setting": label, "settings": names_, "precision": settings.precision_of(
        settings.get(framework, names_), default[0].get("device_kind") or "cpu")}
    if failed:
        # a worker killed or timed out says nothing of the setting
        ended = (failed[0].get("error") or "").startswith("the worker ended without a record")
        return {**out, "decision": "did not finish" if ended else "cannot run here",
                "why": (failed[0].get("error") or failed[0].get("status") or "").splitlines()[0]}
    # sec/epoch as the report reads it (common.results.timing: the median epoch; None where it failed)
    before = [s for s in (timing(r)["sec"] for r in default) if s]
    after = [timing(r)["sec"] for r in arm]
    v = verdict(before, after, band)
    out.update(sec_default=statistics.median(before), sec=statistics.median(after),
               ratio=v["ratio"], verdict=says(v), repeats=list(v["repeats"]))
    wrong = agreement(arm, default, names_, framework, model)
    if wrong:
        return {**out, "decision": "wrong numbers", "why": wrong}
    if v["verdict"] == "faster":
        return {**out, "decision": "kept", "why": says(v)}
    why = {"slower": "slower", "within noise": "no difference", TOO_FEW: TOO_FEW}[v["verdict"]]
    return {**out, "decision": why, "why": says(v)}


def best_of(g: dict) -> tuple[float | None, float | None]:
    """A group's defaults' s/epoch and its best's (the kept arm its best names; the
    defaults where nothing was kept)."""
    chosen = next((d for d in reversed(g["decisions"]) if d.get("settings") == g["best"]
                   and d["decision"] == "kept"), None) if g.get("best") else None
    base = next((d["sec_default"] for d in g["decisions"] if d.get("sec_default")), None)
    return base, chosen["sec"] if chosen else base


def merged(runs: list[dict]) -> dict:
    """Several runs' decisions on one machine kind as one settings file: for each row
    (framework, model, mode), the group of the run whose best cut the most from its own
    defaults (a later run on a tie), so that a bfloat16 run and a float32 run of the same
    row leave the faster of their bests for compare --settings best."""
    kinds = {r["machine_kind"] for r in runs}
    if len(kinds) != 1:
        raise SeveralKinds(f"--best-file: the runs are of several machine kinds ({', '.join(sorted(kinds))}); "
                         "give runs of one kind")
    chosen: dict[tuple, dict] = {}
    for r in runs:
        for g in r["groups"]:
            base, best = best_of(g)
            ratio = best / base if base and best else 1.0
            key = (g["framework"], g["model"], g["mode"], nodes_of(g))
            if key not in chosen or ratio <= chosen[key][0]:
                chosen[key] = (ratio, g)
    return {"machine_kind": kinds.pop(), "env": runs[-1]["env"],
            "measured": " and ".join(dict.fromkeys(r["measured"] for r in runs)),
            "runs": [{"command": r["command"], "measured": r["measured"]} for r in runs],
            "groups": [g for _, g in chosen.values()]}
