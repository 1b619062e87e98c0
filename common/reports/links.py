"""benchmarks.links' page: DIR/links.md and DIR/links-<model>.png from DIR's records.

Measured (each figure from the run's records): t1, one device's step alone at the node
runs' per-device batch; t2, the probe's all-reduce of the gradients alone on the link;
each engine's step on 2 nodes; the bytes each node's link sent per timed step. Computed
from them, and labelled so: exposed communication (step - t1), hidden (t1 + t2 - step),
the formulas' bytes (MXNet's parameter server: from its key-to-server assignment,
common/core/perf.py), the per-device batch from which t1 >= 1.2 x t2 (t1 fitted as
a + c x b to the compute runs), and the predictor's steps.

The predictor, validated out of sample: t1 fitted to the compute runs at every batch
but the node runs' own; the link's efficiency (bytes per second over the rate's) fitted
to the probe at --fit-rate only, and each engine's own per-step cost o to its step
there; each other rate's and node count's step predicted as t1 + o + the exchange's
bytes / (efficiency x rate) and set against the measured one, beside what a t2 = 0
model (the step is t1) predicts. The exchange's bytes: a ring's per node; a parameter
server's key-by-key pushpull, which keeps the links busy longer than its busiest link's
bytes (a key's answers wait for every worker's push of it: common/core/perf.py). t1's
own law is validated apart: each compute batch predicted from the others."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common import models
from common.core import perf
from common.core.perf import RULE, Compute, PowerLaw
from common.launch import netns
from common.reports.formats import ms
from common.reports.plots import colour, save_figure
from common.reports.runs import machine_lines
from common.results.timing import step_sec
from common.results.record import RecordError, load_records, nodes_of


MB = 1e6
WITHIN = 0.20            # the predictor's bound on the rows where t2 is a fair part of the step
T2_SHARE = 0.30          # ... at least this share of the measured step


ring_bytes = perf.ring_bytes


def sent_bytes(model: str, n: int, placement: str | None) -> list[float]:
    """Each node's bytes sent a step: a ring's 2(n-1)/n x P on every node; MXNet's
    parameter server's from its keys' servers (perf.sent_bytes)."""
    if placement is None:
        return [ring_bytes(models.param_bytes(model), n)] * n
    return [float(b) for b in perf.sent_bytes(perf.key_sizes(model), n, placement)]


def busiest_bytes(model: str, n: int, placement: str | None) -> float:
    """The busiest link's bytes sent a step (sent_bytes' largest)."""
    return max(sent_bytes(model, n, placement))


def exchange_bytes(model: str, n: int, placement: str | None) -> float:
    """How long a step's gradient exchange keeps the links busy, in one link's bytes: a
    ring's busiest link (its bytes flow without waiting); a parameter server's key-by-key
    pushpull (perf.exchange_bytes: a key's answers wait for its pushes)."""
    if placement is None:
        return ring_bytes(models.param_bytes(model), n)
    return perf.exchange_bytes(perf.key_sizes(model), n, placement)


def split_bytes(model: str, mode: str, n: int, batch: int) -> float:
    """Each node's bytes sent a step by a split of issue 52 across n nodes, on the engine
    that runs it across machines (PyTorch's, a process per device on gloo: perf's
    measured facts): fsdp, FSDP2's two all-gathers and its reduce-scatter, which gloo
    sends as an all-reduce; tp, DTensor's two all-reduces of the batch's activations
    forward and four backward (Q, K, V and fc1 each its input's gradient) a block, every
    node running the whole batch of `batch` images."""
    if mode == "fsdp":
        return perf.sharded_bytes(models.param_bytes(model), n, regather=True,
                                  scatter_as_all_reduce=perf.GLOO_REDUCE_SCATTER_AS_ALL_REDUCE)
    m = models.get(model)
    activations = 4 * batch * m.TOKENS * m.SIZE["width"]
    return perf.tensor_parallel_bytes(activations, m.SIZE["blocks"], n,
                                      perf.DTENSOR_BACKWARD_ALL_REDUCES)


def row_exchange_bytes(row: "Row") -> float:
    """How long a row's step keeps its links busy, in one link's bytes: data parallelism's
    exchange (exchange_bytes), or its split's collectives (split_bytes: each a ring's, so
    its bytes flow without waiting)."""
    if row.mode == "native":
        return exchange_bytes(row.model, row.nodes, row.placement)
    return split_bytes(row.model, row.mode, row.nodes, row.record["batch_size"])


def row_sent_bytes(row: "Row") -> list[float]:
    """Each node's calculated bytes sent a step for a row (sent_bytes, or its split's:
    every node the same)."""
    if row.mode == "native":
        return sent_bytes(row.model, row.nodes, row.placement)
    return [split_bytes(row.model, row.mode, row.nodes, row.record["batch_size"])] * row.nodes


def _records(folder: Path) -> list[dict]:
    try:
        return load_records(folder) if folder.is_dir() else []
    except RecordError:
        return []


def _rate_key(rate: str) -> float:
    return netns.rate_bits(rate) or float("inf")


@dataclass
class Row:
    model: str
    framework: str
    rate: str
    nodes: int
    placement: str | None        # parameter server: per-node or one; None: a ring
    record: dict

    @property
    def ok(self) -> bool:
        return self.record["status"] == "ok" and step_sec(self.record) is not None

    @property
    def step(self) -> float:
        return step_sec(self.record)

    @property
    def mode(self) -> str:
        return self.record.get("mode", "native")

    @property
    def engine(self) -> str:
        """The framework, and its split where the row is not data parallel."""
        return self.framework if self.mode == "native" else f"{self.framework} {self.mode}"

    def sent(self) -> list[float] | None:
        link = self.record.get("link") or {}
        if not link.get("tx_bytes") or not link.get("timed_steps"):
            return None
        return [t / link["timed_steps"] for t in link["tx_bytes"]]


def load(out: Path) -> dict:
    """Everything the page uses: compute points, probes and node rows, per model."""
    data = {"models": {}, "ps": [], "ps_probes": {}, "records": []}
    for model in models.NAMES:
        base = out / model
        if not base.is_dir():
            continue
        compute: dict[str, list[tuple[int, float]]] = {}
        for folder in sorted(base.glob("compute-b*")):
            for r in _records(folder):
                data["records"].append(r)
                if r["status"] == "ok" and step_sec(r):
                    compute.setdefault(r["framework"], []).append((r["batch_size"], step_sec(r)))
        probes = {p.name[len("probe-n2-"):-len(".json")]: json.loads(p.read_text())
                  for p in base.glob("probe-n2-*.json")}
        rows = []
        for folder in base.glob("n*-*"):             # n{nodes}-{rate}: the node runs
            for r in _records(folder):
                data["records"].append(r)
                rate = (r.get("link") or {}).get("rate") or folder.name.split("-", 1)[1]
                rows.append(Row(model, r["framework"], rate, nodes_of(r), _placement(r), r))
        data["models"][model] = {"compute": compute, "probes": probes, "rows": rows,
                                 "batch": _node_batch(rows)}
    for folder in sorted((out / "ps").glob("n*-*")) if (out / "ps").is_dir() else []:
        for r in _records(folder):
            data["records"].append(r)
            data["ps"].append(Row("lenet", r["framework"], (r.get("link") or {}).get("rate", "?"),
                                  nodes_of(r), _placement(r), r))
    for p in sorted((out / "ps").glob("probe-*.json")) if (out / "ps").is_dir() else []:
        n = int(p.name.split("-")[1][1:])
        data["ps_probes"][n] = json.loads(p.read_text())
    return data


def _placement(r: dict) -> str | None:
    if not r.get("servers"):
        return None
    return "one" if r["servers"] == 1 and nodes_of(r) > 1 else "per-node"


def _node_batch(rows: list[Row]) -> int | None:
    sizes = {r.record["batch_size"] // r.nodes for r in rows if r.record.get("batch_size")}
    return sizes.pop() if len(sizes) == 1 else None


def probe_sec(probe: dict | None) -> float | None:
    """The probe's t2: per repeat the slowest rank's all-reduce, the median over repeats."""
    if not probe or "ranks" not in probe:
        return None
    per_repeat = np.max([rank["times"] for rank in probe["ranks"]], axis=0)
    return float(np.median(per_repeat))


def probe_sent(probe: dict | None) -> float | None:
    """Bytes rank 0's link sent per all-reduce (median over repeats)."""
    if not probe or "ranks" not in probe:
        return None
    return float(np.median(probe["ranks"][0]["tx_bytes"]))


rule_batch = perf.rule_batch      # from the fitted t1 and the measured t2


def _ms(x: float | None) -> str:
    return ms(x, ".0f" if x is None or abs(x) >= 0.1 else ".1f")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.0f} %"


def _ring_rows(m: dict) -> list[Row]:
    """The model's data-parallel rows on 2 nodes (the links' lesson, probe beside them)."""
    return [r for r in m["rows"] if r.mode == "native" and r.nodes == 2]


def lesson_table(model: str, m: dict) -> list[str]:
    p = models.param_bytes(model)
    out = [f"| engine | link | t1 ms | t2 ms (probe) | step ms | exposed ms | hidden ms (% of t2) "
           f"| sent MB/step node 0, 1 | ring formula MB | t1 / t2 | batch for t1 >= {RULE} t2 |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(_ring_rows(m), key=lambda r: (r.framework, _rate_key(r.rate))):
        if not row.ok:
            error = (row.record.get("error") or "").splitlines()
            out.append(f"| {row.framework} | {row.rate} | {row.record['status']}: "
                       f"{error[0][:120] if error else ''} | | | | | | | | |")
            continue
        t1 = dict(m["compute"].get(row.framework, [])).get(m["batch"])
        t2 = probe_sec(m["probes"].get(row.rate))
        exposed = row.step - t1 if t1 else None
        hidden = t1 + t2 - row.step if t1 and t2 else None
        sent = row.sent()
        fit = Compute(m["compute"].get(row.framework, []))
        rule = rule_batch(fit, t2) if t2 and len(fit.points) >= 2 else None
        out.append(" | ".join([
            f"| {row.framework}", row.rate, _ms(t1), _ms(t2), _ms(row.step), _ms(exposed),
            # a share only where t2 is a fair part of the step (else a share of noise)
            "-" if hidden is None else _ms(hidden) + (
                f" ({100 * hidden / t2:.0f} %)" if t2 >= 0.2 * row.step else ""),
            "-" if not sent else ", ".join(f"{s / MB:.2f}" for s in sent),
            f"{ring_bytes(p, 2) / MB:.2f}", "-" if not (t1 and t2) else f"{t1 / t2:.2f}",
            f"{rule if rule else '> 65536'} |"]))
    return out


def link_efficiency(m: dict, model: str, rate: str) -> float | None:
    """The link's bytes per second over its rate's, from the probe's ring all-reduce of the
    model's gradients at `rate` (2 nodes); None without that probe."""
    t2 = probe_sec(m["probes"].get(rate))
    if not t2 or rate == netns.UNSHAPED:
        return None
    return ring_bytes(models.param_bytes(model), 2) / t2 / (netns.rate_bits(rate) / 8)


def splits_table(model: str, m: dict, fit_rate: str) -> list[str]:
    """Data parallelism beside the splits of issue 52 at each node count and link: each
    row's step, the bytes its nodes sent against its collectives' (row_sent_bytes), t2
    as those bytes at the probe's efficiency at fit_rate (a calculation), what of the step
    the link does not explain, and the fastest split at each link. [] where the model's
    node runs are data parallel on 2 nodes alone (lesson_table holds them)."""
    if all(r.mode == "native" and r.nodes == 2 for r in m["rows"]):
        return []
    eff = link_efficiency(m, model, fit_rate)
    ok = [r for r in m["rows"] if r.ok]
    out = ["| nodes | link | split | step ms | sent MB/step (each node) | calculated MB/step "
           "| measured / calculated | t2 ms (calculated) | step - t2 ms | t1 ms (one device) "
           "| fastest here |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(m["rows"], key=lambda r: (r.nodes, _rate_key(r.rate), SPLIT_ORDER.get(r.mode, 9))):
        if not row.ok:
            error = (row.record.get("error") or "").splitlines()
            out.append(f"| {row.nodes} | {row.rate} | {row.engine} | {row.record['status']}: "
                       f"{error[0][:120] if error else ''} | | | | | | | |")
            continue
        sent, calc = row.sent(), row_sent_bytes(row)[0]
        rate = netns.rate_bits(row.rate)          # None: unshaped, no rate to scale
        t2 = row_exchange_bytes(row) / (eff * rate / 8) if eff and rate else None
        # a one-device run measures a node's compute where the split keeps a device's
        # share of the batch (data parallel, fsdp); tp's node runs the whole batch
        t1 = dict(m["compute"].get(row.framework, [])).get(m["batch"]) if row.mode != "tp" else None
        fastest = min((r for r in ok if (r.nodes, r.rate) == (row.nodes, row.rate)),
                      key=lambda r: r.step)
        out.append(" | ".join([
            f"| {row.nodes}", row.rate, row.engine, _ms(row.step),
            "-" if not sent else ", ".join(f"{x / MB:.2f}" for x in sent), f"{calc / MB:.2f}",
            "-" if not sent else f"{max(sent) / calc:.2f}", _ms(t2),
            _ms(row.step - t2) if t2 is not None else "-", _ms(t1),
            ("yes" if fastest is row else "") + " |"]))
    return out


# the splits' order in a table: data parallelism first, then sharded, then tensor parallel
SPLIT_ORDER = {"native": 0, "fsdp": 1, "tp": 2}


def ps_table(data: dict) -> list[str]:
    out = ["| nodes | engine | servers | link | step ms | sent MB/step (each node) | calculated "
           "MB/step (largest first) | measured / calculated, largest first | exchange MB "
           "(key by key) | probe t2 ms (ring) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(data["ps"], key=lambda r: (r.nodes, r.placement or "", r.framework)):
        servers = {None: "- (ring)", "per-node": "one per node",
                   "one": "one (node 0)"}[row.placement]
        if not row.ok:
            out.append(f"| {row.nodes} | {row.framework} | {servers} | {row.rate} | "
                       f"{row.record['status']} | | | | | |")
            continue
        sent = row.sent()
        calc = sorted(sent_bytes(row.model, row.nodes, row.placement), reverse=True)
        out.append(" | ".join([
            f"| {row.nodes}", row.framework, servers, row.rate, _ms(row.step),
            "-" if not sent else ", ".join(f"{s / MB:.2f}" for s in sent),
            ", ".join(f"{c / MB:.2f}" for c in calc),
            "-" if not sent else ", ".join(f"{m / c:.2f}" for m, c in zip(
                sorted(sent, reverse=True), calc)),
            f"{exchange_bytes(row.model, row.nodes, row.placement) / MB:.2f}",
            _ms(probe_sec(data["ps_probes"].get(row.nodes))) + " |"]))
    return out


def sent_misses(rows: list[Row], calculate=None, within: float = 0.10) -> list[str]:
    """Rows whose nodes' measured bytes sent a step (largest first) are not within
    `within` of the calculated loads (largest first; which node a server rank lands on
    is ps-lite's choice): each as a line naming the row and the worst node. Framing
    adds 2-8 % (measured on the ring's rows)."""
    out = []
    for row in rows:
        sent = row.sent() if row.ok else None
        if not sent:
            continue
        calc = sorted(calculate(row.model, row.nodes, row.placement) if calculate
                      else row_sent_bytes(row), reverse=True)
        worst = max((m / c - 1 for m, c in zip(sorted(sent, reverse=True), calc)), key=abs)
        if abs(worst) > within:
            out.append(f"{row.engine} {row.placement or 'ring'} at {row.nodes} nodes: "
                       f"a node {100 * worst:+.0f} % from its calculated bytes")
    return out


def predictions(data: dict, fit_rate: str) -> list[dict]:
    """Every shaped row but those at fit_rate, predicted as

        step = t1 + o + exchange bytes / (efficiency x rate)

    the exchange's bytes: a ring's busiest link; MXNet's parameter server's key-by-key
    pushpull from its keys' servers (exchange_bytes); t1 fitted to the compute runs at every batch but the node runs' own (x n / cores
    where n nodes share fewer cores); the link's efficiency from the probe at fit_rate; o,
    what the engine adds to a step beyond compute and the link (its collective's own
    work, the nodes' contention for the machine; negative where it hides communication
    behind the backward pass), from its 2-node step at fit_rate."""
    rows = []
    for model, m in data["models"].items():
        b, p = m["batch"], models.param_bytes(model)
        fit_bytes_s = netns.rate_bits(fit_rate) / 8
        probe_fit = probe_sec(m["probes"].get(fit_rate))
        if not probe_fit or b is None:        # b None: node runs at several batches
            continue
        eff = ring_bytes(p, 2) / probe_fit / fit_bytes_s
        fits = {}         # (framework, mode): o fitted to its 2-node step at fit_rate
        for fw, points in m["compute"].items():
            held = [pt for pt in points if pt[0] != b]
            at_fit = [r for r in m["rows"] if r.framework == fw and r.rate == fit_rate
                      and r.nodes == 2 and r.ok]
            for r in at_fit if len(held) >= 2 else []:
                t1 = Compute(held)
                fits[fw, r.mode] = (t1, r.step - t1(b) - row_exchange_bytes(r) / (eff * fit_bytes_s))
        for row in [*m["rows"], *(data["ps"] if model == "lenet" else [])]:
            if not row.ok or (row.rate == fit_rate and row.nodes == 2):
                continue
            if row.rate == netns.UNSHAPED or (row.framework, row.mode) not in fits:
                rows.append({"row": row, "why": "unshaped: no rate to scale"
                             if row.rate == netns.UNSHAPED else "no fit at " + fit_rate})
                continue
            t1_fit, overhead = fits[row.framework, row.mode]
            cores = (row.record.get("env") or {}).get("cpu_count") or 1
            # n nodes on fewer cores (the PS rows share them): each computes that much slower
            share = 1.0 if row.record.get("cores_per_device") else max(1.0, row.nodes / cores)
            t1 = share * t1_fit(row.record["batch_size"] // row.nodes)
            rate = netns.rate_bits(row.rate) / 8
            t2 = row_exchange_bytes(row) / (eff * rate)
            t1_measured = dict(m["compute"].get(row.framework, [])).get(b)
            probe = (data["ps_probes"] if row in data["ps"] else m["probes"])
            t2_probe = probe_sec(probe.get(row.nodes if row in data["ps"] else row.rate))
            rows.append({"row": row, "t1": t1, "o": overhead, "t2": t2,
                         "step": t1 + overhead + t2, "err": (t1 + overhead + t2) / row.step - 1,
                         "err_t2_0": t1 / row.step - 1,
                         "t1_err": (t1_fit(b) / t1_measured - 1) if t1_measured else None,
                         "t2_err": (ring_bytes(p, row.nodes) / (eff * rate) / t2_probe - 1)
                         if t2_probe else None,
                         "t2_share": t2 / row.step})
    return rows


LAWS = {"a + c b": Compute, "k b^alpha": PowerLaw}


def compute_out_of_sample(m: dict, laws: dict = LAWS) -> dict[str, dict[int, dict]]:
    """Per engine with three or more compute batches: each batch's t1 predicted by each
    law fitted to the other batches alone, as that prediction's error."""
    out = {}
    for fw, points in sorted(m["compute"].items()):
        if len({b for b, _ in points}) < 3:
            continue
        out[fw] = {b: {name: law([p for p in points if p[0] != b])(b) / t - 1
                       for name, law in laws.items()} for b, t in sorted(points)}
    return out


def compute_table(m: dict) -> list[str]:
    held = compute_out_of_sample(m)
    if not held:
        return []
    batches = sorted({b for errs in held.values() for b in errs})
    out = ["| engine | t1 ms at " + ", ".join(map(str, batches)) + " | " + " | ".join(
        f"{b} from the others: {' / '.join(LAWS)}" for b in batches) + " |",
           "|---|---|" + "---|" * len(batches)]
    for fw, errs in held.items():
        t1 = dict(m["compute"][fw])
        # an engine may lack a batch that another has (compute runs merged for one engine)
        out.append(" | ".join([f"| {fw}", ", ".join(_ms(t1.get(b)) for b in batches),
                               *(" / ".join(_pct(errs[b][n]) for n in LAWS) if b in errs
                                 else "-" for b in batches)]) + " |")
    return out


def misses(preds: list[dict], data: dict) -> list[str]:
    """Where the predictor is not within WITHIN: every validated row whose t2 is at least
    T2_SHARE of the measured step, and t1 at the node runs' batch from the other batches
    (the predictor's t1), as table rows."""
    out = []
    for p in preds:
        r = p["row"]
        if "why" not in p and p["t2_share"] >= T2_SHARE and abs(p["err"]) > WITHIN:
            servers = {None: "ring", "per-node": "a server per node", "one": "one server"}
            out.append(f"| step | {r.model} {r.engine}, {r.nodes} nodes, "
                       f"{servers[r.placement]}, {r.rate} | {_pct(p['err'])} "
                       f"(t2 {100 * p['t2_share']:.0f} % of the step) |")
    for model, m in data["models"].items():
        for fw, errs in compute_out_of_sample(m).items():
            err = errs.get(m["batch"], {}).get("a + c b")
            if err is not None and abs(err) > WITHIN:
                out.append(f"| t1 | {model} {fw} at batch {m['batch']} from the others | "
                           f"{_pct(err)} |")
    return out


def prediction_table(preds: list[dict]) -> list[str]:
    out = ["| model | engine | servers | nodes | link | measured step ms "
           "| predicted ms (t1 + o + t2) "
           "| error | t2 = 0 error | t1 error | t2 error (probe) | t2 share of step |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in preds:
        r = p["row"]
        servers = {None: "-", "per-node": "per node", "one": "one"}[r.placement]
        if "why" in p:
            out.append(f"| {r.model} | {r.engine} | {servers} | {r.nodes} | {r.rate} | "
                       f"{_ms(r.step)} | {p['why']} | | | | | |")
            continue
        out.append(" | ".join([
            f"| {r.model}", r.engine, servers, str(r.nodes), r.rate, _ms(r.step),
            f"{_ms(p['t1'])} + {_ms(p['o'])} + {_ms(p['t2'])} = {_ms(p['step'])}",
            _pct(p["err"]),
            _pct(p["err_t2_0"]), _pct(p["t1_err"]), _pct(p["t2_err"]),
            f"{100 * p['t2_share']:.0f} % |"]))
    return out


def plot(out: Path, model: str, m: dict) -> Path | None:
    ok = [r for r in _ring_rows(m) if r.ok]
    if not ok:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rates = sorted({r.rate for r in ok}, key=_rate_key)
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    engines = sorted({r.framework for r in ok})
    width = 0.8 / max(1, len(engines))
    # the middle panel's bars start at half the smallest t1 (a log axis has no 0), so
    # each pale t1 shows under its exposed communication
    t1s = [t for fw in engines for t in [dict(m["compute"].get(fw, [])).get(m["batch"])] if t]
    floor = 0.5e3 * min(t1s) if t1s else 1.0
    for i, fw in enumerate(engines):
        pts = sorted((r for r in ok if r.framework == fw), key=lambda r: _rate_key(r.rate))
        left.plot([rates.index(r.rate) for r in pts], [r.step * 1e3 for r in pts], marker="o",
                  color=colour(fw), label=fw)
        t1 = dict(m["compute"].get(fw, [])).get(m["batch"])
        for r in pts:
            x = rates.index(r.rate) + (i - (len(engines) - 1) / 2) * width
            if t1:
                mid.bar(x, t1 * 1e3 - floor, width, bottom=floor, color=colour(fw), alpha=0.45)
                mid.bar(x, max(0.0, r.step - t1) * 1e3, width, bottom=t1 * 1e3,
                        color=colour(fw), label=fw if r is pts[0] else None)
    t2 = [probe_sec(m["probes"].get(rate)) for rate in rates]
    left.plot(range(len(rates)), [x * 1e3 if x else np.nan for x in t2], "k--",
              label="t2: the all-reduce alone")
    for ax in (left, mid):
        ax.set_xticks(range(len(rates)), rates)
        ax.set_yscale("log")
        ax.set_ylabel("ms per step")
        ax.set_xlabel("link rate")
    mid.set_ylim(bottom=floor)
    left.set_title(f"{model}: step time against the link, 2 nodes")
    mid.set_title("t1 (pale) and exposed communication (step - t1)")
    left.legend(fontsize=7)
    mid.legend(fontsize=7)
    batches = np.logspace(0, 16, 200, base=2)
    for fw in engines:
        fit = Compute(m["compute"].get(fw, []))
        if len(fit.points) >= 2:
            right.plot(batches, [fit(b) * 1e3 for b in batches], color=colour(fw),
                       label=f"t1 {fw} (fitted)")
    for rate, t in zip(rates, t2):
        if t:
            right.axhline(RULE * t * 1e3, color="grey", lw=0.8, ls=":")
            right.text(batches[0], RULE * t * 1e3, f" {RULE} x t2 at {rate}", fontsize=7,
                       va="bottom")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("per-device batch")
    right.set_ylabel("ms")
    right.set_title("where compute (t1) hides the link (t2)")
    right.legend(fontsize=7)
    return save_figure(plt, fig, out / f"links-{model}.png")


def write_page(out: Path, fit_rate: str) -> int:
    data = load(out)
    if not data["records"]:
        print(f"links: error: no compare records under {out}", flush=True)
        return 2
    # a line per run whose records the folder holds (--merge adds lines)
    commands = [c for c in ((out / "command.txt").read_text().splitlines()
                            if (out / "command.txt").is_file() else []) if c.strip()] or ["?"]
    lines = [f"# Compute against communication on emulated links", "",
             "Command: " + "; ".join(f"`{c.strip()}`" for c in commands) + "; page rebuilt "
             f"with `python -m benchmarks.links --report {out}` (fit rate {fit_rate}).", "", *machine_lines(data["records"]), ""]
    for model, m in data["models"].items():
        p = models.param_bytes(model)
        lines += [f"## {model}: 2 nodes, 1 core each, per-device batch {m['batch']}", "",
                  f"P = {p:,} bytes of float32 gradients; a 2-node ring sends "
                  f"{ring_bytes(p, 2) / MB:.2f} MB a step from each node.", "",
                  *lesson_table(model, m), ""]
        if plot(out, model, m):
            lines += [f"![{model}](links-{model}.png)", ""]
        if splits_table(model, m, fit_rate):
            lines += [f"## {model}: data, sharded and tensor parallelism side by side", "",
                      *splits_table(model, m, fit_rate), ""]
    if data["ps"]:
        lines += ["## Parameter server against ring (LeNet)", "", *ps_table(data), ""]
    preds = predictions(data, fit_rate)
    if preds:
        lines += [f"## The predictor across links (fitted at {fit_rate})", "",
                  *prediction_table(preds), ""]
    for model, m in data["models"].items():
        if compute_table(m):
            lines += [f"## t1's law out of sample ({model}): each batch from the others", "",
                      *compute_table(m), ""]
    missed = misses(preds, data)
    lines += [f"## Not within {100 * WITHIN:.0f} %", "", "Predicted steps where t2 is at "
              f"least {100 * T2_SHARE:.0f} % of the step, and t1 at the node runs' batch:", "",
              *(["| what | row | error |", "|---|---|---|", *missed] if missed else ["none"]),
              ""]
    lines += ["Measured: t1 (one device, one core, the compute runs at the node runs' batch), "
              "t2 (the link probe: torch's gloo ring all-reduce of P, nothing beside it), step "
              "(sec per timed epoch / steps), sent (each node's link counters over the timed "
              "steps). Calculated: exposed = step - t1; hidden = t1 + t2 - step (its share of t2 "
              "where t2 is at least a fifth of the step), negative where the engine's step "
              "costs more than compute and the probe's all-reduce (its own communication, the "
              "two nodes' contention for the machine); the formulas; "
              f"the batch for t1 >= {RULE} t2 from t1 fitted as a + c x b; a parameter "
              "server's bytes from MXNet's key-to-server assignment and its exchange key by "
              "key (common/core/perf.py); every prediction.", ""]
    (out / "links.md").write_text("\n".join(lines))
    print(f"written: {out / 'links.md'}")
    return 0
