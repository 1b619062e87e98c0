"""One framework's device-scopes runs in a process of its own:
`python -m benchmarks.workers.device_scopes CONFIG_JSON OUT_DIR`.

benchmarks.device_scopes starts one per framework. Before each placement it prints
'@begin PLACEMENT' on stdout, after writing its record (atomically, in OUT_DIR)
'@end PLACEMENT STATUS', so that the parent knows which placement a crash or a
time-out hit. The thread count is in the environment before any framework is
imported."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from common.launch import progress

from .devices import CRASH_ENV
from .run import thread_env


def main(argv: list[str]) -> int:
    cfg_json, out = json.loads(argv[0]), Path(argv[1])
    os.environ.update(thread_env(cfg_json["threads"]))
    # imported once the thread count is in the environment: NumPy's BLAS (under every
    # module of common) and the frameworks size their thread pools at import
    from common.experiments import scopes
    from common.results.record import write_atomic
    cfg = scopes.Config(**cfg_json)

    def begin(placement):
        progress.say(f"@begin {placement}")()
        # fault injection for the tests: PLACEMENT, or FRAMEWORK:PLACEMENT
        if os.environ.get(CRASH_ENV) in (placement, f"{cfg.framework}:{placement}"):
            os.abort()

    def done(record):
        write_atomic(out / scopes.record_filename(cfg.framework, record["placement"]), record)
        progress.say(f"@end {record['placement']} {record['status']}")()

    scopes.run(cfg, on_begin=begin, on_record=done)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
