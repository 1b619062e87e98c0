"""Model mode in Paddle: the stage calls that common/core/pipeline.py's GPipe loop is
written on. A stage's input is a detached tensor with stop_gradient off;
paddle.autograd.backward(out, grad) takes the gradient of the output and leaves the
input's in X.grad. Paddle has one CPU place per process, so stages on a CPU run in
processes of their own, handing over with paddle.distributed.send/recv (gloo)."""
import os

import numpy as np
import paddle
import paddle.distributed as dist
from paddle import nn

from common.launch import launcher

from .devices import place
from .models import loss_sum


class Pipeline:
    def stage_forward(self, replica, X, y=None, training=True):
        units = replica.stage.units
        if not training:
            with paddle.no_grad():
                return self.apply_stage(replica, X, False), None
        X = X.detach()
        X.stop_gradient = units[0] == 0
        out = self.apply_stage(replica, X, True)
        if y is not None:
            out = loss_sum(out, y)
        return out.detach(), (X, out)

    def stage_backward(self, replica, tape, grad, first):
        X, out = tape                 # gradients add up in p.grad; sgd clears them
        paddle.autograd.backward([out], None if grad is None else [grad])
        return None if X.stop_gradient else X.grad

    tape_bytes_by = "paddle.autograd.saved_tensors_hooks (the tensors autograd saves)"

    def measure_tape(self, replica, forward):
        full = replica.full
        own = {t.data_ptr() for t in (*full, *full.state)}
        saved = {}

        def pack(t):               # each tensor once, no parameter
            if t.data_ptr() not in own:
                saved[t.data_ptr(), tuple(t.shape)] = int(t.numel()) * t.element_size()
            return t
        with paddle.autograd.saved_tensors_hooks(pack, lambda t: t):
            result = forward()
        return result, sum(saved.values())

    def send(self, x, dst):
        # on gloo it returns once rank dst receives (measured: 1F1B's two stages, each
        # sending to the other first, timed out); common.core.schedules.rank_ops orders
        # the hand-overs so that no two stages wait in sends for each other
        return dist.isend(x, dst)

    def recv(self, shape, src, device):
        x = paddle.to_tensor(np.empty(shape, np.float32), place=place(device))
        dist.recv(x, src)
        return x

    def gather_floats(self, values):
        mine = paddle.to_tensor(np.asarray(values, np.float64))
        out = []
        dist.all_gather(out, mine)
        return np.stack([t.numpy() for t in out])


def engine_probe_rank() -> None:
    """One rank of a 2-stage step with Paddle's fleet PipelineParallel (CPU, gloo): does
    Paddle's own pipeline engine run here? (benchmarks.pipeline --probe-engines)."""
    r = launcher.RankInfo.from_env()
    ends = [f"{r.master_addr}:{r.master_port + 1 + i}" for i in range(r.world_size)]
    os.environ.update({"PADDLE_TRAINER_ID": str(r.rank), "PADDLE_TRAINERS_NUM": str(r.world_size),
                       "PADDLE_CURRENT_ENDPOINT": ends[r.rank],
                       "PADDLE_TRAINER_ENDPOINTS": ",".join(ends), "PADDLE_DISTRI_BACKEND": "gloo"})
    import paddle.distributed.fleet as fleet
    from paddle.distributed.fleet.meta_parallel import LayerDesc, PipelineLayer
    try:
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 2}
        strategy.pipeline_configs = {"accumulate_steps": 4, "micro_batch_size": 4}
        fleet.init(is_collective=True, strategy=strategy)
        model = PipelineLayer(layers=[LayerDesc(nn.Conv2D, 1, 20, 3), LayerDesc(nn.ReLU),
                                      LayerDesc(nn.AvgPool2D, 2), LayerDesc(nn.Flatten),
                                      LayerDesc(nn.Linear, 20 * 13 * 13, 10)],
                              num_stages=2, loss_fn=nn.CrossEntropyLoss())
        opt = fleet.distributed_optimizer(
            paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters()))
        model = fleet.distributed_model(model)
        model.train_batch([paddle.randn([16, 1, 28, 28]), paddle.randint(0, 10, [16, 1])], opt)
        if r.rank == 0:
            print("paddle fleet PipelineParallel, 2 processes, gloo: ran", flush=True)
    except Exception as e:  # noqa: BLE001 - the reason is the finding
        if r.rank == 0:
            print(f"paddle fleet PipelineParallel, 2 processes, gloo: {type(e).__name__}: {e}",
                  flush=True)
