"""The records tenant A writes to its commands topic in the tenant-flood scenario
(``tests.chaos.tenants``): malformed records and hostile commands of every kind, aimed at
the other tenant, cronstream's own topics and the services on the loopback."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from cronstream.schemas.events import IntervalSchedule, JobDefinition, Target, utc_now
from cronstream.schemas.tenancy import TenantAction, TenantCommand
from tests.chaos.hostile import HOSTILE_TARGETS, bad_updates, malformed

# A 400 KB job id: the command holds it twice (0.8 MB, under the broker's 1 MiB); an
# answer that echoes it as key, header and value is over the producer's 1 MB limit.
BIG = 400_000
MALFORMED = (
    "random bytes",
    "magic byte not 0",
    "an unknown schema id",
    "a truncated command",
    "the wire header alone",
    "a non-UTF-8 key (a valid trigger)",
    "no key (a valid trigger)",
)
CONTROL_IDS = ("x\n", "\x1b[2Jx", "a\x00b", "a\u202eb", "\u0085x")
Kind = tuple[str, Callable[["Victims", int], TenantCommand]]


@dataclass(frozen=True)
class Victims:
    """What tenant A aims at."""

    other: str  # the other tenant
    own: JobDefinition  # A's one valid job (the base of its hostile puts)
    runs_topic: str  # cronstream's own runs topic
    ports: tuple[int, ...]  # services listening on 127.0.0.1
    registry_port: int


def _cmd(action: TenantAction, job_id: str, **fields: object) -> TenantCommand:
    return TenantCommand(
        command_id=uuid.uuid4().hex, action=action, job_id=job_id, issued_at=utc_now(), **fields
    )  # type: ignore[arg-type]


def _put(v: Victims, job_id: str, target: Target | None = None, **changes: object) -> TenantCommand:
    definition = replace(v.own, job_id=job_id, target=target or v.own.target, **changes)  # type: ignore[arg-type]
    return _cmd(TenantAction.PUT, job_id, job=definition)


def http_target(url: str, method: str = "POST") -> Target:
    return Target(type="http", url=url, method=method)


def _sneaky(v: Victims, i: int) -> TenantCommand:
    """A loopback address spelled as a host name (or in a NAT64 prefix): public to the
    admission's policy; every 5 s, a GET of the chaos registry's subjects."""
    host = ("127.1", "0x7f.0.0.1", "[64:ff9b::7f00:1]")[i % 3]
    url = f"http://{host}:{v.registry_port}/apis/ccompat/v7/subjects"
    return _put(
        v,
        f"sneak-{i % 3}",
        http_target(url, "GET"),
        schedule=IntervalSchedule(every_ms=5000, anchor=utc_now()),
    )


def _bad(v: Victims, i: int) -> TenantCommand:
    bad = bad_updates(v.own, utc_now())[i % 8]
    return _cmd(TenantAction.PUT, bad.job_id, job=bad)


KINDS: list[Kind] = [
    ("put http://[zz]/", lambda v, i: _put(v, "zz", http_target("http://[zz]/"))),
    (
        "put python os:system",
        lambda v, i: _put(v, "py", Target(type="python", callable="os:system"), payload="id"),
    ),
    ("put shell sh -c id", lambda v, i: _put(v, "sh", Target(type="shell", command="sh -c id"))),
    (
        "put kafka to cronstream's runs topic",
        lambda v, i: _put(v, "k", Target(type="kafka", topic=v.runs_topic)),
    ),
    (
        "put kafka to the other tenant's topic",
        lambda v, i: _put(v, "k2", Target(type="kafka", topic=f"{v.other}.events")),
    ),
    (
        "put http 127.0.0.1:<a stack port>",
        lambda v, i: _put(v, "lo", http_target(f"http://127.0.0.1:{v.ports[i % len(v.ports)]}/")),
    ),
    (
        "put http localhost / [::ffff:127.0.0.1]",
        lambda v, i: _put(
            v,
            "lo2",
            http_target(
                ("http://localhost:{}/", "http://[::ffff:127.0.0.1]:{}/")[i % 2].format(
                    v.registry_port
                )
            ),
        ),
    ),
    (
        "put http 169.254.169.254",
        lambda v, i: _put(v, "md", http_target("http://169.254.169.254/latest/meta-data/")),
    ),
    ("put a target of hostile.HOSTILE_TARGETS", lambda v, i: _put(v, "ht", HOSTILE_TARGETS[i % 5])),
    ("put an invalid definition (hostile.bad_updates)", _bad),
    ("put a job id with control characters", lambda v, i: _put(v, CONTROL_IDS[i % 5])),
    ("put without a definition", lambda v, i: _cmd(TenantAction.PUT, "empty")),
    (
        "put naming the other tenant (id and tenant field)",
        lambda v, i: _put(v, f"{v.other}/spoof", tenant=v.other),
    ),
    ("put http to a loopback spelled as a name", _sneaky),
    ("trigger (over the quota)", lambda v, i: _cmd(TenantAction.TRIGGER, "victim")),
    ("trigger (over the quota)", lambda v, i: _cmd(TenantAction.TRIGGER, "victim")),
    (
        "trigger with a control character in its key",
        lambda v, i: _cmd(TenantAction.TRIGGER, "victim", idempotency_key="k\x07"),
    ),
    (
        "cancel the other tenant's job",
        lambda v, i: _cmd(TenantAction.CANCEL, "probe-0", run_id="probe-0@manual-x"),
    ),
    (
        "cancel the other tenant's run via its own job",
        lambda v, i: _cmd(TenantAction.CANCEL, "victim", run_id=f"{v.other}/probe-0@manual-x"),
    ),
    (
        "delete/pause the other tenant's job by path",
        lambda v, i: _cmd(
            (TenantAction.DELETE, TenantAction.PAUSE)[i % 2],
            (f"../{v.other}/probe-0", f"{v.other}/probe-0")[i % 2],
        ),
    ),
]
# Written near the end: the first 85 % show what each other kind gets if one of these
# stops the admission.
RARE: list[Kind] = [
    ("put a 1 MB payload", lambda v, i: _put(v, "big", payload="x" * 1_000_000)),
    (
        "cancel a 600 KB run id",
        lambda v, i: _cmd(TenantAction.CANCEL, "victim", run_id="r" * 600_000),
    ),
    ("put a 400 KB job id", lambda v, i: _put(v, "j" * BIG)),
]


def hostile_commands(
    v: Victims, prefix: bytes, encode: Callable[[TenantCommand], bytes], count: int
) -> Iterator[tuple[str, bytes | None, bytes]]:
    """``count`` (label, key, value) records for A's commands topic: the malformed kinds
    of ``hostile.malformed`` (their valid value a trigger of A's job) and every kind of
    ``KINDS`` in turn, the ``RARE`` ones every 30th record of the last 300."""
    rare = iter(RARE * 4)
    turn = len(MALFORMED) + len(KINDS)
    for i in range(count):
        kind = next(rare, None) if i >= count - 300 and i % 30 == 0 else None
        if kind is None and i % turn < len(MALFORMED):
            good = encode(_cmd(TenantAction.TRIGGER, "victim"))
            record = malformed(prefix, good, i % turn)
            assert record is not None  # kinds 0-6 are the generic ones
            key, value = record
            yield MALFORMED[i % turn], key, value or b""
            continue
        label, make = kind or KINDS[i % turn - len(MALFORMED)]
        command = make(v, i // turn)  # the kind's own count: its variants in turn
        yield label, command.job_id.encode()[:200], encode(command)
