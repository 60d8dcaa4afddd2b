"""Fixtures of the fault tests: twin databases, one killed and re-run, one clean, on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from skillflow.storage.engine import make_engine
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN, _pg_engine


def _sqlite_urls(tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield f"sqlite:///{tmp_path / 'killed.db'}", f"sqlite:///{tmp_path / 'clean.db'}"


def _pg_urls() -> Iterator[tuple[str, str]]:
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    killed, clean = _pg_engine(), _pg_engine()
    try:
        yield next(killed), next(clean)
    finally:
        next(killed, None)
        next(clean, None)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def twins(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    urls = _sqlite_urls(tmp_path) if request.param == "sqlite" else _pg_urls()
    for killed_url, clean_url in urls:
        killed, clean = make_engine(killed_url), make_engine(clean_url)
        try:
            yield killed, clean
        finally:
            killed.dispose()
            clean.dispose()
