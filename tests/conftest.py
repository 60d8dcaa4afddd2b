"""Shared fixtures: migrated databases on SQLite and on the real PostgreSQL server, corpora, Prefect."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = ["tests.support.promotion"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SKILLFLOW_SHARED_DIR", ROOT.parent / "shared"))
CORPORA = SHARED / "corpora"
TAU_BENCH = CORPORA / "tau-bench" / "gpt-4o-airline.json"
POSTGRES_DSN = os.environ.get("SKILLFLOW_TEST_POSTGRES_DSN")
PG_SKIP_REASON = "SKILLFLOW_TEST_POSTGRES_DSN is not set (CI sets it; locally: export it to run the PostgreSQL tests)"


def _pg_engine() -> Iterator[str]:
    """A fresh schema on the PostgreSQL server for one test; yields a URL whose search_path is that schema."""
    assert POSTGRES_DSN
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = make_engine(POSTGRES_DSN)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in POSTGRES_DSN else "?"
    url = f"{POSTGRES_DSN}{sep}options=-csearch_path%3D{schema}"
    try:
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database URL on each backend (SQLite file; PostgreSQL schema)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'skillflow.db'}"
        return
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    yield from _pg_engine()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A migrated engine on each backend."""
    eng = make_engine(db_url)
    migrate(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    eng = make_engine(f"sqlite:///{tmp_path / 'skillflow.db'}")
    migrate(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def tau_bench_path() -> Path:
    if not TAU_BENCH.is_file():
        pytest.skip(f"τ-bench corpus not found at {TAU_BENCH} (it lives in ../shared/corpora; CI has it)")
    return TAU_BENCH


@pytest.fixture
def corpora_dir() -> Path:
    if not CORPORA.is_dir():
        pytest.skip(f"corpora not found at {CORPORA} (they live in ../shared/corpora; CI has it)")
    return CORPORA


@pytest.fixture
def api_bank_half(corpora_dir: Path, tmp_path: Path) -> Path:
    """Every second API-Bank level-1 scenario (all of its dialogs), copied into a temporary folder: the same
    format and grouping as the whole corpus at about half the fitting time, for tests of the bench's plumbing."""
    root = corpora_dir / "api-bank" / "level-1-given-desc"
    files = sorted(root.glob("*.jsonl"))
    keep = sorted({f.stem.rsplit("-", 1)[0] for f in files})[::2]
    out = tmp_path / "api-bank-half"
    out.mkdir()
    for f in files:
        if f.stem.rsplit("-", 1)[0] in keep:
            (out / f.name).write_bytes(f.read_bytes())
    return out


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One session-scoped ephemeral Prefect server for the tests that run real flows."""
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED", "false")
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with (
        prefect_test_harness(server_startup_timeout=120),
        temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
    ):
        yield
