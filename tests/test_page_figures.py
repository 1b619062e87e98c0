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
             if p.name not in ("limits.json", "cpu_peak.json", "cpu_bandwidth.json")]
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
def _predicted() -> list[dict]:
    """cpu-2core-links.md's predictions (fitted at 100mbit), the page's order."""
    from common.reports import links
    return [p for p in links.predictions(links.load(RESULTS / "links"), "100mbit") if "why" not in p]


def _errs(model: str, framework: str, rate: str, placement: str | None = None, key: str = "err") -> list[str]:
    """The predictor's errors (or t2's shares of the step) of a links row, in %, as the page
    words them: '+5', '-3', '0'."""
    rows = [p for p in _predicted() if (p["row"].model, p["row"].framework, p["row"].rate,
                                        p["row"].placement) == (model, framework, rate, placement)]
    return [f"{n:+d}" if n and key == "err" else str(n) for n in (round(100 * p[key]) for p in rows)]


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


def test_a_prose_figure_typed_by_hand_fails_the_check():
    """Planted: the fastest best of vit-best's prose (1.97 s/epoch) typed as 1.96 in a copy
    of the page; the check names that fragment and no other."""
    pages = _pages()
    page = "cpu-2core-vit-best.md"
    assert "(1.97 s/epoch;" in pages[page]
    planted = {**pages, page: pages[page].replace("(1.97 s/epoch;", "(1.96 s/epoch;")}
    problems = prose_problems(planted)
    assert len(problems) == 1 and "fastest best (1.97 s/epoch" in problems[0], problems
