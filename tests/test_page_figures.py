"""Figures typed in a results page's prose are its records' (issue 53): each ratio, range,
count or value a "What it shows" paragraph quotes is recomputed from the page's committed
records and held to the page's text at the page's rounding, so that it cannot drift from
the records any more than a table row can (tests/test_results_pages.py holds the rows).
An entry of PROSE_FIGURES: (page, the fragment the page shows with {} for each figure,
what the records give for them). Prose wraps, so whitespace runs are compared as one
space. A figure no record gives (a judgement, a measurement outside the records, a
formula worked by hand) is labelled on its page instead: a reading, a calculation, or
measured by whom. Pure Python: records and report functions, no framework imported."""
import functools
import statistics

import pytest

from common.results.record import load_records
from tests.test_results_pages import RESULTS, _judged

VB, VBC, VBP = ("cpu-2core-vit-best/vit", "cpu-2core-vit-best/vit-pytorch-compiled",
                "cpu-2core-vit-best/profile")


@functools.cache
def _run(run: str) -> dict:
    return _judged(run)


def _group(run: str, framework: str, mode: str = "native") -> dict:
    return next(g for g in _run(run)["groups"] if (g["framework"], g["mode"]) == (framework, mode))


def _decision(run: str, framework: str, setting: str, mode: str = "native") -> dict:
    return next(d for d in _group(run, framework, mode)["decisions"] if d["setting"] == setting)


def _best(run: str, framework: str, mode: str = "native") -> float:
    from common.reports.decisions import best_of
    return best_of(_group(run, framework, mode))[1]


def _fastest_best(run: str) -> float:
    return min(_best(run, g["framework"], g["mode"]) for g in _run(run)["groups"])


def _p(d: dict) -> str:
    """A decision's p value as its verdict words it: '0.028', '< 0.001'."""
    return d["why"].split("(p ", 1)[1].rstrip(")")


@functools.cache
def _profiles(folder: str) -> dict[str, dict]:
    """A profile folder's rows by the label its page gives them."""
    import json

    from common.reports import profile
    paths = [p for p in sorted((RESULTS / folder).rglob("*.json"))
             if p.name not in ("limits.json", "cpu_peak.json", "cpu_bandwidth.json", "gpu_peak.json",
                               "gpu_bandwidth.json")]
    records = profile.labelled([json.loads(p.read_text()) for p in paths])
    return {f"{profile.label(r)} {r['model']}": r for r in profile.ok(records)}


def _ms(folder: str, row: str, cls: str = "step") -> float:
    """A profiled row's ms per step in one class ('step': the profiled window)."""
    from common.reports import profile
    r = _profiles(folder)[row]
    return r["profile"]["window_ms"] if cls == "step" else profile.per_class(r)[cls]


@functools.cache
def _roofline(folder: str, model: str) -> dict[str, dict[str, str]]:
    """The page's roofline table rebuilt from the folder's records: class -> column -> cell."""
    import json

    from common.reports import profile
    rows = sorted((r for r in _profiles(folder).values() if r["model"] == model),
                  key=lambda r: r["profile"]["window_ms"])
    limits = json.loads((RESULTS / folder / "limits.json").read_text())
    header, _, *body = profile.roofline_table(rows, model, rows[0]["batch_size"], limits)
    names = [c.strip() for c in header.strip("|").split("|")]
    return {cells[0]: dict(zip(names, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in body)}


def _bound(folder: str, model: str, *classes: str) -> float:
    return sum(float(_roofline(folder, model)[c]["bound ms"]) for c in classes)


def _over(folder: str, model: str, cls: str, row: str) -> str:
    """A roofline cell's time over the bound, '1.7' of '1.7x (5.7)'."""
    return _roofline(folder, model)[cls][f"{row}: time/bound (GFLOP/s)"].split("x")[0]


def _achieved(folder: str, model: str, cls: str, row: str) -> float:
    """A roofline cell's achieved GFLOP/s, 5.7 of '1.7x (5.7)'."""
    return float(_roofline(folder, model)[cls][f"{row}: time/bound (GFLOP/s)"].split("(")[1][:-1])


def _limits(folder: str) -> tuple[str, str]:
    """The measured GEMM peak and copy bandwidth as the pages give them (263 GFLOP/s, 21.1 GB/s)."""
    import json
    limits = json.loads((RESULTS / folder / "limits.json").read_text())
    return _f(limits["gflops"], 0), _f(limits["gb_per_s"], 1)


@functools.cache
def _arms(run: str) -> list[dict]:
    """A settings run's records: every arm's every repeat."""
    import json
    return [json.loads(p.read_text()) for p in sorted((RESULTS / run / "records").glob("*.json"))]


def _conv(folder: str, row: str) -> float:
    return sum(_ms(folder, row, c) for c in CONV)


def _rank(folder: str, row: str) -> str:
    """A profiled row's place among its model's native rows at their defaults: '2nd'."""
    framework, model = row.split()[0], row.split()[-1]
    rows = sorted((r for r in _profiles(folder).values() if r["model"] == model
                   and r["mode"] == "native" and not r.get("settings")),
                  key=lambda r: r["profile"]["window_ms"])
    n = 1 + [r["framework"] for r in rows].index(framework)
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n, 'th')}"


def _plain(folder: str, row: str) -> float:
    return _profiles(folder)[row]["profile"]["plain_step_ms"]


def _ps(*decisions: dict) -> str:
    """Several decisions' p values as a range: '0.030-0.037'."""
    return _span([float(_p(d)) for d in decisions], 3)


def _kept_accuracies(run: str, kept: bool) -> list[float]:
    """Test accuracies of the arms a run kept (kept) or of those rows' defaults."""
    best = {(g["framework"], g["mode"]): g["best"] for g in _run(run)["groups"] if g["best"]}
    return [r["test_accuracy"] for r in _arms(run) if (r["framework"], r["mode"]) in best
            and r["settings"] == (best[(r["framework"], r["mode"])] if kept else [])]


def _repeats(run: str, settings: list) -> list[str]:
    """Each repeat's span of epochs (one record each) of one arm, the lowest first."""
    spans = sorted((min(r["sec_per_epoch"]), max(r["sec_per_epoch"])) for r in _arms(run)
                   if r["settings"] == settings)
    return [_span(s, 1) for s in spans]


def _low_repeat(run: str, settings: list) -> tuple[str, str]:
    """An arm's lowest repeat's span of epochs, and the span of the others'."""
    low, *rest = sorted((r["sec_per_epoch"] for r in _arms(run) if r["settings"] == settings), key=min)
    return _span(low, 1), _span([t for r in rest for t in r], 1)


@functools.cache
def _links() -> dict:
    """cpu-2core-links.md's records (links.load)."""
    from common.reports import links
    return links.load(RESULTS / "links")


@functools.cache
def _predicted() -> list[dict]:
    """cpu-2core-links.md's predictions (fitted at 100mbit), the page's order."""
    from common.reports import links
    return [p for p in links.predictions(_links(), "100mbit") if "why" not in p]


def _errs(model: str, framework: str, rate: str, placement: str | None = None, key: str = "err") -> list[str]:
    """The predictor's errors (or t2's shares of the step) of a links row, in %, as the page
    words them: '+5', '-3', '0'."""
    rows = [p for p in _predicted() if (p["row"].model, p["row"].framework, p["row"].rate,
                                        p["row"].placement) == (model, framework, rate, placement)]
    return [f"{n:+d}" if n and key == "err" else str(n) for n in (round(100 * p[key]) for p in rows)]


def _lk_probe(model: str, rate: str) -> float:
    """A links probe's t2, in seconds."""
    from common.reports import links
    return links.probe_sec(_links()["models"][model]["probes"][rate])


def _lk_t1(model: str, framework: str, batch: int | None = None) -> float:
    """A links engine's t1 at a compute batch (the node runs' own by default), in seconds."""
    m = _links()["models"][model]
    return dict(m["compute"][framework])[batch or m["batch"]]


def _lk_rows(model: str, rate: str) -> list:
    """A links model's 2-node data-parallel rows at one rate."""
    return [r for r in _links()["models"][model]["rows"] if r.rate == rate and r.nodes == 2 and r.ok]


def _lk_ps(framework: str, nodes: int, placement: str | None) -> object:
    """A parameter-server-against-ring row."""
    return next(r for r in _links()["ps"] if (r.framework, r.nodes, r.placement) == (framework, nodes, placement))


def _lk_pred(model: str, framework: str, rate: str, nodes: int = 2, placement: str | None = None) -> dict:
    return next(p for p in _predicted() if (p["row"].model, p["row"].framework, p["row"].rate, p["row"].nodes,
                                            p["row"].placement) == (model, framework, rate, nodes, placement))


def _exposed(model: str, rate: str) -> dict[str, float]:
    """Each engine's step beyond its t1 at one rate (the lesson table's 'exposed'), in seconds."""
    return {r.framework: r.step - _lk_t1(model, r.framework) for r in _lk_rows(model, rate)}


def _rule_batches(model: str, rate: str) -> str:
    """The span of the engines' batch for t1 >= 1.2 t2 (t1 fitted as a + c x b): '512-2048'."""
    from common.core.perf import Compute, rule_batch
    m = _links()["models"][model]
    batches = [rule_batch(Compute(m["compute"][r.framework]), _lk_probe(model, rate)) for r in _lk_rows(model, rate)]
    return f"{min(batches)}-{max(batches)}"


def _ps_err(bytes_of) -> dict[tuple, float]:
    """MXNet's LeNet rows at 10 Mbit/s predicted with another exchange's bytes (bytes_of(nodes,
    placement)) in place of the key-by-key pushpull's, o fitted again at 100 Mbit/s with them:
    each row's error."""
    from common.reports import links
    per_byte = _lk_probe("lenet", "100mbit") / links.ring_bytes(_p_bytes("lenet"), 2)   # s at the fit
    out = {}
    for p in _predicted():
        r = p["row"]
        if (r.model, r.framework, r.rate) != ("lenet", "mxnet", "10mbit"):
            continue
        o = p["o"] + per_byte * (links.exchange_bytes("lenet", 2, "per-node") - bytes_of(2, "per-node"))
        t2 = p["t2"] * bytes_of(r.nodes, r.placement) / links.row_exchange_bytes(r)
        out[r.nodes, r.placement, r.step] = (p["t1"] + o + t2) / r.step - 1
    return out


def _p_bytes(model: str) -> int:
    from common import models
    return models.param_bytes(model)


def _busiest_of(nodes: int, placement: str | None) -> float:
    from common.reports import links
    return links.busiest_bytes("lenet", nodes, placement)


def _busiest(nodes: int) -> float:
    """MXNet's busiest link's calculated bytes with a server per node."""
    return _busiest_of(nodes, "per-node")


def _xp(nodes: int, placement: str, digits: int = 2) -> str:
    """MXNet's key-by-key exchange of LeNet, in multiples of P."""
    from common.reports import links
    return _f(links.exchange_bytes("lenet", nodes, placement) / _p_bytes("lenet"), digits)


def _ps_misfits() -> list[float]:
    """Every parameter-server-against-ring node's measured bytes off its calculation (largest
    first against largest first, as the table sets them)."""
    from common.reports import links
    return [abs(m / c - 1) for r in _links()["ps"] for m, c in zip(
        sorted(r.sent(), reverse=True), sorted(links.sent_bytes("lenet", r.nodes, r.placement), reverse=True))]


def _pc_span(values: list[float]) -> str:
    """Errors' span as the page words it: '-32' where one, '-32 to -33' (nearest 0 first)."""
    lo, hi = _pc(max(values), False), _pc(min(values), False)
    return lo if lo == hi else f"{lo} to {hi}"


def _law_err(model: str, framework: str, batch: int, law: str = "a + c b") -> float:
    from common.reports import links
    return links.compute_out_of_sample(_links()["models"][model])[framework][batch][law]


def _pc(x: float, sign: bool = True) -> str:
    """A share as the page words it, in %: '+72', '-3', '0'."""
    n = round(100 * x)
    return f"{n:+d}" if sign and n else str(n)


@functools.cache
def _across(framework: str) -> tuple[str, str, str]:
    """cpu-2core-scaling.md's cross-run ratio: the 2-node row's samples/s against the strong
    run's 1-device native row's."""
    one = _cells(SC, 0, "samples/s", framework=framework, mode="native", devices="1")[0]
    two = _cells(SC, 2, "samples/s", framework=framework)[0]
    return f"{one:,.0f}", f"{two:,.0f}", _f(two / one)


@functools.cache
def _compare(folder: str) -> list[dict]:
    return [r for r in load_records(RESULTS / folder) if r["status"] == "ok"]


def _default_run(pattern: str) -> str:
    """A figure of cpu-2core-default.md's header (the run's report.md; no records kept)."""
    import re
    return re.search(pattern, (RESULTS / "cpu-2core-default.md").read_text()).group(1)


@functools.cache
def _typed_table(page: str, index: int) -> list[dict]:
    """The index-th table of a page without records (its run's report typed in), as rows
    of {header: cell}: the prose around it derives its figures from it."""
    tables, block = [], []
    for line in [*(RESULTS / page).read_text().splitlines(), ""]:
        if line.startswith("|") and set(line) - set("|- :"):
            block.append([c.strip() for c in line.strip("|").split("|")])
        elif not line.startswith("|") and block:
            tables.append([dict(zip(block[0], r)) for r in block[1:]])
            block = []
    return tables[index]


def _cells(page: str, index: int, column: str, **where) -> list[float]:
    return [float(r[column].replace(",", "").rstrip("%")) for r in _typed_table(page, index)
            if all(r[k] == v for k, v in where.items())]


def _both(framework: str, model: str, cls: str = "step", digits: int = 0, f=None) -> str:
    """A framework's span over its profiled modes in cpu-2core-profile/ (f: a function of
    the row instead of one class)."""
    rows = [k for k in _profiles(PROF) if k.startswith(f"{framework} ") and k.endswith(f" {model}")
            and k.split()[1] in MODES]
    return _span([f(PROF, k) if f else _ms(PROF, k, cls) for k in rows], digits)


def _conv_grad(folder: str, row: str) -> float:
    return _conv(folder, row) - _ms(folder, row, "conv forward")


def _the(values) -> str:
    """The one value every record gives (several, joined, where they differ)."""
    return "/".join(sorted({str(v) for v in values}))


VS, VS_AMD = "cpu-2core-vit-splits/vit", "cpu-2core-vit-splits-amd-avx512/vit"
# the EPYC page's first run of its command (20 minutes before its records), kept for its spread
VS_AMD_FIRST = "cpu-2core-vit-splits-amd-avx512/first-run"


@functools.cache
def _split_rows(folder: str) -> dict[tuple[str, str, int], dict]:
    """A split page's compare rows (runs.summarize) by (framework, mode, devices)."""
    from common.reports import runs
    records = load_records(RESULTS / folder)
    return {(r["framework"], r["mode"], r["devices"]): row
            for r, row in zip(records, runs.summarize(records)) if row["status"] == "ok"}


def _vs(framework: str, mode: str, devices: int, folder: str = VS_AMD) -> float:
    return _split_rows(folder)[framework, mode, devices]["sec/epoch"]


def _spread_hi() -> float:
    """The most one of the EPYC split page's first run's rows took over the kept run's."""
    return max(_vs(*k, folder=VS_AMD_FIRST) / v["sec/epoch"] for k, v in _split_rows(VS_AMD).items())


def _splits_table(folder: str) -> list[dict]:
    """A split page's table "One model split over the devices" (common/reports/splits.py)."""
    from common.reports import splits
    return splits.rows(load_records(RESULTS / folder))


# the frameworks whose own tensor parallelism runs on 2 CPU devices
TP_OWN = ("pytorch", "tensorflow", "paddle", "jax", "keras-jax")
WORDS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "paddle": "Paddle", "jax": "JAX",
         "keras-jax": "Keras on JAX", "mxnet": "MXNet"}


def _names(frameworks: list[str]) -> str:
    """'A, B, C and D' in the pages' words."""
    words = [WORDS[f] for f in frameworks]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


VSL, VSL_AMD = "vit-splits-links", "vit-splits-links-amd-avx512"


