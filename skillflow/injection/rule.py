"""The applicability rule as it serves a request: score the request, apply the floors and the margin, choose the
skill whose procedure follows the calls made (docs/guide/runtime.md, "Which skill, or none").

A rule is fitted by :mod:`skillflow.injection.calibration` and stored by :mod:`skillflow.injection.applicability`;
serving needs numpy only (no scikit-learn or scipy: deciding a request never trains).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from skillflow.injection.procedures import Chooser, follows
from skillflow.kernel.state import NOOP_TOOLS

NONE = "__none__"
READ_ONLY = "read-only"
NEVER = float("inf")


@dataclass(frozen=True)
class LiveSkill:
    """A live skill as the rule sees it: its intent, its procedure (tool names, write last) and its rank."""

    skill_id: str
    canonical_hash: str
    intent: str
    procedure: tuple[str, ...]
    rank: tuple[float, ...] = ()  # higher is better: (success rate, executions)

    def follows(self, calls: Sequence[str]) -> int:
        """How many of the calls already made this procedure makes in the same order (their common subsequence)."""
        return follows(tuple(calls), self.procedure)


@dataclass
class Rule:
    """A fitted decision rule; ``view is None`` (or no floors) means inject nothing."""

    view: str | None
    margin: float
    floors: dict[str, float]
    lower_bound: float
    labels: list[str]
    exemplars: np.ndarray  # float32 (n, dim), rows grouped by label index
    exemplar_labels: np.ndarray  # int label index per row (sorted)
    skills: list[LiveSkill]
    tools_before: dict[str, list[str]]
    reason: str = ""
    inner: dict[str, int] = field(default_factory=dict)
    weights: np.ndarray | None = None  # (labels, dim) logistic regression; None: max-cosine scores (older rules)
    bias: np.ndarray | None = None  # (labels,), -inf for a label without exemplars
    strength: float | None = None  # the logistic regression's C chosen by the inner CV
    opening_floors: dict[str, float] = field(default_factory=dict)  # higher floors for openings (older rules: none)
    _parts: tuple[Scores, dict[str, Choices], dict[str, set[str]]] | None = field(
        default=None, repr=False, compare=False
    )

    def parts(self) -> tuple[Scores, dict[str, Choices], dict[str, set[str]]]:
        """The index, each intent's skill chooser and tools-before sets, built once per rule (decide runs per
        request)."""
        if self._parts is None:
            index = Scores(self.labels, self.exemplars, self.exemplar_labels, self.weights, self.bias)
            before = {k: set(v) for k, v in self.tools_before.items()}
            self._parts = (index, {k: Choices(v) for k, v in by_intent(self.skills).items()}, before)
        return self._parts

    @property
    def injects(self) -> bool:
        return self.view is not None and any(np.isfinite(f) for f in self.floors.values())


@dataclass(frozen=True)
class Decision:
    skill_id: str | None
    intent: str | None
    score: float
    runner_up: float
    reason: str


class Choices(list[LiveSkill]):
    """An intent's live skills with the chooser that picks the one following the calls made."""

    def __init__(self, skills: Sequence[LiveSkill]) -> None:
        super().__init__(skills)
        self.chooser = Chooser(skills)

    def choose(self, prefix: Sequence[str]) -> LiveSkill | None:
        chosen = self.chooser.choose(prefix)
        return chosen if isinstance(chosen, LiveSkill) else None


class Scores:
    """The stored score of a rule: exemplars labelled by intent (or NONE), grouped by label for one
    ``maximum.reduceat`` (the nearest exemplar), or the logistic regression's weights."""

    def __init__(
        self, labels: list[str], vecs: np.ndarray, lab: np.ndarray, w: np.ndarray | None, b: np.ndarray | None
    ) -> None:
        self.labels = labels
        self.vecs = vecs
        self.lab = lab
        self.starts = np.searchsorted(lab, np.arange(len(labels)))
        self.present = np.isin(np.arange(len(labels)), lab)
        self.w = w
        self.b = b

    def best(self, q: np.ndarray) -> np.ndarray:
        out = np.full(len(self.labels), -np.inf)
        if self.w is not None and self.b is not None:
            z = self.w @ np.asarray(q, dtype=np.float64) + self.b
            p = np.exp(z - z.max())
            return np.where(np.isfinite(self.b), p / p.sum(), -np.inf)
        if self.vecs.shape[0]:
            sims = self.vecs @ np.asarray(q, dtype=np.float32)
            out[self.present] = np.maximum.reduceat(sims, self.starts[self.present])
        return out


