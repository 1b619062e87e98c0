"""benchmarks.settings' page: each framework's recommended settings against its defaults,
the decision on each with its reason, and each row's best, from the decisions file alone."""
from __future__ import annotations

from common.facts import settings
from common.facts.machine import cpu_line
from common.launch import networks
from common.reports.decisions import agree_steps, best_of
from common.reports.formats import ms
from common.results.record import model_of, nodes_of

# issue 37's aims for a framework at its best: within 1.5x of the fastest framework's
# best; across nodes, its step within 1.15x of max(t1, t2) (compute or communication,
# whichever is longer, the other hidden behind it)
GOAL = 1.5
LINK_GOAL = 1.15


def mode_cell(g: dict) -> str:
    """A group's mode, and its nodes and link where it ran across nodes."""
    nodes = nodes_of(g)
    return g["mode"] + (f", {nodes} nodes at {g['link']}" if nodes > 1 else "")


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
                f"| {g['framework']} | {g['model']} | {mode_cell(g)} | {d['setting']} | "
                f"{s.kind if s else 'several'} | {d.get('precision') or (s.precision if s else '-')} | "
                f"{_cell(d.get('sec_default'), '.2f')} | {_cell(d.get('sec'), '.2f')} | "
                f"{_cell(d.get('ratio'), '.2f')} | {d['decision']} | {d['why']} |")
    return lines


def best_rows(groups: list[dict]) -> list[str]:
    lines = ["| framework | model | mode | best settings | default s/epoch | best s/epoch | "
             "speed-up |", "|" + "---|" * 7]
    for g in groups:
        if g.get("error"):
            lines.append(f"| {g['framework']} | {g['model']} | {mode_cell(g)} | - | - | - | "
                         f"{g['error']} |")
            continue
        base, best = best_of(g)
        lines.append(f"| {g['framework']} | {g['model']} | {mode_cell(g)} | "
                     f"{'+'.join(g['best']) or 'the defaults'} | {_cell(base, '.2f')} | "
                     f"{_cell(best, '.2f')} | "
                     + (f"{base / best:.2f}x |" if base and best else "- |"))
    return lines


def against_fastest(groups: list[dict]) -> list[str]:
    """Each model's rows, best against the run's fastest best (and default against the
    fastest default), and whether each best is within GOAL of the fastest; [] where a
    model has fewer than two frameworks measured."""
    out = []
    groups = [g for g in groups if nodes_of(g) == 1]     # one device each
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


def against_limits(groups: list[dict]) -> list[str]:
    """Groups across nodes: each engine's step at its defaults and at its best against
    max(t1, t2), and whether the best is within LINK_GOAL of it; [] where none ran."""
    rows = [g for g in groups if g.get("limits")]
    if not rows:
        return []
    out = ["| framework | model | nodes, link | t1 ms | t2 ms | default step ms | x max(t1, t2) "
           f"| best settings | best step ms | x max(t1, t2) | within {LINK_GOAL}x |",
           "|" + "---|" * 11]
    for g in rows:
        lim = g["limits"]
        top = max(lim["t1"], lim["t2"]) if lim["t1"] and lim["t2"] else None

        def x(step):
            return _cell(step / top if step and top else None, ".2f")
        out.append(f"| {g['framework']} | {g['model']} | {g['nodes']}, {g['link']} | "
                   f"{ms(lim['t1'])} | {ms(lim['t2'])} | {ms(lim['step_default'])} | "
                   f"{x(lim['step_default'])} | {'+'.join(g['best']) or 'the defaults'} | "
                   f"{ms(lim['step_best'])} | {x(lim['step_best'])} | "
                   + ("-" if not (top and lim["step_best"]) else
                      "yes" if lim["step_best"] <= LINK_GOAL * top else "no") + " |")
    return out


def sources(groups: list[dict]) -> list[str]:
    seen = dict.fromkeys(g["framework"] for g in groups)
    return [f"- {f} {s.name}: {s.what} ([source]({s.source}))"
            for f in seen for s in settings.SETTINGS.get(f, ())]


