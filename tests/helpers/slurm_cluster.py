"""A real Slurm on this machine, its nodes emulated: Debian's slurmctld, and a slurmd per node
inside that node's network namespace (common/launch/netns.py: its own address on link0, the
nodes joined through a bridge) and a UTS namespace of its own (its hostname, n0, n1, ...), a
munged of its own for their credentials. Everything lives in a temporary folder and the
run's namespaces; `/etc/netns/<namespace>/hosts` (which `ip netns exec` puts in the
namespace's /etc/hosts) names the nodes, as a cluster's DNS would. The controller runs in the
bridge's namespace, 10.77.0.254 on the bridge: the login node, where srun and sbatch run.

    with SlurmCluster(2) as slurm:
        slurm.run(["srun", "-N2", "--ntasks-per-node=1", "hostname"])

`python -m tests.helpers.slurm_cluster [NODES] -- COMMAND...` runs one command on the login node of
such a cluster (docs/nodes.md, "Machines from Slurm")."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.launch import netns

HEAD, HEAD_ADDRESS = "head", f"{netns.SUBNET}.254"
DAEMONS = ("munged", "slurmctld", "slurmd", "srun")
HOSTS_DIR = Path("/etc/netns")
UP_TIMEOUT = 60


def unavailable() -> str | None:
    """Why a Slurm cannot be brought up here (None when it can)."""
    why = netns.unavailable()
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if why is None and missing:
        why = (f"Slurm's {', '.join(missing)} missing: `make slurm` installs Debian's slurm-wlm "
               "and munge")
    return why


def node_name(i: int) -> str:
    return f"n{i}"


class SlurmCluster:
    def __init__(self, nodes: int = 2, rate: str = netns.UNSHAPED):
        self.nodes, self.rate = nodes, rate
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "SlurmCluster":
        why = unavailable()
        if why:
            raise RuntimeError(why)
        clean_stale_hosts()
        self.net = netns.create(self.nodes, self.rate)
        try:      # SIGTERM unwinds through __exit__ too (SIGKILL leaves it to netns.clean_stale)
            self.old = signal.signal(signal.SIGTERM, netns._exit_on_term)
        except ValueError:            # not the main thread
            self.old = None
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        net = self.net
        netns._ip("ip", "-n", net.switch, "addr", "add", f"{HEAD_ADDRESS}/24", "dev", "br0")
        netns._ip("ip", "-n", net.switch, "link", "set", "lo", "up")
        self.dir = Path(tempfile.mkdtemp(prefix="dl-compare-slurm-"))
        self.dir.chmod(0o755)                 # munged wants its socket's folder open to all
        hosts = "".join(["127.0.0.1 localhost\n", f"{HEAD_ADDRESS} {HEAD}\n",
                         *(f"{net.address(i)} {node_name(i)}\n" for i in range(self.nodes))])
        self.made_hosts_dir = not HOSTS_DIR.exists()
        for ns in self.namespaces:
            (HOSTS_DIR / ns).mkdir(parents=True, exist_ok=True)
            (HOSTS_DIR / ns / "hosts").write_text(hosts)
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.socket = self.dir / "munge.sock"
        self._daemon(["munged", "-F", "--force", f"--socket={self.socket}", f"--key-file={key}",
                      f"--log-file={self.dir / 'munged.log'}", f"--pid-file={self.dir / 'munged.pid'}",
                      f"--seed-file={self.dir / 'munged.seed'}"], "munged")
        self._wait(lambda: self.socket.exists(), "munged made no socket")
        self.conf = self.dir / "slurm.conf"
        self.conf.write_text(self._conf())
        # autodetection finds no cgroup file system under gVisor's /sys/fs/cgroup (a tmpfs
        # of v1 hierarchies); slurmd 22.05 starts its cgroup plugin whatever tracks tasks
        (self.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        for i in range(self.nodes):
            (self.dir / node_name(i)).mkdir()
        self._daemon(self._in(net.switch, HEAD, ["slurmctld", "-D", "-f", str(self.conf)]),
                     "slurmctld")
        for i in range(self.nodes):
            self._daemon(self._in(net.ns(i), node_name(i), ["slurmd", "-D", "-f", str(self.conf)]),
                         f"slurmd-{node_name(i)}")
        self._wait(self._idle, f"the {self.nodes} nodes did not show idle in sinfo")

    @property
    def namespaces(self) -> list[str]:
        return [self.net.switch, *(self.net.ns(i) for i in range(self.nodes))]

    def _conf(self) -> str:
        d = self.dir
        nodes = "".join(f"NodeName={node_name(i)} NodeAddr={self.net.address(i)} "
                        f"NodeHostname={node_name(i)} CPUs={os.cpu_count()} State=UNKNOWN\n"
                        for i in range(self.nodes))
        return f"""ClusterName=dlc
