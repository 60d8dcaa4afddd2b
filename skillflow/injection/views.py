"""The vectors the applicability rule compares: one per conversation so far, in one of three views.

- ``last``: the latest user message, embedded;
- ``joint``: the latest message and the last three (newest first, one text: the ``recent`` text), each
  embedded and each as hashed word and character n-grams, the four blocks unit-normalised, concatenated and
  normalised again. The embedding carries paraphrase, the n-grams carry the words that name an action
  ("cancel", "transfer", "bag"), which a sentence embedding blurs between requests of one domain
  (docs/BENCHMARKS.md, "Applicability").

The fit chooses between ``last`` and ``joint``; ``recent`` alone (the fit's third choice before ``joint``) is
still computed for rules stored with it. On unseen τ-bench tasks it lost to ``joint`` whenever the inner CV
preferred it: it memorises a conversation's own wording.

Stored history and live requests go through the same function (:func:`vectors`), after the same
redaction, so the two sides are always compared in the same form.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from skillflow.injection.conversation import LAST, RECENT, view_text
from skillflow.injection.embeddings import Embedder, HashingEmbedder

JOINT = "joint"
VIEWS = (LAST, JOINT)  # what the fit chooses from; ``recent`` alone still applies to rules stored before ``joint``
NEAREST = (LAST,)  # views the nearest-exemplar score is offered on (its stored exemplars stay small)
SINGLE_TEXT = (LAST, RECENT)
NGRAM_DIM = 256
_NGRAMS = HashingEmbedder(NGRAM_DIM)


class _Recent:
    """The embeddings of the latest request texts (per model): an agent calls ``prepare`` before every model
    call, and within one user turn the texts do not change, so only a turn's first call embeds."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._rows: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, embedder: Embedder, texts: list[str]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for text in texts:
            key = (embedder.model_id, text)
            with self._lock:
                row = self._rows.get(key)
                if row is not None:
                    self._rows.move_to_end(key)
            if row is None:
                row = np.asarray(embedder.embed([text])[0], dtype=np.float32)  # alone: no padding to a longer text
                with self._lock:
                    self._rows[key] = row
                    while len(self._rows) > self.size:
                        self._rows.popitem(last=False)
            out.append(row)
        return out

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()


RECENT_TEXTS = _Recent()


def _embed(embedder: Embedder, texts: list[str], cached: bool = False) -> np.ndarray:
    """Embed each distinct text once (a blank text embeds as one space)."""
    unique = list(dict.fromkeys(t or " " for t in texts))
    if not unique:
        return np.zeros((0, embedder.dim), np.float32)
    rows = {t: i for i, t in enumerate(unique)}
    mat = np.stack(RECENT_TEXTS.embed(embedder, unique)) if cached else embedder.embed(unique)
    return np.asarray(mat[[rows[t or " "] for t in texts]], dtype=np.float32)


def vectors(
    conversations: Sequence[Sequence[str]],
    view: str,
    embedder: Embedder,
    form: Callable[[str], str] = lambda t: t,
    *,
    cached: bool = False,
) -> np.ndarray:
    """One unit vector per conversation so far (its user messages, oldest first) in ``view``.

    ``cached`` (the request path) keeps the latest texts' embeddings in :data:`RECENT_TEXTS`.
    """
    if view in SINGLE_TEXT:
        return _embed(embedder, [view_text(m, view, form) for m in conversations], cached)
    if view != JOINT:
        raise ValueError(f"unknown view {view!r}; expected one of {', '.join((*SINGLE_TEXT, JOINT))}")
    memo: dict[str, str] = {}  # both texts end with the latest message: redact each line once

    def once(line: str) -> str:
        if line not in memo:
            memo[line] = form(line)
        return memo[line]

    last = [view_text(m, LAST, once) for m in conversations]
    recent = [view_text(m, RECENT, once) for m in conversations]
    both = _embed(embedder, last + recent, cached)
    n = len(last)
    blocks = [both[:n], both[n:], _NGRAMS.embed(last), _NGRAMS.embed(recent)]
    joint = np.hstack(blocks).astype(np.float32)
    norms = np.linalg.norm(joint, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = joint / norms
    return out
