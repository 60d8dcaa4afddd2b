"""Self-calibrated applicability: fit a tenant's injection rule on its own history (applying it is
:mod:`skillflow.injection.rule`).

The rule (docs/guide/runtime.md, "Which skill, or none") decides *which intent* a request belongs to — the
state-changing call its procedure ends in, or ``read-only`` — and then *which live skill* of that intent to
inject. Every request of the history is an exemplar labelled with its intent (``NONE`` when it ends without a
write): the tenant's own requests no skill answers compete with the skills, so a request that merely resembles
them loses to its true neighbours; an intent without a live skill is its own label and is never injected.
Classes ending in the same write form one intent. An intent is ruled out when the calls already made include
one that never preceded its write in the history (the calls contradict it; a failed attempt at that write
itself never does); within the intent, the skill whose procedure follows those calls most closely is injected
(ties: the best success rate, then the most direct procedure). The fit is a grouped cross-validation on the
history (groups = conversations, never single runs): it chooses the view, the score, a margin over the
runner-up label (``NONE`` included) and a floor per intent so that the inner-CV wrong and false injections stay
within budget with two standard deviations to spare while hits are maximised; openings (one user message, no call
made since the last write: every request of a single-turn agent) keep the budgets on their own too, through
floors for openings only where the intents' floors do not. The score is the nearest exemplar
(max cosine per label) or a regularised multinomial logistic regression over the view's vectors (labels =
intents + ``NONE``, strength ``C`` from ``CS``): a label's score is then its probability, renormalised over
the labels the calls leave, so the margin is p1 - p2 and the floors (and ``lower_bound``) apply to p1.
Injecting nothing is always feasible, and is what the rule does until the history supports more.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from skillflow.injection.rule import NEVER, NONE, READ_ONLY, LiveSkill, Rule, Scores, by_intent, score
from skillflow.kernel.config import PromotionConfig

MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08)
MIN_INTENT_CANDIDATES = 5  # an intent gets its own floor only with this many inner-CV candidates
# Scores the inner CV chooses from: None = nearest exemplar (max cosine per label), else the logistic regression's
# strength C. Ties keep the earlier: the nearest exemplar, then the stronger regularisation.
CS: tuple[float | None, ...] = (None, 1.0, 10.0, 100.0)
LR_ITERS = 1000
LR_TOLERANCE = 1e-6  # lbfgs stops when no coordinate of the (objective / C n) gradient exceeds this
# An inner-CV error count n keeps a budget B when n + SPARE_SDS * sqrt(n) <= B: about a 98 % one-sided bound on the
# count (normal approximation); one deviation (about 84 %) still let held-out errors exceed the budgets
# (docs/BENCHMARKS.md, "thirteenth pass").
SPARE_SDS = 2.0


@dataclass(frozen=True)
class Example:
    """One model call point of the history: its views' vectors, intent, class and the calls made before it."""

    group: str  # conversation id (or the run id of a standalone run)
    intent: str
    klass: str
    vectors: Mapping[str, np.ndarray]  # view name -> unit vector
    prefix: tuple[str, ...] = ()  # tools called before it since the last state-changing call, in order
    trains: bool = True  # a row the classifier is trained on; every example is scored by the inner CV
    failed: bool = False  # its run failed (see :func:`taught`)
    opening: bool = False  # one user message, no call since the last write: the form a single-turn request has
    weight: int = 1  # the call points it stands for: a run's points with the same messages and calls made are one


UNSUCCESSFUL = "unsuccessful"  # a failed run's label when it teaches a negative: never an intent, so NONE


def taught(examples: Sequence[Example], skills: Sequence[LiveSkill]) -> list[Example]:
    """What each example teaches the fit: its intent (its own label, injected only when it has a live skill;
    ``NONE`` for ``read-only``), except a failed run whose procedure is a live skill's own. That procedure was
    followed there and failed, so its request is one where the skill should not be injected — injecting it would
    reinforce the mistake: a negative, labelled :data:`UNSUCCESSFUL`. A failed run by another procedure keeps its
    intent: its request is still one for the intent, done the wrong way, which is what the skill is for
    (docs/guide/runtime.md, "Which skill, or none")."""
    own = {(s.intent, s.canonical_hash) for s in skills}
    return [replace(e, intent=UNSUCCESSFUL) if e.failed and (e.intent, e.klass) in own else e for e in examples]


def _config_default(name: str) -> Any:
    """The ``PromotionConfig`` default of ``name``: the budgets have one source, the configuration."""
    return PromotionConfig.model_fields[name].default


