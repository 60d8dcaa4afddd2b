"""Live skill names are unique per tenant, enforced by ``uq_skillbox_live_name_key`` on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, select, text, update
from sqlalchemy.exc import IntegrityError
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.models import LIVE_STATUSES, SkillStatus
from skillflow.lifecycle.decisions import ActivationRefused, activate_skill, demote_skill
from skillflow.lifecycle.revisions import EditRefused, edit_skill
from skillflow.lifecycle.rollback import rollback_skill
from skillflow.lifecycle.transfer import import_skill
from skillflow.promotion import cycle as promotion
from skillflow.promotion import landing
from skillflow.promotion.cycle import run_partition
from skillflow.promotion.landing import NAME_TAKEN, store_skill
from skillflow.promotion.stages import gather_evidence, validate_draft
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skillbox
from skillflow.storage.skills import ALLOWED, NameTaken, get_skill, insert_skill, live_name_key, transition
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN, _pg_engine
from tests.support.promotion import AGENT, agent, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")

H1, H2, H3 = "1" * 64, "abcdef" + "2" * 58, "3" * 64
CONTENT = '---\nname: refund-order\ndescription: "Use when a customer wants a refund."\n---\n\n## Steps\n1. x\n'


@pytest.fixture
def pg_engine() -> Iterator[Engine]:
    """A migrated engine on a throwaway PostgreSQL schema (real concurrent transactions)."""
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    for url in _pg_engine():
        eng = make_engine(url)
        migrate(eng)
        yield eng
        eng.dispose()


def _skill(conn: Connection, chash: str, status: SkillStatus, name: str = "refund-order", user: str = "u") -> str:
    return insert_skill(
        conn, agent_id="a", user_id=user, canonical_hash=chash, name=name, description="d", content=CONTENT,
        status=status,
    ).id  # fmt: skip


def _key(engine: Engine, skill_id: str) -> str | None:
    with engine.connect() as conn:
        return conn.execute(select(skillbox.c.live_name_key).where(skillbox.c.id == skill_id)).scalar()


def test_the_key_admits_one_live_skill_per_name_per_tenant(engine: Engine) -> None:
    with engine.begin() as conn:
        first = _skill(conn, H1, SkillStatus.ACTIVE)
    with pytest.raises(IntegrityError), engine.begin() as conn:  # another class, same tenant, same name
        _skill(conn, H2, SkillStatus.SHADOW)
    with engine.begin() as conn:
        other_tenant = _skill(conn, H2, SkillStatus.SHADOW, user="other")
        retired = _skill(conn, H3, SkillStatus.REJECTED)  # not live: no key, no conflict
    assert _key(engine, first) == live_name_key("a", "u", "refund-order")
    assert _key(engine, other_tenant) == live_name_key("a", "other", "refund-order") != _key(engine, first)
    assert _key(engine, retired) is None
    with engine.begin() as conn:
        transition(conn, first, SkillStatus.DEMOTED, actor="test", reason="drift")
        second = _skill(conn, H2, SkillStatus.SHADOW)  # the demotion freed the name
    assert _key(engine, first) is None and _key(engine, second) == live_name_key("a", "u", "refund-order")


PAIRS = [(frm, to) for frm, targets in ALLOWED.items() for to in sorted(targets)]


@pytest.mark.parametrize(("frm", "to"), PAIRS, ids=[f"{f.value}-{t.value}" for f, t in PAIRS])
def test_every_transition_keeps_the_name_key_set_exactly_while_live(
    sqlite_engine: Engine, frm: SkillStatus, to: SkillStatus
) -> None:
    with sqlite_engine.begin() as conn:
        sid = _skill(conn, H1, frm)
    assert (_key(sqlite_engine, sid) is not None) == (frm in LIVE_STATUSES)
    with sqlite_engine.begin() as conn:
        transition(conn, sid, to, actor="test", reason="r")
    assert _key(sqlite_engine, sid) == (live_name_key("a", "u", "refund-order") if to in LIVE_STATUSES else None)


def test_a_legacy_duplicate_cannot_go_live_under_the_taken_name(engine: Engine) -> None:
    with engine.begin() as conn:
        _skill(conn, H1, SkillStatus.ACTIVE)
        dup = _skill(conn, H2, SkillStatus.SHADOW, name="refund-order-x")
        # What migration 012 leaves for a pre-existing duplicate: the same name, no key.
        conn.execute(update(skillbox).where(skillbox.c.id == dup).values(name="refund-order", live_name_key=None))
    with pytest.raises(NameTaken, match="name refund-order is used by live skill"):
        activate_skill(engine, dup, "user", actor="alice")
    with engine.connect() as conn:
        assert get_skill(conn, dup).status == "shadow"


# ---- landing -----------------------------------------------------------------------------------------------------


def _ready(engine: Engine) -> tuple[Any, Any, Any, Any]:
    """A distilled, validated skill of a real class (the offline distiller), ready to land."""
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
    [stats] = promotion.assess_classes(engine, AGENT, "u1", sf.config, promotion.utcnow(), 1)
    evidence = gather_evidence(engine, stats.stats, sf.config)
    outcome = promotion.distill_evidence(evidence, sf.config)
    validation = validate_draft(outcome.skill_md, evidence, sf.config)
    assert validation.ok, validation.reasons
    return sf, evidence, outcome, validation


def _as_class(evidence: Any, canonical_hash: str) -> Any:
    """The same evidence under another class key: two classes whose distilled skills share a name."""
    return dataclasses.replace(evidence, stats=dataclasses.replace(evidence.stats, canonical_hash=canonical_hash))


def _race_landing(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Two stores of different classes, both past ``unique_name`` before either inserts (two workers)."""
    sf, evidence, outcome, validation = _ready(engine)
    barrier, waited = threading.Barrier(2, timeout=30), set()
    real = landing.unique_name

    def in_step(*args: Any) -> str | None:
        name = real(*args)
        if threading.get_ident() not in waited:  # only the first attempt: a retry runs alone
            waited.add(threading.get_ident())
            barrier.wait()
        return name

    monkeypatch.setattr(landing, "unique_name", in_step)
    out: list[Any] = [None, None]

    def worker(i: int) -> None:
        try:
            out[i] = store_skill(engine, _as_class(evidence, (H1, H2)[i]), outcome, validation, sf.config)
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertions
            out[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def _live_names(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        q = select(skillbox.c.name).where(skillbox.c.status.in_([s.value for s in LIVE_STATUSES]))
        return sorted(conn.execute(q).scalars())


@pytest.mark.postgres
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "key-dropped-control"])
def test_concurrent_landings_of_one_name_store_distinct_names(
    pg_engine: Engine, monkeypatch: pytest.MonkeyPatch, with_key: bool
) -> None:
    if not with_key:  # the control: without the database key the same race stores one name twice
        with pg_engine.begin() as conn:
            conn.execute(text("DROP INDEX uq_skillbox_live_name_key"))
    results = _race_landing(pg_engine, monkeypatch)
    assert [r.decision for r in results] == ["promoted", "promoted"], results
    names = _live_names(pg_engine)
    if not with_key:
        assert names[0] == names[1]
        return
    with pg_engine.connect() as conn:
        by_class = dict(conn.execute(select(skillbox.c.canonical_hash, skillbox.c.name)).all())
    base = min(names, key=len)
    loser = next(h for h, n in by_class.items() if n != base)  # the retry suffixed its own class hash prefix
    assert by_class[loser] == f"{base}-{loser[:6]}" and set(by_class) == {H1, H2}


