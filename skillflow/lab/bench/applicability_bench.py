"""Applicability on real conversations (τ-bench airline): the fitted rule vs the fixed threshold vs the ceiling.

Every conversation is segmented into procedures (:func:`skillflow.capture.segments.segment_conversation`).
Outer 5-fold cross-validation grouped by task (never split by episode): on the training folds, classes that
pass the configured gates (executions, execution success, distinct queries; read-only classes excluded)
become live skills, and :func:`skillflow.injection.calibration.fit` fits the rule exactly as a promotion
cycle does (the training segments as stored runs, through :func:`skillflow.injection.history.examples`).
Every held-out segment is then probed once, just before its state-changing call (read-only segments: before
their last call), with the conversation so far and the calls of the segment made before it. Rows:

- ``fitted``: the product's rule (:func:`skillflow.injection.rule.decide`);
- ``hindsight``: the same fitted rules' scores with one floor chosen afterwards on the held-out probes
  themselves (the most intent hits within the configured wrong and false budgets, pooled over the folds):
  what the rule's score could do with a perfect floor, next to what its fitted floors do;
- ``fixed``: before issue 11 — the latest user message, raw, against each skill's (redacted) trigger
  queries, top-1 when the max similarity ≥ ``threshold``;
- ``ceiling``: always inject the nearest skill (no abstention), the best a reader can hope for.

Intent level: P = held-out segments whose intent (closing write) has a skill, N = the rest. Class level:
P = segments whose class has a skill. hit/wrong/miss are fractions of P; false = injections / N.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skillflow.capture.segments import Segment, segment_conversation
from skillflow.injection.calibration import Budget, fit, folds_by_group
from skillflow.injection.conversation import LAST, view_text
from skillflow.injection.embeddings import Embedder
from skillflow.injection.history import HistoryRun
from skillflow.injection.history import examples as history_examples
from skillflow.injection.procedures import champion
from skillflow.injection.rule import LiveSkill, decide
from skillflow.injection.views import NEAREST, VIEWS, vectors
from skillflow.kernel import canonical
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import ClassStats, utcnow
from skillflow.kernel.state import changes_state
from skillflow.lab.bench.retrieval_bench import CachedEmbedder
from skillflow.lab.ingest.tau_bench import HANDOFF_TOOLS
from skillflow.promotion.gates import evaluate_gates
from skillflow.promotion.redact import redact_query

TAU_BENCH = Path("/work/shared/corpora/tau-bench/gpt-4o-airline.json")


@dataclass(frozen=True)
class Seg:
    task: str
    conversation: str
    intent: str
    klass: str
    procedure: tuple[str, ...]
    span: tuple[str, ...]  # the segment's own user messages (what a stored segment run's query holds)
    so_far: tuple[str, ...]  # every user message of the conversation before the probe
    ok: bool
    query_key: str
    index: int = 0  # the segment's position in its conversation


def spans(messages: Any) -> Iterator[tuple[Segment, tuple[str, ...], tuple[str, ...]]]:
    """Each segment of a recorded conversation with its own user messages and the conversation's so far."""
    seen: list[str] = []
    for seg in segment_conversation(messages):
        span = tuple(m for m in seg.query.split("\n") if m.strip())
        seen.extend(span)
        yield seg, span, tuple(seen)


def conversation_segs(task: str, conversation: str, messages: Any, noop: Sequence[str] = ("think",)) -> list[Seg]:
    """A recorded conversation as segments (its intent as segmented, success from the calls' results)."""
    out: list[Seg] = []
    for seg, span, so_far in spans(messages):
        units = canonical.signature(seg.steps, noop)
        if units:
            out.append(
                Seg(
                    task=task,
                    conversation=conversation,
                    intent=seg.intent,
                    klass=canonical.canonical_hash(units) or "",
                    procedure=tuple(u.tool for u in units),
                    span=span,
                    so_far=so_far,
                    ok=canonical.execution_succeeded(units, None),
                    query_key=canonical.normalize_query(seg.query),
                    index=seg.index,
                )
            )
    return out


def tau_segments(path: Path, noop: Sequence[str] = ("think",)) -> list[Seg]:
    """The corpus's conversations as segments (one list, conversation order kept)."""
    out: list[Seg] = []
    for run in json.loads(path.read_text(encoding="utf-8")):
        out += conversation_segs(str(run["task_id"]), f"{run['task_id']}-{run.get('trial', 0)}", run["traj"], noop)
    return out


