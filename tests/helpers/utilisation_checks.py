"""The utilisation checks that need a framework, each framework in a process of its own
(tests/test_utilisation.py): `python -m tests.helpers.utilisation_checks FRAMEWORK OUT_JSON`.

pytorch: the FLOPs that PyTorch's own FlopCounterMode counts over the suite's PyTorch
models (frameworks/pytorch/models.py), per sample; and the GPU path (allocator peak per
GPU, the GPU's name, its float32 math, the vendor peak) on faked CUDA calls.
jax: the same GPU path on faked JAX devices (their device_kind). No GPU is needed: the
fakes stand for the driver's answers; the suite's code around them is real."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from common import models
from common.facts import registry
from common.results import utilisation

BATCH = 2
FAKE_NAMES = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")     # what the driver calls them


def torch_flops(name: str) -> dict:
    """FLOPs per sample of the forward pass and of forward + backward, as counted by
    torch.utils.flop_counter over the suite's PyTorch model in training mode."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from frameworks.pytorch.models import Models
    model = models.get(name)
    params = [torch.tensor(p, requires_grad=True) for p in model.init_params(0, "glorot")]
    state = [torch.tensor(s) for s in model.init_state()]
    X = torch.randn(BATCH, *model.IMAGE_SHAPE)

    def forward():
        return Models.models[name].apply(params, state, X, True)

    # FlopCounterMode has no formula for the CPU's fused attention kernel
    # (aten._scaled_dot_product_flash_attention_for_cpu: the ViT's two attention products
    # went uncounted, 6 % of its FLOPs); the math kernel writes them as bmm, which it counts
    with FlopCounterMode(display=False) as fwd, sdpa_kernel(SDPBackend.MATH):
        forward()
    with FlopCounterMode(display=False) as train, sdpa_kernel(SDPBackend.MATH):
        forward().sum().backward()
    return {"forward": fwd.get_total_flops() / BATCH, "train": train.get_total_flops() / BATCH}


def gpu_path(backend) -> dict:
    """What the suite makes of the (faked) GPUs: per-device allocator peaks, the largest,
    each GPU's name, the float32 math, the vendor peak and the memory per device."""
    gpu_mb = backend.device_peak_memory_mb()
    return {"device_peak_memory_mb": gpu_mb, "peak_memory_mb": backend.peak_memory_mb(),
            "gpu_model": [backend.gpu_model(d) for d in ("gpu:0", "gpu:1")],
            "float32_math": backend.float32_math(),
            "device_peak": utilisation.device_peak(backend, "gpu:1"),
            "memory_per_device": utilisation.memory_per_device(["gpu:0", "gpu:1"], gpu_mb, 1.0)}


def torch_fake_gpu() -> dict:
    import torch
    backend = registry.get("pytorch")
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 2
    torch.cuda.get_device_name = lambda device=None: FAKE_NAMES[torch.device(device).index]
    torch.cuda.max_memory_allocated = lambda i=None: (i + 1) * 2**30
    out = {"default": gpu_path(backend)}
    torch.backends.cudnn.allow_tf32 = False      # FP32 convolutions (matmuls are by default)
    out["fp32"] = gpu_path(backend)
    return out


def jax_fake_gpu() -> dict:
    import jax
    from frameworks.jax import devices as jax_devices

    class FakeGPU:
        platform = "gpu"

        def __init__(self, i):
            self.device_kind, self.i = FAKE_NAMES[i], i

        def memory_stats(self):
            return {"peak_bytes_in_use": (self.i + 1) * 2**30}

    fakes = [FakeGPU(0), FakeGPU(1)]
    cpu = jax_devices.local_devices
    jax_devices.local_devices = lambda kind: fakes if kind == "gpu" else cpu(kind)
    backend = registry.get("jax")
    out = {"default": gpu_path(backend)}
    jax.config.update("jax_default_matmul_precision", "highest")
    out["fp32"] = gpu_path(backend)
    return out


def main(argv: list[str]) -> int:
    framework, out = argv
    if framework == "pytorch":
        result = {"flops": {name: torch_flops(name) for name in models.NAMES},
                  "gpu": torch_fake_gpu()}
    elif framework == "jax":
        result = {"gpu": jax_fake_gpu()}
    else:
        raise SystemExit(f"no utilisation checks for {framework}")
    Path(out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
