"""A communication setting reaching its engine, where the engine runs a process per
device (Paddle's DataParallel, TensorFlow's MultiWorkerMirroredStrategy): two ranks on
this machine (gloo; TensorFlow's RING collectives), each applying the settings before it
joins as a run's rank does (common/launch/rank.py), building the native trainer and
writing what its engine object holds:

    python -m tests.helpers.comm_ranks FRAMEWORK OUT_DIR [SETTING ...]

OUT_DIR/rank<r>.json: the engine's own fields (ENGINE below)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from common import models
from common.facts import registry
from common.launch import launcher


def _tf_engine(t) -> dict:
    """The trainer's strategy's options, and those of the collective implementation that
    all-reduces its replicas' values (its CollectiveAllReduce and each device's launcher,
    whose batch_all_reduce cuts the packs)."""
    ext = t.strategy.extended
    ops = ext._cross_device_ops
    return {"strategy": type(t.strategy).__name__,
            "bytes_per_pack": ext._communication_options.bytes_per_pack,
            "all_reduce_bytes_per_pack": ops._options.bytes_per_pack,
            "launchers_bytes_per_pack": [x._options.bytes_per_pack for x in ops._launchers]}


# what each engine object holds of the communication settings, read off the trainer
ENGINE = {"paddle": lambda t: {"comm_buffer_size": t.model.comm_buffer_size,
                               "last_comm_buffer_size": t.model.last_comm_buffer_size},
          "tensorflow": _tf_engine}


def _tf_config(r: launcher.RankInfo) -> dict:
    """TensorFlow's workers find one another by TF_CONFIG alone, each on its own port
    above the master's (as common/launch/engines.py's TfConfig starts them)."""
    workers = [f"{r.master_addr}:{r.master_port + 1 + i}" for i in range(r.world_size)]
    return {"TF_CONFIG": json.dumps({"cluster": {"worker": workers},
                                     "task": {"type": "worker", "index": r.rank}})}


# what a rank's engine reads from its environment to join, beside the launcher's RankInfo
JOIN_ENV = {"tensorflow": _tf_config}


def rank(framework: str, out: str, names: list[str]) -> None:
    r = launcher.RankInfo.from_env()
    os.environ.update(JOIN_ENV[framework](r) if framework in JOIN_ENV else {})
    b = registry.get(framework)
    b.setup(threads=1)
    for name in names:
        b.apply_setting(name)
    r = b.join(r) or r
    params = models.get("lenet").init_params(0, "glorot")
    trainer = b.build_native_trainer("lenet", params, [b.rank_device(r)], 0.1, "eager",
                                     r.rank, r.world_size, False)
    Path(out, f"rank{r.rank}.json").write_text(json.dumps(ENGINE[framework](trainer)))
    b.leave()


if __name__ == "__main__":
    framework, out, *names = sys.argv[1:]
    launcher.launch(rank, 2, (framework, out, names), env={"OMP_NUM_THREADS": "1"})
