"""One run in a process of its own: `python -m benchmarks.workers.run CONFIG_JSON OUT_PATH`.

benchmarks.compare starts one per (framework, mode, device count). The thread
count goes into the environment before any framework is imported, since several
read it only at import. Progress goes to stdout as '@step' lines; the record goes
to OUT_PATH, written atomically."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from common.core.plan import RunConfig  # the facts table alone: no NumPy yet
from common.facts import settings
from common.launch.launcher import thread_env  # noqa: F401 - the benchmarks' commands take it from here

# Quiet the C++ logs of TensorFlow and Paddle so that errors stand out.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GLOG_minloglevel": "2", "GLOG_v": "0",
             "PYTHONWARNINGS": "ignore"}


def main(argv: list[str]) -> int:
    cfg_json, out_path = argv[0], argv[1]
    cfg = RunConfig(**json.loads(cfg_json))
    os.environ.update(thread_env(cfg.threads))
    # a setting's environment, read by the framework when it loads (benchmarks.runner
    # also starts the process with it: a preloaded allocator acts only from the start)
    os.environ.update(settings.env_of(settings.get(cfg.framework, cfg.settings)))
    # imported once the thread count is in the environment: NumPy's BLAS (under most
    # of common) and the frameworks size their thread pools at import
    from common.launch.run import run
    from common.results.record import write_atomic
    # a traced run's timeline beside its record (compare moves both into place)
    record = run(cfg, tell=True, trace_path=Path(out_path).with_suffix(".trace.json"))
    write_atomic(out_path, record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
