"""Applicability at every model call: ``prepare`` called as an agent calls it, on unseen conversations.

Outer k-fold cross-validation grouped by task (τ-bench) or scenario (API-Bank). Per fold the training
conversations are the tenant's history (their procedures as stored runs); the classes that pass the gates
become ACTIVE skills of a fresh SQLite tenant, the rule is fitted exactly as a promotion cycle fits it and
stored. Then ``Skillflow.prepare`` is called before every ``assistant`` message of every held-out
conversation with the conversation so far, as README's agent loop does (the latest user message, the
messages before it, ``Conversation.from_messages``), and once per held-out conversation with its first
user request alone (``prepare(query)``: a single-turn agent). Figures (docs/BENCHMARKS.md, "Every model
call"):

- *pre-write*: the calls whose message makes a procedure's closing call: intent hit / wrong / miss over the
  procedures whose write has a skill, false over the rest (read-only procedures included); *open* hit: the hit
  over those whose write was not already made since the latest user message (a repeat, such as the second of
  several flight changes asked in one message, must not get the skill again: no re-injection);
- *misleading*: calls that get a skill whose intent is not the write closing the call's span, per call;
- *no-write share*: the share of calls, in conversations that never change state, that get a skill;
- *re-injections*: calls that get a skill of a write that already succeeded since the latest user message;
- *outside gold*: calls that get a skill of a write outside the task's gold actions, per call;
- *against the gold actions* (τ-bench: judged against what a correct agent does, not what this agent did):
  *misleading, gold write*: the misleading calls whose skill is of a write the task's gold actions make —
  the agent never made the write its task asked for, so the skill pointed at the right one; *no-write share*
  split by whether the task's gold actions write: conversations where the agent failed to make a gold write,
  and conversations where no write is correct (a request the policy refuses, a question);
- *reinforcement*: at the calls that make a write outside the gold actions, the share that got that very
  write's skill (and, for comparison, the same share at the calls that make a gold write);
- *single-turn*: hit / wrong / false of ``prepare(query)`` on the first requests, labelled with the first
  call's span (against the gold actions: the false injections whose skill is of a gold write);
- *siblings* (the ceiling beside these figures): conversations of one task (the same user instructions,
  τ-bench's trials) that end in different writes. A rule that reads the conversation cannot be right on
  both sides of such a pair; the task oracle — knowing the task and injecting, at a first request, the
  write most of the task's other conversations opened with (leave-one-out, a tie abstains) — shows what
  even perfect recognition of the user's goal gives on the single-turn labels;
- *hindsight*: the fitted rule's own scores without its floors, with the one floor chosen afterwards on
  these probes that gives the most pre-write hits within the pre-write budgets and misleading ≤ the target:
  the best any floor could do (``prepare``'s other checks not applied); *hindsight, every target*: the same
  with the no-write share ≤ its target too.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from skillflow.capture.segments import READ_ONLY
from skillflow.injection.calibration import Budget, fit, folds_by_group
from skillflow.injection.conversation import Conversation
from skillflow.injection.embeddings import Embedder
from skillflow.injection.history import HistoryRun
from skillflow.injection.history import examples as history_examples
from skillflow.injection.rule import LiveSkill, Rule, decide
from skillflow.injection.views import NEAREST, VIEWS, vectors
from skillflow.kernel.canonical import normalize_query
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.messages import message_text
from skillflow.kernel.state import changes_state
from skillflow.lab.bench.applicability_bench import Seg, activate, conversation_segs, gated_skills, history_runs
from skillflow.lab.bench.call_points import CallPoint, Dialog, dialog, gold_writes
from skillflow.lab.bench.retrieval_bench import CachedEmbedder
from skillflow.lab.ingest.api_bank import chat_messages
from skillflow.lab.ingest.tau_bench import STOP_MARKER
from skillflow.promotion.redact import redact_query

MISLEADING_TARGET = 0.03
NO_WRITE_TARGET = 0.05
AGENT, USER = "bench-agent", "bench-user"


@dataclass(frozen=True)
class Probe:
    """One held-out model call: its dialog and point, what ``prepare`` injected, the rule's unfloored choice."""

    fold: int
    dialog: Dialog
    point: CallPoint
    injected: LiveSkill | None
    intents: frozenset[str]  # intents with a live skill in the probe's fold
    score: float = float("nan")  # the rule's score without floors or margin
    nearest: LiveSkill | None = None  # the rule's choice without floors or margin