def score(
    index: Scores,
    q: np.ndarray,
    prefix: Sequence[str],
    by_intent: Mapping[str, Sequence[LiveSkill]],
    tools_before: Mapping[str, set[str]],
) -> tuple[str, float, float, bool]:
    """(best label, its score, best other label's score, whether the label has a live skill)."""
    best = index.best(q)
    done = set(prefix)
    # The calls already made contradict every procedure of the intent, the intent's own write aside: a write among
    # them failed (a successful one ends the prefix), and the agent retrying it is still before that write.
    for i, label in enumerate(index.labels):
        if label != NONE and done and not done - {label} <= tools_before.get(label, set()):
            best[i] = -np.inf
    live = np.isfinite(best)
    if index.w is not None and best[live].sum() > 0:  # probabilities: condition on the calls made
        best[live] /= best[live].sum()
    order = np.argsort(-best, kind="stable")
    label, s1 = index.labels[order[0]], float(best[order[0]])
    s2 = float(best[order[1]]) if len(order) > 1 else -np.inf
    if label == NONE or not np.isfinite(s1):
        return NONE, s1, s2, False
    return label, s1, s2, bool(by_intent.get(label))


def by_intent(skills: Sequence[LiveSkill]) -> dict[str, list[LiveSkill]]:
    out: dict[str, list[LiveSkill]] = {}
    for s in skills:
        out.setdefault(s.intent, []).append(s)
    return out


def decide(
    rule: Rule, q: np.ndarray, prefix: Sequence[str] = (), *, floors: bool = True, one_message: bool = False
) -> Decision:
    """Apply ``rule`` to the request vector ``q`` (in ``rule.view``) after the calls ``prefix``.

    ``one_message``: the request is a single user message; with no call made since the last write it is an
    *opening* (what a single-turn agent's every request is) and is held to the intent's opening floor too.
    ``floors=False`` skips the floors and the margin (what the rule would inject with no abstention beyond
    ``NONE`` winning): the benchmarks' hindsight row, never the product."""
    if not rule.injects:
        return Decision(None, None, float("nan"), float("nan"), rule.reason or "inject nothing")
    prefix = tuple(t for t in prefix if t not in NOOP_TOOLS)  # stored procedures never hold a no-op call
    opening = one_message and not prefix
    index, choosers, before = rule.parts()
    label, s1, s2, has = score(index, q, prefix, choosers, before)
    if label == NONE:
        return Decision(None, None, s1, s2, "nearest requests have no skill" if np.isfinite(s1) else "contradicted")
    if not has:  # an intent the history shows that no live skill serves: its own label, never injected
        return Decision(None, label, s1, s2, "no live skill of the intent")
    floor = max(rule.floors.get(label, NEVER), rule.lower_bound) if floors else -np.inf
    if s1 < floor:
        return Decision(None, label, s1, s2, "below the intent's floor")
    if floors and opening and s1 < rule.opening_floors.get(label, -np.inf):
        return Decision(None, label, s1, s2, "below the intent's floor for an opening request")
    if floors and s1 - s2 < rule.margin:
        return Decision(None, label, s1, s2, "margin over the runner-up too small")
    skill = choosers[label].choose(tuple(t for t in prefix if t != label))  # an earlier attempt is not a step
    if skill is None:
        return Decision(None, label, s1, s2, "no live skill of the intent")
    return Decision(skill.skill_id, label, s1, s2, "injected")