def gated_skills(train: Sequence[Seg], config: PromotionConfig, handoffs: Collection[str] = ()) -> list[LiveSkill]:
    """The classes that pass the promotion cycle's gates (:func:`~skillflow.promotion.gates.evaluate_gates` over
    the segments' statistics, every tool's write flag declared by the verb rule the segments were cut with,
    ``handoffs`` the declared hand-off tools), as live skills. Distinct queries are counted as the cycle counts
    them: successful runs' non-empty requests (a write made again with no new user message has none)."""
    now = utcnow()
    by: dict[str, list[Seg]] = {}
    for s in train:
        by.setdefault(s.klass, []).append(s)
    declared = {t: changes_state(t) for s in train for t in s.procedure}
    out = []
    for k, ss in sorted(by.items()):
        ok = sum(s.ok for s in ss)
        stats = ClassStats(
            agent_id="bench", user_id="bench", canonical_hash=k, executions=len(ss), successes=ok,
            failures=len(ss) - ok, unknown=0, success_rate=ok / len(ss),
            distinct_queries=len({s.query_key for s in ss if s.ok and s.query_key}), first_seen=now, last_seen=now,
            tool_sequence=" > ".join(ss[0].procedure),
        )  # fmt: skip
        if evaluate_gates(stats, config, now, live_skill=False, declared=declared, handoffs=handoffs).eligible:
            out.append(LiveSkill(k, k, ss[0].intent, ss[0].procedure, (ok / len(ss), float(len(ss)))))
    return out


@dataclass
class Rates:
    P: int = 0
    N: int = 0
    hit: float = 0.0
    wrong: float = 0.0
    miss: float = 0.0
    false: float = 0.0


@dataclass
class Tally:
    counts: Counter[str] = field(default_factory=Counter)

    def add(self, positive: bool, injected: str | None, truth: str) -> None:
        if positive:
            self.counts["hit" if injected == truth else "wrong" if injected else "miss"] += 1
        else:
            self.counts["false" if injected else "abstain"] += 1

    def rates(self) -> Rates:
        c = self.counts
        p, n = c["hit"] + c["wrong"] + c["miss"], c["false"] + c["abstain"]
        return Rates(p, n, c["hit"] / max(p, 1), c["wrong"] / max(p, 1), c["miss"] / max(p, 1), c["false"] / max(n, 1))


@dataclass
class AppResult:
    corpus: str
    segments: int
    folds: int
    threshold: float
    rows: dict[str, dict[str, Rates]]
    fitted: list[dict[str, Any]]
    decide_p50_ms: float
    decide_p95_ms: float
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def history_runs(segs: Sequence[Seg]) -> list[HistoryRun]:
    """The segments as the stored runs a promotion cycle reads (one conversation per ``Seg.conversation``)."""
    return [
        HistoryRun(f"{s.conversation}#{s.index}", "\n".join(s.span), " > ".join(s.procedure), s.klass,
                   s.conversation, s.index, "success" if s.ok else "failure")
        for s in segs
    ]  # fmt: skip


Split = tuple[list[int], list[int], list[LiveSkill]]  # (history indices, probe indices, live skills)


def task_folds(
    segs: Sequence[Seg], config: PromotionConfig, folds: int, seed: int, handoffs: Collection[str] = ()
) -> Iterable[Split]:
    """Outer CV grouped by ``Seg.task`` (a task, or a template family); live skills = the gated train classes."""
    for test in folds_by_group([s.task for s in segs], folds, seed):
        held = set(test)
        train = [i for i in range(len(segs)) if i not in held]
        yield train, test, gated_skills([segs[i] for i in train], config, handoffs)


