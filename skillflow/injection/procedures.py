"""Which live skill of an intent to inject: the one whose procedure follows the calls already made most closely.

Most calls made in the same order first (the longest common subsequence of the calls and the procedure);
then the best success rate, the most direct procedure (fewest steps) and the most executions; the skill id
and the procedure last, so the choice never depends on the order skills are listed in. Repeated or
reordered reads never rule a procedure out: whether the calls contradict the intent at all is decided
before, from the tenant's history (docs/guide/runtime.md, "Which skill, or none").

:func:`champion` is the rule as written; :class:`Chooser` computes the same choice for a request with one
vectorised pass over an intent's distinct procedures (a bit-parallel LCS, one machine word per procedure of
up to 64 calls), so an intent with thousands of live skills still decides in a tenth of a millisecond.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol, TypeVar

import numpy as np


class Procedural(Protocol):
    @property
    def skill_id(self) -> str: ...
    @property
    def procedure(self) -> tuple[str, ...]: ...
    @property
    def rank(self) -> tuple[float, ...]: ...


S = TypeVar("S", bound=Procedural)
WORD = 64  # procedures up to this many calls take the bit-parallel path


@lru_cache(maxsize=1 << 14)
def follows(calls: tuple[str, ...], procedure: tuple[str, ...]) -> int:
    """How many of ``calls`` the procedure makes in the same order (their longest common subsequence)."""
    row = [0] * (len(procedure) + 1)
    for x in calls:
        diag = 0
        for j, y in enumerate(procedure):
            up = row[j + 1]
            row[j + 1] = diag + 1 if x == y else max(up, row[j])
            diag = up
    return row[-1]


def _static(s: Procedural) -> tuple[tuple[float, ...], int, tuple[float, ...], str, tuple[str, ...]]:
    return s.rank[:1], -len(s.procedure), s.rank[1:], s.skill_id, s.procedure


def champion(skills: Sequence[S], prefix: Sequence[str]) -> S | None:
    """The skill whose procedure follows ``prefix`` most closely (see the module docstring); None without skills."""
    if not skills:
        return None
    calls = tuple(prefix)
    return max(skills, key=lambda s: (follows(calls, s.procedure), *_static(s)))


class Chooser:
    """One intent's skills, best per distinct procedure, as a padded code matrix for a vectorised choice."""

    def __init__(self, skills: Sequence[S]) -> None:
        best: dict[tuple[str, ...], S] = {}
        for s in skills:
            cur = best.get(s.procedure)
            if cur is None or _static(s) > _static(cur):
                best[s.procedure] = s
        # Ascending static order: a higher position wins among procedures the calls follow equally far.
        self.skills: list[Procedural] = sorted(best.values(), key=_static)
        vocab = {t: i for i, t in enumerate(sorted({t for k in self.skills for t in k.procedure}))}
        width = max((len(k.procedure) for k in self.skills), default=0)
        self.codes = np.full((len(self.skills), width), -2, dtype=np.int64)
        for r, chosen in enumerate(self.skills):
            self.codes[r, : len(chosen.procedure)] = [vocab[t] for t in chosen.procedure]
        self.vocab = vocab
        # Bit-parallel LCS (Hyyro 2004): for procedures of at most 64 calls, one uint64 per procedure holds
        # the DP row; masks[t] has bit j set where the procedure's j-th call is tool t.
        self.masks: np.ndarray | None = None
        if width <= WORD:
            self.masks = np.zeros((len(vocab), len(self.skills)), dtype=np.uint64)
            for j in range(width):
                hit = self.codes[:, j] >= 0
                self.masks[self.codes[hit, j], np.flatnonzero(hit)] |= np.uint64(1 << j)

    def _followed(self, prefix: Sequence[str]) -> np.ndarray:
        """Per procedure, how many of ``prefix`` it makes in the same order (:func:`follows`, vectorised)."""
        n, width = self.codes.shape
        if self.masks is not None:
            v = np.full(n, np.iinfo(np.uint64).max, dtype=np.uint64)
            for tool in prefix:
                x = self.vocab.get(tool)
                if x is None:  # a tool no procedure makes matches nothing
                    continue
                u = v & self.masks[x]
                v = (v + u) | (v - u)  # wraps modulo 2**64, as the algorithm needs
            return WORD - np.bitwise_count(v).astype(np.int64)
        row = np.zeros((n, width + 1), dtype=np.int64)
        for tool in prefix:
            x = self.vocab.get(tool, -1)
            diag = np.zeros(n, dtype=np.int64)
            for j in range(width):
                up = row[:, j + 1].copy()
                row[:, j + 1] = np.where(self.codes[:, j] == x, diag + 1, np.maximum(up, row[:, j]))
                diag = up
        out: np.ndarray = row[:, width]
        return out

    def choose(self, prefix: Sequence[str]) -> Procedural | None:
        if not self.skills:
            return None
        n = len(self.skills)
        score = self._followed(prefix) * n + np.arange(n)  # most calls followed, then the static order
        return self.skills[int(np.argmax(score))]
