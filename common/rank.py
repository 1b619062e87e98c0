"""One process of a multi-node run, as each framework's launcher starts it (a script
path, since Paddle's launcher takes one): `python common/rank.py CONFIG_JSON OUT_DIR ROLE`.

ROLE "worker" trains (common.training.rank_main); "server" and "scheduler" are MXNet's
parameter-server roles, which importing MXNet with DMLC_ROLE set runs to the end."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

if __package__ in (None, ""):      # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent ends. torchrun and Paddle's launcher
    start their workers in sessions of their own, so a launcher killed hard would leave
    them running; this ties every rank to the process that started it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)    # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    die_with_parent()
    cfg_json, out_dir, role = argv
    from common import registry
    from common.results import RunConfig
    cfg = RunConfig(**json.loads(cfg_json))
    if role in ("server", "scheduler"):
        registry.get(cfg.framework)          # runs the role and exits inside the import
        print(f"{cfg.framework} ran no {role}: its build has no distributed KVStore",
              file=sys.stderr)
        return 1
    from common.training import rank_main
    rank_main(cfg, Path(out_dir) / f"node{os.environ.get('DL_COMPARE_NODE', '0')}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
