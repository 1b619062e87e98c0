"""The device API: neutral names <-> CPUPlace / CUDAPlace(i). Paddle has one CPU
place per process: replicas on the CPU share it."""
import numpy as np
import paddle

from common.facts import devices as dev


def place(device: str):
    kind, i = dev.parse(device)
    return paddle.CPUPlace() if kind == "cpu" else paddle.CUDAPlace(i)


class Devices:
    distinct_cpu_devices = False

    def setup(self, cpu_devices=1, threads=None):
        # Paddle reads OMP_NUM_THREADS at import; benchmarks.workers.run sets it
        paddle.set_device("gpu:0" if self.num_gpus() else "cpu")

    def version(self):
        return paddle.__version__

    def num_gpus(self):
        return paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0

    def array(self, value, device):
        return paddle.to_tensor(np.asarray(value), place=place(device))

    def to_device(self, x, device):
        if self.device_of(x) == device:
            return x
        kind, i = dev.parse(device)
        return x.cpu() if kind == "cpu" else x.cuda(i)

    def device_of(self, x):
        p = x.place
        return "cpu:0" if p.is_cpu_place() else dev.name("gpu", p.gpu_device_id())

    def to_numpy(self, x):
        return x.numpy()

    def synchronize(self):
        if self.num_gpus():
            paddle.device.synchronize()

    def device_peak_memory_mb(self):
        return {dev.name("gpu", i): paddle.device.cuda.max_memory_allocated(i) / 2**20
                for i in range(self.num_gpus())}

    def gpu_model(self, device):
        return paddle.device.cuda.get_device_name(dev.parse(device)[1])
