"""What every local service shares: a JVM process group started from Maven-resolved jars
and probed by its own protocol (``Service``), and the helpers around it.

A process is "ours" only when its command line carries ``-Dcronstream.home=<home>``,
so a recycled pid never gets a signal from us. The services themselves are in
``infra.services``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path

from cronstream.infra import hosts
from cronstream.infra.errors import StackError
from cronstream.infra.hosts import Host
from cronstream.runtime.health import port_open
from cronstream.runtime.settings import Settings, node_name

INFRA_DIR = Path(__file__).resolve().parent
CONF_DIR = INFRA_DIR / "conf"

JVM_COMMON = [
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]

# Upstream conf/jvm17-server.options plus the two INFRA-NOTES found missing on JDK 17.
CASSANDRA_JPMS = [
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports",
    "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports",
    "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports",
    "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports",
    "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports",
    "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports",
    "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-exports",
    "java.management/com.sun.jmx.remote.security=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens",
    "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
]


def log_tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return "(no log yet)"
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64 * 1024))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


def require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StackError(f"'{name}' is not installed: {hint}")
    return path


def run_maven(args: list[str], what: str) -> None:
    mvn = require_tool("mvn", "install Maven (apt-get install -y maven) and run again")
    require_tool("java", "install a JDK 17 (apt-get install -y openjdk-17-jdk-headless)")
    proc = subprocess.run([mvn, "-B", "-q", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise StackError(
            f"Maven could not download {what} (exit {proc.returncode}). Check that Maven "
            "Central is reachable and ~/.m2/settings.xml has no broken mirror, then run "
            "'make up' again. Maven said:\n" + "\n".join(out)
        )


def _exited(pid: int) -> bool:
    """True once every thread of ``pid`` is gone.

    A JVM's main thread can end (its /proc/PID/stat reads 'Z') while other threads still
    run and hold the ports, so a zombie-looking leader is not enough: our own child is
    reaped with waitpid, which reports only when the whole thread group has exited; any
    other process is gone when its /proc entry is.
    """
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        return reaped == pid
    except ChildProcessError:
        return not Path(f"/proc/{pid}").exists()


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads (or belongs to: the launcher's session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(pid), sig)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exited(pid):
            return True
        time.sleep(0.1)
    return False


class Service(ABC):
    """One JVM service of the local stack."""

    name: str
    start_timeout: float = 120.0
    stop_signal: int = signal.SIGTERM  # what asks the process to stop
    # started after the bootstrap (its Kafka login, ACLs and topics): Kafka Connect
    after_bootstrap: bool = False
    host: str = "127.0.0.1"  # the address it listens on
    net_host: Host | None = None  # its own network namespace (o.NETNS), if any
    after: str | None = None  # the service that must answer before this one starts

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        home = settings.home
        self.lib = home / "lib" / self.name
        self.data = home / "data" / self.name
        self.conf = home / "conf"
        self.log = home / "logs" / f"{self.name}.log"
        self.pidfile = home / "run" / f"{self.name}.pid"

    # -- what each service defines ------------------------------------------------------
    @property
    @abstractmethod
    def port(self) -> int:
        """The client-facing port that readiness is polled on."""

    @property
    def other_ports(self) -> list[int]:
        return []

    @abstractmethod
    def fetch(self) -> None:
        """Make the jars present under ``self.lib``; a no-op when already there."""

    @abstractmethod
    def prepare(self) -> None:
        """Write config files and initialise storage; idempotent."""

    @abstractmethod
    def command(self) -> list[str]:
        """The full java command line (must contain ``self.marker``)."""

    @abstractmethod
    def ready(self) -> bool:
        """True when the service answers its own protocol, not just an open port."""

    @property
    def endpoint(self) -> str:
        """How clients reach it, for status output: ``host:port`` unless it says more."""
        return f"{self.host}:{self.port}"

    # -- shared mechanics ---------------------------------------------------------------
    @property
    def marker(self) -> str:
        return f"-Dcronstream.home={self.settings.home}/{self.name}"

    def _resolve(self, spec: Path, into: Path) -> bool:
        """Have Maven put what ``spec`` names into ``into``; False when already done.

        ``spec`` is a POM (its runtime dependencies are copied) or a file holding one
        artifact coordinate (that artifact alone is copied: the Apicurio archive, whose
        parent POM is not on Maven Central). A marker in ``into`` named after the spec's
        hash makes the next call a no-op until the spec changes (one per folder: a
        service may resolve several, as Kafka Connect's plugins).
        """
        marker = into / f".resolved-{hashlib.sha256(spec.read_bytes()).hexdigest()[:16]}"
        if marker.exists():
            return False
        if into.exists():
            shutil.rmtree(into)
        into.mkdir(parents=True)
        if spec.suffix == ".xml":
            args = ["-f", str(spec), "dependency:copy-dependencies", "-DincludeScope=runtime"]
        else:
            args = ["dependency:copy", f"-Dartifact={spec.read_text().strip()}"]
        run_maven([*args, f"-DoutputDirectory={into}"], f"the {self.name} artifacts ({spec})")
        marker.touch()
        return True

    def pid(self) -> int | None:
        """The pid of our running process, or None (stale pid files are removed)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ValueError, ProcessLookupError):
            self.pidfile.unlink(missing_ok=True)
            return None
        # An exiting JVM has an empty cmdline while its threads still hold the ports: it is
        # still ours. A non-empty cmdline without our marker is a recycled pid: not ours.
        exiting = cmdline == [b""]
        if self.marker.encode() not in cmdline and not exiting:
            self.pidfile.unlink(missing_ok=True)
            return None
        return None if _exited(pid) else pid

    def running(self) -> bool:
        return self.pid() is not None

    def start(self) -> None:
        """Start the process in its own session; returns without waiting for readiness."""
        if self.running():
            return
        # First: an address not on the bridge yet may answer elsewhere (the port check).
        if self.net_host is not None:
            hosts.ensure(self.net_host)  # the bridge with it
        elif self.settings.netns:  # on the machine, listening on the bridge (the registry)
            hosts.ensure_bridge()
        for port in [self.port, *self.other_ports]:
            if port_open(port, self.host):
                raise StackError(
                    f"{self.name}: port {port} is already in use by another process. "
                    f"Stop it, or choose other ports (see 'Configuration' in README.md)."
                )
        self.prepare()
        command = self.command()
        if self.net_host is not None:
            command = [*hosts.prefix(self.net_host), *command]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"\n==== cronstream: starting {self.name} at {time.ctime()}\n".encode())
        # A shell starts the JVM in the background and exits at once, printing its pid: the
        # JVM is then nobody's child (no zombie, no Popen left waiting) and outlives us.
        launcher = subprocess.run(
            [
                "/bin/sh",
                "-c",
                'cd "$1" && shift && "$@" >>"$LOG" 2>&1 </dev/null & echo $!',
                "sh",
                str(self.data),
                *command,
            ],
            env={**os.environ, "LOG": str(self.log)},
            capture_output=True,
            text=True,
            check=True,
            start_new_session=True,
        )
        self.pidfile.write_text(launcher.stdout.strip())

    def wait_ready(self, timeout: float | None = None) -> float:
        """Return once the service answers (the seconds waited); StackError when it exits
        or ``timeout`` (its start timeout) passes first."""
        began = time.monotonic()
        deadline = began + (timeout or self.start_timeout)
        while not self.ready():
            self.check_alive()
            if time.monotonic() > deadline:
                raise StackError(
                    f"{self.name} did not answer within {deadline - began:.0f} s; last lines "
                    f"of {self.log}:\n{log_tail(self.log)}"
                )
            time.sleep(0.2)
        return time.monotonic() - began

    def check_alive(self) -> None:
        if not self.running():
            raise StackError(
                f"{self.name} exited during startup. Last lines of {self.log}:\n"
                f"{log_tail(self.log)}"
            )

    def stop(self, timeout: float = 45.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout``; return once it is gone.

        "Gone" means no /proc entry (or a zombie): /proc/PID/cmdline empties while a JVM
        is still exiting with its ports bound, so the marker check alone is not enough.
        """
        pid = self.pid()
        if pid is None:
            return
        _signal_group(pid, self.stop_signal)
        if not _wait_gone(pid, timeout):
            _signal_group(pid, signal.SIGKILL)
            _wait_gone(pid, 30.0)
        self.pidfile.unlink(missing_ok=True)

    def rss_bytes(self) -> int | None:
        pid = self.pid()
        if pid is None:
            return None
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None


class NodeService(Service):
    """A service the 3-node stack runs once per node (``o.NODES``): node ``n``
    is ``<kind>-<n>`` (node 1 keeps the plain name), all share the kind's jars, and each
    listens on its node's address (``node_host``), on a test host of its own with
    ``o.NETNS`` (``infra.hosts``)."""

    kind: str

    def __init__(self, settings: Settings, node: int = 1) -> None:
        self.node = node
        self.name = node_name(self.kind, node)
        super().__init__(settings)
        self.lib = settings.home / "lib" / self.kind
        self.host = self.node_host(node, settings.netns)
        if settings.netns:
            self.net_host = Host(self.name, self.node_host(node, netns=True))

    @staticmethod
    @abstractmethod
    def node_host(node: int, netns: bool = False) -> str:
        """Where node ``node`` listens."""