@dataclass(frozen=True)
class Single:
    """One held-out first request, asked alone: its label and what ``prepare(query)`` injected."""

    fold: int
    label: str
    injected: LiveSkill | None
    intents: frozenset[str]
    gold: frozenset[str] | None = None  # the task's gold writes (τ-bench), as :attr:`Dialog.gold`
    twin: bool = False  # a training conversation opened with the same words (:func:`twins`)


@dataclass
class CallResult:
    corpus: str
    outcome: str
    folds: int
    calls: int
    per_fold: list[dict[str, float]]
    pooled: dict[str, float]
    hindsight: dict[str, float]
    single: dict[str, float]
    single_per_fold: list[dict[str, float]]
    fitted: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    siblings: dict[str, float] = field(default_factory=dict)
    hindsight_all: dict[str, float] = field(default_factory=dict)  # the hindsight floor within every target

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _share(n: int, d: int) -> float:
    return n / d if d else 0.0


def figures(
    probes: Sequence[Probe], chosen: Callable[[Probe], LiveSkill | None] = lambda p: p.injected
) -> dict[str, float]:
    """The every-call figures (see the module docstring) of ``probes``, with ``chosen`` as the injection."""
    pos = hit = wrong = neg = false = misleading = quiet = quiet_inj = again = open_pos = open_hit = 0
    gold_calls = outside = bad = bad_same = good = good_same = mis_gold = 0
    quiet_gold = quiet_gold_inj = quiet_none = quiet_none_inj = 0
    for p in probes:
        got = chosen(p)
        label = p.point.label
        if p.point.pre_write:
            if label in p.intents:
                pos += 1
                hit += got is not None and got.intent == label
                wrong += got is not None and got.intent != label
                if label not in p.point.done:  # a repeat of a write done since the request is never injected
                    open_pos += 1
                    open_hit += got is not None and got.intent == label
            else:
                neg += 1
                false += got is not None
        misleading += got is not None and got.intent != label
        gold = p.dialog.gold
        mis_gold += got is not None and got.intent != label and gold is not None and got.intent in gold
        if not p.dialog.writes:
            quiet += 1
            quiet_inj += got is not None
            if gold:
                quiet_gold, quiet_gold_inj = quiet_gold + 1, quiet_gold_inj + (got is not None)
            elif gold is not None:
                quiet_none, quiet_none_inj = quiet_none + 1, quiet_none_inj + (got is not None)
        again += got is not None and got.intent in p.point.done
        if p.dialog.gold is not None:
            gold_calls += 1
            outside += got is not None and got.intent not in p.dialog.gold
            w = p.point.writing
            if w is not None and w not in p.dialog.gold:
                bad += 1
                bad_same += got is not None and got.intent == w
            elif w is not None:
                good += 1
                good_same += got is not None and got.intent == w
    return {
        "calls": len(probes), "pre_write_P": pos, "pre_write_N": neg,
        "pre_write_hit": _share(hit, pos), "pre_write_wrong": _share(wrong, pos),
        "pre_write_open_P": open_pos, "pre_write_open_hit": _share(open_hit, open_pos),
        "pre_write_false": _share(false, neg), "misleading": _share(misleading, len(probes)),
        "no_write_calls": quiet, "no_write_share": _share(quiet_inj, quiet),
        "misleading_gold_write": _share(mis_gold, len(probes)),
        "no_write_gold_calls": quiet_gold, "no_write_gold_share": _share(quiet_gold_inj, quiet_gold),
        "no_write_none_calls": quiet_none, "no_write_none_share": _share(quiet_none_inj, quiet_none),
        "reinjections": again, "outside_gold": _share(outside, gold_calls), "wrong_writes": bad,
        "reinforcement": _share(bad_same, bad), "right_writes": good, "right_write_same": _share(good_same, good),
    }  # fmt: skip


