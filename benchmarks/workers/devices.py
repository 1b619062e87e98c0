"""One framework's device experiments in a process of its own:
`python -m benchmarks.workers.devices CONFIG_JSON OUT_DIR`.

benchmarks.devices starts one per framework. Before each experiment it prints
'@begin NAME' on stdout, after writing its record (atomically, in OUT_DIR)
'@end NAME STATUS', so that the parent knows which experiment a crash hit and can
start a new worker for the rest. The thread count is in the environment before
any framework is imported."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from common.launch import progress

from .run import thread_env

# Fault injection for the tests: the worker aborts (as a segfault would) when it
# begins the experiment named here.
CRASH_ENV = "DL_COMPARE_DEVICES_CRASH"


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    out = Path(argv[1])
    os.environ.update(thread_env(cfg["threads"]))
    # imported once the thread count is in the environment: NumPy's BLAS (under every
    # module of common) and the frameworks size their thread pools at import
    from common.core.contract import NotApplicable
    from common.experiments import device_experiments as ex, ops as ops_mod
    from common.facts.machine import env_info
    from common.results.record import write_atomic

    env = env_info()
    ops = None
    try:
        ops = ops_mod.load(cfg["framework"])
        # two CPU devices where the framework can make them (TF logical devices,
        # MXNet contexts): the two-device and all-reduce experiments use them
        ops.setup(cpu_devices=2, threads=cfg["threads"])
        version = ops.backend.version()
        setup_error = None
    except NotApplicable as e:      # a known gap (the facts' `devices`): every record says why
        version, setup_error = None, e
    except Exception as e:  # noqa: BLE001 - recorded for every experiment
        version, setup_error = None, f"{type(e).__name__}: {e}"
    ctx = ex.Context(ops=ops, framework=cfg["framework"], kinds=cfg["kinds"], repeat=cfg["repeat"],
                     quick=cfg["quick"], threads=cfg["threads"])
    for name in cfg["experiments"]:
        progress.say(f"@begin {name}")()
        if os.environ.get(CRASH_ENV) == name:
            os.abort()
        if isinstance(setup_error, NotApplicable):
            record = ex.new_record(cfg["framework"], name, status="not-applicable",
                                   error=str(setup_error))
        elif setup_error:
            record = ex.new_record(cfg["framework"], name, error=setup_error)
        else:
            record = ex.run_experiment(ctx, name)
        record.update(framework_version=version, env=env)
        write_atomic(out / ex.record_filename(cfg["framework"], name), record)
        progress.say(f"@end {name} {record['status']}")()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
