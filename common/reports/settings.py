"""benchmarks.settings' page: each framework's recommended settings against its defaults,
the decision on each with its reason, and each row's best, from the decisions file alone."""
from __future__ import annotations

from common.facts import settings
from common.facts.machine import cpu_line

# issue 37's aim for a framework at its best: within 1.5x of the fastest framework's best
GOAL = 1.5


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


def best_of(g: dict) -> tuple[float | None, float | None]:
    """A group's defaults' s/epoch and its best's (the kept arm its best names; the
    defaults where nothing was kept)."""
    chosen = next((d for d in reversed(g["decisions"]) if d.get("settings") == g["best"]
                   and d["decision"] == "kept"), None) if g.get("best") else None
    base = next((d["sec_default"] for d in g["decisions"] if d.get("sec_default")), None)
    return base, chosen["sec"] if chosen else base


def best_rows(groups: list[dict]) -> list[str]:
    lines = ["| framework | model | mode | best settings | default s/epoch | best s/epoch | "
             "speed-up |", "|" + "---|" * 7]
    for g in groups:
        if g.get("error"):
            lines.append(f"| {g['framework']} | {g['model']} | {g['mode']} | - | - | - | "
                         f"{g['error']} |")
            continue
        base, best = best_of(g)
        lines.append(f"| {g['framework']} | {g['model']} | {g['mode']} | "
                     f"{'+'.join(g['best']) or 'the defaults'} | {_cell(base, '.2f')} | "
                     f"{_cell(best, '.2f')} | {_cell(base / best if base and best else None, '.2f')}x |")
    return lines


def against_fastest(groups: list[dict]) -> list[str]:
    """Each model's rows, best against the run's fastest best (and default against the
    fastest default), and whether each best is within GOAL of the fastest; [] where a
    model has fewer than two frameworks measured."""
    out = []
    for model in dict.fromkeys(g["model"] for g in groups):
        rows = [(g, *best_of(g)) for g in groups if g["model"] == model and not g.get("error")]
        rows = [(g, base, best) for g, base, best in rows if base and best]
        if len({g["framework"] for g, _, _ in rows}) < 2:
            continue
        top = min(best for _, _, best in rows)
        top_default = min(base for _, base, _ in rows)
        fastest = next(g for g, _, best in rows if best == top)
        out += [f"### {model}: every row's best against the fastest best", "",
                f"The fastest best: {fastest['framework']} {fastest['mode']} "
                f"({'+'.join(fastest['best']) or 'the defaults'}) at {top:.2f} s/epoch; the "
                f"goal: every best within {GOAL}x of it.", "",
                "| framework | mode | best settings | best s/epoch | x the fastest best | "
                f"within {GOAL}x | default s/epoch | x the fastest default |",
                "|" + "---|" * 8]
        for g, base, best in sorted(rows, key=lambda r: r[2]):
            out.append(f"| {g['framework']} | {g['mode']} | {'+'.join(g['best']) or 'the defaults'} "
                       f"| {best:.2f} | {best / top:.2f} | {'yes' if best <= GOAL * top else 'no'} "
                       f"| {base:.2f} | {base / top_default:.2f} |")
        out.append("")
    return out


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
        base, best = best_of(g)
        lines.append(f"| {r['framework']} | {g['model']} | {r['mode']} | "
                     f"{'+'.join(g['best']) or 'the defaults'} | {_cell(base, '.2f')} | "
                     f"{_cell(best, '.2f')} |")
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
        *(["## Best against best", "", "Each row's best (and its defaults) divided by the "
           "run's fastest, one machine, one run: the groups ran one after another, each "
           "group's arms interleaved.", "", *fastest] if (fastest := against_fastest(groups))
          else []),
        "## The settings and their sources", "", *sources(groups), ""])
