"""Which skill, if any, a request gets: the tenant's fitted rule, or the fixed threshold before any fit.

With a current fitted rule (:mod:`skillflow.injection.applicability`) the request is viewed as the rule
says (over the conversation so far), redacted and vectorised exactly like the stored history
(:func:`skillflow.injection.views.vectors`), and :func:`skillflow.injection.rule.decide` picks at
most one skill — never one of an intent the calls already made contradict. A stale rule (fitted for
another set of live skills) injects nothing. A tenant without a rule keeps the configured threshold over
the skills' own vectors (exact, pruned search), with the same conversation checks: candidates whose
procedure contradicts the calls made are dropped and those that continue them come first. A tenant without
an ACTIVE skill gets nothing without its request being embedded (the embedder is never loaded for it).

Done means done: the request is read from the first user message after the last successful write
(:meth:`~skillflow.injection.conversation.Conversation.request`), and a skill whose intent's write already
succeeded with no user message after it is not injected (reason ``done``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, bindparam, select

from skillflow.injection.applicability import CURRENT, RULES, STALE, UNREADABLE, class_procedure
from skillflow.injection.conversation import LAST, Conversation, view_text
from skillflow.injection.embeddings import Embedder
from skillflow.injection.retrieval import ScoredSkill, search_skills
from skillflow.injection.rule import READ_ONLY, Rule, decide
from skillflow.injection.views import RECENT_TEXTS, vectors
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import SkillStatus
from skillflow.storage.schema import skillbox


@dataclass(frozen=True)
class Selection:
    """The chosen skills and why (``state``: current | stale | uncalibrated; ``reason`` a fixed phrase)."""

    skills: list[ScoredSkill]
    state: str
    reason: str


_SKILL = select(skillbox).where(
    skillbox.c.id == bindparam("skill_id"),
    skillbox.c.agent_id == bindparam("agent_id"),
    skillbox.c.user_id == bindparam("user_id"),
    skillbox.c.status == SkillStatus.ACTIVE.value,
)  # built once: it runs on every request that gets a skill


def _skill(conn: Connection, skill_id: str, agent_id: str, user_id: str, score: float) -> ScoredSkill | None:
    params = {"skill_id": skill_id, "agent_id": agent_id, "user_id": user_id}
    row = conn.execute(_SKILL, params).mappings().first()
    return None if row is None else ScoredSkill.from_row(row, score)


def procedures(conn: Connection, agent_id: str, user_id: str, hashes: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The tool procedure of each class (from its newest run)."""
    return {h: class_procedure(conn, agent_id, user_id, h) for h in dict.fromkeys(hashes)}


DONE = "done: its write already succeeded and no user message came after it"


def _apply(
    conn: Connection,
    rule: Rule,
    q: np.ndarray,
    prefix: Sequence[str],
    agent_id: str,
    user_id: str,
    done: Callable[[str], bool] = lambda intent: False,
    one_message: bool = False,
) -> Selection:
    d = decide(rule, q, prefix, one_message=one_message)
    intent = next((s.intent for s in rule.skills if s.skill_id == d.skill_id), None) if d.skill_id else None
    if intent is not None and done(intent):
        return Selection([], CURRENT, DONE)
    chosen = _skill(conn, d.skill_id, agent_id, user_id, d.score) if d.skill_id else None
    return Selection([chosen] if chosen else [], CURRENT, d.reason)


def select_rule_skill(
    engine: Engine, model_id: str, agent_id: str, user_id: str, q: np.ndarray, prefix: Sequence[str]
) -> tuple[str, Selection | None]:
    """The fitted rule's part of :func:`select_skills` for a vector already in the rule's view (the benchmarks
    time retrieval without the embedding with it): the tenant's rule state, and its choice when current."""
    with engine.connect() as conn:
        tenant = RULES.current(conn, agent_id, user_id, model_id)
        if tenant.state != CURRENT or tenant.rule is None or not tenant.rule.injects:
            return tenant.state, None
        return CURRENT, _apply(conn, tenant.rule, q, prefix, agent_id, user_id)


def select_skills(
    engine: Engine,
    embedder: Embedder,
    agent_id: str,
    user_id: str,
    query: str,
    config: PromotionConfig,
    *,
    conversation: Conversation | None = None,
    form: Callable[[str], str] = lambda t: t,
    changes_state: Callable[[str], bool] = lambda t: False,
    bound: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> Selection:
    """The skills to render for ``query`` after ``conversation`` (see the module docstring). ``bound`` wraps
    each unit of database work (the runtime passes its deadline: a database that stalls cannot hold the
    agent, docs/RELIABILITY.md); the request's embedding runs between them, outside the bound."""
    conv = conversation or Conversation()
    messages = conv.request(query, changes_state)
    prefix = conv.prefix(changes_state)

    def done(intent: str) -> bool:
        return conv.done(intent, query, changes_state)

    if config.max_skills_in_context <= 0 or not messages:
        return Selection([], "off", "no request")
    with bound(), engine.connect() as conn:  # the database work is bounded, the embedding between is not
        tenant = RULES.current(conn, agent_id, user_id, embedder.model_id)
    if tenant.state == STALE:
        return Selection([], STALE, "rule fitted for other live skills; refit at the next cycle")
    if tenant.state == UNREADABLE:
        return Selection([], UNREADABLE, "stored rule unreadable; refit at the next cycle")
    if tenant.state == CURRENT and tenant.rule is not None:
        rule = tenant.rule
        if not rule.injects or rule.view is None:
            return Selection([], CURRENT, rule.reason or "inject nothing")
        if not view_text(messages, LAST, form):
            return Selection([], CURRENT, "empty request")
        q = vectors([messages], rule.view, embedder, form, cached=True)[0]
        with bound(), engine.connect() as conn:
            return _apply(conn, rule, q, prefix, agent_id, user_id, done, len(messages) == 1)
    if not tenant.live:
        return Selection([], "uncalibrated", "no live skill")
    text = view_text(messages, LAST, form)
    if not text:
        return Selection([], "uncalibrated", "empty request")
    vec = RECENT_TEXTS.embed(embedder, [text])[0]  # a turn's later calls reuse it, as the fitted rule's do
    with bound(), engine.connect() as conn:
        found = search_skills(
            conn,
            vec,
            embedder.model_id,
            agent_id,
            user_id,
            SkillStatus.ACTIVE,
            k=config.max_skills_in_context,
            min_score=config.retrieval_min_similarity,
        )
        procs = procedures(conn, agent_id, user_id, [s.canonical_hash for s in found]) if found and conv.calls else {}
    if found and conv.calls:
        if prefix:
            cont = [s for s in found if procs[s.canonical_hash][: len(prefix)] == prefix]
            rest = [s for s in found if s not in cont and set(prefix) <= set(procs[s.canonical_hash])]
            found = cont + rest
        open_ = [s for s in found if not done(_intent(procs[s.canonical_hash], changes_state))]
        if found and not open_:
            return Selection([], "uncalibrated", DONE)
        found = open_
    return Selection(found, "uncalibrated", "fixed threshold")


def _intent(procedure: Sequence[str], changes_state: Callable[[str], bool]) -> str:
    """The state-changing call a procedure ends in, or ``read-only``."""
    return procedure[-1] if procedure and changes_state(procedure[-1]) else READ_ONLY
