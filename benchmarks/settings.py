"""Each framework at the settings its own documentation recommends, beside its defaults:
`python -m benchmarks.settings`.

For every framework, model and default mode: the defaults and each setting of the
framework's table (common/facts/settings.py) that applies here, one at a time, each in a
fresh compare worker, their repeats interleaved (default, setting 1, setting 2, ...,
default, ...) so that drift hits all alike; then the kept settings together against the
defaults the same way. A setting is kept when it is faster and its numbers agree with the
defaults' (the rule: common/reports/decisions.py; the defaults' run is the one the
conformance suite holds to the NumPy oracle). Rejected settings say why: slower, no
difference, too few repeats, wrong numbers, or cannot run here. DIR/settings.md is the page; DIR/settings.json the
decisions, and the settings file `compare --settings best` applies."""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from common import models
from common.core.modes import MODES
from common.facts import machine, registry, settings
from common.launch import netns, networks
from common.reports import settings as page
from common.reports.decisions import SeveralKinds, decide, merged
from common.results.record import nodes_of, write_atomic
from common.results.timing import step_sec

from .cli import (UsageError, add_models, command_parser, names, positive, positive_float,
                  recorded_command, run_command)
from .probe import can_emulate, probe
from .tuned import DECISIONS, asked
from .runner import Interrupts, run_config

TIMEOUT = 3600.0
LINK = "10mbit"          # --nodes' default link: issue 37's, where t2 outgrows t1
T1 = "t1"                # a group across nodes: one node's compute, its records' label
TOGETHER = "together"


def build_parser():
    p = command_parser("benchmarks.settings", __doc__)
    add_models(p, "lenet")
    p.add_argument("--mode", default="default",
                   help="modes: default (compare's), or a comma-separated list")
    p.add_argument("--settings", default="all",
                   help="all (every setting of each framework's table that applies here), or "
                        "FRAMEWORK:NAME+NAME,... (common/facts/settings.py)")
    p.add_argument("--repeat", type=positive, default=3,
                   help="runs of each arm, interleaved (Welch needs 2 a side; 3 or more decide)")
    p.add_argument("--epochs", type=positive, default=2, help="epochs per run (compare's default)")
    p.add_argument("--steps-per-epoch", type=positive, default=None,
                   help="cap an epoch's steps (the accuracy check then sees less training)")
    p.add_argument("--threads", type=positive, default=2)
    p.add_argument("--nodes", type=positive, default=1,
                   help="run each row across this many emulated nodes (network namespaces, a "
                        "core each, the model's links batch per node) to measure the "
                        "communication settings, with each engine's t1 and t2 beside them")
    p.add_argument("--link", default=None,
                   help=f"with --nodes: the emulated links' rate (a tc rate; default {LINK})")
    p.add_argument("--dataset", default="fashion-mnist", choices=("fashion-mnist", "synthetic"))
    p.add_argument("--data-dir", default=None)
    p.add_argument("--noise", type=positive_float, default=0.05,
                   help="the verdict's band: a change smaller than this is no change")
    p.add_argument("--out", default=None, help="results folder (default: results/settings-<time>)")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="rebuild DIR/settings.md from DIR's decisions; runs nothing")
    p.add_argument("--best-file", default=None, metavar="DIR,DIR,...",
                   help="write docs/results/settings/<machine kind>.json from these runs' "
                        "decisions (one machine kind): each row's fastest best; runs nothing")
    return p


def arms(framework: str, mode: str, wanted: list[str] | None, device_kind: str,
         nodes: int = 1) -> tuple[list, list]:
    """The arms to run (label, [setting names], execution) after the defaults, and the
    settings that cannot run here with the reason. Across nodes, the communication
    settings only: the others are measured on one device."""
    default = registry.default_execution(framework, mode)
    run, refused = [], []
    for s in settings.SETTINGS.get(framework, ()):
        if wanted is not None and s.name not in wanted:
            continue
        why = settings.why_not(s, device_kind, nodes=nodes)
        if why is None and nodes > 1 and s.kind != "communication":
            why = (f"not a communication setting ({s.kind}): measured on one device "
                   "(benchmarks.settings without --nodes)")
        execution = settings.execution_of([s], default)
        if why is None and execution == default and not s.env and not s.hook:
            why = f"{execution} is already {mode} mode's default execution"
        if why is None and execution != default:
            gap = MODES[mode].gap(framework, execution=execution)
            why = f"{framework} {mode} cannot run {execution}: {gap}" if gap else None
        if why:
            refused.append({"setting": s.name, "decision": "cannot run here", "why": why})
        else:
            run.append((s.name, [s.name], execution))
    return run, refused


