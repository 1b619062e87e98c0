"""benchmarks.settings' page: each framework's recommended settings against its defaults,
the decision on each with its reason, and each row's best, from the decisions file alone."""
from __future__ import annotations

from common.facts import settings
from common.facts.machine import cpu_line


def _cell(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def decision_rows(groups: list[dict]) -> list[str]:
    lines = ["| framework | model | mode | setting | kind | precision | default s/epoch | "
             "with it s/epoch | ratio | decision | why |", "|" + "---|" * 11]
    for g in groups:
        table = settings.table(g["framework"])
        for d in g["decisions"]:
            s = table.get(d["setting"])
            lines.append(
                f"| {g['framework']} | {g['model']} | {g['mode']} | {d['setting']} | "
                f"{s.kind if s else 'several'} | {d.get('precision') or (s.precision if s else '-')} | "
                f"{_cell(d.get('sec_default'), '.2f')} | {_cell(d.get('sec'), '.2f')} | "
                f"{_cell(d.get('ratio'), '.2f')} | {d['decision']} | {d['why']} |")
    return lines


def best_rows(groups: list[dict]) -> list[str]:
    lines = ["| framework | model | mode | best settings | default s/epoch | best s/epoch | "
             "speed-up |", "|" + "---|" * 7]
    for g in groups:
        if g.get("error"):
            lines.append(f"| {g['framework']} | {g['model']} | {g['mode']} | - | - | - | "
                         f"{g['error']} |")
            continue
        chosen = next((d for d in reversed(g["decisions"]) if d.get("settings") == g["best"]
                       and d["decision"] == "kept"), None) if g["best"] else None
        base = next((d["sec_default"] for d in g["decisions"] if d.get("sec_default")), None)
        best = chosen["sec"] if chosen else base
        lines.append(f"| {g['framework']} | {g['model']} | {g['mode']} | "
                     f"{'+'.join(g['best']) or 'the defaults'} | {_cell(base, '.2f')} | "
                     f"{_cell(best, '.2f')} | {_cell(base / best if base and best else None, '.2f')}x |")
    return lines


def sources(groups: list[dict]) -> list[str]:
    seen = dict.fromkeys(g["framework"] for g in groups)
    return [f"- {f} {s.name}: {s.what} ([source]({s.source}))"
            for f in seen for s in settings.SETTINGS.get(f, ())]


def best_known_lines(records: list[dict]) -> list[str]:
    """Where benchmarks.settings measured this machine's kind: each default row's kept
    settings and their times as measured there (its own run, its own dates: set beside
    this run's, never divided by it); [] where none were measured."""
    env = next((r["env"] for r in records if r.get("env")), None)
    known = settings.best_known(env) if env else None
    if not known:
        return []
    groups = {(g["framework"], g["model"], g["mode"]): g for g in known["groups"]}
    lines = []
    for r in records:
        g = groups.get((r["framework"], r.get("model", "lenet"), r["mode"]))
        if r.get("settings") or r["devices"] != 1 or g is None:
            continue
        chosen = next((d for d in reversed(g["decisions"]) if d.get("settings") == g["best"]
                       and d["decision"] == "kept"), None) if g["best"] else None
        base = next((d["sec_default"] for d in g["decisions"] if d.get("sec_default")), None)
        lines.append(f"| {r['framework']} | {g['model']} | {r['mode']} | "
                     f"{'+'.join(g['best']) or 'the defaults'} | {_cell(base, '.2f')} | "
                     f"{_cell(chosen['sec'] if chosen else base, '.2f')} |")
    if not lines:
        return []
    return ["## Best known settings on this machine kind", "",
            f"Measured by benchmarks.settings on this machine kind (`{known['machine_kind']}`, "
            f"{known['measured']}: `docs/results/settings/{known['machine_kind']}.json`), in its "
            "own runs: its defaults' and its best's sec/epoch, beside this report's rows, not "
            "divided by them.", "",
            "| framework | model | mode | best settings | its default s/epoch | its best s/epoch |",
            "|" + "---|" * 6, *lines, ""]


def markdown(results: dict) -> str:
    env = results.get("env") or {}
    tol = ", ".join(f"{p}: step losses within {t['step_loss']:.0e} relative, test accuracy "
                    f"at most {t['accuracy']} lower" for p, t in settings.PRECISION.items())
    groups = results["groups"]
    return "\n".join([
        "# Each framework at its recommended settings, beside its defaults", "",
        f"Command: `{results['command']}`", "",
        f"Machine: {cpu_line(env)}; GPU: {env.get('gpu_model') or 'none'}; machine kind "
        f"`{results['machine_kind']}`; measured {results['measured']}, {results['epochs']} "
        f"epoch(s) a run, {results['repeat']} repeats an arm, interleaved with the defaults'.", "",
        "Every setting against the defaults, one at a time (then the kept ones together): "
        "kept when the verdict (Welch on the repeats' log sec/epoch, band "
        f"{results['noise']:.0%}) says faster and the run agrees with the defaults' on the "
        f"same weights and batches ({tol}; the first {settings.AGREE_STEPS} step losses).", "",
        *decision_rows(groups), "",
        "## Best per row", "", *best_rows(groups), "",
        "## The settings and their sources", "", *sources(groups), ""])
