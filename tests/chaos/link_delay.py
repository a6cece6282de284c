"""``python -m tests.chaos.link_delay QUEUE DELAY_MS``: a fixed added delay on a test
host's link, where this kernel has no ``netem``. Run inside the host's network namespace
(``Delayer``: ``ip netns exec cs-kafka-2 ...``), bound to netfilter queue ``QUEUE``,
to which ``infra.hosts.hold`` then hands every packet leaving the host: each packet is
accepted ``DELAY_MS`` after it arrived, in arrival order (a link's latency, not a
reordering). The link's loss is ``infra.hosts.lossy``'s, in the kernel. The cluster
suite's ``broker-slow-link`` row (``tests.chaos.cluster.slow_link``).

Prints ``bound`` once the queue is bound (the rule may then be added), and on SIGTERM
the packets it held and the most it held at once. A packet still held when it stops is
accepted at once: a stop ends the delay (stop it after the rule is gone: a packet the
kernel still queues when the connection closes is dropped).
"""

from __future__ import annotations

import collections
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from cronstream.infra import hosts
from tests.integration.helpers import terminate

ROOT = Path(__file__).resolve().parents[2]
START_WITHIN_S = STOP_WITHIN_S = 30.0  # the delay's process, bound / gone

# The kernel's queue of packets awaiting a verdict (its default, 1,024, is what 200 ms of a
# busy broker's packets exceed: the kernel would drop the rest).
QUEUE_MAXLEN = 100_000
# Only the metadata is copied to user space: the verdict needs the packet's id alone.
META_BYTES = 0xFFFF


class Delayer:
    """This program on ``host`` (its namespace), held ``delay_ms``, as a process the
    fault starts and stops."""

    queue = 0  # netfilter queues are each namespace's own

    def __init__(self, host: hosts.Host, delay_ms: int) -> None:
        self.host, self.delay_ms = host, delay_ms
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Started and bound to its queue (what ``hosts.hold`` may then feed)."""
        command = [sys.executable, "-m", __name__, str(self.queue), str(self.delay_ms)]
        self.proc = subprocess.Popen(
            [*hosts.prefix(self.host), *command], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_WITHIN_S)
        first = self.proc.stdout.readline().strip() if ready else "(nothing yet)"
        if first != "bound":
            terminate(self.proc, STOP_WITHIN_S)
            self.proc.stdout.close()
            self.proc = None  # not started: nothing to stop
            raise RuntimeError(f"the delay on {self.host.netns} did not start: {first!r}")

    @property
    def started(self) -> bool:
        return self.proc is not None

    def stop(self) -> str:
        """Stopped (every packet it held released first); what it says it did. A delay
        that ended before it was stopped fails the row: the fault did not hold."""
        assert self.proc is not None
        assert self.proc.stdout is not None
        died = self.proc.poll()
        ended = terminate(self.proc, STOP_WITHIN_S)
        with self.proc.stdout:  # a line or two: the pipe never filled
            said = self.proc.stdout.read().strip()
        if not ended:
            raise RuntimeError(
                f"the delay on {self.host.netns} did not stop within {STOP_WITHIN_S:.0f} s"
            )
        if died is not None:
            raise RuntimeError(f"the delay on {self.host.netns} ended early ({died}): {said}")
        return said


class Delay:
    """Packets held ``delay_s`` each, released in arrival order by one thread."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.held: collections.deque[tuple[float, Any]] = collections.deque()  # fnfqueue.Packet
        self.ready = threading.Condition()
        self.stopping = False
        self.count = 0
        self.most = 0
        self.failed = 0

    def hold(self, packet: Any) -> None:
        with self.ready:
            self.held.append((time.monotonic() + self.delay_s, packet))
            self.count += 1
            self.most = max(self.most, len(self.held))
            self.ready.notify()

    def release(self) -> None:
        """Accept each packet once its time comes (every one at once when stopping)."""
        while True:
            with self.ready:
                while not self.held and not self.stopping:
                    self.ready.wait()
                if not self.held:
                    return
                due, packet = self.held[0]
                wait = due - time.monotonic()
                if wait > 0 and not self.stopping:
                    self.ready.wait(wait)
                    continue
                self.held.popleft()
            try:
                packet.accept()
            except OSError:  # the connection closed under it: nothing left to release
                self.failed += 1

    def stop(self) -> None:
        with self.ready:
            self.stopping = True
            self.ready.notify()


class Stopped(Exception):
    """SIGTERM: the rule that fed the queue is gone; release what is held and end."""


def main() -> None:
    import fnfqueue  # in the host's namespace only: the harness does not need it

    queue_number, delay_ms = int(sys.argv[1]), float(sys.argv[2])
    delay = Delay(delay_ms / 1000)
    conn = fnfqueue.Connection(packet_size=4096)
    queue = conn.bind(queue_number)
    queue.set_mode(META_BYTES, fnfqueue.COPY_META)
    queue.set_maxlen(QUEUE_MAXLEN)
    # A daemon: whatever happens to the main thread, the process can end.
    releaser = threading.Thread(target=delay.release, name="release", daemon=True)
    releaser.start()

    def stop(_sig: int, _frame: FrameType | None) -> None:
        raise Stopped

    overflows = gone = 0
    try:
        signal.signal(signal.SIGTERM, stop)
        print("bound", flush=True)
        while True:
            try:
                for packet in conn:
                    delay.hold(packet)
            except fnfqueue.BufferOverflowException:
                # The socket's buffer overflowed: the kernel dropped what did not fit (as
                # a link does); the queue goes on.
                overflows += 1
                conn.reset()
            except Exception as exc:
                # fnfqueue's report of a verdict the kernel refused (a bare Exception,
                # "Hmm: 0 2 No such file or directory"): it no longer held that packet,
                # lost as on a link. Anything else is ours: raised.
                if not str(exc).startswith("Hmm: "):
                    raise
                gone += 1
    except Stopped:
        pass
    finally:
        delay.stop()  # whatever ended the reading, every held packet is released
        releaser.join(STOP_WITHIN_S / 2)  # while the connection still answers
        conn.close()
    print(
        f"held {delay.count} packets, at most {delay.most} at once, {overflows} overflows, "
        f"{gone} gone before their verdict, {delay.failed} verdicts failed",
        flush=True,
    )


if __name__ == "__main__":
    main()
