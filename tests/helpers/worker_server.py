"""Several of the tests' worker runs of one framework in one process:

    python -m tests.helpers.worker_server FRAMEWORK

Each line on stdin is a request, {"cfg": a RunConfig as a dict, "out": a path}; the
process runs it as benchmarks.workers.run does (common.launch.run.run), writes the record
to "out" and answers with a line that starts with DONE. It ends when stdin closes.

Why: a worker run's own work in the tests is a few steps; its framework's import and
start-up are most of its time (PyTorch 4.5 s for a LeNet run of 3 steps, 3.5 s of it
start-up; TensorFlow's and Keras's more), and tests/test_training.py starts dozens.
Served runs share one start-up, as the conformance checks do (tests/helpers/conformance.py).
What a run needs at its process's start is not served (tests/conftest.py, `served`):
a setting, pinned cores, a planted module. Each framework sets its devices up once, for
the most any served run uses (SERVED_DEVICES), before its first run in this process (a run
of several nodes runs the framework in its nodes' processes alone); a run on fewer uses
the first."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

DONE = "@worker-server-done"
SERVED_DEVICES = 2


def main(framework: str) -> int:
    from common.core.plan import RunConfig
    from common.facts import registry
    from common.launch.run import run
    from common.results.record import write_atomic
    started = False
    for line in sys.stdin:
        request = json.loads(line)
        cfg, out = RunConfig(**request["cfg"]), Path(request["out"])
        if not started and cfg.nodes <= 1:
            # a run of several nodes imports no framework here (its nodes' processes
            # do, as from benchmarks.workers.run): the framework loads at the first run
            # in this process, before it
            backend = registry.get(framework)
            backend.setup(cpu_devices=SERVED_DEVICES,
                          threads=int(os.environ.get("OMP_NUM_THREADS", "1")))
            # started now, with them: a run's own setup (on fewer) then finds it started,
            # where before it would set the count again (JAX's is read when its first
            # array is made)
            backend.devices(SERVED_DEVICES)
            started = True
        write_atomic(out, run(cfg, trace_path=out.with_suffix(".trace.json")))
        print(DONE, out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
