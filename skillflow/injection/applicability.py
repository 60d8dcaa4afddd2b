"""A tenant's stored applicability rule: the live-skill fingerprint, save/load, and the cached current rule.

The rule (:mod:`skillflow.injection.calibration`) is fitted by every promotion cycle and stored with the
fingerprint of the live (ACTIVE) skills it was fitted for. At request time the fingerprint of today's live
skills is compared with the stored one: a rule fitted for another skill set is never applied — the
request gets no skill until the next cycle refits (fail safe). A tenant no cycle has calibrated yet has no
rule at all, and keeps the configured fixed threshold.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, bindparam, delete, func, insert, select

from skillflow.injection.rule import NEVER, READ_ONLY, LiveSkill, Rule
from skillflow.kernel.canonical import sequence_tools
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.kernel.state import changes_state
from skillflow.storage.schema import applicability_rules, skillbox, workflow_memory

log = logging.getLogger(__name__)


def intent_of(procedure: Sequence[str], declared: Mapping[str, bool] | None = None) -> str:
    """The state-changing call a procedure ends in, or ``read-only``."""
    return procedure[-1] if procedure and changes_state(procedure[-1], declared) else READ_ONLY


def class_procedure(conn: Connection, agent_id: str, user_id: str, canonical_hash: str) -> tuple[str, ...]:
    """The tool procedure of a tenant's class, from its newest run."""
    seq = conn.execute(
        select(workflow_memory.c.tool_sequence)
        .where(
            workflow_memory.c.agent_id == agent_id,
            workflow_memory.c.user_id == user_id,
            workflow_memory.c.canonical_hash == canonical_hash,
        )
        .order_by(workflow_memory.c.created_at.desc())
        .limit(1)
    ).scalar()
    return sequence_tools(seq)


def live_skills(
    conn: Connection, agent_id: str, user_id: str, declared: Mapping[str, bool] | None = None
) -> list[LiveSkill]:
    """The tenant's ACTIVE skills with their procedure (from a run of their class), intent and rank."""
    rows = conn.execute(
        select(skillbox.c.id, skillbox.c.canonical_hash, skillbox.c.baseline)
        .where(
            skillbox.c.agent_id == agent_id,
            skillbox.c.user_id == user_id,
            skillbox.c.status == SkillStatus.ACTIVE.value,
        )
        .order_by(skillbox.c.id)
    ).all()
    out: list[LiveSkill] = []
    for sid, chash, baseline in rows:
        proc = class_procedure(conn, agent_id, user_id, str(chash))
        b = baseline if isinstance(baseline, Mapping) else {}
        rank = (float(b.get("success_rate") or 0.0), float(b.get("executions") or 0))
        out.append(LiveSkill(str(sid), str(chash), intent_of(proc, declared), proc, rank))
    return out


def fingerprint(conn: Connection, agent_id: str, user_id: str, model_id: str) -> str:
    """sha256 over the tenant's ACTIVE (id, version, class) and the embedding model."""
    rows = conn.execute(
        select(skillbox.c.id, skillbox.c.version, skillbox.c.canonical_hash)
        .where(
            skillbox.c.agent_id == agent_id,
            skillbox.c.user_id == user_id,
            skillbox.c.status == SkillStatus.ACTIVE.value,
        )
        .order_by(skillbox.c.id)
    ).all()
    text = model_id + "\n" + "\n".join(f"{r[0]}:{r[1]}:{r[2]}" for r in rows)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rule_document(rule: Rule) -> dict[str, Any]:
    """The JSON form stored in ``applicability_rules.rule`` (vectors as base64 float32)."""
    return {
        "view": rule.view,
        "margin": rule.margin,
        "floors": {k: (None if v == NEVER else v) for k, v in rule.floors.items()},
        "opening_floors": {k: (None if v == NEVER else v) for k, v in rule.opening_floors.items()},
        "lower_bound": rule.lower_bound,
        "labels": rule.labels,
        "dim": int(rule.exemplars.shape[1]) if rule.exemplars.ndim == 2 else 0,
        "exemplars": base64.b64encode(np.ascontiguousarray(rule.exemplars, np.float32).tobytes()).decode(),
        "exemplar_labels": [int(x) for x in rule.exemplar_labels],
        "skills": [
            {
                "id": s.skill_id,
                "hash": s.canonical_hash,
                "intent": s.intent,
                "procedure": list(s.procedure),
                "rank": list(s.rank),
            }
            for s in rule.skills
        ],
        "tools_before": rule.tools_before,
        "reason": rule.reason,
        "inner": rule.inner,
        "weights": None if rule.weights is None else _b64(rule.weights),
        "bias": None if rule.bias is None else _b64(rule.bias),
        "strength": rule.strength,
    }


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, np.float64).tobytes()).decode()


