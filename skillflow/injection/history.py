"""A tenant's stored runs as the applicability rule's examples, one per model call point.

A live request is judged before every model call on the conversation so far (``prepare(conversation=...)``),
so every stored run is turned into the call points an agent went through, each in that form
(docs/guide/runtime.md, "Which skill, or none"):

- a segment of a recorded conversation (one procedure, ``record_conversation``) gives a point after each
  of its user messages (no call of the span assumed made yet) and a point before each of its calls (every
  message of the span seen, the span's calls before it made). Each sees the request as ``prepare`` reads
  it: the user messages since the previous write — the span's own — or, for a write made without a new
  user message, the latest earlier segment's that has some (by ``segment_index``). Each is labelled with
  the write the span closes with — the write that follows within the procedure span — or ``read-only``
  when the span has none. A run whose outcome (the conversation's business outcome when one was given) is
  ``failure`` keeps its label and is marked ``failed``: the fit decides what it teaches
  (:func:`skillflow.injection.calibration.taught`); a run whose outcome is ``unknown`` is left out, as the
  gates leave it out. The agent's reply to a write before the next user message is not a point: its text
  is the write's own request, only the calls made tell the two apart, and ``prepare`` never re-injects a
  completed write's intent before a new user message;
- a standalone run (``record_run``, no conversation) is one request, and its points are those of a
  conversation of that one message: the request with no call made (its *opening*: what a single-turn
  agent's ``prepare(query)`` sees before it acts) and a point before each of its calls, all labelled with
  its intent. (Until 2026-12-05 it gave only the point before its write, so a single-turn tenant's rule
  was fitted and budgeted on a call its agent never makes, with the calls made already ruling other
  intents out, and injected far less at the request than its inner CV promised: docs/BENCHMARKS.md,
  "Seventeenth pass".)

A stored segment keeps its user messages and its calls but not how they interleaved, so the points inside
a span are an approximation of the live ones; the benchmarks measure on the live ones
(docs/BENCHMARKS.md, "Every model call").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillflow.injection.applicability import intent_of
from skillflow.injection.calibration import Example
from skillflow.injection.embeddings import Embedder
from skillflow.injection.views import vectors
from skillflow.kernel.canonical import sequence_tools
from skillflow.kernel.models import WorkflowOutcome


@dataclass(frozen=True)
class HistoryRun:
    """The columns of a stored run the rule is fitted on."""

    run_id: str
    query: str
    tool_sequence: str
    canonical_hash: str
    conversation_id: str | None = None
    segment_index: int | None = None
    outcome: str = WorkflowOutcome.SUCCESS.value  # a WorkflowOutcome value


@dataclass(frozen=True)
class Point:
    """One model call point of a stored run: what ``prepare`` saw, and the write that followed in the span."""

    run: int  # index of the run in the history
    so_far: tuple[str, ...]
    prefix: tuple[str, ...]
    intent: str
    trains: bool = True  # the classifier is trained on it (see :func:`call_points`)
    failed: bool = False  # the run's outcome is failure
    opening: bool = False  # a conversation's point after one user message, no call made: the single-turn form
    weight: int = 1  # the run's call points it stands for (the same messages and the same calls made)


def _lines(query: str) -> list[str]:
    return [m for m in (query or "").split("\n") if m.strip()]


def _messages(run: HistoryRun) -> tuple[str, ...]:
    """A run's user messages: a segment's query holds one a line (``segment_conversation``); a standalone run's
    query is one request, whatever its lines."""
    if run.conversation_id is None or run.segment_index is None:
        return (run.query,) if (run.query or "").strip() else ()
    return tuple(_lines(run.query))


def requests(runs: Sequence[HistoryRun]) -> list[tuple[str, ...]]:
    """The user messages each run's write is judged on: its own, or (a segment without any) the latest earlier
    segment's of its conversation that has some."""
    out = [_messages(r) for r in runs]
    members: dict[str, list[tuple[int, int]]] = {}
    for i, r in enumerate(runs):
        if r.conversation_id is not None and r.segment_index is not None:
            members.setdefault(r.conversation_id, []).append((r.segment_index, i))
    for segments in members.values():
        latest: tuple[str, ...] = ()
        for _, i in sorted(segments):
            out[i] = latest = out[i] or latest
    return out


def call_points(runs: Sequence[HistoryRun], declared: Mapping[str, bool] | None = None) -> list[Point]:
    """Every run's model call points (see the module docstring), in run order; duplicates within a run once.

    Every point is scored by the fit's inner CV, so its budgets are per model call; the classifier is trained
    on a segment's points after its first user message and after all of them (the request that opens the
    span, and the span whole) — the points between are left out of training to keep a fit's time near that
    of one example per run (docs/BENCHMARKS.md, "Every model call")."""
    judged = requests(runs)
    out: list[Point] = []
    for i, r in enumerate(runs):
        proc = sequence_tools(r.tool_sequence)
        span = judged[i]
        if not proc or not span or r.outcome == WorkflowOutcome.UNKNOWN.value:
            continue
        intent = intent_of(proc, declared)
        failed = r.outcome == WorkflowOutcome.FAILURE.value
        points: list[tuple[tuple[str, ...], tuple[str, ...]]] = [(span[:m], ()) for m in range(1, len(span) + 1)]
        points += [(span, proc[:j]) for j in range(len(proc))]
        if not _lines(r.query):  # a write made without a new message: the earlier request, whole
            points = [(span, proc[:j]) for j in range(len(proc))]
        trains = {span[:1], span}
        # A point reads the calls made as a set (which intents they leave), so points of one run with the same
        # messages and the same set of calls decide alike: one point, weighted by how many calls it stands for.
        # An agent that repeats its reads then costs the fit no more than one that makes each once.
        same: dict[tuple[tuple[str, ...], frozenset[str]], list[Any]] = {}
        for s, p in dict.fromkeys(points):
            if s:
                same.setdefault((s, frozenset(p)), [p, 0])[1] += 1
        out += [
            Point(i, s, p, intent, s in trains, failed, len(s) == 1 and not p, n) for (s, _), (p, n) in same.items()
        ]
    return out


def examples(
    runs: Sequence[HistoryRun],
    embedder: Embedder,
    views: Sequence[str],
    form: Callable[[str], str],
    declared: Mapping[str, bool] | None = None,
) -> list[Example]:
    """The runs' call points (runs oldest first) as examples; a run without a request or a call is left out."""
    points = call_points(runs, declared)
    texts = list(dict.fromkeys(p.so_far for p in points))
    row = {t: j for j, t in enumerate(texts)}
    vecs = {v: vectors(texts, v, embedder, form) for v in views}
    return [
        Example(
            group=runs[p.run].conversation_id or runs[p.run].run_id,
            intent=p.intent,
            klass=runs[p.run].canonical_hash,
            vectors={v: vecs[v][row[p.so_far]] for v in views},
            prefix=p.prefix,
            trains=p.trains,
            failed=p.failed,
            opening=p.opening,
            weight=p.weight,
        )
        for p in points
    ]