def single_figures(singles: Sequence[Single]) -> dict[str, float]:
    """Single-turn hit / wrong over the requests whose label has a skill, false over the rest; the share of the
    rest that got the skill of a write the task's gold actions make (the agent never made it); and hit / wrong /
    false again over the requests no training conversation opened with word for word (``*_unseen``; ``twins``
    counts the others)."""
    pos = [s for s in singles if s.label in s.intents]
    neg = [s for s in singles if s.label not in s.intents]
    gold = sum(s.injected is not None and s.gold is not None and s.injected.intent in s.gold for s in neg)
    pos_unseen = [s for s in pos if not s.twin]
    neg_unseen = [s for s in neg if not s.twin]
    return {
        "P": len(pos), "N": len(neg),
        "hit": _share(sum(s.injected is not None and s.injected.intent == s.label for s in pos), len(pos)),
        "wrong": _share(sum(s.injected is not None and s.injected.intent != s.label for s in pos), len(pos)),
        "false": _share(sum(s.injected is not None for s in neg), len(neg)),
        "false_gold_write": _share(gold, len(neg)),
        "twins": sum(s.twin for s in singles), "P_unseen": len(pos_unseen), "N_unseen": len(neg_unseen),
        "hit_unseen": _share(sum(s.injected is not None and s.injected.intent == s.label for s in pos_unseen),
                             len(pos_unseen)),
        "wrong_unseen": _share(sum(s.injected is not None and s.injected.intent != s.label for s in pos_unseen),
                               len(pos_unseen)),
        "false_unseen": _share(sum(s.injected is not None for s in neg_unseen), len(neg_unseen)),
    }  # fmt: skip


def first_request(messages: Sequence[Mapping[str, Any]]) -> str:
    """A conversation's first user message (what a single-turn agent passes to ``prepare``)."""
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def twins(dialogs: Sequence[Dialog]) -> set[str]:
    """The conversations' first requests as ``normalize_query`` keys: a held-out first request among them was
    seen word for word in training (API-Bank's scenario groups share openings such as "can you help me delete
    my account?"; docs/BENCHMARKS.md)."""
    return {normalize_query(first_request(d.messages)) for d in dialogs}


def siblings(dialogs: Sequence[Dialog], handoffs: Collection[str] = ()) -> dict[str, float]:
    """How far one task's conversations agree on the writes they make, and the task oracle's single-turn figures
    (see the module docstring); tasks with one conversation are left out. A first request labelled with a
    declared hand-off is a negative for the oracle as for ``prepare`` (no skill of a hand-off is promoted)."""
    by_task: dict[str, list[Dialog]] = {}
    for d in dialogs:
        if d.points:
            by_task.setdefault(d.task, []).append(d)
    shared = {t: ds for t, ds in by_task.items() if len(ds) > 1}
    writes = {d.conversation: frozenset(p.label for p in d.points) - {READ_ONLY} for ds in shared.values() for d in ds}
    quiet = [d for ds in shared.values() for d in ds if not writes[d.conversation]]
    pos = hit = wrong = neg = false = 0
    for ds in shared.values():
        for d in ds:
            votes = Counter(_skillable(o.points[0].label, handoffs) for o in ds if o is not d).most_common()
            guess = READ_ONLY if len(votes) > 1 and votes[0][1] == votes[1][1] else votes[0][0]
            label = _skillable(d.points[0].label, handoffs)
            if label == READ_ONLY:
                neg, false = neg + 1, false + (guess != READ_ONLY)
            else:
                pos, hit, wrong = pos + 1, hit + (guess == label), wrong + (guess not in (label, READ_ONLY))
    return {
        "tasks": len(shared), "tasks_same_writes": sum(len({writes[d.conversation] for d in ds}) == 1
                                                       for ds in shared.values()),
        "no_write_conversations": len(quiet),
        "no_write_with_writing_sibling": sum(
            any(writes[o.conversation] for o in shared[d.task] if o is not d) for d in quiet
        ),
        "oracle_P": pos, "oracle_hit": _share(hit, pos), "oracle_wrong": _share(wrong, pos),
        "oracle_N": neg, "oracle_false": _share(false, neg),
    }  # fmt: skip