class RuleDocumentError(ValueError):
    """A stored rule document that cannot be read back as a working rule (damaged in the database): the tenant
    gets no skill until the next cycle fits it again (docs/RELIABILITY.md, "Faults tried")."""


def rule_from_document(doc: Any) -> Rule:
    """The rule a document of :func:`rule_document` stores. Raises :class:`RuleDocumentError` on one that does not
    read back as a working rule: a value of the wrong type or shape, a label index out of range, a threshold or a
    vector that is NaN (every comparison with NaN is False: a NaN floor would let every score through)."""
    try:
        rule = _read(doc)
    except RuleDocumentError:
        raise
    except Exception as exc:  # any damage reads as one error (its class only: no stored value reaches a log)
        raise RuleDocumentError(f"stored rule unreadable ({type(exc).__name__})") from exc
    return rule


def _threshold(value: Any, name: str) -> float:
    """A stored threshold: ``None`` is ``NEVER``; a number, never NaN."""
    out = NEVER if value is None else float(value)
    if np.isnan(out):
        raise RuleDocumentError(f"stored rule unreadable (NaN {name})")
    return out


def _read(doc: Any) -> Rule:
    if not isinstance(doc, Mapping):
        raise RuleDocumentError("stored rule unreadable (not a JSON object)")
    dim = int(doc.get("dim") or 0)
    labels = [str(x) for x in _list(doc.get("labels"))]
    if dim < 0 or len(set(labels)) != len(labels):
        raise RuleDocumentError("stored rule unreadable (dimension or labels)")
    raw = np.frombuffer(base64.b64decode(doc.get("exemplars") or "", validate=True), dtype=np.float32)
    exemplars = raw.reshape(-1, dim) if dim else np.zeros((0, 0), np.float32)
    lab = np.asarray([int(x) for x in _list(doc.get("exemplar_labels"))], dtype=np.int64)
    weights = bias = None
    if doc.get("weights") and dim:
        weights = np.frombuffer(base64.b64decode(doc["weights"], validate=True), np.float64).reshape(len(labels), dim)
    if doc.get("bias"):
        bias = np.frombuffer(base64.b64decode(doc["bias"], validate=True), np.float64)
    if (
        len(lab) != exemplars.shape[0]
        or (len(lab) and (lab.min() < 0 or lab.max() >= len(labels) or (np.diff(lab) < 0).any()))
        or not np.isfinite(exemplars).all()
        or (weights is None) != (bias is None)
        or (weights is not None and not np.isfinite(weights).all())
        or (bias is not None and (bias.shape != (len(labels),) or np.isnan(bias).any() or (bias == np.inf).any()))
    ):
        raise RuleDocumentError("stored rule unreadable (exemplars, labels or weights disagree)")
    view = doc.get("view")
    strength = doc.get("strength")
    rule = Rule(
        view=None if view is None else str(view),
        margin=_threshold(doc.get("margin") or 0.0, "margin"),
        floors={str(k): _threshold(v, "floor") for k, v in _map(doc.get("floors")).items()},
        lower_bound=_threshold(doc.get("lower_bound") or 0.0, "lower bound"),
        labels=labels,
        exemplars=exemplars,
        exemplar_labels=lab,
        skills=[
            LiveSkill(
                str(s["id"]),
                str(s["hash"]),
                str(s["intent"]),
                tuple(str(t) for t in _list(s["procedure"])),
                tuple(float(x) for x in _list(s.get("rank"))),
            )
            for s in _list(doc.get("skills"))
        ],
        tools_before={str(k): [str(t) for t in _list(v)] for k, v in _map(doc.get("tools_before")).items()},
        reason=str(doc.get("reason") or ""),
        inner=dict(_map(doc.get("inner"))),
        weights=weights,
        bias=bias,
        strength=None if strength is None else float(strength),
        opening_floors={str(k): _threshold(v, "floor") for k, v in _map(doc.get("opening_floors")).items()},
    )
    if rule.injects and (not labels or not dim):
        raise RuleDocumentError("stored rule unreadable (a rule that injects has no labels or no dimension)")
    return rule


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise RuleDocumentError("stored rule unreadable (a list expected)")
    return value


