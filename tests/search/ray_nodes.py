"""A Ray cluster on this machine whose worker nodes share no disk with the driver.

Each node (the head included) runs in its own mount namespace (`unshare -m`); on a worker
node the given folders (the study's workdir, the data, ~/.cache/nas) are hidden under an
empty tmpfs, as on separate machines. "Every process of a node" is every process in its
namespace: that is what `kill_node` SIGKILLs, and `stop` ends them all whatever happened.
Used by tests/search/test_ray_cluster.py and benchmarks/ray_cluster.py.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def unshare_refusal() -> str | None:
    """Why this machine cannot start a node in its own mount namespace, or None."""
    probe = tempfile.mkdtemp(prefix="nas-unshare-")
    try:
        out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              f"mount -t tmpfs nas-probe {shlex.quote(probe)}"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare cannot run here ({e})"
    finally:
        os.rmdir(probe)
    if out.returncode:
        return f"unshare -m with a tmpfs mount is not allowed here: {out.stderr.strip()[:200]}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


class LocalCluster:
    """A head with no task slots and `workers` worker nodes of `cpus` CPUs each."""

    def __init__(self, hidden: list[str], workers: int = 2, cpus: int = 1) -> None:
        self.hidden = [os.path.abspath(p) for p in hidden]
        self.workers, self.cpus = workers, cpus
        self.port = _free_port()
        # The head (and a driver started here) on this host's address; each worker node on
        # its own loopback address, so a driver never takes a worker node for its local one.
        from ray._private.services import get_node_ip_address

        self.host = get_node_ip_address()
        self.address = f"{self.host}:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="nasray", dir="/tmp")  # short: socket paths
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("RAY_ADDRESS", None)
        self.nodes: list[subprocess.Popen] = []  # head first
        self._namespaces: list[str | None] = []

    def _start(self, command: list[str], hide: list[str]) -> None:
        mounts = "".join(f"mount -t tmpfs nas-hidden {shlex.quote(p)} && " for p in hide)
        script = f"{mounts}exec {shlex.join(command)}"
        log = open(os.path.join(self.temp, f"node{len(self.nodes)}.log"), "wb")  # noqa: SIM115
        process = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                    script], env=self.env, stdout=log, stderr=log,
                                   start_new_session=True)
        self.nodes.append(process)
        deadline = time.monotonic() + 30
        own = _namespace(os.getpid())
        while time.monotonic() < deadline:
            ns = _namespace(process.pid)
            if ns is not None and ns != own:
                self._namespaces.append(ns)
                return
            if process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"node {len(self.nodes) - 1} did not start: {self.log(-1)}")

    def log(self, index: int) -> str:
        path = os.path.join(self.temp, f"node{index % len(self.nodes)}.log")
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    def start(self, timeout: float = 300) -> LocalCluster:
        """Starts the head, then each worker node in turn; a node whose `ray start` gives
        up (Ray waits 30 s for its raylet: a loaded machine misses that) is started again,
        up to 3 times."""
        for path in self.hidden:
            os.makedirs(path, exist_ok=True)
        self._start([RAY, "start", "--head", "--num-cpus=0", "--num-gpus=0",
                     f"--port={self.port}", f"--temp-dir={self.temp}",
                     "--include-dashboard=false", "--disable-usage-stats", "--block"], [])
        if not self._wait(1, timeout):
            raise RuntimeError(f"the head did not start: {self.log(0)}")
        for i in range(self.workers):
            for _ in range(3):
                self._start([RAY, "start", f"--address={self.address}",
                             f"--node-ip-address=127.0.0.{2 + i}", f"--num-cpus={self.cpus}",
                             "--num-gpus=0", "--block"], self.hidden)
                if self._wait(2 + i, timeout):
                    break
                self.kill_node(len(self.nodes) - 1)
                self.nodes.pop()
                self._namespaces.pop()
            else:
                raise RuntimeError(f"worker node {i + 1} did not start: {self.log(-1)}")
        return self

    def _wait(self, alive: int, timeout: float) -> bool:
        """Whether `alive` nodes registered before the newest node's `ray start` ended or
        `timeout` passed (asked in a child process: this one never joins the cluster)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.nodes[-1].poll() is None:
            try:
                with socket.create_connection((self.host, self.port), 2):
                    break
            except OSError:
                time.sleep(0.5)
        code = ("import sys, time, ray\n"
                f"ray.init(address={self.address!r}, log_to_driver=False)\n"
                f"while sum(n['Alive'] for n in ray.nodes()) < {alive}:\n"
                "    time.sleep(0.5)\n")
        waiter = subprocess.Popen([sys.executable, "-c", code], env=self.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while waiter.poll() is None:
                if self.nodes[-1].poll() is not None or time.monotonic() > deadline:
                    return False
                time.sleep(0.2)
            return waiter.returncode == 0
        finally:
            waiter.kill()
            waiter.wait()

    def busy_nodes(self, title: str = "ray::run_task") -> list[int]:
        """The nodes running a task now: one of their processes carries the title Ray
        gives a worker while it runs that function."""
        busy = set()
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if not f.read().startswith(title.encode()):
                        continue
            except OSError:
                continue
            ns = _namespace(int(p))
            if ns in self._namespaces:
                busy.add(self._namespaces.index(ns))
        return sorted(busy)

    def kill_node(self, index: int) -> int:
        """SIGKILLs every process of node `index` (0: the head); returns how many."""
        namespace, killed = self._namespaces[index], 0
        for _ in range(20):  # a process may fork while its siblings die
            pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and
                    int(p) != os.getpid() and _namespace(int(p)) == namespace]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        self.nodes[index].wait(timeout=30)
        return killed

    def stop(self) -> None:
        """Ends every process of every node (workers first), and removes the temp dir."""
        for index in reversed(range(len(self.nodes))):
            self.kill_node(index)
        import shutil

        shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