@functools.cache
def _splits(folder: str = VSL) -> tuple[dict, dict, dict]:
    """cpu-2core-vit-splits-links.md's rows (or the EPYC's page's, VSL_AMD) by (split,
    nodes, rate), its predictions (fitted at 100mbit) the same way, and the probe's link
    efficiency at 100mbit."""
    from common.reports import links
    data = links.load(RESULTS / folder)
    m = data["models"]["vit"]
    rows = {(r.mode, r.nodes, r.rate): r for r in m["rows"] if r.ok}
    preds = {(p["row"].mode, p["row"].nodes, p["row"].rate): p
             for p in links.predictions(data, "100mbit") if "why" not in p}
    return rows, preds, {"eff": links.link_efficiency(m, "vit", "100mbit"),
                         "t1": dict(m["compute"]["pytorch"])[m["batch"]]}


def _step(*key, folder: str = VSL) -> str:
    from common.reports import links
    return links._ms(_splits(folder)[0][key].step)


def _sent_mb(mode: str, nodes: int, folder: str = VSL) -> str:
    """The span of a split's busiest node's MB a step over its rates, '0.87' where one."""
    sent = [max(r.sent()) / 1e6 for k, r in _splits(folder)[0].items() if k[:2] == (mode, nodes)]
    lo, hi = f"{min(sent):.2f}", f"{max(sent):.2f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _beyond(*key, folder: str = VSL) -> str:
    """A row's step beyond its link's time (step - t2 calculated), in ms."""
    from common.launch import netns
    from common.reports import links
    row, eff = _splits(folder)[0][key], _splits(folder)[2]["eff"]
    return f"{1e3 * (row.step - links.row_exchange_bytes(row) / (eff * netns.rate_bits(row.rate) / 8)):.0f}"


def _calc_mb(mode: str, nodes: int) -> str:
    """A split's calculated MB a node a step (64 images a node)."""
    from common.reports import links
    return f"{links.split_bytes('vit', mode, nodes, 64 * nodes) / 1e6:.2f}"


def _tp_bytes() -> float:
    from common.reports import links
    return links.split_bytes("vit", "tp", 2, 128)


def _pct_of(key, what="err", folder: str = VSL) -> str:
    n = round(100 * _splits(folder)[1][key][what])
    return f"{n:+d}" if what == "err" else str(n)


@functools.cache
def _json(folder: str, name: str) -> dict:
    import json
    return json.loads((RESULTS / folder / name).read_text())


def _loss_gaps(run: str) -> dict[str, float]:
    """Each framework's setting arm's largest relative gap from its defaults' first 10 step losses."""
    arms = _arms(run)
    base = {r["framework"]: r["step_losses"][:10] for r in arms if not r["settings"]}
    return {r["framework"]: max(abs(a / b - 1) for a, b in zip(r["step_losses"][:10], base[r["framework"]]))
            for r in arms if r["settings"]}


def _lim(framework: str) -> dict:
    """A links-best group's t1, t2 and steps (s), as its 'Across nodes' table takes them."""
    return _group(LB, framework)["limits"]


def _x_max(framework: str, step: str = "step_default") -> str:
    lim = _lim(framework)
    return _f(lim[step] / max(lim["t1"], lim["t2"]))


def _beyond_t1_t2(framework: str, step: str = "step_default") -> str:
    """A step less t1 and t2, in ms: '+83'."""
    lim = _lim(framework)
    return f"{1e3 * (lim[step] - lim['t1'] - lim['t2']):+.0f}"


def _node_arms(framework: str | None = None, settings: list | None = None) -> list[dict]:
    """links-best's node runs (not its t1 runs), of one framework and arm where given."""
    return [r for r in _arms(LB) if r.get("link") and framework in (None, r["framework"])
            and (settings is None or r["settings"] == settings)]


def _sent(record: dict) -> list[float]:
    """Each node's bytes sent a timed step (the record's link counters)."""
    link = record["link"]
    return [t / link["timed_steps"] for t in link["tx_bytes"]]


def _vit_shape() -> tuple[int, int]:
    """The default ViT's width and tokens an image (common/models/vit.py)."""
    from common import models
    m = models.get("vit")
    return m.SIZE["width"], m.TOKENS


def _c(x: float) -> str:
    """A figure in thousands as the pages word it: '3,384'."""
    return f"{x:,.0f}"


def _cspan(values) -> str:
    return f"{_c(min(values))}-{_c(max(values))}"


def _e(x: float, digits: int = 1) -> str:
    """A small figure as the pages word it: '6.8e-3'."""
    return f"{x:.{digits}e}".replace("e-0", "e-")


def _first_gaps(run: str, n: int, keep=lambda settings: True) -> list[float]:
    """Each setting arm's largest relative gap from its row's defaults' first repeat's first n
    step losses (common/reports/decisions.py agreement), of the arms whose settings keep takes."""
    arms, base = _arms(run), {}
    for r in arms:
        if not r["settings"]:
            base.setdefault((r["framework"], r["mode"]), r["step_losses"][:n])
    return [max(abs(a / b - 1) for a, b in zip(r["step_losses"][:n], base[r["framework"], r["mode"]]))
            for r in arms if r["settings"] and keep(r["settings"])]


def _pairs(run: str, step: int, frameworks) -> list[float]:
    """The frameworks' defaults' losses at one step (0 the first), each pair's relative gap."""
    import itertools
    loss = {r["framework"]: r["step_losses"][step] for r in _arms(run) if not r["settings"]}
    return [abs(loss[a] / loss[b] - 1) for a, b in itertools.permutations(frameworks, 2)]


def _gain(folder: str, row: str, base: str, *classes: str) -> float:
    """A profiled row's ms over another's in some classes (the step where none), in s."""
    return sum(_ms(folder, row, c) - _ms(folder, base, c) for c in classes or ("step",)) / 1e3


def _jv(version: str, mode: str, model: str, ynn: bool = False) -> str:
    """A cpu-2core-jax-versions-profile row: 'jax 0.10.2 native +ynn-fusion-off lenet'."""
    return f"jax {version} {mode}{' +ynn-fusion-off' if ynn else ''} {model}"


def _jvs(f, versions, modes=("scratch", "native"), model: str = "lenet") -> list[float]:
    """f(round's folder, row) for each round and each (version, ynn) of versions, in each mode."""
    return [f(r, _jv(v, m, model, y)) for r in JV for m in modes for v, y in versions]


@functools.cache
def _rows(folder: str) -> dict[tuple[str, str], dict]:
    """A compare folder's report rows (runs.summarize: 'sec/epoch', 'spread', 'test acc', ...)
    by (framework, mode), each with its record's own fields beside them."""
    from common.reports import runs
    records = load_records(RESULTS / folder)
    return {(r["framework"], r["mode"]): {**r, **row} for r, row in zip(records, runs.summarize(records))
            if row["status"] == "ok"}


def _size(size: str, framework: str, key: str = "sec/epoch") -> float:
    """cpu-2core-vit-sizes.md: one size's native row of one framework."""
    return _rows(f"cpu-2core-vit-sizes/{size}")[framework, "native"][key]


def _one(values, digits: int = 2) -> str:
    """A span, or its one value where both ends read the same."""
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _model(name: str):
    from common import models
    return models.get(name)


def _vit_tokens(name: str) -> int:
    return _model(name).TOKENS


def _under(x: float, step: float, digits: int = 0) -> str:
    """The round figure a prose 'under' or 'within' names: the least multiple of step above x."""
    import math
    return f"{step * (math.floor(x / step) + 1):.{digits}f}"


def _pred(report: str, index: int, **where) -> list[dict]:
    """A table of a predictor report (docs/results/predictor/, what tests/test_predict.py
    regenerates from the records beside it): its rows, as {header: cell}, where cells match."""
    return [r for r in _typed_table(f"predictor/{report}", index) if all(r[k] == v for k, v in where.items())]


def _pc_cells(rows: list[dict], column: str = "error") -> list[int]:
    return [int(r[column].rstrip("%")) for r in rows]


@functools.cache
def _pred_scores(report: str) -> dict[str, tuple[str, str, str]]:
    """A predictor report's summary line: each term's (rows, within 20 %, median |error| %)."""
    import re
    line = (RESULTS / "predictor" / report).read_text().split("## Predicted against measured", 1)[1]
    return {m[1].strip(): (m[3], m[2], m[4]) for m in re.finditer(
        r"(t1 alone|t2 alone|whole step|with t2 = 0)[^:]*: (\d+) of (\d+) within 20 %, median \|error\| (\d+)%", line)}


def _pred_over(report: str) -> float:
    """PyTorch's ResNet-18 at batch 4 on 2 devices: its measured step beyond its predicted t1, in ms."""
    r = _pred(report, 3, model="resnet18", framework="pytorch", nodes="1", batch="4")[0]
    return float(r["measured ms"]) - float(r["t1 ms"])


def _gelu_grid() -> tuple[str, str, str]:
    """The points the vit_defaults worker measures each GELU on (its GRID, read from its source:
    importing the worker would import SciPy): low, high, count."""
    import re
    source = (RESULTS.parent.parent / "benchmarks" / "workers" / "vit_defaults.py").read_text()
    return re.search(r"GRID = np\.linspace\((-?\d+), (-?\d+), (\d+)\)", source).groups()


def _vit_defaults_report():
    from common.reports import vit_defaults
    return vit_defaults


def _started(run: str) -> str:
    """When a settings run started (its settings.json 'measured'; the first of joined runs)."""
    return _json(run, "settings.json")["measured"].split(" and ")[0]


def _ynn_gain(folder: str, mode: str, model: str, *classes: str) -> float:
    """JAX 0.10.2's ms a step over its `ynn-fusion-off` row's in some classes (the profiled
    step where none), in one round of cpu-2core-jax-versions-profile/."""
    return sum(_ms(folder, _jv("0.10.2", mode, model), c) - _ms(folder, _jv("0.10.2", mode, model, True), c)
               for c in classes or ("step",))


def _tens(x: float) -> str:
    """A figure to the nearest ten, as the pages word a rough one: '110'."""
    return f"{round(x, -1):.0f}"