SlurmctldHost={HEAD}({HEAD_ADDRESS})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={d}
SlurmctldPidFile={d}/slurmctld.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdSpoolDir={d}/%n
SlurmdPidFile={d}/%n/slurmd.pid
SlurmdLogFile={d}/%n/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/linear
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
{nodes}PartitionName=dlc Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

    def _in(self, ns: str, hostname: str, argv: list[str]) -> list[str]:
        """argv in namespace ns, under a hostname of its own (a UTS namespace)."""
        return ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
                f'hostname {hostname} && exec "$@"', "sh", *argv]

    def _daemon(self, argv: list[str], name: str) -> None:
        log = open(self.dir / f"{name}.out", "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env(), start_new_session=True))
        log.close()

    def env(self, **extra: str) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf) if hasattr(self, "conf") else "",
                **extra}

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + UP_TIMEOUT
        while not ready():
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{what} ({'exited: ' + str(dead[0]) if dead else 'timed out'}); "
                                   f"logs in {self.dir}: {self.logs()}")
            time.sleep(0.3)

    def _idle(self) -> bool:
        shown = self.run(["sinfo", "-h", "-o", "%t %D"], capture_output=True, text=True).stdout
        return shown.split() == ["idle", str(self.nodes)]

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """argv on the login node (the controller's namespace), with this cluster's
        slurm.conf."""
        env = {**self.env(), **kw.pop("env", {})}
        return subprocess.run(["ip", "netns", "exec", self.net.switch, *argv], env=env, **kw)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.dir.glob("*.out")) if p.stat().st_size)

    def __exit__(self, *exc) -> None:
        if getattr(self, "procs", None) and hasattr(self, "conf"):
            try:          # no step left running on a node when its slurmd goes
                self.run(["scancel", "--full", "--user", "root"], capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for p in reversed(self.procs):        # the node daemons first, munged last
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if hasattr(self, "net"):
            for ns in self.namespaces:
                shutil.rmtree(HOSTS_DIR / ns, ignore_errors=True)
            if getattr(self, "made_hosts_dir", False):
                with contextlib.suppress(OSError):      # unless another cluster's are there
                    HOSTS_DIR.rmdir()
            netns.remove(self.net)
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)
        if getattr(self, "old", None) is not None:
            signal.signal(signal.SIGTERM, self.old)


def clean_stale_hosts() -> None:
    """Hosts folders of namespaces that are gone (a cluster whose owner was killed: netns
    removes its namespaces, not these)."""
    if not HOSTS_DIR.is_dir():
        return
    alive = set(netns._namespaces())
    for d in HOSTS_DIR.glob(f"{netns.PREFIX}*"):
        if d.name not in alive:
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str]) -> int:
    nodes = int(argv[0]) if argv and argv[0] != "--" else 2
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    if not command:
        print("usage: python -m tests.helpers.slurm_cluster [NODES] -- COMMAND...", file=sys.stderr)
        return 2
    with SlurmCluster(nodes) as slurm:
        return slurm.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