@dataclass(frozen=True)
class Budget:
    """The inner-CV budgets of a fit; the defaults are ``PromotionConfig``'s ``applicability_*`` defaults."""

    wrong: float = _config_default("applicability_wrong_budget")
    false: float = _config_default("applicability_false_budget")
    min_negatives: int = _config_default("applicability_min_negatives")
    folds: int = 5
    seed: int = 1

    @classmethod
    def of(cls, config: PromotionConfig) -> Budget:
        """The budgets ``config`` sets (``applicability_wrong_budget``, ``_false_budget``, ``_min_negatives``)."""
        return cls(
            config.applicability_wrong_budget, config.applicability_false_budget, config.applicability_min_negatives
        )


class _Index(Scores):
    """A score trained on labelled exemplars: sorted by label, and the logistic regression fitted when ``c``."""

    def __init__(
        self,
        labels: list[str],
        vecs: np.ndarray,
        lab: list[str],
        c: float | None = None,
        basis: np.ndarray | None = None,
        weights: np.ndarray | None = None,
        start: np.ndarray | None = None,
    ) -> None:
        lid = {name: i for i, name in enumerate(labels)}
        ids = np.asarray([lid[x] for x in lab], dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        super().__init__(labels, np.ascontiguousarray(vecs[order], dtype=np.float32), ids[order], None, None)
        self.solution: np.ndarray | None = None  # the optimiser's variables, a warm start for another C
        if c is not None and self.vecs.shape[0]:
            wts = None if weights is None else np.asarray(weights, np.float64)[order]
            self.w, self.b, self.solution = _logistic(self.vecs, self.lab, self.present, c, basis, wts, start)


def _span(vecs: np.ndarray) -> np.ndarray | None:
    """An orthonormal basis (d x r) of the examples' span, when there are fewer examples than dimensions.

    The logistic regression's optimal weights lie in that span (the loss sees W only through X W, and the
    penalty prefers no component outside it), so solving in it is exact and n instead of d wide.
    """
    n, d = vecs.shape
    if n == 0 or n >= d:
        return None
    f = vecs.astype(np.float64)
    lam, u = np.linalg.eigh(f @ f.T)
    keep = lam > max(float(lam.max()), 0.0) * 1e-10
    basis: np.ndarray = f.T @ (u[:, keep] / np.sqrt(lam[keep]))
    return basis


def _logistic(
    vecs: np.ndarray,
    lab: np.ndarray,
    present: np.ndarray,
    c: float,
    basis: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Multinomial logistic regression, min 0.5 ||W||^2 + C * sum of log-losses (intercept unpenalised):
    scikit-learn's ``LogisticRegression`` (lbfgs) in the examples' span (``basis``, from :func:`_span` when not
    given), deterministic. ``weights`` counts each row that many times (identical rows merged); ``start`` is the
    solution of the same rows at another C (the optimum is the same, it is reached in fewer iterations).
    Returns the weights (one row per label), the intercepts and the solution as a (d + 1) x k array, flat.

    With two labels scikit-learn fits one vector ``v``; the two-column softmax under the same penalty is that
    model at 2C, with the columns -v/2 and v/2 (docs/guide/runtime.md, "Which skill, or none")."""
    labels = np.flatnonzero(present)
    w_all = np.zeros((present.shape[0], vecs.shape[1]))
    b_all = np.full(present.shape[0], -np.inf)
    if len(labels) < 2:
        b_all[labels] = 0.0
        return w_all, b_all, None
    from sklearn.linear_model import LogisticRegression  # only a fit trains; deciding a request never loads it

    basis = _span(vecs) if basis is None else basis
    feats = vecs.astype(np.float64) if basis is None else vecs.astype(np.float64) @ basis
    d, k = feats.shape[1], len(labels)
    binary = k == 2
    model = LogisticRegression(
        C=2 * c if binary else c, solver="lbfgs", max_iter=LR_ITERS, tol=LR_TOLERANCE, warm_start=start is not None
    )
    if start is not None and start.shape == ((d + 1) * k,):  # scikit-learn warm-starts from coef_ / intercept_
        s = start.reshape(d + 1, k)
        model.coef_ = (s[:-1, 1] - s[:-1, 0])[None, :] if binary else s[:-1].T.copy()
        model.intercept_ = np.asarray([s[-1, 1] - s[-1, 0]]) if binary else s[-1].copy()
    model.fit(feats, np.searchsorted(labels, lab), sample_weight=weights)
    if binary:
        v, b0 = model.coef_[0], float(model.intercept_[0])
        w, b = np.stack([-v / 2, v / 2], axis=1), np.asarray([-b0 / 2, b0 / 2])
    else:
        w, b = model.coef_.T, model.intercept_
    coef = w if basis is None else basis @ w
    w_all[labels], b_all[labels] = coef.T, b
    return w_all, b_all, np.vstack([w, b[None, :]]).ravel()


def _tools_before(examples: Sequence[Example]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for ex in examples:
        out.setdefault(ex.intent, set()).update(ex.prefix)
    return out


def _labels(skills: Sequence[LiveSkill], examples: Sequence[Example]) -> list[str]:
    """The classifier's labels: every intent of a live skill, every other intent the history shows (its own label,
    never injected), then ``NONE`` (read-only requests and the failed runs that teach a negative)."""
    own = {e.intent for e in examples if e.intent not in (READ_ONLY, UNSUCCESSFUL, NONE)}
    return [*sorted({s.intent for s in skills} | own), NONE]


def _label(example: Example, labels: Collection[str]) -> str:
    return example.intent if example.intent in labels else NONE


def _merged(
    vecs: Sequence[np.ndarray], lab: Sequence[str], weights: Sequence[int] | None = None
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Identical (vector, label) rows as one row with its count (the rows' weights summed): a request's call
    points share its vector."""
    rows: dict[tuple[str, bytes], int] = {}
    keep: list[np.ndarray] = []
    names: list[str] = []
    count: list[float] = []
    for k, (v, name) in enumerate(zip(vecs, lab, strict=True)):
        j = rows.setdefault((name, np.ascontiguousarray(v).tobytes()), len(keep))
        if j == len(keep):
            keep.append(v)
            names.append(name)
            count.append(0.0)
        count[j] += 1.0 if weights is None else float(weights[k])
    dim = vecs[0].shape[0] if len(vecs) else 0
    out = np.stack(keep) if keep else np.zeros((0, dim), np.float32)
    return out, names, np.asarray(count)


def folds_by_group(groups: Sequence[str], k: int, seed: int) -> list[list[int]]:
    """Indices split into ``k`` folds so that no group (conversation) is ever split."""
    names = sorted(set(groups))
    random.Random(seed).shuffle(names)
    fold_of = {g: i % k for i, g in enumerate(names)}
    out: list[list[int]] = [[] for _ in range(k)]
    for i, g in enumerate(groups):
        out[fold_of[g]].append(i)
    return [f for f in out if f]


@dataclass
class _Records:
    """Inner-CV scores of every held-out example as arrays, so one threshold setting costs a few numpy ops."""

    lab: np.ndarray
    s1: np.ndarray
    gap: np.ndarray
    has_skill: np.ndarray
    positive: np.ndarray  # the example's intent has a live skill
    hit: np.ndarray  # the chosen intent is the example's intent
    opening: np.ndarray  # the example is an opening (:attr:`Example.opening`)
    weight: np.ndarray  # the model calls each example stands for (:attr:`Example.weight`); every count is of calls

    def _sum(self, mask: np.ndarray) -> int:
        return int(self.weight[mask].sum())

    @property
    def n_pos(self) -> int:
        return self._sum(self.positive)

    @property
    def n_neg(self) -> int:
        return self._sum(~self.positive)

    @property
    def n_open_pos(self) -> int:
        return self._sum(self.positive & self.opening)

    @property
    def n_open_neg(self) -> int:
        return self._sum(~self.positive & self.opening)

    def counts(self, margin: float, floor: np.ndarray) -> tuple[int, int, int]:
        inj = self.has_skill & (self.gap >= margin) & (self.s1 >= floor)  # NONE never has a skill
        hits = self._sum(inj & self.positive & self.hit)
        wrong = self._sum(inj & self.positive & ~self.hit)
        false = self._sum(inj & ~self.positive)
        return hits, wrong, false


def _records(
    examples: Sequence[Example], skills: Sequence[LiveSkill], view: str, budget: Budget, c: float | None = None
) -> _Records:
    """Inner-CV records of one view and one score (see :func:`_records_each`)."""
    return _records_each(examples, skills, view, budget, (c,))[0]


def _records_each(
    examples: Sequence[Example],
    skills: Sequence[LiveSkill],
    view: str,
    budget: Budget,
    strengths: Sequence[float | None],
) -> list[_Records]:
    """Inner-CV records of one view for each score, the folds' matrices and spans built once."""
    intents = by_intent(skills)
    labels = _labels(skills, examples)
    rows: list[list[tuple[str, float, float, bool, bool, bool, bool, int]]] = [[] for _ in strengths]
    for fold in folds_by_group([e.group for e in examples], budget.folds, budget.seed):
        held = set(fold)
        seen = [e for i, e in enumerate(examples) if i not in held]
        train = [e for e in seen if e.trains]
        if not train:
            continue
        vecs, lab, wts = _merged(
            [e.vectors[view] for e in train], [_label(e, labels) for e in train], [e.weight for e in train]
        )
        basis = _span(vecs) if any(c is not None for c in strengths) else None
        before = _tools_before(seen)
        start = None
        for k, c in enumerate(strengths):  # strengths ascending: each classifier starts from the previous one
            index = _Index(labels, vecs, lab, c, basis, wts, start)
            start = index.solution if index.solution is not None else start
            for i in fold:
                ex = examples[i]
                label, s1, s2, has = score(index, ex.vectors[view], ex.prefix, intents, before)
                hit = label == ex.intent
                rows[k].append((label, s1, s1 - s2, has, ex.intent in intents, hit, ex.opening, ex.weight))
    out = []
    for r in rows:
        if not r:
            e, no = np.empty(0), np.empty(0, dtype=bool)
            out.append(_Records(e.astype(str), e, e, no, no, no, no, e.astype(np.int64)))
            continue
        cols = list(zip(*r, strict=True))
        out.append(_Records(*(np.asarray(col) for col in cols)))
    return out


def _within(counts: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Whether each row of (hits, wrong, false) counts keeps its wrong and false within ``limit`` with
    :data:`SPARE_SDS` standard deviations to spare (count + 2 sqrt(count)): the fit keeps the setting with the
    most inner-CV hits among many, so the winner's inner-CV error counts are optimistic out of sample
    (docs/guide/runtime.md, "Which skill, or none"). A setting with no error stays within any budget, as
    injecting nothing always does."""
    errors = counts[..., 1:].astype(np.float64)
    return np.asarray((errors + SPARE_SDS * np.sqrt(errors) <= limit[1:]).all(axis=-1))


class _Tail:
    """Counts (hits, wrong, false) of a set of records above any floor: their scores sorted once with suffix sums,
    so a floor costs one binary search instead of a pass over the records."""

    def __init__(self, s1: np.ndarray, hit: np.ndarray, wrong: np.ndarray, false: np.ndarray) -> None:
        order = np.argsort(s1, kind="stable")
        self.s1 = s1[order]
        self.suffix = np.zeros((len(order) + 1, 3), dtype=np.int64)
        ind = np.stack([hit[order], wrong[order], false[order]], axis=1).astype(np.int64)  # weighted indicators
        self.suffix[:-1] = np.cumsum(ind[::-1], axis=0)[::-1]

    def at(self, floors: np.ndarray) -> np.ndarray:
        """(len(floors), 3) counts of the records whose score is at least each floor."""
        return self.suffix[np.searchsorted(self.s1, floors, side="left")]


class _Floors(NamedTuple):
    """What :func:`_fit_floors` chose: the margin, a floor per intent, the floors openings are held to (higher
    ones only), and the inner-CV (hits, wrong, false) over every example and over the openings."""

    margin: float
    floors: dict[str, float]
    openings: dict[str, float]
    counts: tuple[int, int, int]
    opening_counts: tuple[int, int, int]


def _counts(r: _Records, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (hit, wrong, false) calls of the records in ``mask`` (the columns a :class:`_Tail` sums): each record's
    indicator times its weight."""
    w = r.weight[mask]
    return (r.positive & r.hit)[mask] * w, (r.positive & ~r.hit)[mask] * w, (~r.positive)[mask] * w


def _ascend(
    intents: Sequence[str],
    tails: Mapping[str, _Tail],
    candidates: Mapping[str, tuple[np.ndarray, int]],
    floors: dict[str, float],
    cur: np.ndarray,
    limit: np.ndarray,
) -> tuple[dict[str, float], np.ndarray]:
    """Per-intent floors by coordinate ascent from ``floors`` (counts ``cur``): each intent's floor moved to the
    first of its candidate floors that adds the most hits within ``limit``; ``candidates`` holds each intent's
    floors and the number of records they come from, and an intent with fewer than
    :data:`MIN_INTENT_CANDIDATES` records keeps its floor."""
    for _ in range(2):
        for intent in intents:
            cand, records = candidates[intent]
            if records < MIN_INTENT_CANDIDATES:
                continue
            tail = tails[intent]
            trial = cur - tail.at(np.asarray([floors[intent]]))[0] + tail.at(cand)
            ok = np.flatnonzero(_within(trial, limit))
            if len(ok) and trial[ok, 0].max() > cur[0]:
                j = ok[int(np.argmax(trial[ok, 0]))]  # the first candidate with the most hits
                floors, cur = dict(floors, **{intent: float(cand[j])}), trial[j]
    return floors, cur


def _descending(values: np.ndarray) -> np.ndarray:
    """``NEVER`` and the distinct ``values``, highest first: the floors worth trying."""
    return np.asarray([NEVER, *sorted({float(x) for x in values}, reverse=True)])


def _candidates(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, int]:
    """An intent's floors worth trying, and the calls its records stand for."""
    return _descending(values), int(weights.sum())


def _openings(
    r: _Records, eligible: np.ndarray, lower: float, floors: Mapping[str, float], budget: Budget
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Floors for openings, each at least its intent's floor, that keep the openings' own inner-CV errors within
    the budgets (their own positives and negatives, with the spare): a single-turn agent's requests are all
    openings, so they are budgeted on their own rather than diluted among every call (docs/guide/runtime.md,
    "Which skill, or none"). Returns the floors and the openings' counts at the intents' floors and at these."""
    mask = eligible & r.opening
    intents = sorted(floors)
    tails = {i: _Tail(r.s1[m], *_counts(r, m)) for i in intents for m in [mask & (r.lab == i)]}
    zero = np.zeros(3, dtype=np.int64)
    base = sum((tails[i].at(np.asarray([floors[i]]))[0] for i in intents), zero)
    limit = np.asarray([np.inf, budget.wrong * r.n_open_pos, budget.false * r.n_open_neg])
    if _within(base, limit):
        return dict(floors), base, base
    # One raise for every intent first (the lowest within budget), then per intent.
    grid = _descending(r.s1[mask & (r.s1 >= lower)])
    every = sum((tails[i].at(np.maximum(grid, floors[i])) for i in intents), np.zeros((len(grid), 3), np.int64))
    within = np.flatnonzero(_within(every, limit))
    g = float(grid[within[-1]]) if len(within) else NEVER
    raised = {i: max(floors[i], g) for i in intents}
    cur = every[within[-1]] if len(within) else zero
    above = {i: mask & (r.lab == i) & (r.s1 >= max(floors[i], lower)) for i in intents}
    candidates = {i: _candidates(r.s1[m], r.weight[m]) for i, m in above.items()}
    raised, cur = _ascend(intents, tails, candidates, raised, cur, limit)
    return raised, base, cur


def _fit_floors(r: _Records, budget: Budget, lower: float) -> _Floors:
    """Best margin and floors: the most hits within budget, then the smallest margin.

    For each margin: the lowest single floor within budget, then per-intent floors by coordinate ascent, then
    the floors openings are held to (:func:`_openings`); the hits counted are those left after them."""
    intents = sorted({str(x) for x in r.lab[r.has_skill]})  # labels without a live skill are never injected
    limit = np.asarray([np.inf, budget.wrong * r.n_pos, budget.false * r.n_neg])
    best: tuple[tuple[int, float], _Floors] | None = None
    for m in MARGINS:
        eligible = r.has_skill & (r.gap >= m)
        sel = eligible & (r.s1 >= lower)
        tails = {i: _Tail(r.s1[e], *_counts(r, e)) for i in intents for e in [eligible & (r.lab == i)]}
        grid = _descending(r.s1[sel])
        every = sum((t.at(grid) for t in tails.values()), np.zeros((len(grid), 3), dtype=np.int64))
        within = np.flatnonzero(_within(every, limit))  # feasibility only shrinks as the floor falls
        base = float(grid[within[-1]]) if len(within) else NEVER
        cur = every[within[-1]] if len(within) else np.zeros(3, dtype=np.int64)
        candidates = {i: _candidates(r.s1[m], r.weight[m]) for i in intents for m in [sel & (r.lab == i)]}
        floors, cur = _ascend(intents, tails, candidates, dict.fromkeys(intents, base), cur, limit)
        floors = {i: max(f, lower) for i, f in floors.items()}
        opening, before, after = _openings(r, eligible, lower, floors, budget)
        cur = cur - before + after
        fitted = _Floors(
            m,
            floors,
            {i: f for i, f in opening.items() if f > floors[i]},
            (int(cur[0]), int(cur[1]), int(cur[2])),
            (int(after[0]), int(after[1]), int(after[2])),
        )
        key = (fitted.counts[0], -m)
        if best is None or key > best[0]:
            best = (key, fitted)
    assert best is not None
    return best[1]


def nothing(reason: str, skills: Sequence[LiveSkill] = (), lower: float = 0.0, dim: int = 0) -> Rule:
    """The rule that never injects (always feasible)."""
    return Rule(
        None, 0.0, {}, lower, [NONE], np.zeros((0, dim), np.float32), np.zeros(0, np.int64), list(skills), {}, reason
    )


def fit(
    examples: Sequence[Example],
    skills: Sequence[LiveSkill],
    views: Sequence[str],
    budget: Budget,
    lower_bound: float,
    max_exemplars_per_label: int = 256,
    nearest: Collection[str] | None = None,
) -> Rule:
    """Fit the tenant's rule: the view, score, margin and per-intent floors with the most inner-CV hits within
    budget. ``nearest`` names the views the nearest-exemplar score is offered on (default: all); the classifier
    is offered on every view."""
    if not skills:
        return nothing("no live skills", skills, lower_bound)
    examples = taught(examples, skills)
    if not examples:
        return nothing("no history", skills, lower_bound)
    dim = int(next(iter(examples[0].vectors.values())).shape[0])
    intents = by_intent(skills)
    negatives = sum(e.weight for e in examples if e.intent not in intents)
    if negatives < budget.min_negatives:
        return nothing(
            f"{negatives} call point(s) without a skill; {budget.min_negatives} needed", skills, lower_bound, dim
        )
    if len({e.group for e in examples}) < budget.folds:
        return nothing(f"fewer than {budget.folds} conversations", skills, lower_bound, dim)
    best: tuple[tuple[int, int, int], str, float | None, _Floors, _Records] | None = None
    for i, view in enumerate(views):
        offered = [(j, c) for j, c in enumerate(CS) if c is not None or nearest is None or view in nearest]
        each = _records_each(examples, skills, view, budget, [c for _, c in offered])
        for (j, strength), r in zip(offered, each, strict=True):
            chosen = _fit_floors(r, budget, lower_bound)
            key = (chosen.counts[0], -j, -i)  # most hits; ties keep the earlier score (CS), then the earlier view
            if best is None or key > best[0]:
                best = (key, view, strength, chosen, r)
    assert best is not None
    _, view, strength, chosen, r = best
    c, o = chosen.counts, chosen.opening_counts
    inner = {
        "hits": c[0], "wrong": c[1], "false": c[2], "positives": r.n_pos, "negatives": r.n_neg,
        "opening_hits": o[0], "opening_wrong": o[1], "opening_false": o[2],
        "opening_positives": r.n_open_pos, "opening_negatives": r.n_open_neg,
    }  # fmt: skip
    if c[0] == 0:
        rule = nothing("no setting injects within budget on the history", skills, lower_bound, dim)
        rule.inner = inner
        return rule
    labels = _labels(skills, examples)
    newest = [e for e in reversed(examples) if e.trains]  # examples arrive oldest first
    vecs, lab, wts = _merged(
        [e.vectors[view] for e in newest], [_label(e, labels) for e in newest], [e.weight for e in newest]
    )
    if strength is None:  # the nearest exemplar is stored: the newest distinct exemplars, a bounded number per label
        seen: dict[str, int] = {}
        pick = []
        for j, name in enumerate(lab):
            if seen.get(name, 0) < max_exemplars_per_label:
                seen[name] = seen.get(name, 0) + 1
                pick.append(j)
        vecs, lab, wts = vecs[pick], [lab[j] for j in pick], wts[pick]
    index = _Index(labels, vecs.astype(np.float32), lab, strength, None, wts)
    before = {k: sorted(v) for k, v in _tools_before(examples).items()}
    # The classifier needs only its weights: the exemplars are kept for the nearest-exemplar score alone.
    keep_vecs = index.vecs if index.w is None else np.zeros((0, index.vecs.shape[1]), np.float32)
    keep_lab = index.lab if index.w is None else np.zeros(0, np.int64)
    return Rule(
        view, chosen.margin, chosen.floors, lower_bound, labels, keep_vecs, keep_lab, list(skills), before,
        "fitted", inner, index.w, index.b, strength, chosen.openings,
    )  # fmt: skip