def test_a_name_that_stays_taken_is_rejected_after_one_retry(
    sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sf, evidence, outcome, validation = _ready(sqlite_engine)
    first = store_skill(sqlite_engine, _as_class(evidence, H1), outcome, validation, sf.config)
    assert first.decision == "promoted"
    calls: list[str] = []

    def blind(conn: Any, agent_id: str, user_id: str, name: str, canonical_hash: str) -> str:
        calls.append(name)
        return name  # never sees the live skill holding it: only the database key does

    monkeypatch.setattr(landing, "unique_name", blind)
    late = store_skill(sqlite_engine, _as_class(evidence, H2), outcome, validation, sf.config)
    assert late.decision == "rejected" and late.reasons[0].startswith(NAME_TAKEN)
    assert len(calls) == 2  # the first attempt and one retry
    assert len(_live_names(sqlite_engine)) == 1


# ---- rollback ----------------------------------------------------------------------------------------------------


def _taken_by_another_class(engine: Engine) -> tuple[str, str]:
    """v1 of class H1 was active and demoted; class H2's skill took its name since."""
    with engine.begin() as conn:
        old = _skill(conn, H1, SkillStatus.ACTIVE)
    demote_skill(engine, old, "drift", actor="flow:drift-demotion")
    with engine.begin() as conn:
        holder = _skill(conn, H2, SkillStatus.ACTIVE)
    return old, holder


def test_rollback_into_a_taken_name_is_refused_with_the_holder(engine: Engine, db_url: str) -> None:
    old, holder = _taken_by_another_class(engine)
    with pytest.raises(ActivationRefused, match=f"name refund-order is now used by live skill {holder}"):
        rollback_skill(engine, old, 1, actor="alice", reason="undo")
    result = CliRunner().invoke(app, ["rollback", old, "--to", "1", "--reason", "undo", "--db", db_url])
    assert result.exit_code != 0
    assert "rollback refused" in result.output and "refund-order" in result.output
    assert "IntegrityError" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # a clean exit, no traceback
    with engine.connect() as conn:
        assert get_skill(conn, old).status == "demoted" and get_skill(conn, holder).status == "active"


def test_rollback_racing_a_store_of_the_name_is_a_refusal_not_an_integrity_error(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skillflow.lifecycle import rollback

    old, holder = _taken_by_another_class(engine)
    monkeypatch.setattr(rollback, "rollback_problems", lambda *args: [])  # the check ran before the store landed
    with pytest.raises(ActivationRefused, match="made live concurrently"):
        rollback_skill(engine, old, 1, actor="alice", reason="undo")
    with engine.connect() as conn:
        assert get_skill(conn, old).status == "demoted" and get_skill(conn, holder).status == "active"


def test_rollback_of_a_class_to_its_own_name_still_works(engine: Engine) -> None:
    with engine.begin() as conn:
        v1 = _skill(conn, H1, SkillStatus.ACTIVE)
    demote_skill(engine, v1, "drift", actor="flow:drift-demotion")
    with engine.begin() as conn:
        v2 = _skill(conn, H1, SkillStatus.ACTIVE)  # the class's next version, same name
    restored = rollback_skill(engine, v2, 1, actor="alice", reason="v2 regressed")
    assert restored.id == v1 and restored.status == "active"
    assert _key(engine, v1) == live_name_key("a", "u", "refund-order") and _key(engine, v2) is None


# ---- edit and import ---------------------------------------------------------------------------------------------


def test_an_edit_renaming_into_a_taken_name_is_refused_and_a_free_rename_moves_the_key(engine: Engine) -> None:
    sf = agent(engine, require_shadow=True)
    for i in range(6):
        record_cancel(sf, "u1", i)
    [sid] = run_partition(engine, AGENT, "u1", sf.config).promoted
    with engine.begin() as conn:
        skill = get_skill(conn, sid)
        holder = insert_skill(
            conn, agent_id=AGENT, user_id="u1", canonical_hash=H1, name="cancel-booking", description="d",
            content=CONTENT, status=SkillStatus.SHADOW,
        ).id  # fmt: skip
    taken = skill.content.replace(f"name: {skill.name}", "name: cancel-booking", 1)
    with pytest.raises(EditRefused, match=f"name cancel-booking is used by live skill {holder}"):
        edit_skill(engine, sid, taken, editor="alice", config=sf.config)
    assert _key(engine, sid) == live_name_key(AGENT, "u1", skill.name)
    free = skill.content.replace(f"name: {skill.name}", "name: cancel-a-booking", 1)
    assert edit_skill(engine, sid, free, editor="alice", config=sf.config).changed
    assert _key(engine, sid) == live_name_key(AGENT, "u1", "cancel-a-booking")


def test_an_import_under_a_name_a_distilled_live_skill_holds_is_refused(engine: Engine, tmp_path: Path) -> None:
    sf = agent(engine, require_shadow=True)
    for i in range(6):
        record_cancel(sf, "u1", i)
    [sid] = run_partition(engine, AGENT, "u1", sf.config).promoted
    with engine.connect() as conn:
        skill = get_skill(conn, sid)
    folder = tmp_path / skill.name
    folder.mkdir()
    (folder / "SKILL.md").write_text(skill.content.replace("Check each result", "Confirm each result"), "utf-8")
    result = import_skill(engine, folder, AGENT, "u1", actor="alice", config=sf.config)
    assert result.decision == "refused" and f"a live skill named {skill.name} exists ({sid}" in result.reasons[0]
    assert _live_names(engine) == [skill.name]
