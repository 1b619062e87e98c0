"""The device API: neutral names <-> torch.device."""
import shutil

import numpy as np
import torch

from common.facts import devices as dev
from common.core.contract import NotApplicable


def torch_device(device: str) -> torch.device:
    kind, i = dev.parse(device)
    return torch.device("cpu") if kind == "cpu" else torch.device("cuda", i)


def compile_check(devices) -> None:
    """torch.compile's inductor writes C++ (OpenMP) kernels for the CPU and builds them
    with the machine's C++ compiler: without one, a compiled run on the CPU says so."""
    if all(d.startswith("gpu") for d in devices):
        return                       # Triton kernels, built by Triton itself
    from torch._inductor import cpp_builder     # torch.compile's own, imported when used
    compiler = cpp_builder.get_cpp_compiler()
    if not shutil.which(compiler):
        raise NotApplicable(f"torch.compile on the CPU builds C++ kernels with {compiler!r}, which "
                            "this machine does not have; install a C++ compiler (g++) or set CXX")


def _bf16_autocast():
    """torch.autocast's state for the whole process, not a context around each forward,
    on both device types (a run's tensors live on one; the other's flag is inert); its
    cache of weights cast to bfloat16 is off, since nothing ever leaves the autocast
    region to clear it and the steps update the weights in place."""
    for device_type in ("cpu", "cuda"):
        torch.set_autocast_enabled(device_type, True)
        torch.set_autocast_dtype(device_type, torch.bfloat16)
    torch.set_autocast_cache_enabled(False)


class Devices:
    distinct_cpu_devices = False   # one CPU device: replicas share it

    def setup(self, cpu_devices=1, threads=None):
        if threads:
            torch.set_num_threads(threads)

    def version(self):
        return torch.__version__

    # the in-process settings of common/facts/settings.py's PyTorch table: the CUDA
    # libraries' switches, read when a kernel is chosen
    SWITCHES = {
        "cudnn-benchmark": lambda: setattr(torch.backends.cudnn, "benchmark", True),
        "bf16-autocast": _bf16_autocast,
        "tf32": lambda: (setattr(torch.backends.cuda.matmul, "allow_tf32", True),
                         setattr(torch.backends.cudnn, "allow_tf32", True)),
    }

    def apply_setting(self, name):
        if name in self.SWITCHES:
            self.SWITCHES[name]()
        else:
            super().apply_setting(name)

    def num_gpus(self):
        return torch.cuda.device_count()

    def array(self, value, device):
        return torch.tensor(np.asarray(value), device=torch_device(device))

    def tensor(self, value, device):
        return torch.from_numpy(np.ascontiguousarray(value)).to(torch_device(device))

    def to_device(self, x, device):
        d = torch_device(device)
        return x if x.device == d else x.to(d)

    def device_of(self, x):
        return "cpu:0" if x.device.type == "cpu" else dev.name("gpu", x.device.index)

    def to_numpy(self, x):
        return x.detach().cpu().numpy()

    def synchronize(self):
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)

    def device_peak_memory_mb(self):
        if not torch.cuda.is_available():
            return {}
        return {dev.name("gpu", i): torch.cuda.max_memory_allocated(i) / 2**20
                for i in range(torch.cuda.device_count())}

    def gpu_model(self, device):
        return torch.cuda.get_device_name(torch_device(device))

    def float32_math(self):
        # cuDNN's float32 convolutions may use TF32 by default (allow_tf32), matmuls not;
        # convolutions are most of the suite's models' FLOPs
        tf32 = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
        return "tf32" if tf32 else "fp32"
