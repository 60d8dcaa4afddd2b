"""The evaluation: does a reviewed skill beat three replayed raw workflows, and no memory at all?

Arms (same model, tools, generic production instruction and held-out requests; each its own fresh
database with the same independently ingested training runs):

- ``baseline``: no skill; three successful raw workflows of the request's target class, retrieved through
  the audit API ``retrieve_workflows_by_query(exclude_promoted=True)``, replayed into the context;
- ``skill_user``: the reviewed skill, activated at user authority;
- ``skill_developer``: the byte-identical skill, through SHADOW and an explicit developer activation;
- ``no_memory`` (default on): neither skills nor workflows.

Skills are selected exactly as in production: ``Skillflow.prepare`` with the production configuration and
the tenant's rule fitted on the arm's own history (no threshold bypass), so a skill arm may get no skill
for a request — reported as the skill-in-prompt rate, never hidden. In the skill arms the class is stamped
by the activation, so no raw workflow of it is retrieved. Next to the mean deltas the result counts, per
case, whether each arm was better, equal or worse than the baseline (and than no memory): the regression
rate. The built-in invariants (:mod:`skillflow.lab.evaluation.invariants`) are checked at the end and
raise :class:`EvaluationInvariantError` in strict mode.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from skillflow.injection.embeddings import Embedder, get_embedder
from skillflow.kernel.config import get_settings
from skillflow.kernel.models import InjectionRole, utcnow
from skillflow.lab.evaluation import arms as arm_setup
from skillflow.lab.evaluation.arms import USER_ID, Arm, EvaluationSetupError
from skillflow.lab.evaluation.cases import EvalCase, build_cases, trajectory_hash
from skillflow.lab.evaluation.eval_env import EvalSettings, load_eval_settings, make_model
from skillflow.lab.evaluation.execution import Model
from skillflow.lab.evaluation.invariants import (
    Check,
    EvaluationInvariantError,
    digest,
    enforce,
    has_developer_message,
    only_developer_arm_has_developer_message,
    same_requests,
    same_training_state,
    skill_arms_without_raw_workflows,
    skill_bodies_identical,
)
from skillflow.lab.evaluation.metrics import COMPARED, METRICS, CaseResult, aggregate, case_outcomes, deltas, verdict
from skillflow.runtime import Skillflow

__all__ = ["EvaluationInvariantError", "EvaluationResult", "EvaluationSetupError", "run_evaluation"]

PRODUCTION_INSTRUCTION = (
    "You are the customer-service agent of an airline that also runs an online shop. Use the tools to do what "
    "the customer asks, checking facts with the tools before you change anything. When you are done, answer in "
    "one or two sentences that state the concrete ids and amounts."
)
BASELINE, SKILL_USER, SKILL_DEVELOPER, NO_MEMORY = "baseline", "skill_user", "skill_developer", "no_memory"
CANDIDATE_WORKFLOWS = 100  # newest runs the audit API ranks per request
Progress = Callable[[int, int], None]


@dataclass
class EvaluationResult:
    """Everything one evaluation produced; ``summary()`` is its JSON form."""

    provider: str
    model: str
    label: str
    settings: dict[str, Any]
    results: list[CaseResult]
    checks: list[Check]
    skills: list[dict[str, Any]]
    training: dict[str, Any]
    arms: list[str]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def offline(self) -> bool:
        return self.provider == "offline"

    def aggregate(self) -> dict[str, dict[str, float]]:
        return aggregate(self.results)

    def deltas(self, resamples: int = 2000, seed: int = 0) -> dict[str, dict[str, Any]]:
        return deltas(self.results, BASELINE, resamples=resamples, seed=seed)

    def outcomes(self) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
        """reference arm -> arm -> metric -> better/equal/worse counts and the regression rate."""
        refs = [a for a in (BASELINE, NO_MEMORY) if a in self.arms]
        return {
            ref: {
                arm: {m: o.as_dict() for m, o in per.items()}
                for arm, per in case_outcomes(self.results, ref).items()
                if ref == BASELINE or arm in (SKILL_USER, SKILL_DEVELOPER)
            }
            for ref in refs
        }

    def case_rows(self) -> list[dict[str, Any]]:
        """One row per (arm, case, repeat), with its task-accuracy verdict against the baseline and no memory."""
        by_key = {(r.arm, r.case_id, r.repeat): r for r in self.results}
        rows = []
        for r in self.results:
            row = r.as_row()
            for ref in (BASELINE, NO_MEMORY):
                other = by_key.get((ref, r.case_id, r.repeat))
                row[f"vs_{ref}"] = (
                    verdict(r.metric_values()["task_accuracy"], other.metric_values()["task_accuracy"])
                    if other is not None and r.arm != ref
                    else None
                )
            rows.append(row)
        return rows

    def summary(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "provider": self.provider,
            "model": self.model,
            "offline": self.offline,
            "arms": self.arms,
            "cases": len({r.case_id for r in self.results}),
            "repeats": self.settings.get("repeats"),
            "checks": [c.as_dict() for c in self.checks],
            "all_checks_passed": all(c.passed for c in self.checks),
            "aggregate": self.aggregate(),
            "deltas": {
                arm: {m: {"estimate": iv.estimate, "low": iv.low, "high": iv.high} for m, iv in per.items()}
                for arm, per in self.deltas().items()
            },
            "outcomes": self.outcomes(),
            "compared": dict(COMPARED),
            "skills": self.skills,
            "training": self.training,
            "settings": self.settings,
            "seconds": round(self.seconds, 2),
            "notes": self.notes,
            "metrics": list(METRICS),
        }


def retrieve_raw_workflows(sf: Skillflow, request: str, target_hash: str, k: int) -> list[dict[str, Any]]:
    """Up to ``k`` successful runs of the target class, most similar to the request first (audit API)."""
    found = sf.retrieve_workflows_by_query(
        request, USER_ID, k=CANDIDATE_WORKFLOWS, exclude_promoted=True, candidates=CANDIDATE_WORKFLOWS
    )
    return [w for w in found if w["outcome"] == "success" and w["canonical_hash"] == target_hash][:k]


def run_case(
    arm: Arm, case: EvalCase, repeat: int, model: Model, target_hash: str, workflows: Sequence[dict[str, Any]]
) -> CaseResult:
    """One request in one arm: assemble (the real ``prepare``, skill retrieval included), run the model.

    ``workflows`` come from :func:`retrieve_raw_workflows` (once per arm and case, outside the timing: the
    audit API embeds every candidate run per call, a cost no production prompt path pays).
    """
    provider = "anthropic" if model.provider == "anthropic" else "openai"
    started = time.perf_counter()
    prepared = arm.sf.prepare(
        case.request, USER_ID, workflows=workflows, provider=provider, system_prompt=PRODUCTION_INSTRUCTION
    )
    run = model.run(prepared.request, case.task)
    elapsed = (time.perf_counter() - started) * 1000
    why = prepared.reason if arm.skills else ""  # why the rule chose what it did
    return CaseResult(
        arm=arm.name,
        case_id=case.case_id,
        repeat=repeat,
        request=case.request,
        expected_hash=case.expected_hash,
        observed_hash=trajectory_hash(run.steps),
        expected_answer=case.expected_answer,
        answer=run.answer,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        llm_calls=run.llm_calls,
        inference_latency_ms=run.inference_latency_ms,
        end_to_end_latency_ms=elapsed,
        raw_workflows_in_prompt=len(prepared.assembled.workflows),
        developer_message=has_developer_message(prepared.request),
        skill_ids=prepared.skill_ids,
        answer_check="exact" if model.provider == "offline" else "key_facts",
        intent=case.intent,
        retrieved_workflows=len(workflows),
        skills_in_prompt=len(prepared.skill_ids),
        target_skill_in_prompt=any(s.canonical_hash == target_hash for s in prepared.skills),
        procedure_source=run.note,
        error=run.error,
        selection=why,
    )


def build_arms(
    workdir: Path, settings: EvalSettings, embedder: Embedder
) -> tuple[list[Arm], dict[str, str], list[dict[str, Any]], dict[str, Any]]:
    """The training DB (one distillation + review) and the fresh arm databases."""
    config = arm_setup.eval_config(settings.min_similarity)
    start = utcnow() - timedelta(minutes=settings.training_runs)
    _, train = arm_setup.fresh_database(workdir, "training")
    try:
        report = arm_setup.ingest_training(
            arm_setup.handle(train, config, embedder), settings.training_runs, settings.training_seed, start
        )
        classes = arm_setup.target_classes(report, settings.intents)
        reviewed, reports = arm_setup.distill_and_review(train, config, classes)
    finally:
        train.dispose()
    names = [BASELINE, SKILL_USER, SKILL_DEVELOPER] + ([NO_MEMORY] if settings.include_no_memory else [])
    roles = {SKILL_USER: InjectionRole.USER, SKILL_DEVELOPER: InjectionRole.DEVELOPER}
    arms: list[Arm] = []
    for name in names:
        url, engine = arm_setup.fresh_database(workdir, name)
        sf = arm_setup.handle(engine, config, embedder)
        skills: dict[str, str] = {}
        if name != NO_MEMORY:
            arm_setup.ingest_training(sf, settings.training_runs, settings.training_seed, start)
        rule: dict[str, Any] | None = None
        if name in roles:
            for intent, skill in reviewed.items():
                skills[intent] = arm_setup.install_skill(engine, skill, roles[name], embedder, config).id
            rule = arm_setup.calibrate_arm(engine, config, embedder)
        arms.append(Arm(name, url, engine, sf, skills, retrieves_workflows=name != NO_MEMORY, applicability=rule))
    skills_info = [
        {
            "intent": intent,
            "name": s.name,
            "class": s.canonical_hash,
            "version": s.version,
            "sha256": digest(s.content),
            "bytes": len(s.content.encode("utf-8")),
            "content": s.content,
        }
        for intent, s in reviewed.items()
    ]
    training = {
        "runs": report.runs,
        "stored": report.stored,
        "outcomes": dict(report.outcomes),
        "promoted": sum(len(r.promoted) for r in reports),
        "rejected": sum(len(r.rejected) for r in reports),
        "target_classes": dict(classes),
        "applicability": {a.name: a.applicability for a in arms if a.applicability is not None},
    }
    return arms, classes, skills_info, training


def run_evaluation(
    settings: EvalSettings | None = None,
    *,
    model: Model | None = None,
    embedder: Embedder | None = None,
    workdir: Path | None = None,
    strict: bool = True,
    progress: Progress | None = None,
) -> EvaluationResult:
    """Build the arms, answer every held-out request in every arm ``repeats`` times, check the invariants."""
    settings = settings or load_eval_settings()
    model = model or make_model(settings)
    embedder = embedder or get_embedder(settings.embedder or get_settings().embedder)
    began = time.perf_counter()
    cases = build_cases(settings.intents, settings.cases, settings.case_seed, settings.phrasing)
    with tempfile.TemporaryDirectory(prefix="skillflow-eval-") as tmp:
        base = Path(workdir) if workdir is not None else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        arms, classes, skills_info, training = build_arms(base, settings, embedder)
        try:
            results = _answer_all(arms, cases, classes, model, settings, progress)
            checks = _checks(arms, results)
        finally:
            for arm in arms:
                arm.engine.dispose()
    outcome = EvaluationResult(
        provider=model.provider,
        model=model.name,
        label=model.label,
        settings=settings.model_dump(mode="json"),
        results=results,
        checks=checks,
        skills=skills_info,
        training=training,
        arms=[a.name for a in arms],
        seconds=time.perf_counter() - began,
        notes=_notes(settings, embedder, results, training),
    )
    if strict:
        enforce(checks)
    return outcome


def _answer_all(
    arms: Sequence[Arm],
    cases: Sequence[EvalCase],
    classes: dict[str, str],
    model: Model,
    settings: EvalSettings,
    progress: Progress | None,
) -> list[CaseResult]:
    total = settings.repeats * len(cases) * len(arms)
    results: list[CaseResult] = []
    retrieved: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for repeat in range(settings.repeats):
        for case in cases:
            target = classes[case.intent]
            for arm in arms:
                key = (arm.name, case.case_id)
                if key not in retrieved:
                    retrieved[key] = (
                        retrieve_raw_workflows(arm.sf, case.request, target, settings.baseline_workflows)
                        if arm.retrieves_workflows
                        else []
                    )
                results.append(run_case(arm, case, repeat, model, target, retrieved[key]))
                if progress is not None:
                    progress(len(results), total)
    return results


def _checks(arms: Sequence[Arm], results: Sequence[CaseResult]) -> list[Check]:
    bodies = {a.name: arm_setup.stored_bodies(a.engine) for a in arms if a.skills}
    states = {a.name: arm_setup.training_state(a.engine) for a in arms if a.retrieves_workflows}
    return [
        skill_arms_without_raw_workflows(results),
        only_developer_arm_has_developer_message(results),
        skill_bodies_identical(bodies),
        same_requests(results),
        same_training_state(states),
    ]


def _notes(
    settings: EvalSettings, embedder: Embedder, results: Sequence[CaseResult], training: dict[str, Any]
) -> list[str]:
    production = arm_setup.eval_config().retrieval_min_similarity
    bound = production if settings.min_similarity is None else settings.min_similarity
    notes = [
        "skills selected by prepare with the production configuration and the rule fitted on each arm's history"
        + (
            f" (lower bound {bound:.2f}, production)"
            if settings.min_similarity is None
            else f" (lower bound {bound:.2f} — NOT production's {production:.2f})"
        ),
        f"applicability embedder: {embedder.model_id}",
        "cases phrased with templates the training traffic never used"
        if settings.phrasing == "held_out"
        else "cases phrased with the training traffic's own templates (new worlds and ids)",
        "baseline = the best case for raw workflows: successful runs of the request's target class only",
    ]
    for arm in (SKILL_USER, SKILL_DEVELOPER):
        rows = [r for r in results if r.arm == arm]
        rule = (training.get("applicability") or {}).get(arm) or {}
        without = sum(1 for r in rows if not r.skills_in_prompt)
        if rows:
            notes.append(
                f"{arm}: no skill injected for {without}/{len(rows)} request(s)"
                + ("" if rule.get("injects", True) else f" (the fitted rule injects nothing: {rule.get('reason')})")
            )
            notes.extend(_diagnosis(arm, rows, rule))
    if settings.provider == "offline":
        notes.append("answers are checked exactly; tokens are estimated as ceil(characters / 4)")
    else:
        notes.append("answers are checked on key facts (ids, amounts, outcome words); tokens from provider usage")
    return notes


def _diagnosis(arm: str, rows: Sequence[CaseResult], rule: dict[str, Any]) -> list[str]:
    """Why a skill arm's requests went without a skill, and the fit's own estimate beside what they got: every
    case is a single-turn request (an opening), so the inner CV's counts at the openings are its prediction."""
    out = []
    reasons = Counter(r.selection or "unknown" for r in rows if not r.skills_in_prompt)
    if reasons:
        out.append(f"{arm}: why not: " + "; ".join(f"{why} {n}" for why, n in reasons.most_common()))
    inner = rule.get("inner") or {}
    pos, neg = inner.get("opening_positives", 0), inner.get("opening_negatives", 0)
    if pos:
        right = sum(1 for r in rows if r.target_skill_in_prompt)
        out.append(
            f"{arm}: the fit's inner CV at single-turn requests: the right skill at {inner.get('opening_hits', 0)}/"
            f"{pos} ({inner.get('opening_hits', 0) / pos:.2f}), a wrong one at {inner.get('opening_wrong', 0)}, "
            f"a skill at {inner.get('opening_false', 0)}/{neg} without one; these cases: the right skill at "
            f"{right}/{len(rows)} ({right / len(rows):.2f})"
        )
    return out