NEVER_RAN = ("not-applicable", "not-installed")


def row_configuration(r: dict) -> tuple:
    """A compare record's configuration (settings.configuration): its nodes, network and
    link rate."""
    return settings.configuration(r.get("nodes"), networks.of(r).name,
                                  (r.get("link") or {}).get("rate"))


def best_known_lines(records: list[dict]) -> list[str]:
    """Where benchmarks.settings measured the records' machine kind: each default row's
    kept settings and their times as measured there in the row's own configuration (its
    own run, its own dates: set beside this run's, never divided by it), and a line naming
    the rows measured in no such configuration; one line where the kind has none measured."""
    env = next((r["env"] for r in records if r.get("env")), None)
    if not env:
        return []
    kind = settings.machine_kind(env)
    known = settings.best_known(kind)
    if not known:
        return [f"Best known settings: none measured on this machine kind (`{kind}`; measured: "
                f"{', '.join(settings.measured_kinds()) or 'none'}).", ""]
    groups = {(g["framework"], g["model"], g["mode"], settings.group_configuration(g)): g
              for g in known["groups"]}
    lines, unmeasured = [], []
    for r in records:
        # a tuned row, one on several devices, and one that never ran (Keras has no
        # scratch mode; a framework not installed) have nothing to be set beside
        if r.get("settings") or r["devices"] != 1 or r.get("status") in NEVER_RAN:
            continue
        where = row_configuration(r)
        g = groups.get((r["framework"], model_of(r), r["mode"], where))
        if g is None:
            unmeasured.append(f"{r['framework']} {r['mode']} ({settings.describe(where)})")
            continue
        base, best = best_of(g)
        lines.append(f"| {r['framework']} | {g['model']} | {mode_cell(g)} | "
                     f"{'+'.join(g['best']) or 'the defaults'} | {_cell(base, '.2f')} | "
                     f"{_cell(best, '.2f')} |")
    unmeasured = ", ".join(dict.fromkeys(unmeasured))
    if not lines:
        return ([f"Best known settings: none measured on this machine kind (`{kind}`) for: "
                 f"{unmeasured}.", ""] if unmeasured else [])
    return ["## Best known settings on this machine kind", "",
            f"Measured by benchmarks.settings on this machine kind (`{kind}`, "
            f"{known['measured']}: `docs/results/settings/{kind}.json`), in its "
            "own runs: its defaults' and its best's sec/epoch, beside this report's rows, not "
            "divided by them.", "",
            "| framework | model | mode | best settings | its default s/epoch | "
            "its best s/epoch |", "|" + "---|" * 6, *lines, "",
            *([f"No settings measured on this machine kind for: {unmeasured}.", ""]
              if unmeasured else [])]


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
        f"same weights and batches ({tol}; the first step losses: " + ", ".join(
            f"{m}'s first {agree_steps(m)}" for m in dict.fromkeys(g["model"] for g in groups))
        + ").", "",
        *decision_rows(groups), "",
        "## Best per row", "", *best_rows(groups), "",
        *(["## Best against best", "", "Each row's best (and its defaults) divided by the "
           "run's fastest, one machine, one run: the groups ran one after another, each "
           "group's arms interleaved.", "", *fastest] if (fastest := against_fastest(groups))
          else []),
        *(["## Across nodes: each step against max(t1, t2)", "",
           "Each engine's step on the emulated link, at its defaults and at its best, against "
           "the longer of t1 (one node's compute: the defaults on one device, one core, a "
           "node's batch) and t2 (the link's own all-reduce of the model's gradients, torch's "
           "gloo ring with nothing beside it), each measured in every round of the group's "
           f"arms. A step is max(t1, t2) where the engine hides the shorter behind the longer "
           f"entirely, t1 + t2 where it hides nothing; issue 37's aim: within {LINK_GOAL}x of "
           "max(t1, t2).", "",
           *limit_rows, ""] if (limit_rows := against_limits(groups)) else []),
        "## The settings and their sources", "", *sources(groups), ""])