def _skillable(label: str, handoffs: Collection[str]) -> str:
    return READ_ONLY if label in handoffs else label


def hindsight(
    probes: Sequence[Probe], budget: Budget, target: float = MISLEADING_TARGET, quiet_target: float = float("inf")
) -> dict[str, float]:
    """The figures at the one floor on the unfloored scores with the most pre-write hits such that pre-write
    wrong and false stay within ``budget``, misleading within ``target`` and the no-write share within
    ``quiet_target`` (chosen on these probes)."""
    ranked = sorted((p for p in probes if p.nearest is not None), key=lambda p: -p.score)
    pos = sum(1 for p in probes if p.point.pre_write and p.point.label in p.intents)
    neg = sum(1 for p in probes if p.point.pre_write and p.point.label not in p.intents)
    n_quiet = sum(1 for p in probes if not p.dialog.writes)
    best = best_hits = hits = wrong = false = misleading = quiet = 0
    for k, p in enumerate(ranked):
        assert p.nearest is not None
        right = p.nearest.intent == p.point.label
        misleading += not right
        quiet += not p.dialog.writes
        if p.point.pre_write and p.point.label in p.intents:
            hits, wrong = hits + right, wrong + (not right)
        elif p.point.pre_write:
            false += 1
        ok = wrong <= budget.wrong * pos and false <= budget.false * neg and misleading <= target * len(probes)
        ok = ok and (quiet == 0 or quiet <= quiet_target * n_quiet)
        if ok and hits > best_hits:
            best, best_hits = k + 1, hits
    top = {id(p) for p in ranked[:best]}
    return figures(probes, lambda p: p.nearest if id(p) in top else None)


@contextmanager
def tenant(
    skills: Sequence[LiveSkill], embedder: Embedder, config: PromotionConfig
) -> Iterator[tuple[Any, dict[str, LiveSkill], Callable[[Rule], None]]]:
    """A fresh SQLite tenant holding ``skills`` as ACTIVE skills: (Skillflow, skill id -> skill with its
    stored id, a function that stores a rule for them)."""
    from skillflow.injection.applicability import RULES, fingerprint, save_rule
    from skillflow.runtime import Skillflow
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'tenant.db'}")
        migrate(engine)
        with engine.begin() as conn:
            stored = {live.skill_id: live for live in activate(conn, skills, AGENT, USER)}

        def store(rule: Rule) -> None:
            with engine.begin() as conn:
                fp = fingerprint(conn, AGENT, USER, embedder.model_id)
                save_rule(conn, AGENT, USER, fp, embedder.model_id, rule, 1)
            RULES.clear()

        sf = Skillflow(agent_id=AGENT, engine=engine, config=config, embedder=embedder, continual_learning=True)
        try:
            yield sf, stored, store
        finally:
            engine.dispose()


def _so_far(messages: Sequence[Mapping[str, Any]]) -> tuple[str, Sequence[Mapping[str, Any]], Conversation]:
    """What an agent passes to ``prepare`` before its next model call (README, the agent loop)."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    last = users[-1] if users else 0
    query = message_text(messages[last].get("content")) if users else ""
    return query, messages[:last], Conversation.from_messages(messages)


def outer_folds(
    segs: Sequence[Seg], dialogs: Sequence[Dialog], folds: int, seed: int
) -> list[tuple[list[int], list[int]]]:
    """(training procedures, held-out dialogs) per fold, grouped by ``Dialog.task``: a task (scenario) is never
    on both sides, so neither are its conversations' procedures."""
    out = []
    for test in folds_by_group([d.task for d in dialogs], folds, seed):
        held = {dialogs[i].task for i in test}
        out.append(([i for i, s in enumerate(segs) if s.task not in held], test))
    return out


