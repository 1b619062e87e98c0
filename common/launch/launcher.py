"""Starting the rank processes of a multi-process run on this machine: not a
backend's job.

The launcher starts ranks and hands each one its rank, world size, local rank and
master address through the environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT: torchrun's names, which Horovod and
Paddle's launcher also set or read); a backend only joins the process group
(Backend.join) and picks its device from the local rank. On several machines each
framework's own launcher starts the ranks (common.launch.nodes) and hands out the
same variables."""
from __future__ import annotations

import multiprocessing as mp
import os
import socket
from pathlib import Path
from dataclasses import dataclass
from typing import Callable


class LaunchError(RuntimeError):
    pass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    def env(self) -> dict[str, str]:
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size),
                "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.local_world_size),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}

    @classmethod
    def from_env(cls) -> RankInfo:
        """This process's place in the run, as its launcher set it: torchrun's names
        (common.launch.launcher, torchrun, our TF_CONFIG and MXNet nodes), else those of
        paddle.distributed.launch."""
        e = os.environ
        if "RANK" not in e and "PADDLE_GLOBAL_RANK" in e:
            host, port = e["PADDLE_MASTER"].rsplit(":", 1)
            return cls(int(e["PADDLE_GLOBAL_RANK"]), int(e["PADDLE_GLOBAL_SIZE"]),
                       int(e["PADDLE_LOCAL_RANK"]), int(e["PADDLE_LOCAL_SIZE"]), host, int(port))
        try:
            return cls(int(e["RANK"]), int(e["WORLD_SIZE"]), int(e["LOCAL_RANK"]),
                       int(e.get("LOCAL_WORLD_SIZE", e["WORLD_SIZE"])), e["MASTER_ADDR"],
                       int(e["MASTER_PORT"]))
        except KeyError as missing:
            raise LaunchError(f"{missing} is not set: this process was not started by a "
                              "launcher (common.launch.launcher, common.launch.nodes, torchrun)") from None


def thread_env(threads: int) -> dict:
    """The environment that sets a new process's thread pools (read at import by several
    frameworks and BLAS libraries, so it goes in before the process starts)."""
    return {k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


ROOT = Path(__file__).resolve().parents[2]      # the repository


def child_env(threads: int, **extra: str) -> dict:
    """The environment of a process of ours that a command starts: this one's, with the
    child's thread pools' size (read at import, so set before it starts) and the
    repository on the module path."""
    env = {**os.environ, **thread_env(threads), **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def log_tail(path, lines: int = 3) -> str:
    """A log's last non-empty lines, joined on one line (for a record's error)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join([l for l in text.splitlines() if l.strip()][-lines:])


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def core_sets(per_process: int, processes: int) -> list[list[int]]:
    """Disjoint sets of `per_process` CPU cores, one per process, from the cores this
    process may run on (honest CPU scaling: each device its own cores)."""
    cores = sorted(os.sched_getaffinity(0))
    if per_process * processes > len(cores):
        raise LaunchError(f"{processes} x {per_process} cores asked for, but this process may "
                          f"run on {len(cores)} ({','.join(map(str, cores))})")
    return [cores[i * per_process:(i + 1) * per_process] for i in range(processes)]


def _child(env: dict, fn: Callable, args: tuple, cores: list[int] | None) -> None:
    os.environ.update(env)          # before fn imports any framework
    if cores:
        os.sched_setaffinity(0, cores)   # and its thread pools start on these cores only
    fn(*args)


def launch(fn: Callable, nprocs: int, args: tuple = (), env: dict | None = None,
           cores: list[list[int]] | None = None) -> None:
    """Run fn(*args) in nprocs fresh local processes (the spawn method: no framework
    state is inherited), each with its RankInfo in the environment (and, with `cores`,
    pinned to cores[rank]); wait for all. If one fails, the others are stopped and
    LaunchError names the failed ranks."""
    port = free_port()
    ctx = mp.get_context("spawn")
    procs = []
    for r in range(nprocs):
        info = RankInfo(r, nprocs, r, nprocs, "127.0.0.1", port)
        procs.append(ctx.Process(target=_child, args=({**(env or {}), **info.env()}, fn, args,
                                                      cores[r] if cores else None),
                                 name=f"rank{r}"))
    for p in procs:
        p.start()
    failed = []
    try:
        pending = list(procs)
        while pending:
            for p in list(pending):
                p.join(timeout=0.2)
                if p.exitcode is None:
                    continue
                pending.remove(p)
                if p.exitcode != 0:
                    failed.append(p)
            if failed:
                break
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
                if p.is_alive():
                    p.kill()
    if failed:
        codes = ", ".join(f"{p.name} exit code {p.exitcode}" for p in failed)
        raise LaunchError(f"{len(failed)} of {nprocs} ranks failed ({codes}); see the log")