def plan(args) -> list[dict]:
    frameworks = names(args.framework, registry.NAMES, "framework", registry.groups())
    wanted = asked(args.settings, frameworks)
    modes = ([m for m, mode in MODES.items() if mode.default] if args.mode == "default"
             else names(args.mode, MODES, "mode"))
    device_kind = "gpu" if machine.gpu_count() else "cpu"
    link = across(args)
    groups = []
    for model in names(args.model, models.NAMES, "model"):
        for f in frameworks:
            if wanted is not None and f not in wanted:
                continue
            for m in modes:
                if (f, m) in registry.KNOWN_GAPS or (args.nodes > 1 and (
                        MODES[m].across_nodes(f) or registry.gap(f, "nodes"))):
                    continue
                run, refused = arms(f, m, None if wanted is None else wanted[f], device_kind,
                                    args.nodes)
                groups.append({"framework": f, "model": model, "mode": m, "arms": run,
                               "refused": refused, "device_kind": device_kind, **(
                                   {"nodes": args.nodes, "link": link,
                                    "batch": args.nodes * models.get(model).COMMANDS["links"]["batch"]}
                                   if args.nodes > 1 else {})})
    if not any(g["arms"] or nodes_of(g) > 1 for g in groups):
        raise UsageError("no setting to measure: none of the frameworks' settings applies "
                         f"to this machine's {device_kind} runs (see common/facts/settings.py)")
    return groups


def across(args) -> str | None:
    """--nodes' link rate (None on one node); bad input is a UsageError."""
    if args.nodes == 1:
        if args.link:
            raise UsageError("--link is the emulated nodes' link: give --nodes 2 or more with it")
        return None
    link = args.link or LINK
    try:
        netns.rate_bits(link)
    except ValueError as e:
        raise UsageError(str(e)) from None
    can_emulate()
    return link


def _config(args, g: dict, names_: list[str], execution: str) -> dict:
    cfg = {"framework": g["framework"], "mode": g["mode"], "devices": 1, "model": g["model"],
           "execution": execution, "dataset": args.dataset, "data_dir": args.data_dir,
           "epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch,
           "threads": args.threads, "settings": names_}
    if nodes_of(g) > 1:
        # as benchmarks.links runs its nodes: a core each, the model's batch per node
        cfg.update(nodes=g["nodes"], network=settings.ACROSS_NETWORK, link=g["link"], cores_per_device=1,
                   batch_size=g["batch"], steps_per_epoch=args.steps_per_epoch or
                   models.get(g["model"]).COMMANDS["links"]["steps"])
    return cfg


def _tag(g: dict) -> str:
    tag = f"{g['model']}-{g['framework']}-{g['mode']}"
    return tag + (f"-n{g['nodes']}-{g['link']}" if nodes_of(g) > 1 else "")


def _path(out: Path, g: dict, label: str, rep: int) -> Path:
    return out / "records" / f"{_tag(g)}-{label}-r{rep}.json"


def _run(cfg: dict, path: Path, out: Path, stop) -> None:
    record, done = run_config(cfg, path, TIMEOUT, out / "logs" / path.with_suffix(".log").name,
                              stop=stop)
    if record is None:
        write_atomic(path, {"status": "failed", "error": (
            f"the worker ended without a record (exit {done.code}): {done.log_tail}")})


