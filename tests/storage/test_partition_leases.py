"""A partition's lease excludes a worker of the release before the length-prefixed lease name.

Workers before the length prefix took ``promotion:<agent>:<user>``; the prefix made it
``promotion:<len(agent)>:<agent>:<user>`` so that (``acme:eu``, ``bob``) and (``acme``, ``eu:bob``) are two
leases. During a rolling upgrade an old and a new worker on one partition would not see each other's lease,
so a new worker also holds the legacy name (docs/RELIABILITY.md, "Found by the suite").
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from skillflow.kernel.config import Settings
from skillflow.kernel.models import utcnow
from skillflow.promotion import cycle
from skillflow.promotion.chunk import LEASE_HELD
from skillflow.storage.leases import acquire
from skillflow.storage.schema import leases
from tests.support.promotion import config

SETTINGS = Settings(embedder="hashing")


def old_worker_name(agent_id: str, user_id: str) -> str:
    """The lease name as a worker before the length prefix spelled it (``git log -S'len(agent_id)}:'``)."""
    name = f"promotion:{agent_id}:{user_id}"
    return name if len(name) <= 300 else "promotion:" + hashlib.sha256(name.encode()).hexdigest()


def _held(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {r.name: r.holder for r in conn.execute(select(leases.c.name, leases.c.holder))}


def _expire_all(engine: Engine) -> None:
    """What a crash leaves once ``LEASE_TTL_SECONDS`` have passed: every lease expired, none released."""
    with engine.begin() as conn:
        conn.execute(update(leases).values(expires_at=utcnow() - timedelta(seconds=1)))


LONG = ("a" * 150, "u" * 150)  # the old name is over 300 characters: an old worker took its sha256 form


@pytest.mark.parametrize(("agent_id", "user_id"), [("acme", "bob"), LONG], ids=["short", "hashed"])
def test_a_cycle_skips_a_partition_an_old_worker_holds(engine: Engine, agent_id: str, user_id: str) -> None:
    old = old_worker_name(agent_id, user_id)
    assert acquire(engine, old, "old-worker-run", 900)  # what an old worker's cycle does first
    report = cycle.run_partition(engine, agent_id, user_id, config(), flow_run_id="new-worker-run", settings=SETTINGS)
    assert report.partition_skipped == LEASE_HELD  # before: the cycle ran beside the old worker's
    assert _held(engine) == {old: "old-worker-run"}  # the new worker gave back what it had taken


def test_an_old_worker_is_refused_while_a_new_one_runs_the_partition(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skillflow.promotion import staleness

    seen: list[bool] = []
    sweep = staleness.sweep

    def old_worker_starts(*args: Any, **kwargs: Any) -> Any:  # the new worker's first stage, under its lease
        seen.append(acquire(engine, old_worker_name("acme", "bob"), "old-worker-run", 900))
        return sweep(*args, **kwargs)

    monkeypatch.setattr(staleness, "sweep", old_worker_starts)
    report = cycle.run_partition(engine, "acme", "bob", config(), flow_run_id="new-worker-run", settings=SETTINGS)
    assert report.partition_skipped is None and report.partition_failed is None
    assert seen == [False]  # before: True, both cycles ran the partition at once
    assert _held(engine) == {}  # both names released at the end


def test_colliding_tenants_keep_distinct_leases_and_share_only_the_legacy_name(engine: Engine) -> None:
    one, other = cycle.lease_names("acme:eu", "bob"), cycle.lease_names("acme", "eu:bob")
    assert one[0] != other[0]  # two partitions, two leases (tests/storage/test_hostile_callers.py)
    assert one[1] == other[1] == old_worker_name("acme", "eu:bob")  # the old workers' one name for both
    assert cycle.lease_names("acme", "bob") == (cycle.lease_name("acme", "bob"), "promotion:acme:bob")
    from skillflow.storage.leases import acquire_all, release_all

    assert acquire_all(engine, one, "cycle-x", 900)
    assert not acquire_all(engine, other, "cycle-y", 900)  # they take turns while the legacy name is held
    assert _held(engine) == dict.fromkeys(one, "cycle-x")  # the refused one kept nothing
    release_all(engine, one, "cycle-x")
    assert acquire_all(engine, other, "cycle-y", 900)


def test_releasing_frees_both_names(engine: Engine) -> None:
    from skillflow.storage.leases import acquire_all, release_all

    names = cycle.lease_names("acme", "bob")
    assert acquire_all(engine, names, "cycle-x", 900)
    assert acquire_all(engine, names, "cycle-x", 900)  # a retry of the same flow run takes them again
    assert set(_held(engine)) == set(names)
    release_all(engine, names, "cycle-y")  # only the holder can give them back
    assert set(_held(engine)) == set(names)
    release_all(engine, names, "cycle-x")
    assert _held(engine) == {}
    assert acquire(engine, old_worker_name("acme", "bob"), "old-worker-run", 900)


def test_a_crashed_holders_names_both_expire(engine: Engine) -> None:
    from skillflow.storage.leases import acquire_all

    names = cycle.lease_names("acme", "bob")
    assert acquire_all(engine, names, "crashed-run", 900)  # then killed: nothing released
    assert not acquire(engine, old_worker_name("acme", "bob"), "old-worker-run", 900)
    assert not acquire_all(engine, names, "next-run", 900)
    _expire_all(engine)
    assert acquire(engine, old_worker_name("acme", "bob"), "old-worker-run", 900)  # the legacy name is free
    _expire_all(engine)
    assert acquire_all(engine, names, "next-run", 900)  # and so is the partition
    assert _held(engine) == dict.fromkeys(names, "next-run")


def test_a_finished_cycles_retry_releases_both_names(engine: Engine) -> None:
    """A retry that finds its flow run's report (killed after the mark) releases the crashed attempt's leases."""
    first = cycle.run_partition(engine, "acme", "bob", config(), flow_run_id="run-1", settings=SETTINGS)
    assert first.partition_skipped is None and _held(engine) == {}
    from skillflow.storage.leases import acquire_all

    assert acquire_all(engine, cycle.lease_names("acme", "bob"), "run-1", 900)  # as the killed attempt left them
    again = cycle.run_partition(engine, "acme", "bob", config(), flow_run_id="run-1", settings=SETTINGS)
    assert again.cycle == first.cycle and _held(engine) == {}
