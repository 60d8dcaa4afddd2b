"""Database leases: one holder per name until it expires (overlapping flow runs take turns)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import Engine, delete, insert, update
from sqlalchemy.exc import IntegrityError

from skillflow.kernel.models import utcnow
from skillflow.storage.schema import leases


def acquire(engine: Engine, name: str, holder: str, ttl_seconds: float = 600) -> bool:
    """Take the lease ``name`` for ``holder``; True when held (also when already held by ``holder``)."""
    now = utcnow()
    expires = now + timedelta(seconds=ttl_seconds)
    with engine.begin() as conn:
        taken = conn.execute(
            update(leases)
            .where(leases.c.name == name, (leases.c.expires_at < now) | (leases.c.holder == holder))
            .values(holder=holder, expires_at=expires)
        ).rowcount
        if taken:
            return True
    try:
        with engine.begin() as conn:
            conn.execute(insert(leases).values(name=name, holder=holder, expires_at=expires))
        return True
    except IntegrityError:
        return False


def release(engine: Engine, name: str, holder: str) -> None:
    """Give the lease back (only its holder can)."""
    with engine.begin() as conn:
        conn.execute(delete(leases).where(leases.c.name == name, leases.c.holder == holder))


def acquire_all(engine: Engine, names: Sequence[str], holder: str, ttl_seconds: float = 600) -> bool:
    """Take every lease of ``names`` for ``holder``, in order: True when all are held. When one is held by
    another, the ones taken here are given back and False returned; each expires on its own otherwise (a crash).

    A partition's cycle holds its name and the name a worker of the previous release takes
    (docs/RELIABILITY.md, "Found by the suite"), so the two exclude each other during a rolling upgrade.
    """
    taken: list[str] = []
    for name in names:
        if not acquire(engine, name, holder, ttl_seconds):
            release_all(engine, taken, holder)
            return False
        taken.append(name)
    return True


def release_all(engine: Engine, names: Sequence[str], holder: str) -> None:
    """Give back every lease of ``names`` that ``holder`` holds, in one transaction."""
    if names:
        with engine.begin() as conn:
            conn.execute(delete(leases).where(leases.c.name.in_(list(names)), leases.c.holder == holder))
