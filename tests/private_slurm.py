"""A private Slurm cluster for the tests: munged, one slurmctld and one slurmd
per emulated node (two by default, ``nodes=`` names more) on 127.0.0.1, all in one
directory, on free ports. ``wrappers`` starts a node's slurmd under a command
(e.g. ``taskset -c 0``): what the node's jobs run inherits it.

Debian's ``slurm-wlm`` (22.05) and ``munge`` provide the daemons (``.ci/run``
installs them). Nothing outside the directory is touched: the munge key and
socket, the configuration, the state, the spool and the logs live in it, so
the cluster coexists with any other Slurm on the host (or another of these).

By default there is no accounting (``sacct`` answers "accounting storage is
disabled"; finished jobs go to ``jobcomp.txt``). With ``accounting=True`` a
private MariaDB and ``slurmdbd`` keep it (packages ``mariadb-server`` and
``slurmdbd``), with associations enforced: account ``bench`` holds user root.

    python tests/private_slurm.py up DIR [--accounting]   # prints the SLURM_CONF to export
    python tests/private_slurm.py down DIR

Each node declares 4 CPUs and 4 GPUs (gres without devices), whatever the
host has (``SlurmdParameters=config_overrides``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
ACCOUNTING_DAEMONS = ("mariadbd", "mariadb-install-db", "slurmdbd", "sacctmgr")
ACCOUNT = "bench"
NODES = ("node1", "node2")  # the default; PrivateSlurm(nodes=...) for others


def node_names(count: int) -> tuple[str, ...]:
    return tuple(f"node{i}" for i in range(1, count + 1))


CPUS_PER_NODE = 4
GPUS_PER_NODE = 4
# Seconds a finished job stays in squeue (Slurm's default is 300): short, so that
# the tests also see jobs Slurm has forgotten (about 5 s after this).
MIN_JOB_AGE = 10


def missing_daemons(accounting: bool = False) -> list[str]:
    """The daemons that are not installed (``apt-get install slurm-wlm munge``, and
    ``mariadb-server slurmdbd`` for accounting)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    wanted = (*DAEMONS, "sbatch", "squeue", *(ACCOUNTING_DAEMONS if accounting else ()))
    return [d for d in wanted if shutil.which(d, path=search) is None]


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _daemon(name: str) -> str:
    return (
        shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
        or name
    )


