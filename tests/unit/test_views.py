"""The vectors the applicability rule compares: one form for stored history and live requests."""

from __future__ import annotations

import numpy as np
import pytest

from skillflow.capture.segments import segment_conversation
from skillflow.injection.conversation import LAST, RECENT, view_text
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.history import HistoryRun, requests
from skillflow.injection.views import JOINT, NGRAM_DIM, vectors
from skillflow.promotion.redact import redact_query

EMB = HashingEmbedder(64)
CONV = ("hi there", "I need to cancel my reservation", "yes, please proceed\nthank you")


def test_the_joint_view_is_four_equal_blocks_of_two_texts() -> None:
    v = vectors([CONV], JOINT, EMB)[0]
    assert v.shape == (2 * EMB.dim + 2 * NGRAM_DIM,) and np.isclose(np.linalg.norm(v), 1.0)
    last, recent = view_text(CONV, LAST), view_text(CONV, RECENT)
    assert last == "yes, please proceed thank you"  # a message is one line, whatever its line breaks
    assert recent.startswith("yes, please proceed thank you | I need to cancel")
    # Four unit blocks, normalised together: each block is its own vector scaled by 1/2.
    np.testing.assert_allclose(v[: EMB.dim], EMB.embed([last])[0] / 2, atol=1e-6)
    np.testing.assert_allclose(v[EMB.dim : 2 * EMB.dim], EMB.embed([recent])[0] / 2, atol=1e-6)
    np.testing.assert_allclose(
        v[2 * EMB.dim : 2 * EMB.dim + NGRAM_DIM], HashingEmbedder(NGRAM_DIM).embed([last])[0] / 2
    )


@pytest.mark.parametrize("view", [LAST, RECENT, JOINT])
def test_a_stored_run_and_the_live_conversation_give_the_same_vector(view: str) -> None:
    """A stored segment's query holds its user messages one a line; the live side passes them one by one, a
    message possibly spanning lines. Both read a message as one line and redact it whole."""
    live = ("My card is 4111 1111 1111 1111, cancel it", "yes\nplease go ahead with reservation ABC123")
    messages = [{"role": "user", "content": m} for m in live]
    messages.append({"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "cancel_reservation"}}]})
    stored = requests([HistoryRun("r", segment_conversation(messages)[0].query, "cancel_reservation", "h", "c", 0)])[0]
    assert len(stored) == len(live)
    a = vectors([live], view, EMB, redact_query)
    b = vectors([stored], view, EMB, redact_query)
    np.testing.assert_array_equal(a, b)
    assert "4111" not in view_text(live, RECENT, redact_query)


def test_each_distinct_text_is_embedded_once_and_blank_requests_stay_defined() -> None:
    seen: list[str] = []

    class Counting(HashingEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            seen.extend(texts)
            return super().embed(texts)

    out = vectors([CONV, CONV, ()], LAST, Counting(32))
    assert out.shape == (3, 32) and sorted(seen) == sorted(["yes, please proceed thank you", " "])
    assert np.all(np.isfinite(vectors([()], JOINT, EMB)))


def test_an_unknown_view_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown view"):
        vectors([CONV], "everything", EMB)


def test_a_turns_later_calls_reuse_its_embeddings_and_the_cache_stays_bounded() -> None:
    from skillflow.injection.views import RECENT_TEXTS, _Recent

    calls: list[list[str]] = []

    class Counting(HashingEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            calls.append(list(texts))
            return super().embed(texts)

    emb = Counting(48)
    RECENT_TEXTS.clear()
    first = vectors([CONV], JOINT, emb, cached=True)
    assert sorted(len(c) for c in calls) == [1, 1]  # last and recent, each alone (no padding to the longer one)
    again = vectors([CONV], JOINT, emb, cached=True)
    assert len(calls) == 2 and np.array_equal(first, again)
    np.testing.assert_array_equal(first, vectors([CONV], JOINT, emb))  # the same vector as the uncached path
    small = _Recent(size=2)
    for text in ("a", "b", "c"):
        small.embed(emb, [text])
    assert len(small._rows) == 2 and ("hashing-ngrams-v1-48", "a") not in small._rows