def evaluate(
    segs: Sequence[Seg],
    embedder: Embedder,
    config: PromotionConfig,
    *,
    threshold: float = 0.70,
    folds: int = 5,
    seed: int = 0,
    progress: Callable[[str], None] = lambda _: None,
    splits: Iterable[Split] | None = None,
    corpus: str = "tau-bench airline (gpt-4o)",
    declared: Mapping[str, bool] | None = None,
    handoffs: Collection[str] = (),
) -> AppResult:
    """Outer CV grouped by task (or the given ``splits``); see the module docstring.

    The history side is what a promotion cycle fits on (:func:`skillflow.injection.history.examples` over the
    training segments as stored runs), the probe side what ``prepare`` computes
    (:func:`skillflow.injection.views.vectors` over the conversation so far).
    """
    t0 = time.perf_counter()
    memo = CachedEmbedder(embedder)  # folds and seeds share the corpus's texts
    runs = history_runs(segs)
    raw_last = memo.embed([view_text(s.so_far, LAST) or " " for s in segs])
    trig = memo.embed([view_text(s.span, LAST, redact_query) or " " for s in segs])
    probe_last = memo.embed([view_text(s.so_far, LAST, redact_query) or " " for s in segs])
    tallies = {f"{row}/{lvl}": Tally() for row in ("fitted", "fixed", "ceiling") for lvl in ("intent", "class")}
    scored: list[tuple[float, Seg, LiveSkill | None, bool, bool]] = []  # for the hindsight row
    fitted, times = [], []
    budget = Budget.of(config)
    plan = list(splits) if splits is not None else list(task_folds(segs, config, folds, seed, handoffs))
    for k, (train, test, skills) in enumerate(plan):
        examples = history_examples([runs[i] for i in train], memo, VIEWS, redact_query, declared)
        rule = fit(examples, skills, VIEWS, budget, config.retrieval_min_similarity, nearest=NEAREST)
        floors = {i: round(f, 3) for i, f in rule.floors.items()}
        fitted.append({"fold": k, "skills": len(skills), "view": rule.view, "strength": rule.strength,
                       "margin": rule.margin, "reason": rule.reason, "floors": floors,
                       "inner": rule.inner})  # fmt: skip
        progress(f"fold {k}: {len(skills)} skills, rule {rule.reason}")
        intents = {s.intent for s in skills}
        by_class = {s.skill_id: s for s in skills}
        # nearest-skill index for the ceiling and the fixed rule: each skill's trigger queries (its runs, redacted)
        rows = [(i, segs[i].klass) for i in train if segs[i].klass in by_class]
        tv = np.stack([trig[i] for i, _ in rows]) if rows else np.zeros((0, raw_last.shape[1]), np.float32)
        owner = [c for _, c in rows]
        probe = vectors([segs[i].so_far for i in test], rule.view or LAST, memo, redact_query)
        for j, i in enumerate(test):
            s = segs[i]
            pre = s.procedure[:-1]
            t1 = time.perf_counter()
            d = decide(rule, probe[j], pre, one_message=len(s.so_far) == 1)
            times.append((time.perf_counter() - t1) * 1000)
            got = by_class[d.skill_id] if d.skill_id else None
            u = decide(rule, probe[j], pre, floors=False)
            scored.append((u.score, s, by_class[u.skill_id] if u.skill_id else None, s.intent in intents,
                           s.klass in by_class))  # fmt: skip
            for row, skill in (
                ("fitted", got),
                *_baselines(tv, owner, by_class, raw_last[i], probe_last[i], pre, threshold),
            ):
                tallies[f"{row}/intent"].add(s.intent in intents, skill.intent if skill else None, s.intent)
                tallies[f"{row}/class"].add(s.klass in by_class, skill.skill_id if skill else None, s.klass)
    rows_out: dict[str, dict[str, Rates]] = {}
    for key, t in tallies.items():
        row, lvl = key.split("/")
        rows_out.setdefault(row, {})[lvl] = t.rates()
    rows_out["hindsight"] = hindsight(scored, budget)
    ms = sorted(times) or [0.0]
    return AppResult(corpus, len(segs), len(plan), threshold, rows_out, fitted,
                     ms[len(ms) // 2], ms[int(0.95 * (len(ms) - 1))], time.perf_counter() - t0)  # fmt: skip


def hindsight(scored: Sequence[tuple[float, Seg, LiveSkill | None, bool, bool]], budget: Budget) -> dict[str, Rates]:
    """Intent and class rates at the single floor, chosen on these very probes, with the most intent hits whose
    intent wrong and false rates stay within ``budget`` (see the module docstring)."""
    order = sorted(scored, key=lambda x: -x[0] if x[2] is not None else np.inf)
    p = sum(1 for x in scored if x[3])
    n = len(scored) - p
    best, best_hits, hits, wrong, false = 0, 0, 0, 0, 0
    for k, (_, s, skill, positive, _) in enumerate(order):
        if skill is None:
            break
        if positive:
            hits, wrong = (hits + 1, wrong) if skill.intent == s.intent else (hits, wrong + 1)
        else:
            false += 1
        if wrong <= budget.wrong * p and false <= budget.false * n and hits > best_hits:
            best, best_hits = k + 1, hits
    out = {"intent": Tally(), "class": Tally()}
    for k, (_, s, skill, positive, class_positive) in enumerate(order):
        chosen = skill if k < best else None
        out["intent"].add(positive, chosen.intent if chosen else None, s.intent)
        out["class"].add(class_positive, chosen.skill_id if chosen else None, s.klass)
    return {lvl: t.rates() for lvl, t in out.items()}


def _baselines(
    tv: np.ndarray,
    owner: list[str],
    by_class: dict[str, LiveSkill],
    raw: np.ndarray,
    redacted: np.ndarray,
    prefix: Sequence[str],
    threshold: float,
) -> list[tuple[str, LiveSkill | None]]:
    if not owner:
        return [("fixed", None), ("ceiling", None)]
    sims = tv @ raw
    j = int(np.argmax(sims))
    fixed = by_class[owner[j]] if sims[j] >= threshold else None
    near = by_class[owner[int(np.argmax(tv @ redacted))]]
    ceiling = champion([s for s in by_class.values() if s.intent == near.intent], prefix)
    return [("fixed", fixed), ("ceiling", ceiling)]


def run_tau_bench(
    path: Path,
    embedder: Embedder,
    config: PromotionConfig,
    threshold: float,
    progress: Callable[[str], None],
    seed: int = 0,
) -> AppResult | None:
    """None (with a message) when the corpus file is absent; ``seed`` picks the grouped 5-fold split."""
    if not path.is_file():
        progress(f"τ-bench corpus not found at {path}: skipped")
        return None
    segs = tau_segments(path)
    progress(f"τ-bench: {len(segs)} segments, intents {dict(Counter(s.intent for s in segs).most_common())}")
    return evaluate(segs, embedder, config, threshold=threshold, progress=progress, seed=seed, handoffs=HANDOFF_TOOLS)


def activate(conn: Any, skills: Sequence[LiveSkill], agent: str, user: str) -> list[LiveSkill]:
    """``skills`` stored as ACTIVE skills of one bench tenant (``conn`` in a transaction): the same skills under
    their stored ids, in order."""
    from skillflow.kernel.models import InjectionRole, SkillStatus
    from skillflow.storage.skills import insert_skill, transition

    out = []
    for i, s in enumerate(skills):
        rec = insert_skill(conn, agent_id=agent, user_id=user, canonical_hash=s.canonical_hash,
                           name=f"skill-{i}", description=s.intent, content=f"procedure {s.intent}",
                           status=SkillStatus.SHADOW)  # fmt: skip
        transition(conn, rec.id, SkillStatus.ACTIVE, actor="bench", injection_role=InjectionRole.USER)
        out.append(LiveSkill(rec.id, s.canonical_hash, s.intent, s.procedure, s.rank))
    return out


def time_prepare(
    segs: Sequence[Seg],
    embedder: Embedder,
    config: PromotionConfig,
    n: int = 60,
    filler: int = 0,
    handoffs: Collection[str] = (),
) -> dict[str, float]:
    """Milliseconds of ``Skillflow.prepare`` as a whole (query embedding included) with a stored fitted rule.

    A fresh SQLite tenant holds the gated classes of the whole corpus as ACTIVE skills, plus ``filler`` more
    ACTIVE skills of the same intents (synthetic procedures of the corpus's read tools: thousands of procedures
    per intent for the chooser), and their rule. Each of the first ``n`` segments is a user turn: ``prepare``
    is called at its start (no call made yet, the texts' embeddings not cached: ``p50``/``p95``) and again
    just before its write, with the calls made since (``next_p50``/``next_p95``: the same user messages, so no
    embedding — what an agent's later model calls of a turn cost). ``rule_p50``/``rule_p95`` time the fitted
    rule's retrieval alone on the request's vector: the tenant's rule state, :func:`decide` and the chosen
    skill's row. ``injected`` counts the second calls that got a skill.
    """
    import random
    import tempfile

    from sqlalchemy import insert

    from skillflow.injection.applicability import CURRENT, RULES, fingerprint, save_rule
    from skillflow.injection.conversation import Conversation, ToolCall
    from skillflow.injection.selection import select_rule_skill
    from skillflow.injection.views import RECENT_TEXTS
    from skillflow.kernel.models import SkillStatus, new_id, utcnow
    from skillflow.runtime import Skillflow
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate
    from skillflow.storage.schema import skillbox
    from skillflow.storage.skills import live_keys

    agent, user = "bench-agent", "bench-user"
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'prepare.db'}")
        migrate(engine)
        gated = gated_skills(segs, config, handoffs)
        with engine.begin() as conn:
            skills = activate(conn, gated, agent, user)
        rng = random.Random(0)
        reads = sorted({t for s in segs for t in s.procedure[:-1]}) or ["read"]
        now, rows = utcnow(), []
        for k in range(filler if gated else 0):
            sid, chash, intent = new_id(), f"filler-{k:06d}", gated[k % len(gated)].intent
            proc = (*(rng.choice(reads) for _ in range(rng.randint(0, 6))), intent)
            skills.append(LiveSkill(sid, chash, intent, proc, (rng.random(), float(rng.randint(5, 50)))))
            rows.append(
                {"id": sid, "agent_id": agent, "user_id": user, "canonical_hash": chash, "version": 1,
                 "name": f"filler-{k}", "description": intent, "status": SkillStatus.ACTIVE.value,
                 **live_keys(agent, user, chash, f"filler-{k}", True), "content": "filler", "prompt_version": "bench",
                 "distiller": "bench", "embedding_model": embedder.model_id, "injection_role": "user",
                 "created_at": now, "updated_at": now, "activated_at": now}
            )  # fmt: skip
        if rows:
            with engine.begin() as conn:
                conn.execute(insert(skillbox), rows)
        examples = history_examples(history_runs(segs), embedder, VIEWS, redact_query)
        budget = Budget.of(config)
        rule = fit(examples, skills, VIEWS, budget, config.retrieval_min_similarity, nearest=NEAREST)
        with engine.begin() as conn:
            save_rule(conn, agent, user, fingerprint(conn, agent, user, embedder.model_id), embedder.model_id, rule, 1)
        RULES.clear()
        sf = Skillflow(agent_id=agent, engine=engine, config=config, embedder=embedder, continual_learning=True)
        probes = segs[:n]
        first, later, alone, injected = [], [], [], 0
        for p in [probes[0], *probes]:  # the first turn loads the model and the rule: not timed
            query = p.so_far[-1] if p.so_far else ""
            RECENT_TEXTS.clear()
            t0 = time.perf_counter()
            sf.prepare(query, user, conversation=Conversation(p.so_far[:-1]))
            t1 = time.perf_counter()
            calls = tuple(ToolCall(t) for t in p.procedure[:-1])
            prepared = sf.prepare(query, user, conversation=Conversation(p.so_far[:-1], calls))
            t2 = time.perf_counter()
            q = vectors([p.so_far], rule.view or LAST, embedder, redact_query, cached=True)[0]
            t3 = time.perf_counter()
            state, _ = select_rule_skill(engine, embedder.model_id, agent, user, q, p.procedure[:-1])
            t4 = time.perf_counter()
            assert state == CURRENT
            first.append((t1 - t0) * 1000)
            later.append((t2 - t1) * 1000)
            alone.append((t4 - t3) * 1000)
            injected += bool(prepared.skill_ids)
        engine.dispose()
    a, b, c = sorted(first[1:]), sorted(later[1:]), sorted(alone[1:])
    return {
        "p50": a[len(a) // 2], "p95": a[int(0.95 * (len(a) - 1))],
        "next_p50": b[len(b) // 2], "next_p95": b[int(0.95 * (len(b) - 1))],
        "rule_p50": c[len(c) // 2], "rule_p95": c[int(0.95 * (len(c) - 1))],
        "probes": float(len(a)), "injected": float(injected), "skills": float(len(skills)),
    }  # fmt: skip
