"""The --settings option of the commands that run rows (compare, profile) and of
benchmarks.settings: FRAMEWORK:NAME+NAME,... parsed against each framework's table
(common/facts/settings.py), `best` read from this machine kind's settings file in the
run's own configuration, and a row's RunConfig fields for its settings. Bad input is a
UsageError (one line, exit 2)."""
from __future__ import annotations

from common.facts import machine, registry, settings

from .cli import UsageError

DECISIONS = "settings.json"       # benchmarks.settings' decisions file in its results folder


def asked(text: str, frameworks: list[str]) -> dict[str, list[str]] | None:
    """--settings as {framework: names}; None for all. Unknown names are bad input."""
    if text == "all":
        return None
    out: dict[str, list[str]] = {}
    for part in text.split(","):
        fw, sep, rest = part.partition(":")
        if not sep or not rest or fw not in frameworks:
            raise UsageError(f"--settings {part!r}: give FRAMEWORK:NAME+NAME with a framework "
                             f"of --framework ({', '.join(frameworks)}), or all")
        if fw in out:      # the second would silently replace the first
            raise UsageError(f"--settings names {fw} twice: give its settings once, joined by "
                             f"+ ({fw}:{'+'.join(out[fw])}+{rest})")
        try:
            out[fw] = [s.name for s in settings.get(fw, rest.split("+"))]
        except settings.UnknownSetting as e:
            raise UsageError(str(e)) from None
    return out


OPTION_HELP = ("none (each framework's defaults), best (the settings benchmarks.settings kept on "
               "this machine kind: docs/results/settings/), or FRAMEWORK:NAME+NAME,... "
               "(common/facts/settings.py); a tuned row is labelled so everywhere")


def resolve(text: str, frameworks: list[str], modes: list[str], model: str,
            nodes: int = 1, network: str | None = None, link: str | None = None) -> dict:
    """compare --settings as Plan.settings ({"FRAMEWORK" or "FRAMEWORK/MODEL/MODE":
    names}); a setting unknown, or one this machine (or a run on `nodes` nodes) cannot
    apply, is bad input. `best` takes the rows measured on this machine kind in the run's
    own configuration (one node, or the nodes, network and link rate), and is bad input
    where none were: nothing is applied from another kind or configuration."""
    if text == "none":
        return {}
    if text == "best":
        kind = settings.machine_kind()
        known = settings.best_known(kind)
        if known is None:
            raise UsageError(f"--settings best: no settings measured on this machine kind ({kind}; "
                             f"measured: {', '.join(settings.measured_kinds()) or 'none'}); run "
                             f"python -m benchmarks.settings here and commit its {DECISIONS} as "
                             f"docs/results/settings/{kind}.json (--best-file)")
        where = settings.configuration(nodes, network, link)
        mine = [g for g in known["groups"] if g["framework"] in frameworks and g["model"] == model
                and g["mode"] in modes]
        ours = [g for g in mine if settings.group_configuration(g) == where]
        if not ours:
            there = dict.fromkeys(settings.describe(settings.group_configuration(g)) for g in mine)
            raise UsageError(f"--settings best: none measured on this machine kind ({kind}) for "
                             f"these rows in this configuration ({settings.describe(where)}); "
                             f"measured: {', '.join(there) or 'none of these rows'}")
        chosen = {f"{g['framework']}/{g['model']}/{g['mode']}": g["best"] for g in ours if g["best"]}
    else:
        chosen = asked(text, frameworks)
    device_kind = "gpu" if machine.gpu_count() else "cpu"
    for key, names_ in chosen.items():
        framework = key.split("/")[0]
        for s in settings.get(framework, names_):
            why = settings.why_not(s, device_kind, nodes=nodes)
            if why:
                raise UsageError(f"--settings: {framework}'s {s.name} cannot apply here: {why}")
        try:
            settings.env_of(settings.get(framework, names_))
        except settings.UnknownSetting as e:
            raise UsageError(f"--settings: {framework}: {e}") from None
    return chosen


def applied(framework: str, mode: str, execution: str | None, names_: list[str]) -> dict:
    """A row's RunConfig fields for its settings: the execution a setting names (else the
    row's own) and the settings."""
    if not names_:
        return {"execution": execution, "settings": []}
    default = execution or registry.default_execution(framework, mode)
    return {"execution": settings.execution_of(settings.get(framework, names_), default),
            "settings": list(names_)}
