"""A stored rule document read back: the same rule, or :class:`RuleDocumentError` — never another exception and
never a rule that raises or injects on a damaged value (docs/RELIABILITY.md, "Faults tried")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillflow.injection.applicability import RuleDocumentError, rule_document, rule_from_document
from skillflow.injection.calibration import Budget, fit
from skillflow.injection.rule import decide
from tests.unit.test_calibration import PRE_A, SKILLS, around, history

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _documents() -> list[dict[str, Any]]:
    budget = Budget(wrong=0.02, false=0.03, min_negatives=5)
    nearest = fit(history(), SKILLS, ["v"], budget, 0.0)
    classifier = fit(history(), SKILLS, ["v"], budget, 0.0, nearest=())  # the classifier's weights and bias too
    assert nearest.injects and classifier.injects and classifier.weights is not None and nearest.weights is None
    return [rule_document(nearest), rule_document(classifier)]


DOCS = _documents()
KEYS = sorted({k for d in DOCS for k in d})


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(range(len(DOCS))),
    st.lists(st.tuples(st.sampled_from(KEYS), st.none() | JSON, st.booleans()), min_size=1, max_size=4),
)
def test_a_damaged_document_is_read_as_a_working_rule_or_refused(which: int, damage: list[Any]) -> None:
    doc = dict(DOCS[which])
    for key, value, drop in damage:
        if drop:
            doc.pop(key, None)
        else:
            doc[key] = value
    try:
        rule = rule_from_document(doc)
    except RuleDocumentError as exc:
        assert str(exc).startswith("stored rule unreadable")
        return
    dim = rule.exemplars.shape[1] if rule.weights is None else rule.weights.shape[1]
    rng = np.random.default_rng(0)
    for prefix in ((), tuple(PRE_A)):
        q = rng.normal(size=dim) if dim else np.zeros(0)
        d = decide(rule, q, prefix, one_message=True)  # never raises
        assert d.skill_id is None or d.skill_id in {s.skill_id for s in rule.skills}
        if d.skill_id is not None:
            assert np.isfinite(d.score)


@pytest.mark.parametrize(
    "damage",
    [
        {"floors": {"cancel_reservation": "NaN"}},
        {"margin": "nan"},
        {"lower_bound": float("nan")},
        {"opening_floors": {"book_reservation": float("nan")}},
    ],
)
def test_a_nan_threshold_is_refused_not_read_as_inject_always(damage: dict[str, Any]) -> None:
    """Every comparison with NaN is False, so a NaN floor or margin read as such would let every score through."""
    with pytest.raises(RuleDocumentError):
        rule_from_document(DOCS[0] | damage)


def test_an_undamaged_document_reads_back_as_the_same_rule() -> None:
    for doc in DOCS:
        rule = rule_from_document(doc)
        assert rule_document(rule) == doc
        q = around(0, np.random.default_rng(3))
        assert decide(rule, q, ()).skill_id in {"sa", "sb"}
