"""Shared fixtures: migrated databases on SQLite and on the real PostgreSQL server, corpora, Prefect.

Speed (docs/BENCHMARKS.md, "The test suite"): each backend is migrated once per session (per xdist worker)
into a template that every test copies (SQLite: the file; PostgreSQL: ``CREATE DATABASE ... TEMPLATE``);
hypothesis runs the ``HYPOTHESIS_PROFILE`` profile (``dev`` unless set; ``make test`` sets ``ci``); a module with a
module-scoped fixture runs on one xdist worker (its ``xdist_group``) so that the fixture is built once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One Prefect home per test process: xdist workers (and the CLI subprocesses they start) never share the
# ephemeral server's database with each other or with the developer's `.prefect/`.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix=f"prefect-home-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")

# Moderate example counts, no deadline (a busy 2-core CI machine must not turn into flaky timing failures).
settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

pytest_plugins = ["tests.support.promotion"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SKILLFLOW_SHARED_DIR", ROOT.parent / "shared"))
CORPORA = SHARED / "corpora"
TAU_BENCH = CORPORA / "tau-bench" / "gpt-4o-airline.json"
POSTGRES_DSN = os.environ.get("SKILLFLOW_TEST_POSTGRES_DSN")
PG_SKIP_REASON = "SKILLFLOW_TEST_POSTGRES_DSN is not set (CI sets it; locally: export it to run the PostgreSQL tests)"


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session; tests copy it instead of migrating their own."""
    path = tmp_path_factory.mktemp("template") / "skillflow.db"
    eng = make_engine(f"sqlite:///{path}")
    migrate(eng)
    eng.dispose()
    return path


@contextmanager
def _pg_database(name: str, template: str | None = None) -> Iterator[str]:
    """A database created on the PostgreSQL server (copied from ``template`` when given); yields its URL and
    drops it after, whoever still holds a connection to it."""
    assert POSTGRES_DSN
    admin = make_engine(POSTGRES_DSN).execution_options(isolation_level="AUTOCOMMIT")
    copy = f' TEMPLATE "{template}"' if template else ""
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"{copy}'))
    try:
        yield make_url(POSTGRES_DSN).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A PostgreSQL database migrated once per session (per worker); tests clone it and drop their clone."""
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    name = f"sf_tpl_{_worker()}_{uuid.uuid4().hex[:8]}"
    with _pg_database(name) as url:
        eng = make_engine(url)
        migrate(eng)
        eng.dispose()  # a template with an open connection cannot be copied
        yield name


def _pg_clone(template: str) -> Iterator[str]:
    """A fresh database copied from the migrated template for one test; yields its URL, drops it after."""
    with _pg_database(f"sf_t_{uuid.uuid4().hex[:12]}", template) as url:
        yield url


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


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A fresh, empty schema on the PostgreSQL server: a URL whose search_path is that schema; dropped after."""
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    yield from _pg_engine()


@pytest.fixture
def pg_engine(pg_schema_url: str) -> Iterator[Engine]:
    """A migrated PostgreSQL schema's engine, for tests whose subject is the server's row locks (no SQLite twin)."""
    engine = make_engine(pg_schema_url)
    migrate(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL on each backend: empty (SQLite file; PostgreSQL schema), or, when the test also uses
    ``engine``, that engine's migrated database (a copy of the session's template)."""
    migrated = "engine" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "skillflow.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    if migrated:
        yield from _pg_clone(request.getfixturevalue("pg_template"))
    else:
        yield from _pg_engine()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A migrated engine on each backend (``db_url`` copied it from the migrated template)."""
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def sqlite_engine(tmp_path: Path, sqlite_template: Path) -> Iterator[Engine]:
    path = tmp_path / "skillflow.db"
    shutil.copyfile(sqlite_template, path)
    eng = make_engine(f"sqlite:///{path}")
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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups off the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under xdist, keep each module that has a module-scoped fixture (a Prefect server, a fleet, an evaluation
    run, a loaded model) on one worker, so that the fixture is built once rather than once per worker. xdist's hook
    reads the ``xdist_group`` marks as it runs: this one must run first (otherwise no test is grouped)."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)  # pytest's resolved fixtures of the item
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d and d[-1].scope in ("module", "class") for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
