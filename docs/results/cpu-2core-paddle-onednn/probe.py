"""Which way of running Paddle engages oneDNN for training on a CPU (issue 53): one 3x3
convolution (64x64x14x14 -> 128 channels) trained for 3 SGD steps in each of Paddle's
three executions (dynamic graph, paddle.jit.to_static, the old static graph), each with
and without the flag that its documentation names (FLAGS_use_mkldnn; FLAGS_use_onednn,
its newer name), each in a process of its own with ONEDNN_VERBOSE=1: the oneDNN
primitives the process executed (oneDNN's own log, by kind and propagation) and how its
steps ended. Writes the records as JSON; docs/results/cpu-2core-paddle-onednn.md shows
them (tests/test_results_pages.py checks that the page's table is these records).

    python docs/results/cpu-2core-paddle-onednn/probe.py OUT.json
"""
import collections
import json
import os
import platform
import subprocess
import sys

STEP = r'''
import sys, numpy as np, paddle
route = sys.argv[1]
x = np.random.default_rng(0).random((64, 64, 14, 14), dtype=np.float32)
if route == "static":
    paddle.enable_static()
    main, start = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, start):
        xs = paddle.static.data("x", [64, 64, 14, 14], "float32")
        loss = paddle.mean(paddle.static.nn.conv2d(xs, 128, 3, padding=1))
        paddle.optimizer.SGD(0.1).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace()); exe.run(start)
    step = lambda: exe.run(main, feed={"x": x}, fetch_list=[loss])
else:
    conv = paddle.nn.Conv2D(64, 128, 3, padding=1)
    opt = paddle.optimizer.SGD(0.1, parameters=conv.parameters())
    f = paddle.jit.to_static(conv, full_graph=True) if route == "to_static" else conv
    xt = paddle.to_tensor(x)
    def step():
        loss = f(xt).mean(); loss.backward(); opt.step(); opt.clear_grad()
for i in range(3):
    step()
    print("step", i, "done", flush=True)
'''

ROUTES = {"dynamic": {}, "to_static": {}, "static": {"FLAGS_enable_pir_api": "0"}}
FLAGS = {"no flag": {}, "FLAGS_use_mkldnn=1": {"FLAGS_use_mkldnn": "1"},
         "FLAGS_use_onednn=1": {"FLAGS_use_onednn": "1"}}


def run(route: str, flag: str) -> dict:
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "OMP_NUM_THREADS": "2", **ROUTES[route], **FLAGS[flag]}
    proc = subprocess.run([sys.executable, "-c", STEP, route], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = (proc.stdout + proc.stderr).splitlines()
    executed = collections.Counter()
    for line in lines:
        parts = line.split(",")
        if line.startswith("onednn_verbose,") and len(parts) > 7 and parts[2:4] == ["primitive", "exec"]:
            executed[f"{parts[5]} {parts[7]}" if parts[7] != "undef" else parts[5]] += 1
    errors = [l.strip() for l in lines if "Error" in l and not l.startswith("onednn_verbose")]
    return {"route": route, "flag": flag, "exit": proc.returncode,
            "steps": sum(l.startswith("step ") for l in lines), "onednn_executed": dict(executed),
            "error": errors[-1][:200] if errors else ""}


def main(out: str) -> int:
    import paddle
    runs = [run(r, f) for r in ROUTES for f in FLAGS]
    record = {"paddle": paddle.__version__, "python": platform.python_version(),
              "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                           if l.startswith("model name")), "unknown"),
              "command": "python docs/results/cpu-2core-paddle-onednn/probe.py", "runs": runs}
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
    print(table(record))
    return 0


def table(record: dict) -> str:
    rows = ["| execution | flag | oneDNN primitives executed (kind, propagation: count) | steps done of 3 | exit | last error |",
            "|---|---|---|---|---|---|"]
    for r in record["runs"]:
        prims = ", ".join(f"{k}: {v}" for k, v in sorted(r["onednn_executed"].items())) or "none"
        rows.append(f"| {r['route']} | {r['flag']} | {prims} | {r['steps']} | {r['exit']} | "
                    f"{r['error'].replace('|', '/') or '-'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