@dataclass
class PrivateSlurm:
    root: Path
    accounting: bool = False
    nodes: tuple[str, ...] = NODES
    # node -> argv prefix of its slurmd
    wrappers: dict[str, list[str]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, llmb) needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    # ------------------------------------------------------------ set-up

    def _write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        ctld_port, dbd_port, self.db_port, *node_ports = _free_ports(3 + len(self.nodes))
        for sub in (
            "etc",
            "state",
            "log",
            "run",
            "munge",
            "db",
            *(f"spool/{n}" for n in self.nodes),
        ):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        nodes = "\n".join(
            f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={CPUS_PER_NODE} "
            f"RealMemory=1000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
            for name, port in zip(self.nodes, node_ports, strict=True)
        )
        r = self.root
        # FirstJobId: job ids (and so the jobs' MASTER_PORT, 20000 + id) of two clusters running at once on
        # this host start apart, not both at 1 (their ranks would compete for one port on 127.0.0.1).
        self.conf.write_text(f"""\
ClusterName=llmbtest
SlurmctldHost={host}(127.0.0.1)
FirstJobId={1 + ctld_port % 10000}
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
ReturnToService=1
SchedulerType=sched/builtin
{self._accounting_lines(dbd_port)}
JobCompType=jobcomp/filetxt
JobCompLoc={r}/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=5
MinJobAge={MIN_JOB_AGE}
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=20
{nodes}
PartitionName=debug Nodes={",".join(self.nodes)} Default=YES MaxTime=INFINITE State=UP
PartitionName=other Nodes={",".join(self.nodes)} MaxTime=INFINITE State=UP
""")
        if self.accounting:
            dbd = self.root / "etc" / "slurmdbd.conf"  # slurmdbd reads it beside SLURM_CONF
            dbd.write_text(f"""\
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost={host}
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=root
StorageLoc=slurm_acct_db
""")
            dbd.chmod(0o600)
        (self.root / "etc" / "gres.conf").write_text(
            "Name=gpu File=/dev/null,/dev/zero,/dev/full,/dev/urandom\n"
        )
        # munge: its own key, socket and files; it refuses keys others can read.
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.root.chmod(0o755)
        (self.root / "munge").chmod(0o700)

    def _accounting_lines(self, dbd_port: int) -> str:
        if not self.accounting:
            return "AccountingStorageType=accounting_storage/none"
        return (
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={dbd_port}\nAccountingStorageEnforce=associations\n"
            f"AccountingStoragePass={self.munge_socket}"
        )  # for slurmdbd connections: the munge socket

    def _start_database(self, timeout: float = 60.0) -> None:
        """A private MariaDB on a free port, without grant tables (only this test cluster talks to it)."""
        db = self.root / "db"
        self._run(
            [
                _daemon("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={db}/data",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]
        )
        with open(self.root / "log" / "mariadb.log", "ab") as log:
            subprocess.Popen(
                [
                    _daemon("mariadbd"),
                    "--no-defaults",
                    f"--datadir={db}/data",
                    "--user=root",
                    f"--port={self.db_port}",
                    "--bind-address=127.0.0.1",
                    f"--socket={db}/mysql.sock",
                    f"--pid-file={self.root}/run/mariadb.pid",
                    "--skip-grant-tables",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_port(self.db_port, timeout, "MariaDB")

    def _wait_port(self, port: int, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(
            f"{what} did not listen on port {port} within {timeout:.0f} s\n{self.logs()}"
        )

    def _start_slurmdbd(self) -> None:
        self._run([_daemon("slurmdbd")])
        port = int(
            next(
                line.split("=")[1]
                for line in (self.root / "etc" / "slurmdbd.conf").read_text().splitlines()
                if line.startswith("DbdPort=")
            )
        )
        self._wait_port(port, 60, "slurmdbd")
        for args in (
            ["add", "cluster", "llmbtest"],
            ["add", "account", ACCOUNT],
            ["add", "user", "root", f"account={ACCOUNT}", f"defaultaccount={ACCOUNT}"],
        ):
            self._run(["sacctmgr", "-i", *args])

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(
            argv, capture_output=True, text=True, env={**os.environ, **self.env()}, timeout=60
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}\n{self.logs()}"
            )

    def up(self, timeout: float = 60.0) -> PrivateSlurm:
        missing = missing_daemons(self.accounting)
        if missing:
            raise RuntimeError(
                f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge"
                f"{' mariadb-server slurmdbd' if self.accounting else ''})"
            )
        self._write_config()
        m = self.root / "munge"
        self._run(
            [
                _daemon("munged"),
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={m}/munge.key",
                f"--pid-file={m}/munged.pid",
                f"--log-file={m}/munged.log",
                f"--seed-file={m}/munged.seed",
            ]
        )
        if self.accounting:
            self._start_database()
            self._start_slurmdbd()
        self._run([_daemon("slurmctld"), "-f", str(self.conf)])
        for name in self.nodes:
            self._run(
                [*self.wrappers.get(name, ()), _daemon("slurmd"), "-f", str(self.conf), "-N", name]
            )
        self.wait_idle(timeout)
        return self

    def sinfo(self) -> dict[str, str]:
        """Node name -> state (lower case, flags stripped)."""
        result = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env()},
            timeout=30,
        )
        states = {}
        for line in result.stdout.splitlines():
            name, _, state = line.partition(" ")
            states[name] = state.strip().rstrip("*~#!%$@^-")
        return states

    def wait_idle(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.sinfo()
            if sorted(states) == sorted(self.nodes) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.3)
        raise RuntimeError(
            f"the private Slurm did not come up within {timeout:.0f} s (nodes: {states})\n{self.logs()}"
        )

    def scontrol(self, *args: str) -> None:
        self._run(["scontrol", *args])

    def resume(self, node: str) -> None:
        """Back in service after a test set it down (a node that is up already is left as it is)."""
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=resume"],
            capture_output=True,
            env={**os.environ, **self.env()},
            timeout=30,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.sinfo().get(node) not in (
            "idle",
            "alloc",
            "mix",
        ):
            time.sleep(0.3)

    def logs(self, tail: int = 15) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*.log")) + [
            self.root / "munge" / "munged.log"
        ]:
            try:
                lines = path.read_text(errors="replace").splitlines()[-tail:]
            except OSError:
                continue
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # ------------------------------------------------------------ tear-down

    def down(self) -> None:
        """Stop every daemon of this cluster (and the jobs they run)."""
        if self.conf.exists():
            try:
                subprocess.run(
                    ["scancel", "--full", "--quiet", "--user=root"],
                    env={**os.environ, **self.env()},
                    capture_output=True,
                    timeout=10,
                )
            except subprocess.TimeoutExpired:
                pass  # no controller answering: the daemons are stopped below all the same
        run = self.root / "run"
        pidfiles = [
            *run.glob("slurmd-*.pid"),
            run / "slurmctld.pid",
            run / "slurmdbd.pid",
            run / "mariadb.pid",
            self.root / "munge" / "munged.pid",
        ]
        pids = []
        for path in pidfiles:
            try:
                pids.append(int(path.read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                continue
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        # What the daemons started and may have left behind (slurmstepd, a job's ranks)
        # carries this cluster's SLURM_CONF in its environment.
        for pid in _processes_with(f"SLURM_CONF={self.conf}".encode()):
            _signal(pid, signal.SIGKILL)


def _ancestors() -> set[int]:
    """This process and its parents (a shell that exported SLURM_CONF must survive ``down``)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _processes_with(variable: bytes) -> list[int]:
    found, spared = [], _ancestors()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in spared:
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if variable in handle.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def counting_shims(directory: Path) -> Path:
    """Wrappers in front of Slurm's client commands that log each call to the
    returned file (put ``directory`` first on PATH); the real commands still run."""
    directory.mkdir(parents=True)
    calls = directory / "calls"
    for command in ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo"):
        wrapper(directory, command, f'echo {command} >> {calls}\nexec "$REAL" "$@"')
    return calls


def wrapper(directory: Path, command: str, body: str) -> Path:
    """``directory/command``: a shell script running ``body``, where ``$REAL`` is the
    real command (put ``directory`` first on PATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    real = shutil.which(
        command, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    )
    path = directory / command
    path.write_text(f"#!/bin/sh\nREAL={real}\n{body}\n")
    path.chmod(0o755)
    return path


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if (
        len(argv) not in (2, 3)
        or argv[0] not in ("up", "down")
        or argv[2:] not in ([], ["--accounting"])
    ):
        print(__doc__)
        return 2
    cluster = PrivateSlurm(Path(argv[1]).resolve(), accounting=argv[2:] == ["--accounting"])
    if argv[0] == "up":
        cluster.root.mkdir(parents=True, exist_ok=True)
        cluster.up()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
