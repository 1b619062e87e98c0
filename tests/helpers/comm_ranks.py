"""A communication setting reaching its engine, where the engine runs a process per
device (Paddle's DataParallel): two ranks on this machine (gloo), each applying the
settings before it joins as a run's rank does (common/launch/rank.py), building the
native trainer and writing what its engine object holds:

    python -m tests.helpers.comm_ranks FRAMEWORK OUT_DIR [SETTING ...]

OUT_DIR/rank<r>.json: the engine's own fields (ENGINE below)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from common import models
from common.facts import registry
from common.launch import launcher

# what each engine object holds of the communication settings, read off the trainer
ENGINE = {"paddle": lambda t: {"comm_buffer_size": t.model.comm_buffer_size,
                               "last_comm_buffer_size": t.model.last_comm_buffer_size}}


def rank(framework: str, out: str, names: list[str]) -> None:
    r = launcher.RankInfo.from_env()
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