def _map(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RuleDocumentError("stored rule unreadable (an object expected)")
    return value


def save_rule(conn: Connection, agent_id: str, user_id: str, fp: str, model_id: str, rule: Rule, cycle: int) -> None:
    """Replace the tenant's rule (delete + insert: a re-run converges to the same row)."""
    conn.execute(
        delete(applicability_rules).where(
            applicability_rules.c.agent_id == agent_id, applicability_rules.c.user_id == user_id
        )
    )
    conn.execute(
        insert(applicability_rules).values(
            agent_id=agent_id,
            user_id=user_id,
            fingerprint=fp,
            model_id=model_id,
            rule_view=rule.view,
            cycle=cycle,
            fitted_at=utcnow(),
            rule=rule_document(rule),
        )
    )


@dataclass(frozen=True)
class Stored:
    fingerprint: str
    model_id: str
    fitted_at: datetime
    rule: Rule


def load_rule(conn: Connection, agent_id: str, user_id: str) -> Stored | None:
    row = conn.execute(
        select(
            applicability_rules.c.fingerprint,
            applicability_rules.c.model_id,
            applicability_rules.c.fitted_at,
            applicability_rules.c.rule,
        ).where(applicability_rules.c.agent_id == agent_id, applicability_rules.c.user_id == user_id)
    ).first()
    if row is None:
        return None
    return Stored(row[0], row[1], row[2], rule_from_document(row[3]))


UNCALIBRATED = "uncalibrated"
STALE = "stale"
CURRENT = "current"
UNREADABLE = "unreadable"  # the stored document is damaged: nothing is injected until the next fit


@dataclass(frozen=True)
class TenantRule:
    """What applies to a tenant now: ``current`` (``rule`` set), ``stale`` or ``unreadable`` (inject nothing),
    ``uncalibrated``."""

    state: str
    rule: Rule | None = None
    live: bool = True  # the tenant has an ACTIVE skill (without one, a request is never embedded)


# The rule state's version in one statement, built once (the request path runs it on every call): the
# tenant's newest skill change (one seek on the ``(agent_id, user_id, updated_at)`` index) and its rule's fit.
_STAMPS = select(
    select(func.max(skillbox.c.updated_at))
    .where(skillbox.c.agent_id == bindparam("agent_id"), skillbox.c.user_id == bindparam("user_id"))
    .scalar_subquery(),
    select(applicability_rules.c.fitted_at)
    .where(
        applicability_rules.c.agent_id == bindparam("agent_id"),
        applicability_rules.c.user_id == bindparam("user_id"),
    )
    .scalar_subquery(),
)
# Whether the tenant has an ACTIVE skill, read on a cache miss only (any status change bumps the stamp).
_LIVE = (
    select(skillbox.c.id)
    .where(
        skillbox.c.agent_id == bindparam("agent_id"),
        skillbox.c.user_id == bindparam("user_id"),
        skillbox.c.status == SkillStatus.ACTIVE.value,
    )
    .limit(1)
)


class _Cache:
    """Per (engine, tenant, model) rule state, versioned by the skills' newest ``updated_at`` and the rule's."""

    def __init__(self) -> None:
        self._data: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str, str], tuple[Any, TenantRule]]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def current(self, conn: Connection, agent_id: str, user_id: str, model_id: str) -> TenantRule:
        row = conn.execute(_STAMPS, {"agent_id": agent_id, "user_id": user_id}).one()
        stamp = (row[0], row[1])
        key = (agent_id, user_id, model_id)
        with self._lock:
            hit = self._data.get(conn.engine, {}).get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        value = self._state(conn, agent_id, user_id, model_id, row[0] is not None)
        with self._lock:
            self._data.setdefault(conn.engine, {})[key] = (stamp, value)
        return value

    @staticmethod
    def _state(conn: Connection, agent_id: str, user_id: str, model_id: str, any_skill: bool) -> TenantRule:
        try:
            stored = load_rule(conn, agent_id, user_id)
        except RuleDocumentError as exc:  # once per stored version: the state is cached like any other
            log.warning("tenant rule unreadable (%s); injecting nothing until the next fit", exc)
            return TenantRule(UNREADABLE)
        if stored is None:
            live = any_skill and conn.execute(_LIVE, {"agent_id": agent_id, "user_id": user_id}).first()
            return TenantRule(UNCALIBRATED, live=bool(live))
        if stored.model_id != model_id or stored.fingerprint != fingerprint(conn, agent_id, user_id, model_id):
            return TenantRule(STALE)
        return TenantRule(CURRENT, stored.rule)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


RULES = _Cache()
