"""Model FLOPs, utilisation and memory per device: the arithmetic that a run record and
the report share (PaLM's and Megatron's definition).

- Model FLOPs per training sample: the model's TRAIN_FLOPS_PER_IMAGE, counted from its
  layer shapes: convolutions and dense layers only (BatchNorm, ReLU, pooling and the
  loss are left out), a multiply-add is 2 FLOPs, and a training step is taken as 3 x
  the forward pass (the backward pass about twice the forward). A calculation, checked
  against PyTorch's FlopCounterMode in tests/test_utilisation.py.
- Achieved FLOP/s per device: those FLOPs x the run's samples/s / its devices.
- MFU: achieved FLOP/s per device over the device's peak: a GPU's vendor dense peak for
  the float32 math the framework runs (common/facts/peaks.py), a CPU's peak measured by
  benchmarks.compare (a float32 GEMM, common/experiments/gemm.py). Without a peak the
  record's mfu is None and mfu_note says why; no peak is ever assumed."""
from __future__ import annotations

import math
import resource
import statistics

from common import models
from common.facts import peaks
from common.results.record import model_of, nodes_of

NO_CPU_PEAK = ("no CPU peak measured for this run: python -m benchmarks.compare measures one "
               "(a float32 GEMM, --peak-gemm-size) before its workers; a run on its own has none")


def interval95(xs: list[float]) -> tuple[float, float] | None:
    """The 95 % interval of the mean of xs: mean +- t(0.975, n - 1) sd / sqrt(n), Student's
    t with n - 1 degrees of freedom (12.7 at n = 2, 4.3 at 3, 2.78 at 5: the normal
    distribution's 1.96 would understate it 6.5x, 2.2x, 1.4x at those few repeats);
    None under 2."""
    if len(xs) < 2:
        return None
    from scipy import stats       # imported on use: about 0.3 s, and only reports need it
    mean = statistics.fmean(xs)
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return float(mean - half), float(mean + half)


def all_devices(record: dict) -> int:
    """Devices over every node of a run (devices is per node)."""
    return record["devices"] * nodes_of(record)


def sharing(record: dict, nodes_share_cores: bool) -> int:
    """How many of a run's devices share the cores of one CPU peak measurement: 1 when
    each device has cores of its own (--cores-per-device: the GEMM ran on that many
    threads); a node's devices when each node is a machine of its own (not
    nodes_share_cores: the record's network says, common.launch.networks); else every
    device of the machine (virtual devices, or a process per device, on the same cores)."""
    if record.get("cores_per_device"):
        return 1
    if nodes_of(record) > 1 and not nodes_share_cores:
        return record["devices"]
    return all_devices(record)


def cpu_peak(record: dict, gemm: dict, nodes_share_cores: bool) -> tuple[float | None, str]:
    """(peak FLOP/s per device, what it is) on a CPU from compare's GEMM measurement;
    (None, why) when it failed or was not made."""
    if not gemm or gemm.get("gflops") is None:
        return None, (gemm or {}).get("error") or NO_CPU_PEAK
    k = sharing(record, nodes_share_cores)
    text = (f"{gemm['library']} {gemm['size']}x{gemm['size']} float32 product on "
            f"{gemm['threads']} thread(s): {gemm['gflops']:.1f} GFLOP/s, measured by compare")
    if k > 1:
        text += f"; the {k} devices share those cores: 1/{k} each"
    return gemm["gflops"] * 1e9 / k, text


def device_peak(backend, device: str) -> tuple[float | None, str]:
    """A GPU's vendor peak by the model name and float32 math its framework reports;
    on a CPU (None, why): a run does not measure the CPU's peak, compare does."""
    if not device.startswith("gpu"):
        return None, NO_CPU_PEAK
    try:                # a figure of the run, never a reason for the run to fail
        name, math_ = backend.gpu_model(device), backend.float32_math()
    except Exception as e:  # noqa: BLE001
        return None, f"the framework could not name its GPU or float32 math ({type(e).__name__}: {e})"
    return peaks.gpu_peak(name, math_)


def fill(record: dict, peak: float | None, peak_text: str) -> dict:
    """Set a finished run's FLOPs and utilisation keys from its samples/s and the
    device's peak (peak_text: what the peak is, or why there is none)."""
    flops = models.get(model_of(record)).TRAIN_FLOPS_PER_IMAGE
    per_device = (record["samples_per_sec"] / all_devices(record)
                  if record.get("samples_per_sec") else None)
    achieved = flops * per_device if per_device else None
    ok = bool(peak and achieved)
    record.update(flops_per_sample=flops, samples_per_sec_per_device=per_device,
                  flops_per_sec_per_device=achieved, peak_flops_per_device=peak or None,
                  peak_flops_source=peak_text if peak else None,
                  mfu=achieved / peak if ok else None,
                  mfu_note=None if ok else (peak_text if not peak else "no samples/s measured"))
    return record


# --- memory per device ---

def own_rss_mb() -> float:
    """This process's maximum resident set (its children's not included), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0     # Linux: KiB


def memory_per_device(devices: list[str], gpu_mb: dict, rss_mb: float) -> tuple[list | None, str]:
    """One process's peak memory per device it ran, and what it is: the allocator's peak
    of each GPU where the framework counts it; on a CPU the process's maximum resident
    set where it ran one device; None (with why) where one process ran several CPU
    devices, whose memory its RSS holds together."""
    if all(d in gpu_mb for d in devices):
        return [gpu_mb[d] for d in devices], "device allocator's peak, per GPU"
    if any(d.startswith("gpu") for d in devices):
        return None, "the framework reports no allocator peak per GPU"
    if len(devices) == 1:
        return [rss_mb], "process max RSS (one process ran the device)"
    return None, (f"one process ran the {len(devices)} CPU devices: its max RSS "
                  "(peak_memory_mb) is theirs together, not per device")


def combine_ranks(parts: list[dict]) -> tuple[list | None, str]:
    """Per device over the ranks of a run (each part one rank's memory_per_device, with
    its rank), in rank order: each rank's own figures."""
    parts = sorted(parts, key=lambda p: p["rank"])
    missing = next((p["source"] for p in parts if p["mb"] is None), None)
    if missing or not parts:
        return None, missing or "no rank reported its memory"
    return [x for p in parts for x in p["mb"]], f"{parts[0]['source']}, each rank its own"
