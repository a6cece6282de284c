"""The tenant label's cardinality bound (runtime.cardinality.TenantLabels)."""

from __future__ import annotations

from cronstream.runtime.cardinality import TenantLabels


def test_the_first_tenants_keep_their_names_and_later_ones_are_other() -> None:
    labels = TenantLabels(limit=3)
    assert [labels(t) for t in ("a", "b", "a", "c")] == ["a", "b", "a", "c"]
    assert labels("d") == TenantLabels.OTHER
    assert labels("e") == TenantLabels.OTHER
    assert labels("b") == "b"  # a known one stays itself after the bound is reached


def test_a_flood_of_distinct_tenants_stays_within_the_bound() -> None:
    labels = TenantLabels(limit=100)
    seen = {labels(f"tenant-{i}") for i in range(10_000)}
    assert len(seen) == 101  # 100 names and _other
