"""Database leases: one holder per name until it expires (overlapping flow runs take turns)."""

from __future__ import annotations

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
