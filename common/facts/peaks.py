"""The vendor's peak FLOP/s of the GPUs the suite knows, the denominator of model FLOPs
utilisation (MFU) on a GPU. A CPU's peak is measured instead (common/experiments/gemm.py).

Float32 training runs its convolutions and matrix products either on the FP32 units
("fp32") or, where the framework lets it (PyTorch's cuDNN convolutions, JAX and
TensorFlow by default), on the TF32 tensor cores ("tf32"); each framework says which
(Backend.float32_math). The figures are the datasheets' dense ones: NVIDIA prints the
tensor-core figures with structured sparsity, twice the dense rate, so TF32 is half the
printed figure (H100 SXM: 989.4 printed, 494.7 dense)."""
from __future__ import annotations

import re

# (a pattern of the device name that torch.cuda.get_device_name, JAX's device_kind and
# nvidia-smi report, e.g. "NVIDIA H100 80GB HBM3"; the model as the datasheet names it;
# TFLOP/s per float32 math; the source). First match wins: the specific forms first.
GPU_PEAKS = (
    (r"\bH100\b.*\bPCIe\b", "NVIDIA H100 PCIe", {"fp32": 51.0, "tf32": 378.0},
     "NVIDIA H100 Tensor Core GPU datasheet"),
    (r"\bH100\b.*\bNVL\b", "NVIDIA H100 NVL", {"fp32": 60.0, "tf32": 417.5},
     "NVIDIA H100 Tensor Core GPU datasheet"),
    (r"\bH100\b", "NVIDIA H100 SXM", {"fp32": 67.0, "tf32": 494.7},
     "NVIDIA H100 Tensor Core GPU datasheet"),
    (r"\bH200\b.*\bNVL\b", "NVIDIA H200 NVL", {"fp32": 60.0, "tf32": 417.5},
     "NVIDIA H200 Tensor Core GPU datasheet"),
    (r"\bH200\b", "NVIDIA H200 SXM", {"fp32": 67.0, "tf32": 494.7},
     "NVIDIA H200 Tensor Core GPU datasheet"),
    (r"\bA100\b", "NVIDIA A100", {"fp32": 19.5, "tf32": 156.0},
     "NVIDIA A100 Tensor Core GPU datasheet"),
)
MATH = {"fp32": "FP32", "tf32": "TF32 tensor-core dense"}


def gpu_peak(name: str | None, math: str | None) -> tuple[float | None, str]:
    """(peak FLOP/s, what it is and its source) of the GPU model `name` for float32 math
    `math` ("fp32" or "tf32"); (None, why) for a GPU or math the table lacks."""
    if not name:
        return None, "the framework does not name its GPU"
    if math not in MATH:
        return None, f"the framework does not say whether float32 runs as FP32 or TF32 on {name}"
    for pattern, model, tflops, source in GPU_PEAKS:
        if re.search(pattern, name, re.IGNORECASE):
            return (tflops[math] * 1e12,
                    f"{model}, {MATH[math]}: {tflops[math]:g} TFLOP/s ({source}; the "
                    f"device calls itself '{name}')")
    return None, f"no vendor peak for GPU '{name}' in common/facts/peaks.py"