def evaluate_calls(
    segs: Sequence[Seg],
    dialogs: Sequence[Dialog],
    embedder: Embedder,
    config: PromotionConfig,
    *,
    folds: int = 5,
    seed: int = 0,
    corpus: str = "tau-bench airline (gpt-4o)",
    outcome: str = "execution",
    progress: Callable[[str], None] = lambda _: None,
    every_call: bool = True,
    handoffs: Collection[str] = (),
) -> CallResult:
    """Outer CV grouped by ``Dialog.task``; ``segs`` are the same conversations' procedures (``Seg.conversation``
    = ``Dialog.conversation``), their ``ok`` the outcome the gates read. ``every_call=False`` probes only the
    first requests (single-turn); ``handoffs`` are the tools the tenant declared hand-offs (the gates)."""
    t0 = time.perf_counter()
    memo = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder)
    runs = history_runs(segs)
    budget = Budget.of(config)
    probes: list[Probe] = []
    singles: list[Single] = []
    fitted: list[dict[str, Any]] = []
    plan = outer_folds(segs, dialogs, folds, seed)
    for k, (train, test) in enumerate(plan):
        fold = probe_fold(segs, dialogs, train, test, memo, config, k=k, runs=runs, every_call=every_call,
                          handoffs=handoffs)  # fmt: skip
        probes += fold.probes
        singles += fold.singles
        fitted.append(fold.fitted)
        progress(f"{corpus} ({outcome}) fold {k}: {fold.fitted['skills']} skills, {fold.fitted['examples']} call "
                 f"points, {fold.fitted['reason']}")  # fmt: skip
    return CallResult(
        corpus, outcome, len(plan), len(probes),
        [figures([p for p in probes if p.fold == k]) for k in range(len(plan))], figures(probes),
        hindsight(probes, budget), single_figures(singles),
        [single_figures([s for s in singles if s.fold == k]) for k in range(len(plan))], fitted,
        time.perf_counter() - t0, siblings(dialogs, handoffs), hindsight(probes, budget, quiet_target=NO_WRITE_TARGET),
    )  # fmt: skip


@dataclass
class FoldProbes:
    """One outer fold's held-out calls: every call's probe, each first request asked alone, the fitted rule's row."""

    probes: list[Probe]
    singles: list[Single]
    fitted: dict[str, Any]


def probe_fold(
    segs: Sequence[Seg],
    dialogs: Sequence[Dialog],
    train: Sequence[int],
    test: Sequence[int],
    embedder: Embedder,
    config: PromotionConfig,
    *,
    k: int = 0,
    runs: Sequence[HistoryRun] | None = None,
    every_call: bool = True,
    handoffs: Collection[str] = (),
) -> FoldProbes:
    """The fold ``k`` of :func:`evaluate_calls`: the training procedures ``train``' gated classes live in a fresh
    tenant, the rule fitted on their history and stored, then ``prepare`` before every call of the held-out dialogs
    ``test`` and on each one's first request alone. ``runs``: :func:`history_runs` of ``segs`` (made once per
    corpus by the caller)."""
    runs = runs if runs is not None else history_runs(segs)
    budget = Budget.of(config)
    held = {dialogs[i].task for i in test}
    seen = twins([d for d in dialogs if d.task not in held])
    probes: list[Probe] = []
    singles: list[Single] = []
    with tenant(gated_skills([segs[i] for i in train], config, handoffs), embedder, config) as (sf, skills, store):
        live = list(skills.values())
        examples = history_examples([runs[i] for i in train], embedder, VIEWS, redact_query)
        t1 = time.perf_counter()
        rule = fit(examples, live, VIEWS, budget, config.retrieval_min_similarity, nearest=NEAREST)
        fitted = {"fold": k, "skills": len(live), "examples": len(examples), "view": rule.view,
                  "strength": rule.strength, "margin": rule.margin, "reason": rule.reason,
                  "fit_seconds": round(time.perf_counter() - t1, 2), "inner": rule.inner}  # fmt: skip
        store(rule)
        intents = frozenset(s.intent for s in live)
        for i in test:
            d = dialogs[i]
            first = next((p for p in d.points), None)
            query = first_request(d.messages)
            if first is not None and query.strip():
                got = sf.prepare(query, USER).skill_ids
                twin = normalize_query(query) in seen
                singles.append(Single(k, first.label, skills[got[0]] if got else None, intents, d.gold, twin))
            if not every_call:
                continue
            for p in d.points:
                query, history, conv = _so_far(d.messages[: p.index])
                got = sf.prepare(query, USER, history=history, conversation=conv).skill_ids
                un = _unfloored(rule, conv, query, embedder)
                nearest = skills.get(un[1]) if un[1] else None
                probes.append(Probe(k, d, p, skills[got[0]] if got else None, intents, un[0], nearest))
    return FoldProbes(probes, singles, fitted)