def _run_arms(args, g: dict, arm_list: list, out: Path, stop, limits: bool = False) -> None:
    """Every arm's records, the defaults first in each round, rounds interleaved. With
    `limits`, a group across nodes also measures, in each round, its t1 (one node's
    compute: the defaults on one device, one core, a node's batch) and its t2 (the
    link's own all-reduce of the model's gradients: benchmarks.links' probe)."""
    default = registry.default_execution(g["framework"], g["mode"])
    for rep in range(args.repeat):
        for label, names_, execution in [("default", [], default), *arm_list]:
            path = _path(out, g, label, rep)
            print(f"{_tag(g)} {label} (repeat {rep + 1})", flush=True)
            _run(_config(args, g, names_, execution), path, out, stop)
            if stop.signum:
                return
        if limits and nodes_of(g) > 1:
            print(f"{_tag(g)} t1 and t2 (repeat {rep + 1})", flush=True)
            one = {**_config(args, g, [], default), "nodes": 1, "network": networks.DEFAULT,
                   "link": None, "batch_size": g["batch"] // g["nodes"]}
            _run(one, _path(out, g, T1, rep), out, stop)
            probe(out / "probes" / f"{_tag(g)}-r{rep}.json", g["nodes"], g["link"],
                  models.param_bytes(g["model"]))
            if stop.signum:
                return


def _records(out: Path, g: dict, label: str) -> list[dict]:
    paths = sorted(out.glob(f"records/{_tag(g)}-{label}-r*.json"),
                   key=lambda p: int(p.stem.rsplit("-r", 1)[1]))
    return [json.loads(p.read_text()) for p in paths]


def limits(out: Path, g: dict) -> dict | None:
    """A group across nodes: its t1 and t2, and its steps at the defaults and at its best
    (each the median over the rounds), from its records and probes alone; None on one node."""
    if nodes_of(g) == 1:
        return None
    from common.reports.links import probe_sec

    def step(records: list[dict]) -> float | None:
        secs = [step_sec(r) for r in records if r.get("status") == "ok"]
        return statistics.median(secs) if secs and None not in secs else None
    together = g.get("together")
    best = (_records(out / TOGETHER, g, TOGETHER) if together and g["best"] == together[1]
            else _records(out, g, g["best"][0]) if g.get("best") else _records(out, g, "default"))
    t2 = [probe_sec(json.loads(p.read_text())) for p in sorted(out.glob(f"probes/{_tag(g)}-r*.json"))]
    return {"t1": step(_records(out, g, T1)), "t2": statistics.median(t2) if t2 and None not in t2
            else None, "step_default": step(_records(out, g, "default")), "step_best": step(best)}


def decisions_of(out: Path, g: dict, band: float) -> tuple[list[dict], list[str], str | None]:
    """A group's decisions, best settings and error, from its records on disk alone (so
    that --report judges committed records again by today's rules)."""
    f = g["framework"]
    default = _records(out, g, "default")
    if not default:
        return g["refused"], [], None
    if any(r.get("status") != "ok" for r in default):
        bad = next(r for r in default if r.get("status") != "ok")
        return g["refused"], [], "the defaults' run failed: " + str(bad.get("error")).splitlines()[0]
    decisions = [decide(label, n, _records(out, g, label), default, f, band, g["model"])
                 for label, n, _ in g["arms"] if _records(out, g, label)] + g["refused"]
    kept = [d for d in decisions if d["decision"] == "kept"]
    best = min(kept, key=lambda d: d["sec"] / d["sec_default"])["settings"] if kept else []
    both = out / TOGETHER
    if g.get("together") and _records(both, g, TOGETHER):
        d = decide(TOGETHER, g["together"][1], _records(both, g, TOGETHER),
                   _records(both, g, "default"), f, band, g["model"])
        decisions.append(d)
        if d["decision"] == "kept" and d["sec"] / d["sec_default"] < min(
                k["sec"] / k["sec_default"] for k in kept):
            best = g["together"][1]
    return decisions, best, None


def _together(g: dict, decisions: list[dict]):
    """The kept settings as one arm (label, names, execution), or a refusal, or None."""
    kept = [n for d in decisions if d["decision"] == "kept" for n in d["settings"]]
    if len(kept) < 2:
        return None
    try:
        chosen = settings.get(g["framework"], kept)
        settings.env_of(chosen)
        return (TOGETHER, kept, settings.execution_of(
            chosen, registry.default_execution(g["framework"], g["mode"])))
    except settings.UnknownSetting as e:
        return {"setting": TOGETHER, "settings": kept, "decision": "cannot run here", "why": str(e)}


def measure(args, groups: list[dict], out: Path) -> int:
    (out / "command.txt").write_text(" ".join(["python -m benchmarks.settings", *args.argv]))
    results = {"machine_kind": settings.machine_kind(), "env": machine.env_info(),
               "command": recorded_command(out), "noise": args.noise, "repeat": args.repeat,
               "epochs": args.epochs, "measured": time.strftime("%Y-%m-%d %H:%M"), "groups": groups}
    with Interrupts() as stop:
        for g in groups:
            # across nodes, the defaults' step against t1 and t2 even with no setting to try
            if g["arms"] or nodes_of(g) > 1:
                _run_arms(args, g, g["arms"], out, stop, limits=True)
                if stop.signum:
                    break
                decisions, _, error = decisions_of(out, g, args.noise)
                arm = None if error else _together(g, decisions)
                if isinstance(arm, dict):
                    g["refused"].append(arm)
                elif arm:
                    g["together"] = arm
                    _run_arms(args, g, [arm], out / TOGETHER, stop)
            write_atomic(out / DECISIONS, judged(results, out))
    results = judged(results, out)
    write_atomic(out / DECISIONS, results)
    write_page(out)
    return stop.exit_code or int(any(g.get("error") for g in results["groups"]))


def judged(results: dict, out: Path) -> dict:
    """The results with every group's decisions, best and error made from its records."""
    groups = []
    for g in results["groups"]:
        decisions, best, error = decisions_of(out, g, results["noise"])
        g = {**g, "decisions": decisions, "best": best, "error": error}
        groups.append({**g, "limits": limits(out, g)} if nodes_of(g) > 1 else g)
    return {**results, "groups": groups}


def write_page(out: Path) -> int:
    """DIR/settings.md, the decisions judged again from DIR's records (DIR/settings.json
    rewritten with them)."""
    try:
        results = judged(json.loads((out / DECISIONS).read_text()), out)
    except (OSError, ValueError, KeyError) as e:
        print(f"settings: error: no decisions in {out} ({e})", file=sys.stderr)
        return 2
    write_atomic(out / DECISIONS, results)
    text = page.markdown(results)
    (out / "settings.md").write_text(text)
    print(text)
    return 0


def write_best_file(folders: list[Path]) -> int:
    """BEST_DIR/<kind>.json from the runs in folders, each judged again from its records."""
    missing = [str(f) for f in folders if not (f / DECISIONS).is_file()]
    if not folders:
        print("settings: error: --best-file names no folder; give benchmarks.settings results "
              "folders, comma-separated", file=sys.stderr)
        return 2
    if missing:
        print(f"settings: error: --best-file {', '.join(missing)}: no {DECISIONS} there; give "
              "benchmarks.settings results folders", file=sys.stderr)
        return 2
    try:
        best = merged([judged(json.loads((f / DECISIONS).read_text()), f) for f in folders])
    except SeveralKinds as e:
        print(f"settings: error: {e}", file=sys.stderr)
        return 2
    path = settings.BEST_DIR / f"{best['machine_kind']}.json"
    write_atomic(path, best)
    print(path)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--best-file" or a.startswith("--best-file=") for a in argv):
        args = build_parser().parse_args(argv)
        return write_best_file([Path(f) for f in args.best_file.split(",") if f])
    if any(a == "--report" or a.startswith("--report=") for a in argv):
        args = build_parser().parse_args(argv)
        if not Path(args.report).is_dir():
            print(f"settings: error: --report {args.report} is not a folder; give a settings "
                  "results folder", file=sys.stderr)
            return 2
        return write_page(Path(args.report))

    def resolve(args):
        args.argv = argv
        return plan(args)
    return run_command("settings", build_parser(), argv, resolve, "settings-", measure)


if __name__ == "__main__":
    sys.exit(main())
