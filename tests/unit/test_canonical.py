"""Canonical identity: the upstream golden vector, our fixes, and properties over arbitrary input."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from skillflow.kernel import canonical
from skillflow.kernel.models import Step

GOLDEN_JSON = (
    '[{"arg_keys":["order_id"],"errored":false,"tool":"lookup_order"},'
    '{"arg_keys":["amount","order_id"],"errored":false,"tool":"issue_refund"}]'
)
GOLDEN_HASH = "5e6b70e86ec21732b51dd93e2ddd9627b12c43186d3d048e7a8d356b41c37e12"


def _golden_steps(order: str = "A1", amount: float = 10.0) -> list[Step]:
    return [
        Step("lookup_order", {"order_id": order}, {"status": "shipped"}),
        Step("issue_refund", {"order_id": order, "amount": amount}, {"ok": True}),
    ]


def test_golden_vector() -> None:
    units = canonical.signature(_golden_steps())
    assert canonical.signature_json(units) == GOLDEN_JSON
    assert canonical.canonical_hash(units) == GOLDEN_HASH


def test_values_do_not_change_identity() -> None:
    a = canonical.canonical_hash(canonical.signature(_golden_steps("A1", 1)))
    b = canonical.canonical_hash(canonical.signature(_golden_steps("Z9", 999)))
    assert a == b == GOLDEN_HASH


def test_retry_burst_collapses_to_one_clean_unit_and_counts_as_success() -> None:
    steps = [
        Step("lookup_order", {"order_id": "A"}, error="timeout", error_class="TimeoutError"),
        Step("lookup_order", {"order_id": "A"}, error="timeout", error_class="TimeoutError"),
        Step("lookup_order", {"order_id": "A"}, {"ok": 1}),
        Step("issue_refund", {"order_id": "A", "amount": 1}),
    ]
    units = canonical.signature(steps)
    assert len(units) == 2 and units[0].retry_count == 2 and not units[0].errored
    assert canonical.canonical_hash(units) == GOLDEN_HASH
    assert canonical.execution_succeeded(units, None)


def test_two_identical_successes_stay_two_units() -> None:
    steps = [Step("lookup_order", {"order_id": "A"}), Step("lookup_order", {"order_id": "B"})]
    assert len(canonical.signature(steps)) == 2


def test_error_class_is_part_of_identity_and_unrecovered_error_fails() -> None:
    base = [Step("lookup_order", {"order_id": "A"}, error="x", error_class="KeyError")]
    other = [Step("lookup_order", {"order_id": "A"}, error="x", error_class="TimeoutError")]
    ua, ub = canonical.signature(base), canonical.signature(other)
    assert canonical.canonical_hash(ua) != canonical.canonical_hash(ub)
    assert json.loads(canonical.signature_json(ua))[0]["error_class"] == "KeyError"
    assert not canonical.execution_succeeded(ua, None)


def test_noop_tools_are_dropped_and_configurable() -> None:
    steps = [Step("think", {"thought": "hmm"}), *_golden_steps()]
    assert canonical.canonical_hash(canonical.signature(steps)) == GOLDEN_HASH
    assert canonical.canonical_hash(canonical.signature(steps, noop_tools=())) != GOLDEN_HASH


def test_timestamp_order_only_when_all_parse() -> None:
    late, early = "2024-01-01T00:00:02+00:00", "2024-01-01T00:00:01+00:00"
    steps = [
        Step("issue_refund", {"order_id": 1, "amount": 1}, timestamp=late),
        Step("lookup_order", {"order_id": 1}, timestamp=early),
    ]
    assert canonical.canonical_hash(canonical.signature(steps)) == GOLDEN_HASH
    partial = [steps[0], Step("lookup_order", {"order_id": 1}, timestamp="not a time")]
    assert canonical.canonical_hash(canonical.signature(partial)) != GOLDEN_HASH


def test_empty_signature_has_no_hash() -> None:
    assert canonical.canonical_hash(canonical.signature([])) is None
    assert canonical.canonical_hash(canonical.signature([Step("think", {})])) is None


def test_upstream_document_shape() -> None:
    doc = {
        "steps": {
            "Step 1: lookup_order": {"arguments": {"order_id": "A1"}, "result": {}, "error": None, "timestamp": None},
            "Step 2: issue_refund": {"arguments": {"order_id": "A1", "amount": 3}, "result": {}, "error": ""},
        }
    }
    steps = canonical.steps_from_document(doc)
    assert [s.tool for s in steps] == ["lookup_order", "issue_refund"]
    assert canonical.canonical_hash(canonical.signature(steps)) == GOLDEN_HASH


def test_query_normalization() -> None:
    assert canonical.normalize_query("  Cancel   MY\tbooking ") == "cancel my booking"
    assert canonical.query_fingerprint("   ") is None


def test_one_request_in_invisible_or_look_alike_spellings_is_one_distinct_query() -> None:
    """A gate-integrity audit (2026-12-06): one request padded with a zero-width space or a soft hyphen, or spelled
    with a Cyrillic letter or fullwidth letters, counted as five distinct queries and passed the gate that asks
    for different requests. The fingerprint reads the request as every other check does (``textnorm.fold``)."""
    variants = [
        "cancel my reservation",
        "cancel my reservation\u200b",
        "cancel my reserv\u00adation",
        "cancel my r\u0435servation",
        "\uff43\uff41\uff4e\uff43\uff45\uff4c my reservation",
        "CANCEL MY RESERVATION",
        "Straße",
    ]
    assert len({canonical.query_fingerprint(v) for v in variants[:6]}) == 1
    assert canonical.normalize_query("Straße") == canonical.normalize_query("STRASSE")
    # An ASCII request keeps the fingerprint it had: the rows already stored still count as before.
    assert canonical.query_fingerprint("Cancel my booking") == hashlib.sha256(b"cancel my booking").hexdigest()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
tool_names = st.sampled_from(["a", "b", "c", "lookup", "refund"])
key_sets = st.frozensets(st.sampled_from(["x", "y", "z", "order_id"]), max_size=3)


@st.composite
def step_lists(draw: st.DrawFn) -> list[tuple[str, frozenset[str], str | None]]:
    return draw(st.lists(st.tuples(tool_names, key_sets, st.sampled_from([None, "KeyError", "Timeout"])), max_size=6))


def _steps(shape: list[tuple[str, frozenset[str], str | None]], values: list[object]) -> list[Step]:
    out = []
    for i, (tool, keys, err) in enumerate(shape):
        val = values[i % len(values)] if values else None
        out.append(Step(tool, {k: val for k in keys}, result=val, error="e" if err else None, error_class=err))
    return out


@settings(deadline=None)
@given(step_lists(), st.lists(json_values, min_size=1, max_size=3), st.lists(json_values, min_size=1, max_size=3))
def test_property_values_never_change_hash(shape, values_a, values_b) -> None:  # type: ignore[no-untyped-def]
    ha = canonical.canonical_hash(canonical.signature(_steps(shape, values_a)))
    hb = canonical.canonical_hash(canonical.signature(_steps(shape, values_b)))
    assert ha == hb


def expected_hash(shape: list[tuple[str, frozenset[str], str | None]]) -> str | None:
    """The identity rule of docs/design.md, built independently of skillflow.kernel.canonical.

    A failed call followed by the same call (tool and keys) folds into one unit that takes the newest
    attempt's error; the hash is sha256 of the sorted-key compact JSON, clean units with exactly three keys.
    """
    units: list[dict[str, object]] = []
    for tool, keys, err in shape:
        unit: dict[str, object] = {"tool": tool, "arg_keys": sorted(keys), "errored": err is not None}
        if err is not None:
            unit["error_class"] = err
        last = units[-1] if units else None
        if last is not None and last["errored"] and (last["tool"], last["arg_keys"]) == (tool, sorted(keys)):
            units[-1] = unit
        else:
            units.append(unit)
    if not units:
        return None
    text = json.dumps(units, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_expected_hash_reproduces_the_golden_vector() -> None:
    shape = [("lookup_order", frozenset({"order_id"}), None), ("issue_refund", frozenset({"amount", "order_id"}), None)]
    assert expected_hash(shape) == GOLDEN_HASH


@settings(deadline=None)
@given(step_lists())
def test_property_hash_matches_the_documented_rule(shape) -> None:  # type: ignore[no-untyped-def]
    assert canonical.canonical_hash(canonical.signature(_steps(shape, [1]))) == expected_hash(shape)


@settings(deadline=None)
@given(step_lists(), step_lists())
def test_property_shape_changes_hash(a, b) -> None:  # type: ignore[no-untyped-def]
    ha, hb = (canonical.canonical_hash(canonical.signature(_steps(s, [1]))) for s in (a, b))
    assert (ha == hb) == (expected_hash(a) == expected_hash(b))


@settings(deadline=None)
@given(json_values)
def test_property_arbitrary_json_never_crashes(doc) -> None:  # type: ignore[no-untyped-def]
    try:
        steps = canonical.steps_from_document({"steps": doc})
    except ValueError:
        return
    canonical.canonical_hash(canonical.signature(steps))