def _unfloored(rule: Rule, conv: Conversation, query: str, embedder: Embedder) -> tuple[float, str | None]:
    """The rule's score and skill at a call without its floors and margin (the hindsight row's input)."""
    if not rule.injects or rule.view is None:
        return float("-inf"), None
    q = vectors([conv.with_request(query)], rule.view, embedder, redact_query)[0]
    d = decide(rule, q, conv.prefix(lambda t: changes_state(t)), floors=False)
    return d.score, d.skill_id


TAU_GROUPS = ("task", "customer")


def tau_corpus(path: Path, outcome: str = "execution", group: str = "task") -> tuple[list[Seg], list[Dialog]]:
    """τ-bench's procedures and conversations (the simulator's stop marker removed, as ingest does);
    ``outcome="reward"``: a procedure succeeds only when its calls did and its episode's reward is 1.

    ``group`` is what the outer folds keep together: the ``task`` (its four trials), or the task's ``customer``
    (``info.task.user_id``: one customer's tasks are often variants of one scenario, e.g. the same reservation
    cancelled under two pretexts, so grouping by task leaves near-duplicates on both sides; docs/BENCHMARKS.md)."""
    if group not in TAU_GROUPS:
        raise ValueError(f"group must be one of {', '.join(TAU_GROUPS)}")
    segs: list[Seg] = []
    dialogs: list[Dialog] = []
    for run in json.loads(path.read_text(encoding="utf-8")):
        task, conv = str(run["task_id"]), f"{run['task_id']}-{run.get('trial', 0)}"
        if group == "customer":
            task = f"customer:{((run.get('info') or {}).get('task') or {}).get('user_id')}"
        traj = [
            {**m, "content": str(m.get("content") or "").replace(STOP_MARKER, "").strip()}
            if m.get("role") == "user" else m
            for m in run["traj"]
        ]  # fmt: skip
        rewarded = float(run.get("reward") or 0.0) >= 1.0
        for s in conversation_segs(task, conv, traj):
            segs.append(s if outcome == "execution" else replace(s, ok=s.ok and rewarded))
        actions = ((run.get("info") or {}).get("task") or {}).get("actions")
        dialogs.append(dialog(task, conv, traj, gold_writes(actions)))
    return segs, dialogs


def api_bank_corpus(root: Path) -> tuple[list[Seg], list[Dialog]]:
    """API-Bank level-1 dialogs (grouped by scenario) as procedures and conversations; no gold actions."""
    segs: list[Seg] = []
    dialogs: list[Dialog] = []
    for file in sorted(root.glob("*.jsonl")):
        records = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        messages = chat_messages(records)
        scenario = re.sub(r"-\d+$", "", file.stem)
        segs += conversation_segs(scenario, file.stem, messages)
        dialogs.append(dialog(scenario, file.stem, messages))
    return segs, dialogs