def _f(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def _span(values, digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


STEP, DENSE = "**step** (every class at its bound)", ("dense forward", "dense backward")
BL, BP, PN = "cpu-2core-best/lenet", "cpu-2core-best/profile", "cpu-2core-best/paddle-native"
JV = ("cpu-2core-jax-versions-profile/1", "cpu-2core-jax-versions-profile/2")
CONV = ("conv forward", "conv backward", "conv backward input", "conv backward weight")
PROF, SC, VD = "cpu-2core-profile", "cpu-2core-scaling.md", "cpu-2core-vit-default/vit"
MODES = ("scratch", "native")
TFN, KTO, KTR = "tensorflow native lenet", "keras-torch native lenet", "keras-torch native resnet18"
JAXBEST = ("jax scratch +ynn-fusion-off lenet", "jax native +ynn-fusion-off lenet",
           "keras-jax native +ynn-fusion-off lenet")
PT, PTC, MX, PD, PDS = ("pytorch native vit", "pytorch native +compiled vit", "mxnet native vit",
                        "paddle native vit", "paddle native +to-static vit")
LB = "cpu-2core-links-best/lenet-10mbit"
BF, BF4, BFP = "cpu-2core-bf16/lenet-native", "cpu-2core-bf16/native-repeat4", "cpu-2core-bf16/profile-keras-jax"
BF_TORCH = (("pytorch", "bf16-autocast"), ("keras-torch", "mixed-bf16"))
BFR = ("keras-jax native lenet", "keras-jax native +mixed-bf16 lenet")
R18, R18KJ, R18PB, R18B, PR = ("cpu-2core-best/resnet18", "cpu-2core-best/resnet18-keras-jax",
                               "cpu-2core-best/resnet18-pytorch-bf16", "cpu-2core-best/resnet18-bf16",
                               "cpu-2core-best/profile-resnet18")
MXR, YNN, JDEF = ("mxnet native resnet18", ("jax native +ynn-fusion-off resnet18", "keras-jax native +ynn-fusion-off resnet18"),
                  ("jax native resnet18", "keras-jax native resnet18"))
PDR = ("paddle native resnet18", "paddle native +to-static resnet18", "paddle native +onednn resnet18")
CS = "cpu-2core-settings/jax-lenet"
H, HS = "h100-profile", "h100-settings/pytorch-lenet"
HL, HR = "h100-default/lenet", "h100-default/resnet18"
VIT_DEFAULTS = ("oracle", "pytorch", "tensorflow", "mxnet", "paddle", "jax", "keras-tensorflow", "keras-jax",
                "keras-torch")
TORCH_JAX, VIT_SIZES = ("pytorch", "jax"), ("vit", "vit_w128", "vit_p4", "vit_p4w128")
PROSE_FIGURES = [
    # cpu-2core-vit-best.md, "What it shows": the settings run's decisions
    ("cpu-2core-vit-best.md", "PyTorch's defaults are the fastest best ({} s/epoch; `compiled` {}x",
     lambda: (_f(_fastest_best(VB)), _f(_decision(VB, "pytorch", "compiled")["ratio"]))),
    ("cpu-2core-vit-best.md", "Keras on TensorFlow with `xla` ({}, {}x its defaults, p {})",
     lambda: (_f(_best(VB, "keras-tensorflow")), _f(_decision(VB, "keras-tensorflow", "xla")["ratio"]),
              _p(_decision(VB, "keras-tensorflow", "xla")))),
    ("cpu-2core-vit-best.md", "Keras on torch ({}) and TensorFlow ({}): within 1.5x",
     lambda: (_f(_best(VB, "keras-torch")), _f(_best(VB, "tensorflow")))),
    ("cpu-2core-vit-best.md", "Not within it: Keras on JAX ({}, {}x), JAX ({}, {}x), MXNet ({}, {}x) "
     "and Paddle with `to-static` ({}, {}x; {}x its defaults, p {})",
     lambda: (*(s for fw in ("keras-jax", "jax", "mxnet", "paddle")
                for s in (_f(_best(VB, fw)), _f(_best(VB, fw) / _fastest_best(VB)))),
              _f(_decision(VB, "paddle", "to-static")["ratio"]), _p(_decision(VB, "paddle", "to-static")))),
    ("cpu-2core-vit-best.md", "PyTorch's `compiled` is kept ({} against {} s/epoch, {}x, p {} at 6 repeats)",
     lambda: (_f(_best(VBC, "pytorch")), _f(_decision(VBC, "pytorch", "compiled")["sec_default"]),
              _f(_decision(VBC, "pytorch", "compiled")["ratio"]), _p(_decision(VBC, "pytorch", "compiled")))),
    ("cpu-2core-vit-best.md", "Keras on TensorFlow's best is {}x and Keras on torch's {}x",
     lambda: tuple(_f(_best(VB, fw) / _best(VBC, "pytorch")) for fw in ("keras-tensorflow", "keras-torch"))),
    ("cpu-2core-vit-best.md", "PyTorch's autocast {}x, Keras on torch's `mixed-bf16` {}x, TensorFlow's "
     "oneDNN bfloat16 {}x, Keras on TensorFlow's {}x, Keras on JAX's {}x",
     lambda: tuple(_f(_decision(VB, fw, s)["ratio"]) for fw, s in (
         ("pytorch", "bf16-autocast"), ("keras-torch", "mixed-bf16"), ("tensorflow", "onednn-bf16"),
         ("keras-tensorflow", "mixed-bf16"), ("keras-jax", "mixed-bf16")))),
    ("cpu-2core-vit-best.md", "costs the ViT {}x (Keras on JAX {}x); XLA costs TensorFlow {}x but gains "
     "Keras on TensorFlow {}x",
     lambda: tuple(_f(_decision(VB, fw, s)["ratio"]) for fw, s in (
         ("jax", "ynn-fusion-off"), ("keras-jax", "ynn-fusion-off"), ("tensorflow", "xla"),
         ("keras-tensorflow", "xla")))),
    ("cpu-2core-vit-best.md", "every product is {} wide ({:,} x {} by {} x {} for a projection, a calculation)",
     lambda: (lambda width, tokens: (width, 256 * tokens, width, width, width))(*_vit_shape())),
    ("cpu-2core-vit-best.md", "Its `onednn` setting ({}x, undecided)",
     lambda: (_f(_decision(VB, "paddle", "onednn")["ratio"]),)),
    # its roofline and op classes: the profile run's records
    ("cpu-2core-vit-best.md", "is {} ms ({} GFLOP at the measured {} GFLOP/s sgemm peak, the "
     "memory-bound classes at the measured {} GB/s copy)",
     lambda: (_roofline(VBP, "vit")[STEP]["bound ms"],
              _f(float(_roofline(VBP, "vit")[STEP]["MFLOP (calc.)"]) / 1e3),
              *_limits(VBP))),
    ("cpu-2core-vit-best.md", "The fastest step, PyTorch compiled, takes {} ms profiled ({} without the "
     "profiler): **{}x its roofline",
     lambda: (_f(_ms(VBP, PTC), 1), _f(_profiles(VBP)[PTC]["profile"]["plain_step_ms"], 1),
              _over(VBP, "vit", STEP, PTC[:-4]))),
    ("cpu-2core-vit-best.md", "the dense products, {} ms against a bound of {} ({}x: products 64 wide "
     "run at {} GFLOP/s",
     lambda: (_f(_ms(VBP, PTC, "dense forward") + _ms(VBP, PTC, "dense backward"), 1),
              _f(_bound(VBP, "vit", *DENSE), 1),
              _f((_ms(VBP, PTC, "dense forward") + _ms(VBP, PTC, "dense backward"))
                 / _bound(VBP, "vit", *DENSE), 1),
              _span([_achieved(VBP, "vit", c, r) for c in DENSE
                     for r in ("pytorch native", "pytorch native +compiled")
                     if _ms(VBP, f"{r} vit", c)], 0))),
    ("cpu-2core-vit-best.md", "attention, {} ms against {} ({}x:",
     lambda: (_f(_ms(VBP, PTC, "attention"), 1), _f(_bound(VBP, "vit", "attention"), 1),
              _over(VBP, "vit", "attention", PTC[:-4]))),
    ("cpu-2core-vit-best.md", "TensorFlow's attention written out as two batched products and a "
     "softmax takes {} ms, {}x its bound",
     lambda: (_f(_ms(VBP, "tensorflow native vit", "attention"), 1),
              _over(VBP, "vit", "attention", "tensorflow native"))),
    ("cpu-2core-vit-best.md", "and {} ms outside any op, where",
     lambda: (_f(_ms(VBP, PTC, "outside any op"), 1),)),
    ("cpu-2core-vit-best.md", "Eager PyTorch shows them: LayerNorm {} ms ({}x its bound), GELU {} ms "
     "({}x), copies {} ms, other elementwise ops {} ms",
     lambda: (_f(_ms(VBP, PT, "layernorm"), 1), _over(VBP, "vit", "layernorm", PT[:-4]),
              _f(_ms(VBP, PT, "gelu"), 1), _over(VBP, "vit", "gelu", PT[:-4]),
              _f(_ms(VBP, PT, "copies and layout"), 1), _f(_ms(VBP, PT, "other named ops"), 1))),
    ("cpu-2core-vit-best.md", "against PyTorch compiled's {} ms): JAX ({} ms) and Keras on JAX ({}) "
     "lose most in *copies and layout* ({} and {} ms",
     lambda: (_f(_ms(VBP, PTC), 1), _f(_ms(VBP, "jax native vit"), 1), _f(_ms(VBP, "keras-jax native vit"), 1),
              _f(_ms(VBP, "jax native vit", "copies and layout"), 1),
              _f(_ms(VBP, "keras-jax native vit", "copies and layout"), 1))),
    ("cpu-2core-vit-best.md", "the dense backward ({} ms in JAX, {}x its bound) and LayerNorm ({} and "
     "{} ms, {}x and {}x its memory bound",
     lambda: (_f(_ms(VBP, "jax native vit", "dense backward"), 1),
              _over(VBP, "vit", "dense backward", "jax native"),
              _f(_ms(VBP, "jax native vit", "layernorm"), 1), _f(_ms(VBP, "keras-jax native vit", "layernorm"), 1),
              _over(VBP, "vit", "layernorm", "jax native"), _over(VBP, "vit", "layernorm", "keras-jax native"))),
    ("cpu-2core-vit-best.md", "MXNet ({}) in *LayerNorm*, {} ms, {}x its bound and {} % of its step",
     lambda: (_f(_ms(VBP, MX), 1), _f(_ms(VBP, MX, "layernorm"), 1),
              _f(_ms(VBP, MX, "layernorm") / _bound(VBP, "vit", "layernorm"), 0),
              _f(100 * _ms(VBP, MX, "layernorm") / _ms(VBP, MX), 0))),
    ("cpu-2core-vit-best.md", "and attention, {} ms (d2l's `batch_dot`",
     lambda: (_f(_ms(VBP, MX, "attention"), 1),)),
    ("cpu-2core-vit-best.md", "Paddle ({} with `to-static`, {} at its defaults) in *other named ops* "
     "({} ms: its elementwise kernels",
     lambda: (_f(_ms(VBP, PDS), 1), _f(_ms(VBP, PD), 1),
              _span([_ms(VBP, r, "other named ops") for r in (PD, PDS)], 0))),
    ("cpu-2core-vit-best.md", "*copies and layout* ({} ms at its defaults, {} with `to-static`), the "
     "dense products ({} ms, {}x their bound) and LayerNorm ({} ms, {}x)",
     lambda: (_f(_ms(VBP, PD, "copies and layout"), 1), _f(_ms(VBP, PDS, "copies and layout"), 1),
              _span([sum(_ms(VBP, r, c) for c in DENSE) for r in (PD, PDS)], 0),
              _span([float(_over(VBP, "vit", c, r[:-4])) for c in DENSE for r in (PD, PDS)], 0),
              _span([_ms(VBP, r, "layernorm") for r in (PD, PDS)], 0),
              _span([float(_over(VBP, "vit", "layernorm", r[:-4])) for r in (PD, PDS)], 0))),
    ("cpu-2core-vit-best.md", "Keras on TensorFlow with `xla` has {} % of its op time unmapped",
     lambda: (_f(100 * _profiles(VBP)["keras-tensorflow native +xla vit"]["profile"]["unmapped_share"], 1),)),
    ("cpu-2core-vit-best.md", "An epoch of the synthetic set is {} steps of 256 (its {} images: "
     "`--steps-per-epoch 150` caps nothing), {} s",
     lambda: (_the(n for r in _arms(VB) for n in r["steps_per_epoch"]),
              _the(f"{n * r['batch_size']:,}" for r in _arms(VB) for n in r["steps_per_epoch"]),
              _span([t for r in _arms(VB) for t in r["sec_per_epoch"]], 1))),
    ("cpu-2core-vit-best.md", "(most of each ResNet-18 step: {} % of JAX's, {} % of PyTorch's)",
     lambda: tuple(_f(100 * _conv(PROF, f"{fw} native resnet18") / _ms(PROF, f"{fw} native resnet18"), 0)
                   for fw in ("jax", "pytorch"))),
    ("cpu-2core-vit-best.md", "with {} ms of convolution (the patch embedding)",
     lambda: (_span([_conv(VBP, k) for k, r in _profiles(VBP).items()
                     if r["profile"]["unmapped_share"] < 0.5], 1),)),
    ("cpu-2core-vit-best.md", "rise from {}-{} of 8 (LeNet, {} and {} ms) and {}-{} (ResNet-18) to {}-{}",
     lambda: (*sorted((_rank(PROF, f"{fw} native lenet") for fw in ("jax", "keras-jax"))),
              *sorted(_f(_ms(PROF, f"{fw} native lenet"), 0) for fw in ("jax", "keras-jax")),
              *sorted(_rank(PROF, f"{fw} native resnet18") for fw in ("jax", "keras-jax")),
              *sorted(_rank(VBP, f"{fw} native vit") for fw in ("jax", "keras-jax")))),
    ("cpu-2core-vit-best.md", "({} of JAX's {} ms on LeNet, {} of {} on ResNet-18)",
     lambda: tuple(_f(f(PROF, f"jax native {m}"), 0) for m in ("lenet", "resnet18") for f in (_conv, _ms))),
    ("cpu-2core-vit-best.md", "falls from {} on ResNet-18 ({} ms, its oneDNN convolutions the fastest) to {}",
     lambda: (_rank(PROF, "mxnet native resnet18"), _f(_ms(PROF, "mxnet native resnet18"), 0), _rank(VBP, MX))),
    ("cpu-2core-vit-best.md", "stays near the top ({} on LeNet, {} on ResNet-18, {} here)",
     lambda: (_rank(PROF, "tensorflow native lenet"), _rank(PROF, "tensorflow native resnet18"),
              _rank(VBP, "tensorflow native vit"))),
    ("cpu-2core-vit-best.md", "*PyTorch* leads on ResNet-18 and the ViT ({} on LeNet)",
     lambda: (_rank(PROF, "pytorch native lenet"),)),
    ("cpu-2core-vit-best.md", "(dense backward at {} GFLOP/s eager)",
     lambda: (_f(_achieved(VBP, "vit", "dense backward", "pytorch native"), 0),)),
    ("cpu-2core-vit-best.md", "*Paddle* is last on ResNet-18 and the ViT ({} on LeNet)",
     lambda: (_rank(PROF, "paddle native lenet"),)),
    # cpu-2core-best.md, "What it shows": the float32 run, its follow-ups, its profile
    ("cpu-2core-best.md", "every default mode: {} runs, 22:35-23:38 UTC",
     lambda: (str(len(_arms(BL))),)),
    ("cpu-2core-best.md", "PyTorch native keeps `compiled`, {}x, over `bf16-autocast`'s {}x",
     lambda: (_f(_decision("cpu-2core-best/pytorch-native", "pytorch", "compiled")["ratio"]),
              _f(_decision("cpu-2core-bf16/native-repeat4", "pytorch", "bf16-autocast")["ratio"]))),
    ("cpu-2core-best.md", "scratch {} s/epoch ({}x its eager default, p {}), native {} ({}x, p {}, in "
     "the 4-repeat run; in the main run {}, undecided at 2 repeats)",
     lambda: (_f(_best(BL, "pytorch", "scratch")), _f(_decision(BL, "pytorch", "compiled", "scratch")["ratio"]),
              _p(_decision(BL, "pytorch", "compiled", "scratch")),
              _f(_best("cpu-2core-best/pytorch-native", "pytorch")),
              _f(_decision("cpu-2core-best/pytorch-native", "pytorch", "compiled")["ratio"]),
              _p(_decision("cpu-2core-best/pytorch-native", "pytorch", "compiled")),
              _f(_decision(BL, "pytorch", "compiled")["sec"]))),
    ("cpu-2core-best.md", "TensorFlow's defaults are already its best ({}; XLA is {}x slower), Keras "
     "on TensorFlow {}. These five rows are within the aim of 1.5x of the fastest best; PyTorch "
     "native's eager default at {} is at {}x",
     lambda: (_span([_best(BL, "tensorflow", m) for m in MODES]),
              _span([_decision(BL, "tensorflow", "xla", m)["ratio"] for m in MODES]),
              _f(_best(BL, "keras-tensorflow")), _f(_best(BL, "pytorch")),
              _f(_best(BL, "pytorch") / _fastest_best(BL)))),
    ("cpu-2core-best.md", "takes JAX from {} to {} s/epoch ({}x, p {}) and Keras on JAX from {} to {} "
     "({}x, p {}): {}x and {}x the fastest best",
     lambda: (_span([_decision(BL, "jax", "ynn-fusion-off", m)["sec_default"] for m in MODES], 1),
              _the(_f(_best(BL, "jax", m), 1) for m in MODES),
              _span([_decision(BL, "jax", "ynn-fusion-off", m)["ratio"] for m in MODES]),
              _ps(*(_decision(BL, "jax", "ynn-fusion-off", m) for m in MODES)),
              _f(_decision(BL, "keras-jax", "ynn-fusion-off")["sec_default"], 1), _f(_best(BL, "keras-jax"), 1),
              _f(_decision(BL, "keras-jax", "ynn-fusion-off")["ratio"]),
              _p(_decision(BL, "keras-jax", "ynn-fusion-off")),
              _f(max(_best(BL, "jax", m) for m in MODES) / _fastest_best(BL)),
              _f(_best(BL, "keras-jax") / _fastest_best(BL)))),
    ("cpu-2core-best.md", "convolutions, forward {} and backward {} against {} and {} (oneDNN); average "
     "pooling {} (JAX) against {}; copies and layout {} (JAX) against {}; and Keras's optimizer update "
     "on JAX, {} against {}",
     lambda: (_span([_ms(BP, r, "conv forward") for r in JAXBEST], 1),
              _span([_ms(BP, r, "conv backward") for r in JAXBEST], 1),
              _f(_ms(BP, TFN, "conv forward"), 1), _f(_conv(BP, TFN) - _ms(BP, TFN, "conv forward"), 1),
              _span([_ms(BP, r, "pooling") for r in JAXBEST[:2]], 1), _f(_ms(BP, TFN, "pooling"), 1),
              _span([_ms(BP, r, "copies and layout") for r in JAXBEST[:2]], 1),
              _f(_ms(BP, TFN, "copies and layout"), 1),
              _f(_ms(BP, JAXBEST[2], "optimizer update"), 1), _f(_ms(BP, TFN, "optimizer update"), 1))),
    ("cpu-2core-best.md", "**Keras on torch ({}, {}x)**: its convolutions are as fast as TensorFlow's ({} "
     "forward, {} backward); the gap is torch's average pooling ({} ms a step against TensorFlow's {}, "
     "and PyTorch's own {}), activation {}, copies {} and Keras's layers outside any op {}. Its "
     "`compiled` (torch.compile through Keras) is slower, {} against {} (p {})",
     lambda: (_f(_best(BL, "keras-torch")), _f(_best(BL, "keras-torch") / _fastest_best(BL)),
              *(_f(_ms(BP, KTO, c), 1) for c in ("conv forward", "conv backward", "pooling")),
              _f(_ms(BP, TFN, "pooling"), 1), _f(_ms(BP, "pytorch native lenet", "pooling"), 1),
              *(_f(_ms(BP, KTO, c), 1) for c in ("activation", "copies and layout", "outside any op")),
              _f(_decision(BL, "keras-torch", "compiled")["sec"]), _f(_best(BL, "keras-torch")),
              _p(_decision(BL, "keras-torch", "compiled")))),
    ("cpu-2core-best.md", "**MXNet ({} native, {} scratch: {}x and {}x)**: convolution backward {} ms "
     "against TensorFlow's {}, pooling {} against {}, and scratch's eager ReLU {} (`hybridize` cut "
     "scratch to {}x in both runs, undecided at 2 and 3 repeats a side; still {}x the fastest best, a "
     "ratio across the two runs)",
     lambda: (*(_f(_best(BL, "mxnet", m)) for m in ("native", "scratch")),
              *(_f(_best(BL, "mxnet", m) / _fastest_best(BL)) for m in ("native", "scratch")),
              _span([_ms(BP, f"mxnet {m} lenet", "conv backward") for m in MODES], 1),
              _f(_conv(BP, TFN) - _ms(BP, TFN, "conv forward"), 1),
              _span([_ms(BP, f"mxnet {m} lenet", "pooling") for m in MODES], 1), _f(_ms(BP, TFN, "pooling"), 1),
              _f(_ms(BP, "mxnet scratch lenet", "activation"), 1),
              _the(_f(_decision(run, "mxnet", "hybridize", "scratch")["ratio"])
                   for run in (BL, "cpu-2core-best/mxnet-scratch")),
              _f(_decision("cpu-2core-best/mxnet-scratch", "mxnet", "hybridize", "scratch")["sec"]
                 / _fastest_best(BL), 1))),
    ("cpu-2core-best.md", "**Paddle ({}, {}x)**: convolutions forward {} ms and backward {} against "
     "TensorFlow's {} and {}, pooling {}, copies {}",
     lambda: (_span([_best(BL, "paddle", m) for m in MODES], 1),
              _span([_best(BL, "paddle", m) / _fastest_best(BL) for m in MODES], 1),
              *(_span([_ms(BP, f"paddle {m} lenet", c) for m in MODES], 1) for c in ("conv forward", "conv backward")),
              _f(_ms(BP, TFN, "conv forward"), 1), _f(_conv(BP, TFN) - _ms(BP, TFN, "conv forward"), 1),
              *(_span([_ms(BP, f"paddle {m} lenet", c) for m in MODES], 1) for c in ("pooling", "copies and layout")))),
    ("cpu-2core-best.md", "Paddle's epochs in this run spread {} s, the widest of any row",
     lambda: (_span([t for r in _arms(BL) if r["framework"] == "paddle" for t in r["sec_per_epoch"]], 0),)),
    ("cpu-2core-best.md", "jemalloc as PyTorch's allocator doubles its epoch ({} against {} s, p {}); XLA in "
     "TensorFlow {}x (p {}) and in Keras on TensorFlow {}x (undecided at 2 repeats); torch.compile through "
     "Keras {}x",
     lambda: (_span([_decision(BL, "pytorch", "jemalloc", m)["sec"] for m in MODES], 1),
              _span([_decision(BL, "pytorch", "jemalloc", m)["sec_default"] for m in MODES], 1),
              _ps(*(_decision(BL, "pytorch", "jemalloc", m) for m in MODES)),
              _span([_decision(BL, "tensorflow", "xla", m)["ratio"] for m in MODES]),
              _ps(*(_decision(BL, "tensorflow", "xla", m) for m in MODES)),
              _f(_decision(BL, "keras-tensorflow", "xla")["ratio"]),
              _f(_decision(BL, "keras-torch", "compiled")["ratio"]))),
    ("cpu-2core-best.md", "every run's 10th step loss is {}, and every kept setting's test accuracy is "
     "within float32's margin of its defaults' ({} against {})",
     lambda: (_span([r["step_losses"][9] for r in _arms(BL)], 5),
              _span(_kept_accuracies(BL, True), 4), _span(_kept_accuracies(BL, False), 4))),
    ("cpu-2core-best.md", "`ynn-fusion-off` {} ms a native step against 0.7.1's {})",
     lambda: tuple(_span([_plain(f, f"jax {v} native{s} lenet") for f in JV], 1)
                   for v, s in (("0.10.2", " +ynn-fusion-off"), ("0.7.1", "")))),
    ("cpu-2core-best.md", "(the defaults' repeats {}, {}, {}, {}; to-static's one low repeat {} among "
     "{}; onednn's {} among {})",
     lambda: (*_repeats(PN, []), *(x for s in ("to-static", "onednn") for x in _low_repeat(PN, [s])))),
    # cpu-2core-bf16.md, "What it shows": the bfloat16 run, its 4-repeat run, Keras on JAX's profile
    ("cpu-2core-bf16.md", "TensorFlow's LeNet at {} s/epoch against {} ({}x, p {}), Keras's `mixed_bfloat16` on "
     "TensorFlow at {} against {} ({}x, p {}): both kept",
     lambda: tuple(x for fw, st in (("tensorflow", "onednn-bf16"), ("keras-tensorflow", "mixed-bf16"))
                   for d in [_decision(BF, fw, st)]
                   for x in (_f(d["sec"]), _f(d["sec_default"]), _f(1 / d["ratio"]), _p(d)))),
    ("cpu-2core-bf16.md", "**PyTorch and Keras on torch are faster too: {}x the time each, decided at 4 repeats.**",
     lambda: (_the(_f(_decision(BF4, fw, st)["ratio"]) for fw, st in BF_TORCH),)),
    ("cpu-2core-bf16.md", "(bf16-autocast {} against {} s/epoch, Keras's policy {} against {}: each defaults' arm "
     "had one slow first epoch, {} and {} s against {})",
     lambda: (*(x for fw, st in BF_TORCH for d in [_decision(BF, fw, st)] for x in (_f(d["sec"]), _f(d["sec_default"]))),
              *(_f(max(t for r in _arms(BF) if (r["framework"], r["settings"]) == (fw, []) for t in r["sec_per_epoch"]))
                for fw, _ in BF_TORCH),
              _span(sorted(t for fw, _ in BF_TORCH for r in _arms(BF) if (r["framework"], r["settings"]) == (fw, [])
                           for t in r["sec_per_epoch"])[:-2], 1))),
    ("cpu-2core-bf16.md", "bf16-autocast {} against {} (p {}), Keras's policy on torch {} against {} (p {}): both kept",
     lambda: tuple(x for fw, st in BF_TORCH for d in [_decision(BF4, fw, st)]
                   for x in (_f(d["sec"]), _f(d["sec_default"]), _p(d)))),
    ("cpu-2core-bf16.md", "**Keras on JAX is slower in bfloat16**: {} against {} s/epoch ({}x the time, p {})",
     lambda: (lambda d: (_f(d["sec"]), _f(d["sec_default"]), _f(d["ratio"]), _p(d)))(
         _decision(BF, "keras-jax", "mixed-bf16"))),
    ("cpu-2core-bf16.md", "step goes from {} to {} ms without the profiler: convolution backward {} -> {} ms, "
     "average pooling {} -> {}, the optimizer update {} -> {} (Keras keeps float32 weights and casts them each "
     "step), activation {} -> {}; copies fall {} -> {} and convolution forward stays ({} and {})",
     lambda: (*(_f(_plain(BFP, r), 1) for r in BFR),
              *(_f(_ms(BFP, r, c), 1) for c in ("conv backward", "pooling", "optimizer update", "activation",
                                                "copies and layout", "conv forward") for r in BFR))),
    ("cpu-2core-bf16.md", "test accuracy after the 2 epochs is {} in bfloat16 against {} in float32",
     lambda: tuple(_span([r["test_accuracy"] for r in _arms(BF) if bool(r["settings"]) == bf], 4)
                   for bf in (True, False))),
    ("cpu-2core-bf16.md", "the first 10 step losses are within {}-{} % of the defaults' (bfloat16's tolerance: "
     "10 %; the 10th loss {} against {} in float32)",
     lambda: (*(f"{100 * f(_loss_gaps(BF).values()):.2g}" for f in (min, max)),
              _span([r["step_losses"][9] for r in _arms(BF) if r["settings"]], 3),
              _the(_f(r["step_losses"][9], 4) for r in _arms(BF) if not r["settings"]))),
    # cpu-2core-links-best.md, "What it shows": the run's limits (t1, t2, steps), link counters, probes
    ("cpu-2core-links-best.md", "its defaults' step is {} ms against t1 = {} and t2 = {} ({}x). The others, at "
     "their best: TensorFlow {}x, Paddle {}x, JAX {}x, MXNet {}x ({}x at its defaults)",
     lambda: (*(_f(1e3 * _lim("pytorch")[k], 0) for k in ("step_default", "t1", "t2")), _x_max("pytorch"),
              *(_x_max(fw, "step_best") for fw in ("tensorflow", "paddle", "jax", "mxnet")), _x_max("mxnet"))),
    ("cpu-2core-links-best.md", "Each node sent {} KB a step (the records' `link`), the probe {} KB an all-reduce "
     "(each rank's median of its repeats)",
     lambda: (_span([x / 1e3 for r in _node_arms() if r["settings"] != ["fp16-compress"] for x in _sent(r)], 0),
              _span([statistics.median(k["tx_bytes"]) / 1e3 for p in (RESULTS / LB / "probes").glob("*.json")
                     for k in _json(f"{LB}/probes", p.name)["ranks"]], 0))),
    ("cpu-2core-links-best.md", "each step less t1 and t2: TensorFlow {} ms, JAX {} ms, MXNet {} ms at its defaults "
     "and {} ms split, Paddle {} ms, PyTorch {} ms (it hides a little)",
     lambda: (*(_beyond_t1_t2(fw) for fw in ("tensorflow", "jax", "mxnet")), _beyond_t1_t2("mxnet", "step_best"),
              *(_beyond_t1_t2(fw) for fw in ("paddle", "pytorch")))),
    ("cpu-2core-links-best.md", "(`collective-packs`) change nothing ({}x, within the noise band); its step is "
     "t1 + t2 + {} ms, so even hiding all of t1 ({} ms) would leave it at {}x",
     lambda: (_f(_decision(LB, "tensorflow", "collective-packs")["ratio"]), _beyond_t1_t2("tensorflow")[1:],
              _f(1e3 * _lim("tensorflow")["t1"], 0),
              _f((_lim("tensorflow")["step_default"] - _lim("tensorflow")["t1"]) / _lim("tensorflow")["t2"]))),
    ("cpu-2core-links-best.md", "its step is t1 + t2 to within {} ms: DataParallel hides none of its {} ms of "
     "compute (t1 is {} % of t2, so {}x). Smaller buffers (`small-buffers`, 0.25 MB) are {}x",
     lambda: (_beyond_t1_t2("paddle")[1:], _f(1e3 * _lim("paddle")["t1"], 0),
              _f(100 * _lim("paddle")["t1"] / _lim("paddle")["t2"], 0), _x_max("paddle"),
              _f(_decision(LB, "paddle", "small-buffers")["ratio"]))),
    ("cpu-2core-links-best.md", "cuts the step from {} to {} ms ({}x, p {}), and it stays {} ms above t1 + t2",
     lambda: (*(_f(1e3 * _lim("mxnet")[k], 0) for k in ("step_default", "step_best")),
              _f(_decision(LB, "mxnet", "split-big-arrays")["ratio"]), _p(_decision(LB, "mxnet", "split-big-arrays")),
              _beyond_t1_t2("mxnet", "step_best")[1:])),
    ("cpu-2core-links-best.md", "(each node sent {} KB a step against {}), so its step, {} ms, is below the float32 "
     "t2 ({}x of max(t1, t2))",
     lambda: (*(_span([x / 1e3 for r in _node_arms("pytorch", st) for x in _sent(r)], d)
                for st, d in ((["fp16-compress"], 1), ([], 0))),
              _f(1e3 * _lim("pytorch")["step_best"], 0), _x_max("pytorch", "step_best"))),
    ("cpu-2core-links-best.md", "Its 10th step loss is {} against the defaults' {} ({} relative; float16's "
     "tolerance is 2e-2). `ddp-small-buckets` (0.25 MB) is {}x",
     lambda: (lambda fp, base: (_f(fp, 5), _f(base, 5), f"{abs(fp / base - 1):.0e}".replace("e-0", "e-"),
                                _f(_decision(LB, "pytorch", "ddp-small-buckets")["ratio"])))(
         *(float(_the(_f(r["step_losses"][9], 5) for r in _node_arms("pytorch", st)))
           for st in (["fp16-compress"], [])))),
    ("cpu-2core-links-best.md", "every float32 arm's 10th step loss equals its defaults' ({}; MXNet's {} with and "
     "without the split)",
     lambda: (_the(_f(r["step_losses"][9], 5) for r in _node_arms() if r["framework"] != "mxnet"
                   and r["settings"] != ["fp16-compress"]),
              _the(_f(r["step_losses"][9], 5) for r in _node_arms("mxnet")))),
    # cpu-2core-links.md, "What it shows": the predictor's errors (common/reports/links.py)
    ("cpu-2core-links.md", "(PyTorch {}, {}, {}, {} % at 2, 2, 3, 4 nodes; TensorFlow {} %, Paddle {} %, JAX {} %)",
     lambda: (*_errs("lenet", "pytorch", "10mbit"),
              *(e for fw in ("tensorflow", "paddle", "jax") for e in _errs("lenet", fw, "10mbit")))),
    ("cpu-2core-links.md", "(a server per node {}, {}, {}, {} % at 2, 2, 3, 4 nodes; one server {}, {}, {} %)",
     lambda: (*_errs("lenet", "mxnet", "10mbit", "per-node"), *_errs("lenet", "mxnet", "10mbit", "one"))),
    ("cpu-2core-links.md", "MXNet at 1 Gbit/s, LeNet {} % (t2 {} % of the step) and ResNet-18 {} % ({} %)",
     lambda: tuple(e for m in ("lenet", "resnet18") for k in ("err", "t2_share")
                   for e in _errs(m, "mxnet", "1gbit", "per-node", k))),
    ("cpu-2core-links.md", "PyTorch's ResNet-18 at 1 Gbit/s, {} % (t2 {} %)",
     lambda: tuple(e for k in ("err", "t2_share") for e in _errs("resnet18", "pytorch", "1gbit", None, k))),
    # cpu-2core-links.md, the rest of "What it shows": the probes, compute runs and node runs
    ("cpu-2core-links.md", "LeNet's {} KB of gradients take {} ms at 10 Mbit/s against a {}-{} ms compute "
     "step: every engine's step is {} s (t1 / t2 = {}), and from 100 Mbit/s on compute dominates. "
     "ResNet-18's {} MB take {} s at 100 Mbit/s, more than its {} s step on one core, and {} ms at 1 Gbit/s",
     lambda: (_f(_p_bytes("lenet") / 1e3, 0), _f(1e3 * _lk_probe("lenet", "10mbit"), 0),
              *(f"{round(1e3 * f(_lk_t1('lenet', r.framework) for r in _lk_rows('lenet', '10mbit')), -1):.0f}"
                for f in (min, max)),
              _span([r.step for r in _lk_rows("lenet", "10mbit")], 1),
              _span([_lk_t1("lenet", r.framework) / _lk_probe("lenet", "10mbit") for r in _lk_rows("lenet", "10mbit")]),
              _f(_p_bytes("resnet18") / 1e6, 1), _f(_lk_probe("resnet18", "100mbit"), 1),
              _span([_lk_t1("resnet18", r.framework) for r in _lk_rows("resnet18", "100mbit")], 1),
              _f(1e3 * _lk_probe("resnet18", "1gbit"), 0))),
    ("cpu-2core-links.md", "a per-device batch of {} on LeNet at 10 Mbit/s, {} at 100 Mbit/s, and {} for "
     "ResNet-18 at 100 Mbit/s",
     lambda: (_rule_batches("lenet", "10mbit"), _rule_batches("lenet", "100mbit"),
              _rule_batches("resnet18", "100mbit"))),
    ("cpu-2core-links.md", "each node sent {} MB a LeNet step for 2(n-1)/n x P = {} (framing adds up to {} %), "
     "{} MB for ResNet-18's {}",
     lambda: (*(_span([s / 1e6 for r in _links()["models"][m]["rows"] if r.ok for s in r.sent()], d)
                for m, d in (("lenet", 2),)),
              _f(2 * (2 - 1) / 2 * _p_bytes("lenet") / 1e6),
              _f(100 * max(s / _p_bytes(r.model) - 1 for m in ("lenet", "resnet18")
                           for r in _links()["models"][m]["rows"] if r.ok for s in r.sent()), 0),
              _span([s / 1e6 for r in _links()["models"]["resnet18"]["rows"] if r.ok for s in r.sent()], 1),
              _f(_p_bytes("resnet18") / 1e6, 1))),
    ("cpu-2core-links.md", "(ResNet-18: {} ms, {} % of t2, at 100 Mbit/s",
     lambda: (lambda hidden: (_f(1e3 * hidden, 0), _f(100 * hidden / _lk_probe("resnet18", "100mbit"), 0)))(
         -_exposed("resnet18", "100mbit")["pytorch"] + _lk_probe("resnet18", "100mbit"))),
    ("cpu-2core-links.md", "which the unshaped rows show: {} ms a LeNet step, {} s a ResNet-18 step but "
     "Paddle's, {} s under its t1",
     lambda: (_span([1e3 * x for x in _exposed("lenet", "unshaped").values()], 0),
              _span([x for x in _exposed("resnet18", "unshaped").values() if x > 0], 1),
              _f(-_exposed("resnet18", "unshaped")["paddle"], 1))),
    ("cpu-2core-links.md", "(node 0 sent {} MB at 3 nodes, {} at 4), and its step grows with it ({}, {}, {} ms "
     "at 2, 3, 4 nodes) where the ring's stays near its 2(n-1)/n x P ({}, {}, {} ms)",
     lambda: (*(_f(_lk_ps("mxnet", n, "one").sent()[0] / 1e6) for n in (3, 4)),
              *(_f(1e3 * _lk_ps(fw, n, pl).step, 0) for fw, pl in (("mxnet", "one"), ("pytorch", None))
                for n in (2, 3, 4)))),
    ("cpu-2core-links.md", "the 800 x 128 dense weight ({} KB of {}) and its node sends P + (n - 2) x {} KB = "
     "{} MB a step, at 4 nodes {} MB",
     lambda: (lambda w: (w, _f(_p_bytes("lenet") / 1e3, 0), w,
                         *(_f(_busiest(n) / 1e6) for n in (3, 4))))(_f(4 * 800 * 128 / 1e3, 0))),
    ("cpu-2core-links.md", "Its link carried {} and {} MB; every node's measured bytes are within {}-{} % of the "
     "calculation (column \"measured / calculated\"), where the even spread's {} and {} MB were {} % and {} % off",
     lambda: (*(_f(max(_lk_ps("mxnet", n, "per-node").sent()) / 1e6) for n in (3, 4)),
              *(_f(100 * f(_ps_misfits()), 0) for f in (min, max)),
              *(_f(2 * (n - 1) / n * _p_bytes("lenet") / 1e6) for n in (3, 4)),
              *(_f(100 * (max(_lk_ps("mxnet", n, "per-node").sent()) / (2 * (n - 1) / n * _p_bytes("lenet")) - 1), 0)
                for n in (3, 4)))),
    ("cpu-2core-links.md", "MXNet's parameter server {} to {} %",
     lambda: tuple(_pc(f(p["err"] for p in _predicted() if p["row"].framework == "mxnet" and p["t2_share"] >= 0.3))
                   for f in (min, max))),
    ("cpu-2core-links.md", "against {} to {} % for a t2 = 0 model",
     lambda: tuple(_pc(f(p["err_t2_0"] for p in _predicted() if p["t2_share"] >= 0.3), sign=False)
                   for f in (max, min))),
    ("cpu-2core-links.md", "the links stay busy {} x P at 2 nodes (the step's {} x the probe's all-reduce), "
     "{} x P at 3 nodes and {} x P at 4 with a server per node, {} and {} x P with one",
     lambda: (_xp(2, "per-node"),
              _f(_exposed("lenet", "10mbit")["mxnet"] / _lk_probe("lenet", "10mbit"), 1),
              _xp(3, "per-node"), _xp(4, "per-node"), _xp(3, "one"), _xp(4, "one"))),
    ("cpu-2core-links.md", "(calculations; the busiest link's bytes alone left the 2-node rows {} %, a server "
     "per node {} and {} % at 3 and 4 nodes; the even spread {} to {} %)",
     lambda: (lambda busiest, even: (
         _pc_span([e for k, e in busiest.items() if k[0] == 2]),
         *(_pc(busiest[k], False) for k in busiest if k[:2] in ((3, "per-node"), (4, "per-node"))),
         _pc(max(even.values()), False), _pc(min(even.values()), False)))(
         _ps_err(_busiest_of), _ps_err(lambda n, pl: 2 * (n - 1) / n * _p_bytes("lenet")))),
    ("cpu-2core-links.md", "(t2 about {} s against {} s of compute)",
     lambda: (_f(2 * _lk_probe("resnet18", "100mbit"), 0),
              _span([_lk_t1("resnet18", r.framework) for r in _lk_rows("resnet18", "100mbit")], 1))),
    ("cpu-2core-links.md", "MXNet's own work a step ({} ms on LeNet's unshaped link: {} - {}) runs while its "
     "{} ms of transfer do, so its o comes out {} ms, and at 1 Gbit/s ({} ms of transfer)",
     lambda: (_f(1e3 * _exposed("lenet", "unshaped")["mxnet"], 0),
              _f(1e3 * next(r.step for r in _lk_rows("lenet", "unshaped") if r.framework == "mxnet"), 0),
              _f(1e3 * _lk_t1("lenet", "mxnet"), 1),
              _f(1e3 * _lk_probe("lenet", "100mbit") * float(_xp(2, "per-node", 9)), 0),
              _f(1e3 * _lk_pred("lenet", "mxnet", "1gbit", placement="per-node")["o"], 1),
              _f(1e3 * _lk_pred("lenet", "mxnet", "1gbit", placement="per-node")["t2"], 0))),
    ("cpu-2core-links.md", "holds DDP's hiding of {} s of communication, which at 1 Gbit/s has only {} s to hide",
     lambda: (_f(-_lk_pred("resnet18", "pytorch", "1gbit")["o"], 0),
              _f(_lk_pred("resnet18", "pytorch", "1gbit")["t2"], 1))),
    ("cpu-2core-links.md", "the line a + c x b is within {} % at the node runs' batch for every engine but JAX, "
     "**not within 20 %** for JAX: LeNet at {} {} %, ResNet-18 at {} {} %",
     lambda: (_f(100 * max(abs(_law_err(m, fw, _links()["models"][m]["batch"])) for m in ("lenet", "resnet18")
                           for fw in _links()["models"][m]["compute"] if fw != "jax"), 0),
              *(x for m in ("lenet", "resnet18") for x in (
                  _links()["models"][m]["batch"], _pc(_law_err(m, "jax", _links()["models"][m]["batch"])))))),
    ("cpu-2core-links.md", "(LeNet {}, {}, {} ms at 32, 128, 512; ResNet-18 {}, {}, {} ms at 8, 32, 64)",
     lambda: (*(_f(1e3 * _lk_t1("lenet", "jax", b) / b) for b in (32, 128, 512)),
              *(_f(1e3 * _lk_t1("resnet18", "jax", b) / b, 0) for b in (8, 32, 64)))),
    ("cpu-2core-links.md", "the power law k x b^alpha misses it too ({} %, {} %)",
     lambda: tuple(_pc(_law_err(m, "jax", _links()["models"][m]["batch"], "k b^alpha")) for m in ("lenet", "resnet18"))),
    ("cpu-2core-links.md", "takes the same t1 error back: {} % at 10 Mbit/s)",
     lambda: (_pc(_lk_pred("lenet", "jax", "10mbit")["err"]),)),
    ("cpu-2core-links.md", "the line misses by up to {} % (ResNet-18 at {}:",
     lambda: (lambda worst: (_f(100 * worst[0], 0), worst[1]))(
         max((abs(_law_err(m, fw, b)), b) for m in ("lenet", "resnet18")
             for b in [min(b for b, _ in _links()["models"][m]["compute"]["jax"])]
             for fw in _links()["models"][m]["compute"]))),
    # cpu-2core-vit-splits-links.md, "What it shows": the splits' rows and predictions
    ("cpu-2core-vit-splits-links.md", "{} ms a step at 10 Mbit/s on 2 nodes against FSDP2's {} ms and "
     "tensor parallelism's {} ms; {} ms against {} and {} ms at 1 Gbit/s",
     lambda: tuple(_step(m, 2, r) for r in ("10mbit", "1gbit") for m in ("native", "fsdp", "tp"))),
    ("cpu-2core-vit-splits-links.md", "{} MB a node a step on 2 nodes, {} MB on 4, against 4(n-1)/n x P = {} and {} MB",
     lambda: (_sent_mb("fsdp", 2), _sent_mb("fsdp", 4),
              *(_calc_mb("fsdp", n) for n in (2, 4)))),
    ("cpu-2core-vit-splits-links.md", "costs more than DDP's ({} against {} ms at 1 Gbit/s)",
     lambda: (_beyond("fsdp", 2, "1gbit"), _beyond("native", 2, "1gbit"))),
    ("cpu-2core-vit-splits-links.md", "{} MB a node a step on 2 nodes ({} times data parallelism's at 1 Gbit/s), {} MB on 4",
     lambda: (_sent_mb("tp", 2), f"{max(_splits()[0]['tp', 2, '1gbit'].sent()) / max(_splits()[0]['native', 2, '1gbit'].sent()):.0f}",
              _sent_mb("tp", 4))),
    ("cpu-2core-vit-splits-links.md", "x 4 bytes = {} MB; measured {} at 1 Gbit/s, {}-{} times it where the link is slow",
     lambda: (_calc_mb("tp", 2), f"{max(_splits()[0]['tp', 2, '1gbit'].sent()) / 1e6:.2f}",
              *(f(f"{max(_splits()[0]['tp', 2, r].sent()) / _tp_bytes():.2f}"
                  for r in ("10mbit", "100mbit")) for f in (min, max)))),
    ("cpu-2core-vit-splits-links.md", "{} ms a step beyond the link at 1 Gbit/s against DDP's {}",
     lambda: (_beyond("tp", 2, "1gbit"), _beyond("native", 2, "1gbit"))),
    ("cpu-2core-vit-splits-links.md", "spends {}-{} % of its step on the link",
     lambda: tuple(f(_pct_of((m, 2, "10mbit"), "t2_share") for m in ("native", "fsdp", "tp"))
                   for f in (min, max))),
    ("cpu-2core-vit-splits-links.md", "compute-bound (t2 {}-{} %), tensor parallelism still not ({} %)",
     lambda: (_pct_of(("native", 2, "1gbit"), "t2_share"), _pct_of(("fsdp", 2, "1gbit"), "t2_share"),
              _pct_of(("tp", 2, "1gbit"), "t2_share"))),
    ("cpu-2core-vit-splits-links.md", "within 20 % ({}-{} %) but one, tensor parallelism at 1 Gbit/s on 2 "
     "nodes ({} %, t2 {} % of its step)",
     lambda: (*(str(f(abs(round(100 * p["err"])) for k, p in _splits()[1].items()
                     if p["t2_share"] >= 0.3 and k != ("tp", 2, "1gbit"))) for f in (min, max)),
              _pct_of(("tp", 2, "1gbit")), _pct_of(("tp", 2, "1gbit"), "t2_share"))),
    ("cpu-2core-vit-splits-links.md", "folded into the fitted o ({} ms)",
     lambda: (f"{1e3 * _splits()[1]['tp', 2, '10mbit']['o']:.0f}",)),
    ("cpu-2core-vit-splits-links.md", "FSDP2 on 4 nodes at 1 Gbit/s is {} % off where its t2 is {} % of the step",
     lambda: (str(abs(round(100 * _splits()[1]["fsdp", 4, "1gbit"]["err"]))),
              _pct_of(("fsdp", 4, "1gbit"), "t2_share"))),
    # cpu-2core-vit-splits-amd-avx512.md, "What it shows": the EPYC's split rows, beside the Xeon's
    ("cpu-2core-vit-splits-amd-avx512.md", "as parameter bytes, {}-{} MB on 2 devices: each gradient is laid out as its parameter. JAX's "
     "fsdp holds {} MB, the whole gradient",
     lambda: (lambda t: (*(lambda g: (_f(min(g), 3), _f(max(g), 3)))(
         [r["grads MB/dev"] for r in t if r["devices"] == 2 and r["grads MB/dev"]
          and (r["framework"], r["mode"]) != ("jax", "fsdp")]),
                         _f(next(r["grads MB/dev"] for r in t if (r["framework"], r["mode"], r["devices"])
                                 == ("jax", "fsdp", 2)), 3)))(_splits_table(VS_AMD))),
    ("cpu-2core-vit-splits-amd-avx512.md", "put single rows at {}-{}x of these",
     lambda: (lambda r: (_f(min(r)), _f(max(r))))(
         [_vs(*k, folder=VS_AMD_FIRST) / v["sec/epoch"] for k, v in _split_rows(VS_AMD).items()])),
    ("cpu-2core-vit-splits-amd-avx512.md", "JAX {} s an epoch against {} and Keras on JAX {} against {} gain more than that spread; "
     "PyTorch's DDP ({} against {}), TensorFlow's MirroredStrategy ({} against {}), MXNet ({} against {}) and "
     "Paddle ({} against {}) are within it",
     lambda: tuple(_f(_vs(fw, "native", d)) for fw in ("jax", "keras-jax", "pytorch", "tensorflow", "mxnet", "paddle")
                   for d in (2, 1)) if all(
         (_vs(fw, "native", 1) / _vs(fw, "native", 2) > _spread_hi()) == (fw in ("jax", "keras-jax"))
         for fw in ("jax", "keras-jax", "pytorch", "tensorflow", "mxnet", "paddle")) else ("?",) * 12),
    ("cpu-2core-vit-splits-amd-avx512.md", "Megatron's cut sends {} MB a device a step here (the suite's tensor mode, counted: four all-reduces of "
     "batch x tokens x width a block), {} times the model; JAX's tp program carries {} MB",
     lambda: (lambda t: (_f(t["pytorch", "tensor"]["sent MB/step/dev"], 3),
                         f"{t['pytorch', 'tensor']['sent MB/step/dev'] / t['pytorch', 'tensor']['model MB']:.0f}",
                         _f(t["jax", "tp"]["compiled collectives MB"], 3)))(
         {(r["framework"], r["mode"]): r for r in _splits_table(VS_AMD) if r["devices"] == 2})),
    ("cpu-2core-vit-splits-amd-avx512.md", "Sharding costs {}-{}x where a compiler schedules the gathers (TensorFlow's DTensor {} s against {}, "
     "JAX {} against {}, Keras on JAX {} against {}) and {}x where FSDP2 runs them op by op over gloo "
     "({} against {})",
     lambda: (*(_f(f(_vs(fw, "fsdp", 2) / _vs(fw, "native", 2) for fw in ("tensorflow", "jax", "keras-jax")), 1)
                for f in (min, max)),
              *(_f(_vs(fw, m, 2)) for fw in ("tensorflow", "jax", "keras-jax") for m in ("fsdp", "native")),
              _f(_vs("pytorch", "fsdp", 2) / _vs("pytorch", "native", 2), 1),
              _f(_vs("pytorch", "fsdp", 2)), _f(_vs("pytorch", "native", 2)))),
    ("cpu-2core-vit-splits-amd-avx512.md", "Tensor parallelism costs {}-{}x (TensorFlow's DTensor {}, Paddle's auto-parallel {} against its {}, "
     "JAX {}, Keras on JAX {}, PyTorch's DTensor {})",
     lambda: (*(_f(f(_vs(fw, "tp", 2) / _vs(fw, "native", 2) for fw in TP_OWN), 1) for f in (min, max)),
              _f(_vs("tensorflow", "tp", 2)), _f(_vs("paddle", "tp", 2)), _f(_vs("paddle", "native", 2)),
              *(_f(_vs(fw, "tp", 2)) for fw in ("jax", "keras-jax", "pytorch")))),
    ("cpu-2core-vit-splits-amd-avx512.md", "their 1-device rows cost {}x (PyTorch) to {}x (TensorFlow",
     lambda: (lambda r: (_f(r[0][0]), _f(r[-1][0], 1)) if (r[0][1], r[-1][1]) == ("pytorch", "tensorflow")
              else ("?", "?"))(
         sorted((_vs(fw, m, 1) / _vs(fw, "native", 1), fw) for fw in ("pytorch", "tensorflow", "mxnet", "paddle", "jax")
                for m in ("sharded", "tensor")))),
    ("cpu-2core-vit-splits-amd-avx512.md", "every row both pages ran took {}-{}x as long on the Xeon",
     lambda: (lambda r: (_f(min(r)), _f(max(r))))(
         [_vs(*k, folder=VS) / v["sec/epoch"] for k, v in _split_rows(VS_AMD).items() if k in _split_rows(VS)])),
    ("cpu-2core-vit-splits-amd-avx512.md", "Tensor parallelism is the costliest own split on both in {}",
     lambda: (_names([fw for fw in TP_OWN if all(
         _vs(fw, "tp", 2, f) == max(_vs(fw, m, 2, f) for m in ("native", "fsdp", "tp") if (fw, m, 2) in _split_rows(f))
         for f in (VS, VS_AMD))]),)),
    ("cpu-2core-vit-splits-amd-avx512.md", "data parallelism there ({} against {} s, {} against {} s), are {}-{} %",
     lambda: (_f(_vs("tensorflow", "tp", 2, VS)), _f(_vs("tensorflow", "native", 2, VS)),
              _f(_vs("keras-jax", "fsdp", 2, VS)), _f(_vs("keras-jax", "native", 2, VS)),
              *(f"{100 * (f(_vs(fw, m, 2) / _vs(fw, 'native', 2) for fw, m in (('tensorflow', 'tp'), ('keras-jax', 'fsdp'))) - 1):.0f}"
                for f in (min, max)))),
    # cpu-2core-vit-splits-links-amd-avx512.md, "What it shows": the EPYC's rows, beside the Xeon's
    ("cpu-2core-vit-splits-links-amd-avx512.md", "{} ms a step at 10 Mbit/s on 2 nodes against FSDP2's {} ms "
     "and tensor parallelism's {} ms; {} ms against {} and {} ms at 1 Gbit/s",
     lambda: tuple(_step(m, 2, r, folder=VSL_AMD) for r in ("10mbit", "1gbit") for m in ("native", "fsdp", "tp"))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "FSDP2 {} MB a node a step on 2 nodes, {} MB on 4",
     lambda: (_sent_mb("fsdp", 2, VSL_AMD), _sent_mb("fsdp", 4, VSL_AMD))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "tensor parallelism {} MB on 2 nodes and {} MB on 4",
     lambda: (_sent_mb("tp", 2, VSL_AMD), _sent_mb("tp", 4, VSL_AMD))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "(t1) takes {} ms here ({} ms on the Xeon",
     lambda: tuple(f"{1e3 * _splits(f)[2]['t1']:.1f}" for f in (VSL_AMD, VSL))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "is {} % for data parallelism, {} % for FSDP2 and {} % for tensor "
     "parallelism (the Xeon's {}, {} and {} %)",
     lambda: tuple(_pct_of((m, 2, "1gbit"), "t2_share", f) for f in (VSL_AMD, VSL) for m in ("native", "fsdp", "tp"))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "DDP {} ms, FSDP2 {} ms, tensor parallelism {} ms",
     lambda: tuple(_beyond(m, 2, "1gbit", folder=VSL_AMD) for m in ("native", "fsdp", "tp"))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "within 20 % ({}-{} %), tensor parallelism at 1 Gbit/s on 2 nodes "
     "among them ({} %, t2 {} % of its step), the row the Xeon's fit missed ({} %)",
     lambda: (*(str(f(abs(round(100 * p["err"])) for p in _splits(VSL_AMD)[1].values() if p["t2_share"] >= 0.3))
                for f in (min, max)),
              _pct_of(("tp", 2, "1gbit"), folder=VSL_AMD), _pct_of(("tp", 2, "1gbit"), "t2_share", VSL_AMD),
              _pct_of(("tp", 2, "1gbit")))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "its fitted o is {} ms ({} ms on the Xeon)",
     lambda: tuple(f"{1e3 * _splits(f)[1]['tp', 2, '10mbit']['o']:.0f}" for f in (VSL_AMD, VSL))),
    ("cpu-2core-vit-splits-links-amd-avx512.md", "FSDP2 on 4 nodes at 1 Gbit/s is {} % off where its t2 is {} % of",
     lambda: (str(abs(round(100 * _splits(VSL_AMD)[1]["fsdp", 4, "1gbit"]["err"]))),
              _pct_of(("fsdp", 4, "1gbit"), "t2_share", VSL_AMD))),
    # docs/results/README.md: figures read from the pages it indexes
    ("README.md", "every row's test accuracy {}, epochs of {} s)",
     lambda: (_span([r["test_accuracy"] for r in _compare(VD)], 4),
              _span([statistics.median(r["sec_per_epoch"]) for r in _compare(VD)], 0))),
    ("README.md", "2 epochs from Glorot weights, 1 device on a CPU; {}, {})",
     lambda: (_default_run(r"Wall time of the whole run: \*\*(.+?)\*\*"),
              _default_run(r"ran\. (\d{4}-\d\d-\d\d),"))),
    # cpu-2core-scaling.md: its tables are its runs' reports typed in (no records kept);
    # the prose's ranges and cross-run ratios are held to them
    ("cpu-2core-scaling.md", "PyTorch DDP, TensorFlow (both modes) and Paddle DDP reach {} of the ideal 2; "
     "PyTorch's and Paddle's scratch modes {}", 
     lambda: (_span([x for fw, ms in (("pytorch", ("native",)), ("tensorflow", MODES), ("paddle", ("native",)))
                     for m in ms for x in _cells(SC, 0, "speed-up", framework=fw, mode=m, devices="2")]),
              _span([x for fw in ("pytorch", "paddle")
                     for x in _cells(SC, 0, "speed-up", framework=fw, mode="scratch", devices="2")]))),
    ("cpu-2core-scaling.md", "MXNet's two contexts {}; Keras's fit {} (spread {} %)",
     lambda: (_span(_cells(SC, 0, "speed-up", framework="mxnet", devices="2")),
              _f(*_cells(SC, 0, "speed-up", framework="keras", devices="2")),
              _f(*_cells(SC, 0, "spread", framework="keras", devices="2"), 0))),
    ("cpu-2core-scaling.md", "PyTorch {} -> {} samples/s ({}x), TensorFlow {} -> {} ({}x), MXNet {} -> {} "
     "({}x: one KVStore worker per node, gradients summed by the parameter servers), Paddle {} -> {} "
     "({}x), Keras {} -> {} ({}x)",
     lambda: tuple(x for fw in ("pytorch", "tensorflow", "mxnet", "paddle", "keras")
                   for x in _across(fw))),
    ("cpu-2core-scaling.md", "(its in-process MirroredStrategy row above: {}x)",
     lambda: (_f(*_cells(SC, 0, "speed-up", framework="tensorflow", mode="native", devices="2")),)),
    ("cpu-2core-scaling.md", "{} s for 64-256, {} s at 512, one run each), and batch 512, with half the "
     "updates of 256 per epoch, needs {} epochs to reach 0.7 against {}: time to accuracy {} s against {} s",
     lambda: (_span([x for b in ("64", "128", "256") for x in _cells(SC, 3, "sec/epoch", batch=b)], 1),
              _f(*_cells(SC, 3, "sec/epoch", batch="512"), 1), _f(*_cells(SC, 3, "epochs to 0.7", batch="512"), 0),
              _span([x for b in ("64", "128", "256") for x in _cells(SC, 3, "epochs to 0.7", batch=b)], 0),
              _f(*_cells(SC, 3, "sec to 0.7", batch="512"), 0),
              _span([x for b in ("64", "128", "256") for x in _cells(SC, 3, "sec to 0.7", batch=b)], 0))),
    # cpu-2core-profile.md: every default row's op classes (its records, cpu-2core-profile/)
    ("cpu-2core-profile.md", "with {} % of its op time unmapped, and each profiled window is within {}x",
     lambda: (_f(100 * max(r["profile"]["unmapped_share"] for r in _profiles(PROF).values()), 1),
              _span([r["profile"]["profiled_step_ms"] / r["profile"]["plain_step_ms"]
                     for r in _profiles(PROF).values()]))),
    ("cpu-2core-profile.md", "(a float32 GEMM at {} GFLOP/s, a streaming copy at {} GB/s)",
     lambda: tuple(_f(_json(PROF, f)[k], 1) for f, k in (("cpu_peak.json", "gflops"), ("cpu_bandwidth.json", "gb_per_s")))),
    # (TensorFlow's oneDNN convolutions: its rows and Keras on TensorFlow's)
    ("cpu-2core-profile.md", "TensorFlow is fastest ({} ms) on oneDNN's convolutions: {} forward, {} backward",
     lambda: (_both("tensorflow", "lenet", digits=1),
              *(_span([f(PROF, r) for r in (*(f"tensorflow {m} lenet" for m in MODES),
                                            "keras-tensorflow native lenet")], 1)
                for f in (lambda d, r: _ms(d, r, "conv forward"), _conv_grad)))),
    ("cpu-2core-profile.md", "**PyTorch** ({} ms): its convolution gradients take {} ms and its average "
     "pooling {} ms, against TensorFlow's {} and {}",
     lambda: (_both("pytorch", "lenet"), _both("pytorch", "lenet", f=_conv_grad), _both("pytorch", "lenet", "pooling"),
              _f(_conv_grad(PROF, "tensorflow native lenet"), 0), _f(_ms(PROF, "tensorflow native lenet", "pooling"), 1))),
    ("cpu-2core-profile.md", "**MXNet** ({} ms): convolution gradients {} ms; scratch's eager ReLU {} ms "
     "against hybridized native's {}",
     lambda: (_both("mxnet", "lenet"), _both("mxnet", "lenet", f=_conv_grad),
              *(_f(_ms(PROF, f"mxnet {m} lenet", "activation"), 0) for m in MODES))),
    ("cpu-2core-profile.md", "**Paddle** ({} ms): convolution gradients {} ms, pooling {} ms, and {} ms of copies",
     lambda: (_both("paddle", "lenet"), _both("paddle", "lenet", f=_conv_grad), _both("paddle", "lenet", "pooling"),
              _both("paddle", "lenet", "copies and layout"))),
    ("cpu-2core-profile.md", "*Outside any op* (Python, dispatch, the framework's own runtime) is {} ms "
     "of every row's step",
     lambda: (lambda out: (f"{min(out):.1f}-{max(out):.0f}",))(
         [_ms(PROF, k, "outside any op") for k, r in _profiles(PROF).items() if r["model"] == "lenet"]),),
    ("cpu-2core-profile.md", "**JAX and Keras on JAX** ({} ms): XLA:CPU's convolutions are the gap: {} ms "
     "forward ({}x TensorFlow's, mode for mode) and {} ms backward; outside any op is {} ms, so it is "
     "not JAX's dispatch. Keras on JAX adds {} ms of optimizer update",
     lambda: (lambda rows: (
         _span([_ms(PROF, r) for r in rows], 0), _span([_ms(PROF, r, "conv forward") for r in rows], 0),
         _span([_ms(PROF, r, "conv forward") / _ms(PROF, r.replace("jax", "tensorflow"), "conv forward")
                for r in rows], 1),
         _span([_conv_grad(PROF, r) for r in rows], 0), _span([_ms(PROF, r, "outside any op") for r in rows], 0),
         _f(_ms(PROF, "keras-jax native lenet", "optimizer update"), 0)))(
         ("jax scratch lenet", "jax native lenet", "keras-jax native lenet"))),
    ("cpu-2core-profile.md", "**JAX** ({} ms) and **Keras on JAX** ({} ms): convolution gradients {} ms "
     "({}x PyTorch's), and ReLU {} ms",
     lambda: (lambda rows: (
         _both("jax", "resnet18"), _f(_ms(PROF, rows[2]), 0), _span([_conv_grad(PROF, r) for r in rows], 0),
         _span([_conv_grad(PROF, r) / _conv_grad(PROF, "pytorch " + r.split(" ", 1)[1].replace("keras-", ""))
                for r in rows], 1),
         _span([_ms(PROF, r, "activation") for r in rows], 0)))(
         ("jax scratch resnet18", "jax native resnet18", "keras-jax native resnet18"))),
    ("cpu-2core-profile.md", "**ResNet-18: PyTorch is fastest** ({} ms), MXNet native close ({} ms), "
     "TensorFlow at {} ms (its convolution gradients {} ms against PyTorch's {})",
     lambda: (_both("pytorch", "resnet18"), _f(_ms(PROF, "mxnet native resnet18"), 0), _both("tensorflow", "resnet18"),
              _both("tensorflow", "resnet18", f=_conv_grad), _both("pytorch", "resnet18", f=_conv_grad))),
    ("cpu-2core-profile.md", "**Keras on torch** ({} ms) loses its {} ms to copies ({} ms), other named ops "
     "({} ms) and outside any op ({} ms)",
     lambda: (_f(_ms(PROF, KTR), 0), _f(_ms(PROF, KTR) - _ms(PROF, "pytorch scratch resnet18"), 0),
              *(_f(_ms(PROF, KTR, c), 0) for c in ("copies and layout", "other named ops", "outside any op")))),
    ("cpu-2core-profile.md", "**Paddle** ({} ms): convolution gradients {} ms ({}x PyTorch's), forward "
     "{} ms, and native's {} ms of other named ops",
     lambda: (_both("paddle", "resnet18"), _both("paddle", "resnet18", f=_conv_grad),
              _the(_f(_conv_grad(PROF, f"paddle {m} resnet18") / _conv_grad(PROF, f"pytorch {m} resnet18"), 1)
                   for m in MODES),
              _both("paddle", "resnet18", "conv forward"), _f(_ms(PROF, "paddle native resnet18", "other named ops"), 0))),
    # cpu-2core-best-resnet18.md: its four settings runs and its profile (cpu-2core-best/)
    ("cpu-2core-best-resnet18.md", "part from one another by {} to {} at the third step and {}-{} % by the fifth",
     lambda: (lambda fws: (*(_e(f(_pairs(R18, 2, fws)), 0) for f in (min, max)),
                           *(_f(100 * f(_pairs(R18, 4, fws)), 0) for f in (min, max))))(
         ("pytorch", "tensorflow", "mxnet", "paddle"))),
    ("cpu-2core-best-resnet18.md", "the loss goes {}, {}, {}, {}, {}, {} at lr {})",
     lambda: (lambda r: (*(_f(x, 1) for x in r["step_losses"][:4]), *(_f(x) for x in r["step_losses"][4:6]),
                         _the(a["lr"] for a in _arms(R18))))(
         next(r for r in _arms(R18) if r["framework"] == "pytorch" and not r["settings"]))),
    ("cpu-2core-best-resnet18.md", "Each arm's first 2 losses are within {} of its defaults' (relative)",
     lambda: (_e(max(_first_gaps(R18, 2))),)),
    ("cpu-2core-best-resnet18.md", "a reading of the run's wall clock: {} s an epoch at its defaults)",
     lambda: (_f(_decision(R18, "paddle", "to-static")["sec_default"], 0),)),
    ("cpu-2core-best-resnet18.md", "the fastest best is MXNet's defaults** ({} s/epoch; its native mode is hybridized "
     "with `static_alloc` already), then PyTorch with torch.compile ({}, {}x its eager default, p {}), TensorFlow's "
     "defaults ({}) and Keras on TensorFlow ({}), Keras on torch ({}, {}x)",
     lambda: (_f(_fastest_best(R18)), _f(_best(R18, "pytorch")), _f(_decision(R18, "pytorch", "compiled")["ratio"]),
              _p(_decision(R18, "pytorch", "compiled")), _f(_best(R18, "tensorflow")), _f(_best(R18, "keras-tensorflow")),
              _f(_best(R18, "keras-torch")), _f(_best(R18, "keras-torch") / _fastest_best(R18)))),
    ("cpu-2core-best-resnet18.md", "JAX with `ynn-fusion-off` ({}, {}x its default {}, p {}: {}x the fastest best), "
     "Keras on JAX (its `ynn-fusion-off` {}x but undecided at 2 repeats, so its best in this run is its defaults', "
     "{}: {}x), and Paddle ({}, {}x; `to-static` {}x on one repeat a side)",
     lambda: (lambda d: (_f(d["sec"]), _f(d["ratio"]), _f(d["sec_default"]), _p(d), _f(_best(R18, "jax") / _fastest_best(R18)),
                         _f(_decision(R18, "keras-jax", "ynn-fusion-off")["ratio"]), _f(_best(R18, "keras-jax")),
                         _f(_best(R18, "keras-jax") / _fastest_best(R18)), _f(_best(R18, "paddle")),
                         _f(_best(R18, "paddle") / _fastest_best(R18)), _f(_decision(R18, "paddle", "to-static")["ratio"])))(
         _decision(R18, "jax", "ynn-fusion-off"))),
    ("cpu-2core-best-resnet18.md", "PyTorch's best is `compiled+bf16-autocast` at {} s/epoch ({}x its defaults), Keras "
     "on torch's and on TensorFlow's `mixed-bf16` ({}x and {}x): what this machine kind's settings file now applies "
     "to those rows. TensorFlow's `onednn-bf16` is {}x slower",
     lambda: (_f(_best(R18PB, "pytorch")), _f(_decision(R18PB, "pytorch", "together")["ratio"]),
              *(_f(_decision(R18B, fw, "mixed-bf16")["ratio"]) for fw in ("keras-torch", "keras-tensorflow")),
              _f(_decision(R18B, "tensorflow", "onednn-bf16")["ratio"]))),
    ("cpu-2core-best-resnet18.md", "kept, {} against {} s/epoch ({}x, p {}), so the machine kind's settings file now "
     "applies it. Against the main run's fastest best ({}) that is {}x",
     lambda: (lambda d: (_f(d["sec"]), _f(d["sec_default"]), _f(d["ratio"]), _p(d), _f(_fastest_best(R18)),
                         _f(d["sec"] / _fastest_best(R18))))(_decision(R18KJ, "keras-jax", "ynn-fusion-off"))),
    ("cpu-2core-best-resnet18.md", "(ms a step, profiled at compare's batch of 256, against MXNet native's {}:",
     lambda: (_c(_ms(PR, MXR)),)),
    ("cpu-2core-best-resnet18.md", "*JAX and Keras on JAX at `ynn-fusion-off`* ({} ms): no longer their convolutions, "
     "which the flag takes from {} to {} GFLOP/s forward and from {} to {} backward (MXNet's oneDNN: {} and {})",
     lambda: (_cspan([_ms(PR, r) for r in YNN]),
              *(_span([_achieved(PR, "resnet18", c, r[:-9]) for r in rows], 0)
                for c in ("conv forward", "conv backward") for rows in (JDEF, YNN)),
              *(_f(_achieved(PR, "resnet18", c, MXR[:-9]), 0) for c in ("conv forward", "conv backward")))),
    ("cpu-2core-best-resnet18.md", "(\"activation\", {} ms against MXNet's {} and TensorFlow's {}: {}x the class's "
     "memory bound) and BatchNorm's statistics and gradient reductions ({} ms against {} and {}: {}x its bound), {} s "
     "of the {} s between them and MXNet. At their defaults the convolutions are the most of it (conv backward {} to "
     "{} s, forward {} s)",
     lambda: (*(x for c in ("activation", "batchnorm") for x in (
                  _cspan([_ms(PR, r, c) for r in YNN]), *(_f(_ms(PR, r, c), 0) for r in (MXR, "tensorflow native resnet18")),
                  _span([float(_over(PR, "resnet18", c, r[:-9])) for r in YNN], 0))),
              _the(_f(_gain(PR, r, MXR, "activation", "batchnorm"), 1) for r in YNN),
              _span([_gain(PR, r, MXR) for r in YNN], 1),
              *(f"{f(_gain(PR, r, MXR, 'conv backward') for r in JDEF):+.1f}" for f in (min, max)),
              _the(f"{_gain(PR, r, MXR, 'conv forward'):+.1f}" for r in JDEF))),
    ("cpu-2core-best-resnet18.md", "*Paddle* ({} ms, at its defaults, `to-static` and `onednn`): its convolutions, {} "
     "GFLOP/s forward and {} backward against MXNet's {} and {}: {} to {} s forward and {} to {} s backward a step",
     lambda: (_cspan([_ms(PR, r) for r in PDR]),
              *(_span([_achieved(PR, "resnet18", c, r[:-9]) for r in PDR], 0) for c in ("conv forward", "conv backward")),
              *(_f(_achieved(PR, "resnet18", c, MXR[:-9]), 0) for c in ("conv forward", "conv backward")),
              *(f"{f(_gain(PR, r, MXR, c) for r in PDR):+.1f}" for c in ("conv forward", "conv backward")
                for f in (min, max)))),
    ("cpu-2core-best-resnet18.md", "Then {} s a step of \"other named ops\" in every Paddle row",
     lambda: (_the(_f(_ms(PR, r, "other named ops") / 1e3, 1) for r in PDR),)),
    ("cpu-2core-best-resnet18.md", "*outside any op* is {} ms of every row's step",
     lambda: (_span([_ms(PR, r, "outside any op") for r in _profiles(PR)], 0),)),
    ("cpu-2core-best-resnet18.md", "{}x slower in TensorFlow (p {}), {}x in Keras on TensorFlow (p {})",
     lambda: tuple(x for fw in ("tensorflow", "keras-tensorflow") for d in [_decision(R18, fw, "xla")]
                   for x in (_f(d["ratio"]), _p(d)))),
    ("cpu-2core-best-resnet18.md", "({} on the synthetic test set after {} steps)",
     lambda: (_the(_f(r["test_accuracy"], 3) for run in (R18, R18KJ, R18PB, R18B) for r in _arms(run)),
              _the(n for r in _arms(R18) for n in r["steps_per_epoch"]))),
    # its follow-ups: bfloat16
    ("cpu-2core-best-resnet18.md", "`bf16-autocast` {} against {} s/epoch ({}x, p {}), and with torch.compile together "
     "{} against the defaults' {} beside it ({}x)",
     lambda: (lambda a, b: (_f(a["sec"]), _f(a["sec_default"]), _f(a["ratio"]), _p(a),
                            _f(b["sec"]), _f(b["sec_default"]), _f(b["ratio"])))(
         *(_decision(R18PB, "pytorch", s) for s in ("bf16-autocast", "together")))),
    ("cpu-2core-best-resnet18.md", "Against the main run's fastest best (MXNet's float32 defaults, {}) that is {}x",
     lambda: (_f(_fastest_best(R18)), _f(_best(R18PB, "pytorch") / _fastest_best(R18)))),
    ("cpu-2core-best-resnet18.md", "{}x on TensorFlow ({} against {}), {}x on torch ({} against {}), both p <= {} and "
     "kept; on JAX {}x, undecided ({} against {}: no gain measured)",
     lambda: (*(x for fw in ("keras-tensorflow", "keras-torch") for d in [_decision(R18B, fw, "mixed-bf16")]
                for x in (_f(d["ratio"]), _f(d["sec"]), _f(d["sec_default"]))),
              _f(max(float(_p(_decision(R18B, fw, "mixed-bf16")).strip("< "))
                     for fw in ("keras-tensorflow", "keras-torch")), 3),
              *(lambda d: (_f(d["ratio"]), _f(d["sec_default"]), _f(d["sec"])))(_decision(R18B, "keras-jax", "mixed-bf16")))),
    ("cpu-2core-best-resnet18.md", "**TensorFlow's `onednn-bf16` is {}x slower** ({} against {}, p {})",
     lambda: (lambda d: (_f(d["ratio"]), _f(d["sec"]), _f(d["sec_default"]), _p(d)))(
         _decision(R18B, "tensorflow", "onednn-bf16"))),
    ("cpu-2core-best-resnet18.md", "Every bfloat16 arm's first 2 step losses are within {} of its defaults'",
     lambda: (_e(max(g for run in (R18PB, R18B) for g in _first_gaps(run, 2, lambda st: any("bf16" in x for x in st)))),)),
    # cpu-2core-jax-versions-profile.md: its two rounds of profiles
    ("cpu-2core-jax-versions-profile.md", "Native mode's step without the profiler: 0.10.2 {} and {} ms, 0.7.1 {} and {} "
     "ms, 0.10.2 with `ynn-fusion-off` {} and {} ms (rounds 1 and 2). Of 0.10.2's +{} and +{} ms against "
     "`ynn-fusion-off` in the profiled window, convolution forward is +{} and +{} ms ({} and {} ms against {} and {}: "
     "{}x), convolution backward +{} and +{} ms ({}, {} against {}, {}), activation +{} and +{} ms ({}, {} against "
     "{}, {}), copies and layout +{} and +{} ms. Scratch mode the same, its convolution backward worse ({} and {} ms)",
     lambda: (*(_f(_plain(r, _jv(v, "native", "lenet", y)), 1) for v, y in (("0.10.2", 0), ("0.7.1", 0), ("0.10.2", 1))
                for r in JV),
              *(_f(_ynn_gain(r, "native", "lenet"), 0) for r in JV),
              *(x for c in ("conv forward", "conv backward", "activation") for x in (
                  *(_f(_ynn_gain(r, "native", "lenet", c), 0) for r in JV),
                  *(_f(_ms(r, _jv("0.10.2", "native", "lenet", y), c), 1) for y in (0, 1) for r in JV),
                  *([_span([_ms(r, _jv("0.10.2", "native", "lenet"), c) / _ms(r, _jv("0.10.2", "native", "lenet", True), c)
                             for r in JV], 1)] if c == "conv forward" else []))),
              *(_f(_ynn_gain(r, "native", "lenet", "copies and layout"), 0) for r in JV),
              *(_f(_ms(r, _jv("0.10.2", "scratch", "lenet"), "conv backward"), 1) for r in JV))),
    ("cpu-2core-jax-versions-profile.md", "convolution classes are 0.7.1's or lower ({}-{} ms apart, the larger "
     "differences in 0.10.2's favour), and its step is no slower than 0.7.1's ({} against {} ms in both modes)",
     lambda: (*(_f(f(abs(_ms(r, _jv("0.10.2", m, "lenet", True), c) - _ms(r, _jv("0.7.1", m, "lenet"), c))
                     for r in JV for m in MODES for c in ("conv forward", "conv backward")), 1) for f in (min, max)),
              *(_span(_jvs(_plain, [(v, y)]), 1) for v, y in (("0.10.2", True), ("0.7.1", False))))),
    ("cpu-2core-jax-versions-profile.md", "LeNet's average pooling takes {} ms a step in 0.10.2 with or without the "
     "fusions, {} ms in 0.7.1 (its forward and backward together): {} ms a step, {}-{} % of the tuned step",
     lambda: (lambda pool, gaps, steps: (
         _span(_jvs(pool, [("0.10.2", False), ("0.10.2", True)]), 1), _span(_jvs(pool, [("0.7.1", False)]), 1),
         _span(gaps, 1), *(_f(100 * f(g / t for g, t in zip(gaps, steps)), 0) for f in (min, max))))(
         lambda r, k: _ms(r, k, "pooling"),
         [_ms(r, _jv("0.10.2", m, "lenet", True), "pooling") - _ms(r, _jv("0.7.1", m, "lenet"), "pooling")
          for r in JV for m in MODES], _jvs(_plain, [("0.10.2", True)]))),
    ("cpu-2core-jax-versions-profile.md", "Step without the profiler: 0.10.2 {} and {} ms (native), {} and {} (scratch); "
     "0.7.1 {} and {}; `ynn-fusion-off` {} and {}. Its convolutions (forward and backward together, since their split "
     "moves between arms) take 0.10.2 {} ms a step with the fusions and {} ms without them (0.7.1: {} ms), while its "
     "BatchNorm takes {} ms with the fusions and {} ms without: the fusions cost ResNet-18's convolutions {}-{} ms a "
     "step and save its BatchNorm {}-{} ms",
     lambda: (lambda bn, cost, saved: (
         *(_f(_plain(r, _jv("0.10.2", m, "resnet18")), 1) for m in ("native", "scratch") for r in JV),
         *(_span([_plain(r, _jv(v, m, "resnet18", y)) for r in JV], 1) for v, y in (("0.7.1", 0), ("0.10.2", 1))
           for m in ("native", "scratch")),
         *(_span(_jvs(_conv, [vy], model="resnet18"), 0) for vy in (("0.10.2", False), ("0.10.2", True), ("0.7.1", False))),
         *(_span(_jvs(bn, [vy], model="resnet18"), 0) for vy in (("0.10.2", False), ("0.10.2", True))),
         *(_tens(f(cost)) for f in (min, max)), *(_tens(f(saved)) for f in (min, max))))(
         lambda r, k: _ms(r, k, "batchnorm"), [_ynn_gain(r, m, "resnet18", *CONV) for r in JV for m in MODES],
         [-_ynn_gain(r, m, "resnet18", "batchnorm") for r in JV for m in MODES])),
    ("cpu-2core-jax-versions-profile.md", "(LeNet {} ms, ResNet-18 {} ms)",
     lambda: (_span(_jvs(lambda r, k: _ms(r, k, "other named ops"), [("0.7.1", False)]), 1),
              _span(_jvs(lambda r, k: _ms(r, k, "other named ops"), [("0.7.1", False)], model="resnet18"), 0))),
    ("cpu-2core-jax-versions-profile.md", "The profiler's cost stays within {}x of the unprofiled step in every row but "
     "one (0.10.2 native ResNet-18 in round 2, {}x",
     lambda: (lambda cost: (_span([c for k, c in cost.items() if k != (JV[1], _jv("0.10.2", "native", "resnet18"))]),
                            _f(cost[JV[1], _jv("0.10.2", "native", "resnet18")])))(
         {(f, k): r["profile"]["profiled_step_ms"] / r["profile"]["plain_step_ms"] for f in JV
          for k, r in _profiles(f).items()})),
    # cpu-2core-settings.md: JAX's settings run on the Intel Xeon, and cpu-2core-profile.md's rows there
    ("cpu-2core-settings.md", "({} runs, 12 min of wall clock)",
     lambda: (str(len(_arms(CS))),)),
    ("cpu-2core-settings.md", "**One XLA flag makes JAX {}x faster here**",
     lambda: (_span([d["sec_default"] / d["sec"] for d in (_decision(CS, "jax", "ynn-fusion-off", m) for m in MODES)], 1),)),
    ("cpu-2core-settings.md", "native LeNet runs {} s/epoch against its default {}, scratch {} against {} (Welch, p {} both)",
     lambda: (*(x for m in ("native", "scratch") for d in [_decision(CS, "jax", "ynn-fusion-off", m)]
                for x in (_f(d["sec"]), _f(d["sec_default"]))),
              _the(_p(_decision(CS, "jax", "ynn-fusion-off", m)) for m in MODES))),
    ("cpu-2core-settings.md", "the 10th step's loss is {} in all {} runs, and test accuracy {} against the defaults' {}",
     lambda: (_the(_f(r["step_losses"][9], 5) for r in _arms(CS)), str(len(_arms(CS))),
              _the(_f(a, 4) for a in _kept_accuracies(CS, True)), _the(_f(a, 4) for a in _kept_accuracies(CS, False)))),
    ("cpu-2core-settings.md", "TensorFlow's LeNet is at {} ms a step on the same machine ([cpu-2core-profile.md]"
     "(cpu-2core-profile.md)), where JAX's convolutions take {} ms forward alone",
     lambda: (_both("tensorflow", "lenet", digits=1), _both("jax", "lenet", "conv forward"))),
    # cpu-2core-vit-sizes.md: its four sizes' compare records (and the default compare's, cpu-2core-vit-default/)
    ("cpu-2core-vit-sizes.md", "so its {} s/epoch is high ({} on the idle machine in [cpu-2core-vit-default.md]",
     lambda: (_f(_size("vit", "jax")), _f(_rows(VD)["jax", "native"]["sec/epoch"]))),
    ("cpu-2core-vit-sizes.md", "gains {} points of test accuracy after the default 2 epochs ({} against {}, both "
     "frameworks) at {}x the time an epoch (PyTorch {} against {} s, JAX {} against {}); finer patches (`vit_p4`, {} "
     "tokens) gain {} points at {}x; both (`vit_p4w128`) gain {} points at {}x, its loss still falling ({} against "
     "the default's {} after the second epoch",
     lambda: (lambda gain, times: (
         _one(gain("vit_w128"), 1), _the(_f(_size("vit_w128", fw, "test acc"), 4) for fw in TORCH_JAX),
         _the(_f(_size("vit", fw, "test acc"), 4) for fw in TORCH_JAX), _span(times("vit_w128"), 1),
         *(_f(_size(m, fw)) for fw in TORCH_JAX for m in ("vit_w128", "vit")),
         str(_vit_tokens("vit_p4")), _one(gain("vit_p4"), 1), _span(times("vit_p4"), 1),
         _one(gain("vit_p4w128"), 1), _span(times("vit_p4w128"), 1),
         *(_one([_size(m, fw, "train loss") for fw in TORCH_JAX], 3) for m in ("vit_p4w128", "vit"))))(
         lambda m: [100 * (_size(m, fw, "test acc") - _size("vit", fw, "test acc")) for fw in TORCH_JAX],
         lambda m: [_size(m, fw) / _size("vit", fw) for fw in TORCH_JAX])),
    ("cpu-2core-vit-sizes.md", "PyTorch's and JAX's test accuracies are within {} of each other at every size",
     lambda: (_under(max(abs(_size(m, "pytorch", "test acc") - _size(m, "jax", "test acc")) for m in VIT_SIZES), 0.005, 3),)),
    ("cpu-2core-vit-sizes.md", "the default compare's slowest rows (Paddle's two and MXNet's scratch, {} s an epoch "
     "at the default) would take about {} minutes an epoch at `vit_p4w128` (a calculation: {}x)",
     lambda: (lambda slow, x: (_span(slow, 0), _span([t * x / 60 for t in slow], 1), _f(x, 1)))(
         sorted(r["sec/epoch"] for r in _rows(VD).values())[-3:],
         min(_size("vit_p4w128", fw) / _size("vit", fw) for fw in TORCH_JAX))),
    ("cpu-2core-vit-sizes.md", "PyTorch's achieved rate goes from {} GFLOP/s ({} % of the measured {} GFLOP/s sgemm "
     "peak) to {} at `vit_w128` and {} at `vit_p4w128` ({} %); JAX's from {} to {}",
     lambda: (lambda rate, peak: (
         _f(rate("vit", "pytorch"), 0), _f(100 * _size("vit", "pytorch", "mfu"), 1), _f(peak, 0),
         *(_f(rate(m, "pytorch"), 0) for m in ("vit_w128", "vit_p4w128")),
         _span([100 * rate(m, "pytorch") / peak for m in ("vit_w128", "vit_p4w128")], 0),
         _f(rate("vit", "jax"), 0), _span([rate(m, "jax") for m in ("vit_w128", "vit_p4w128")], 0)))(
         lambda m, fw: _size(m, fw, "flops_per_sec_per_device") / 1e9,
         _size("vit", "pytorch", "peak_flops_per_device") / 1e9)),
    ("cpu-2core-vit-sizes.md", "(or `vit_d2l`, the book's, {} GFLOP per image)",
     lambda: (_f(_model("vit_d2l").TRAIN_FLOPS_PER_IMAGE / 1e9),)),
    # h100-default.md: its two compare runs' records (h100-default/)
    ("h100-default.md", "every row is under {} % MFU (of the datasheet's TF32 peak) and under {} s per epoch. "
     "JAX's native step, one jitted program, is the fastest ({} s/epoch); PyTorch eager {}; Keras on JAX {}; JAX "
     "scratch, the chapter's split batch and hand-written all-reduce as separate jitted calls, {}; Keras on torch {}. "
     "The repeats spread {}-{} %: read differences under {} % as none",
     lambda: (lambda rows: (
         _under(100 * max(r["mfu"] for r in rows.values()), 1), _under(max(r["sec/epoch"] for r in rows.values()), 0.5, 1),
         _f(rows["jax", "native"]["sec/epoch"]), _span([rows["pytorch", m]["sec/epoch"] for m in MODES]),
         _f(rows["keras-jax", "native"]["sec/epoch"]), _f(rows["jax", "scratch"]["sec/epoch"]),
         _f(rows["keras-torch", "native"]["sec/epoch"]),
         *(_f(100 * f(r["spread"] for r in rows.values()), 0) for f in (min, max)),
         _under(100 * max(r["spread"] for r in rows.values()), 5)))(_rows(HL))),
    ("h100-default.md", "**ResNet-18**: JAX {} s/epoch (about {} % MFU), Keras on JAX {}, PyTorch eager {} ({} %), "
     "Keras on torch {}, with a {} GB allocator peak against PyTorch's {} GB",
     lambda: (lambda rows: (
         _span([rows["jax", m]["sec/epoch"] for m in MODES]),
         _f(100 * statistics.mean(rows["jax", m]["mfu"] for m in MODES), 0),
         _f(rows["keras-jax", "native"]["sec/epoch"]), _span([rows["pytorch", m]["sec/epoch"] for m in MODES]),
         _span([100 * rows["pytorch", m]["mfu"] for m in MODES], 0), _f(rows["keras-torch", "native"]["sec/epoch"]),
         _f(rows["keras-torch", "native"]["peak MB"] / 1e3, 1),
         _span([rows["pytorch", m]["peak MB"] / 1e3 for m in MODES], 1)))(
         _rows(HR))),
    ("h100-default.md", "JAX native LeNet reached {} against {} for JAX scratch",
     lambda: tuple(_f(_rows(HL)["jax", m]["test acc"], 4) for m in ("native", "scratch"))),
    # h100-profile.md: PyTorch's profiled rows on the H100 (h100-profile/)
    ("h100-profile.md", "ResNet-18 at batch {}: the kernels take {} ms of a {} ms profiled step, convolutions' "
     "backward {} ms of them; LeNet at batch {}: {} ms of {} ms",
     lambda: tuple(x for m in ("resnet18", "lenet") for rows in [[r for r in _profiles(H).values() if r["model"] == m]]
                   for x in (_the(r["batch_size"] for r in rows), _one([r["profile"]["op_ms"] for r in rows], 1),
                             _span([r["profile"]["window_ms"] for r in rows], 1),
                             *([_one([_conv_grad(H, k) for k in _profiles(H) if k.endswith(m)], 1)]
                               if m == "resnet18" else [])))),
    ("h100-profile.md", "**The profiler's own cost is large on a GPU** ({}x the unprofiled step)",
     lambda: (_span([r["profile"]["profiled_step_ms"] / r["profile"]["plain_step_ms"] for r in _profiles(H).values()], 1),)),
    ("h100-profile.md", "a float32 GEMM with TF32 off ({} TFLOP/s measured)",
     lambda: (_f(_json(H, "limits.json")["gflops"] / 1e3, 1),)),
    # h100-settings.md: its two settings runs (h100-settings/) and h100-profile.md's LeNet rows
    ("h100-settings.md", "(see [h100-profile.md](h100-profile.md): the kernels are {} ms of a {} ms step)",
     lambda: (lambda rows: (_one([r["profile"]["op_ms"] for r in rows], 1),
                            _span([r["profile"]["window_ms"] for r in rows], 1)))(
         [r for r in _profiles(H).values() if r["model"] == "lenet"])),
    ("h100-settings.md", "torch.compile's default mode is {}-{} % slower",
     lambda: tuple(_f(100 * (f(_decision(HS, "pytorch", "compiled", m)["ratio"] for m in MODES) - 1), 0) for f in (min, max))),
    ("h100-settings.md", "({} apart on LeNet's first steps with cuDNN's auto-tuner on)",
     lambda: (_e(max(_first_gaps(HS, 10, lambda st: st == ["cudnn-benchmark"]))),)),
    # cpu-2core-predictor.md: its reports (predictor/predict.md, predictor/link-16mib/predict.md) and records
    ("cpu-2core-predictor.md", "ResNet-18's {} MB of gradients between two processes",
     lambda: (_f(_p_bytes("resnet18") / 1e6, 1),)),
    ("cpu-2core-predictor.md", "| t1, compute (1 device, batch sizes not fitted on) | {} | {} | {} % | "
     "| t2, all-reduce (16 and 256 MiB, link fitted up to 1 MiB) | {} | {} | {} % | "
     "| whole step, several devices or nodes | {} | {} | {} % | | the same 27 rows with t2 = 0 | {} | {} | {} % |",
     lambda: tuple(x for t in ("t1 alone", "t2 alone", "whole step", "with t2 = 0") for x in _pred_scores("predict.md")[t])),
    ("cpu-2core-predictor.md", "| t2, all-reduce (256 MiB, link fitted up to 16 MiB) | {} | {} | {} % | "
     "| whole step, several devices or nodes | {} | {} | {} % | | the same 27 rows with t2 = 0 | {} | {} | {} % |",
     lambda: tuple(x for t in ("t2 alone", "whole step", "with t2 = 0") for x in _pred_scores("link-16mib/predict.md")[t])),
    ("cpu-2core-predictor.md", "predicts the third and fourth within {} % (LeNet 256 and 512, ResNet-18 16 and 32), "
     "except Paddle's LeNet ({} %, {} %:",
     lambda: (str(max(abs(e) for r in _pred("predict.md", 1) if (r["model"], r["framework"]) != ("lenet", "paddle")
                      for e in _pc_cells([r]))),
              *map(str, _pc_cells(_pred("predict.md", 1, model="lenet", framework="paddle"))))),
    ("cpu-2core-predictor.md", "(PyTorch's gloo: 64 KiB in {} ms, 1 MiB in {} ms, {} GB/s; 16 MiB in {} ms, {} GB/s)",
     lambda: (lambda rows: (_f(1e3 * rows[65536]["median_s"]), _f(1e3 * rows[2 ** 20]["median_s"], 1),
                            _f(rows[2 ** 20]["algbw"]), _f(1e3 * rows[2 ** 24]["median_s"], 1),
                            _f(rows[2 ** 24]["algbw"], 1)))(
         {r["bytes"]: r for r in _json("predictor/allreduce", "pytorch-allreduce.devices.json")["rows"]
          if r["variant"] == "native"})),
    ("cpu-2core-predictor.md", "t2 for ResNet-18 is {} ms for PyTorch, and its 2-device and 2-node rows are "
     "over-predicted by {}-{} %. Paddle's ({} ms predicted) stays within {} %",
     lambda: (lambda torch, paddle: (
         _the(_f(float(r["t2 ms"]), 0) for r in torch), *(str(f(_pc_cells(torch))) for f in (min, max)),
         _the(_f(float(r["t2 ms"]), 0) for r in paddle), str(max(map(abs, _pc_cells(paddle))))))(
         *(_pred("predict.md", 3, model="resnet18", framework=fw) for fw in ("pytorch", "paddle")))),
    ("cpu-2core-predictor.md", "(PyTorch batch 4 over 2 devices: {} %; Paddle {} %), where the measured step exceeds "
     "the compute by about {} ms",
     lambda: (*(str(_pc_cells(_pred("predict.md", 3, model="resnet18", framework=fw, batch="4"), "error if t2 = 0")[0])
                for fw in ("pytorch", "paddle")),
              _f(_pred_over("predict.md"), 0))),
    ("cpu-2core-predictor.md", "PyTorch's ResNet-18 at batch 4 on 2 devices (+{} % with t2, {} % without), Keras "
     "across two nodes ({} %: fit waits on every step, a cross-worker reduction under MultiWorkerMirroredStrategy, "
     "that the model has no term for) and on two devices ({} %), MXNet's two devices in one process ({} %, {} %), "
     "TensorFlow across two nodes ({} %:",
     lambda: (lambda row: (
         *map(str, (_pc_cells(row("resnet18", "pytorch", "1", "4"))[0],
                    _pc_cells(row("resnet18", "pytorch", "1", "4"), "error if t2 = 0")[0])),
         *(str(_pc_cells(row("lenet", fw, n, b))[0]) for fw, n, b in (
             ("keras-tensorflow", "2", "256"), ("keras-tensorflow", "1", "256"), ("mxnet", "1", "256"),
             ("mxnet", "1", "512"), ("tensorflow", "2", "256")))))(
         lambda m, fw, n, b: _pred("predict.md", 3, model=m, framework=fw, nodes=n, batch=b))),
    ("cpu-2core-predictor.md", "Outside 20 % in both models ({} rows)",
     lambda: ({6: "six"}.get(n := sum(1 for r in _pred("predict.md", 3) if abs(_pc_cells([r])[0]) > 20
                                     and abs(_pc_cells([r], "error if t2 = 0")[0]) > 20), str(n)),)),
    ("cpu-2core-predictor.md", "PyTorch's t2 for ResNet-18 is then {} ms ({} % off the 256 MiB all-reduce), and every "
     "ResNet-18 row is within {} % (PyTorch batch 4 over 2 devices: {} %, where t2 = 0 misses by {} %); MXNet's 256 "
     "MiB all-reduce stays {} %",
     lambda: (lambda rows, row4: (
         _the(_f(float(r["t2 ms"]), 0) for r in rows if r["framework"] == "pytorch"),
         str(abs(_pc_cells(_pred("link-16mib/predict.md", 2, framework="pytorch", size="256 MiB"))[0])),
         str(max(map(abs, _pc_cells(rows)))), str(_pc_cells(row4)[0]), str(_pc_cells(row4, "error if t2 = 0")[0]),
         _pred("link-16mib/predict.md", 2, framework="mxnet", size="256 MiB")[0]["error"].rstrip("%")))(
         _pred("link-16mib/predict.md", 3, model="resnet18"),
         _pred("link-16mib/predict.md", 3, model="resnet18", framework="pytorch", nodes="1", batch="4"))),
    ("cpu-2core-predictor.md", "(up to {} % of the predicted step here; a prediction, which the measured steps bear "
     "out: PyTorch's exceeds its predicted compute by about {} ms)",
     lambda: (str(max(_pc_cells(_pred("link-16mib/predict.md", 3, model="resnet18"), "t2 share"))),
              _f(_pred_over("link-16mib/predict.md"), 0))),
    # cpu-2core-vit-defaults.md: its report's paragraph (common/reports/vit_defaults.py), from its oracle's record
    ("cpu-2core-vit-defaults.md", "` ({} threads). ",
     lambda: (_json("cpu-2core-vit-defaults", "oracle.json")["threads"],)),
    ("cpu-2core-vit-defaults.md", "The default-size ViT trained for {} SGD steps (batch {}, lr {}, float32)",
     lambda: tuple(_the(r[k] for r in (_json("cpu-2core-vit-defaults", f"{n}.json") for n in VIT_DEFAULTS))
                   for k in ("steps", "batch", "lr"))),
    ("cpu-2core-vit-defaults.md", "a default moves the loss when its largest difference is more than {} x the "
     "framework's float32 noise",
     lambda: (_vit_defaults_report().NOISE_FACTOR,)),
    ("cpu-2core-vit-defaults.md", "on {:,} points in [{}, {}]",
     lambda: (lambda lo, hi, n: (int(n), lo, hi))(*_gelu_grid())),
    ("cpu-2core-best-resnet18.md", "(constraints.txt); {}, {}-03:26 UTC",
     lambda: _started(R18).split(" ")),
    ("cpu-2core-best-resnet18.md", "({} repeats a side, {}-05:11 UTC the same day,",
     lambda: (_the(_decision(R18KJ, "keras-jax", "ynn-fusion-off")["repeats"]),
              _started(R18KJ).split(" ")[1])),
    ("cpu-2core-best-resnet18.md", "# {}-07:34 UTC",
     lambda: (_started(R18PB).split(" ")[1],)),
    ("cpu-2core-best-resnet18.md", "# {}-08:21 UTC",
     lambda: (_started(R18B).split(" ")[1],)),
    ("cpu-2core-best-resnet18.md", "A ResNet-18 setting is held to its first {} step losses, not LeNet's {}",
     lambda: tuple(_model(m).COMMANDS["settings"]["agree_steps"] for m in ("resnet18", "lenet"))),
    ("cpu-2core-best-resnet18.md", "1 epoch of {} steps a run (after the loop's 2 warm-up steps)",
     lambda: (_the(n for r in _arms(R18) for n in r["steps_per_epoch"]),)),
    ("cpu-2core-best-resnet18.md", "these {} are within issue 37's aim of 1.5x",
     lambda: ({5: "five"}.get(n := sum(_best(R18, g["framework"]) <= 1.5 * _fastest_best(R18) for g in _run(R18)["groups"]),
                              str(n)),)),
    ("cpu-2core-jax-versions-profile.md", "(LeNet at batch {}, {} profiled steps; ResNet-18 at batch {}, {} steps;",
     lambda: tuple(x for m in ("lenet", "resnet18") for rows in [[r for f in JV for r in _profiles(f).values() if r["model"] == m]]
                   for x in (_the(r["batch_size"] for r in rows), _the(r["profile"]["profile_steps"] for r in rows)))),
]


def prose_problems(texts: dict[str, str]) -> list[str]:
    """Each listed fragment the page's text does not show with the records' figures."""
    out = []
    for page, fragment, figures in PROSE_FIGURES:
        want = fragment.format(*figures())
        if want not in " ".join(texts[page].split()):
            out.append(f"{page} does not say what its records give: '{want}'")
    return out


def _pages() -> dict[str, str]:
    return {page: (RESULTS / page).read_text() for page in dict.fromkeys(p for p, _, _ in PROSE_FIGURES)}


def test_a_pages_prose_figures_are_its_records():
    assert prose_problems(_pages()) == []


@pytest.mark.parametrize("page, typed, planted, named", [
    ("cpu-2core-vit-best.md", "(1.97 s/epoch;", "(1.96 s/epoch;", "fastest best (1.97 s/epoch"),
    # the figure this page had before it was held: MXNet's BatchNorm, 74.497 ms, rounded twice
    ("cpu-2core-best-resnet18.md", "against 74 and 119:", "against 75 and 119:", "against 74 and 119: 8-10x")])
def test_a_prose_figure_typed_by_hand_fails_the_check(page, typed, planted, named):
    """Planted: one figure of a page's prose typed otherwise in a copy of the page; the check
    names that fragment and no other."""
    pages = _pages()
    assert typed in pages[page]
    problems = prose_problems({**pages, page: pages[page].replace(typed, planted)})
    assert len(problems) == 1 and named in problems[0], problems
