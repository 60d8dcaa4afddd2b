"""A tenant's stored runs as the applicability rule's examples, each at its probe moment.

A live request is judged on the conversation so far (``prepare(conversation=...)``), so every stored run is
turned into the same form: a segment of a recorded conversation sees the user messages of the
conversation's earlier segments (by ``segment_index``) and its own; a standalone run sees its own query.
Its intent is the state-changing call its procedure ends in, its prefix the calls before that one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from skillflow.injection.applicability import intent_of, parse_sequence
from skillflow.injection.calibration import Example
from skillflow.injection.embeddings import Embedder
from skillflow.injection.views import vectors


@dataclass(frozen=True)
class HistoryRun:
    """The columns of a stored run the rule is fitted on."""

    run_id: str
    query: str
    tool_sequence: str
    canonical_hash: str
    conversation_id: str | None = None
    segment_index: int | None = None


def _lines(query: str) -> list[str]:
    return [m for m in (query or "").split("\n") if m.strip()]


def conversations_so_far(runs: Sequence[HistoryRun]) -> list[tuple[str, ...]]:
    """Each run's user messages up to its probe moment (a conversation's earlier segments first)."""
    out = [tuple(_lines(r.query)) for r in runs]
    members: dict[str, list[tuple[int, int]]] = {}
    for i, r in enumerate(runs):
        if r.conversation_id is not None and r.segment_index is not None:
            members.setdefault(r.conversation_id, []).append((r.segment_index, i))
    for segments in members.values():
        seen: list[str] = []
        for _, i in sorted(segments):
            seen.extend(out[i])
            out[i] = tuple(seen)
    return out


def examples(
    runs: Sequence[HistoryRun],
    embedder: Embedder,
    views: Sequence[str],
    form: Callable[[str], str],
    declared: Mapping[str, bool] | None = None,
) -> list[Example]:
    """The runs (oldest first) as examples; a run without a request or without a call is left out."""
    so_far = conversations_so_far(runs)
    keep = [i for i, r in enumerate(runs) if so_far[i] and parse_sequence(r.tool_sequence)]
    vecs = {v: vectors([so_far[i] for i in keep], v, embedder, form) for v in views}
    out: list[Example] = []
    for j, i in enumerate(keep):
        r = runs[i]
        proc = parse_sequence(r.tool_sequence)
        out.append(
            Example(
                group=r.conversation_id or r.run_id,
                intent=intent_of(proc, declared),
                klass=r.canonical_hash,
                vectors={v: vecs[v][j] for v in views},
                prefix=proc[:-1],
            )
        )
    return out
