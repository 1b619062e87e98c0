"""The link's all-reduce alone, for benchmarks.links: one process per emulated node (each
in its namespace), torch.distributed's gloo ring all-reduce of NBYTES of float32, timed
after a warm-up with every rank at a barrier before the clock starts; rank 0 writes the
times and each rank's link bytes per all-reduce to OUT as JSON.

    python -m benchmarks.workers.link_probe RANK WORLD MASTER_ADDR PORT NBYTES REPEATS OUT

Run by benchmarks.links (probe()), never by hand: it is t2 as the chapter defines it,
the gradients' all-reduce with no compute beside it, measured on the same link as the
engines' runs."""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

from common.launch import netns


def main(argv: list[str]) -> int:
    rank, world, addr, port, nbytes, repeats = (int(argv[0]), int(argv[1]), argv[2],
                                                int(argv[3]), int(argv[4]), int(argv[5]))
    out = argv[6]
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    grads = torch.ones(nbytes // 4)
    dist.all_reduce(grads)                  # warm-up: gloo's connections and buffers
    times, sent = [], []
    for _ in range(repeats):
        dist.barrier()
        before = netns.counters(os.environ.get(netns.LINK_ENV, netns.LINK_IF))["tx"]
        t0 = time.perf_counter()
        dist.all_reduce(grads)
        times.append(time.perf_counter() - t0)
        sent.append(netns.counters(os.environ.get(netns.LINK_ENV, netns.LINK_IF))["tx"] - before)
    every = [None] * world
    dist.all_gather_object(every, {"times": times, "tx_bytes": sent})
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"ranks": every, "bytes": nbytes, "world": world,
                       "torch": torch.__version__}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
