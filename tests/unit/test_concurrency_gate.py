"""The concurrency policies' decisions (consumers.core.concurrency), item by item."""

from __future__ import annotations

from cronstream.consumers.core.concurrency import START, ConcurrencyGate


def gate_with(policy: str, *running: str) -> ConcurrencyGate[str]:
    gate: ConcurrencyGate[str] = ConcurrencyGate()
    for run_id in running:
        assert gate.admit("j", run_id, attempt=1, policy=policy, item=run_id) == START
        gate.started("j", run_id, policy=policy, item=run_id)
    return gate


def test_allow_always_starts_and_tracks_nothing() -> None:
    gate = gate_with("ALLOW", "j@1", "j@2")
    assert gate.admit("j", "j@3", attempt=1, policy="ALLOW", item="j@3") == START
    assert gate.running == {}


def test_forbid_skips_a_new_run_naming_the_one_still_running() -> None:
    gate = gate_with("FORBID", "j@1")
    decision = gate.admit("j", "j@2", attempt=1, policy="FORBID", item="j@2")
    assert not decision.start
    assert decision.skip_reason == "concurrency forbid: run j@1 of the job is still running"
    assert gate.ended("j", "j@1") is None
    assert gate.admit("j", "j@3", attempt=1, policy="FORBID", item="j@3") == START


def test_a_retry_attempt_always_starts_whatever_the_policy() -> None:
    for policy in ("FORBID", "QUEUE", "REPLACE"):
        gate = gate_with(policy, "j@1")
        assert gate.admit("j", "j@0", attempt=2, policy=policy, item="j@0") == START


def test_replace_names_the_runs_to_cancel_and_starts() -> None:
    gate = gate_with("REPLACE", "j@1")
    decision = gate.admit("j", "j@2", attempt=1, policy="REPLACE", item="j@2")
    assert decision.start
    assert decision.cancel == ("j@1",)
    gate.started("j", "j@2", policy="REPLACE", item="j@2")
    assert gate.ended("j", "j@1") is None  # j@2 still runs
    assert set(gate.running["j"]) == {"j@2"}


def test_queue_starts_runs_one_after_the_other_in_order() -> None:
    gate = gate_with("QUEUE", "j@1")
    for run_id in ("j@2", "j@3"):
        decision = gate.admit("j", run_id, attempt=1, policy="QUEUE", item=run_id)
        assert not decision.start
        assert decision.skip_reason is None
    assert len(gate) == 2
    assert gate.ended("j", "j@1") == "j@2"
    # j@2's turn came but it has not started yet: a new run still queues behind j@3.
    assert not gate.admit("j", "j@4", attempt=1, policy="QUEUE", item="j@4").start
    gate.started("j", "j@2", policy="QUEUE", item="j@2")
    assert gate.ended("j", "j@2") == "j@3"
    # j@3 did not start after all (cancelled meanwhile): the next one's turn.
    assert gate.release("j") == "j@4"
    assert gate.release("j") is None
    assert len(gate) == 0
    assert gate.queued == {}


def test_other_jobs_are_not_held_by_a_jobs_queue() -> None:
    gate = gate_with("QUEUE", "j@1")
    assert gate.admit("k", "k@1", attempt=1, policy="QUEUE", item="k@1") == START


def test_revoked_queued_runs_are_dropped() -> None:
    gate = gate_with("QUEUE", "j@1")
    gate.admit("j", "j@2", attempt=1, policy="QUEUE", item="j@2")
    gate.admit("j", "j@3", attempt=1, policy="QUEUE", item="j@3")
    assert gate.drop_queued(lambda item: item == "j@2") == 1
    assert gate.ended("j", "j@1") == "j@3"
