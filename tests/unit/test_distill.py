"""The offline distiller: a real, spec-valid SKILL.md from evidence, or INSUFFICIENT with reasons."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from skillflow.kernel import canonical
from skillflow.kernel.config import Settings
from skillflow.kernel.models import ClassStats, EvidenceRun, RunInput
from skillflow.lab.ingest.tau_bench import parse_tau_bench
from skillflow.promotion.backends import get_distiller, get_judge
from skillflow.promotion.distill import OfflineDistiller
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.judge import OfflineJudge
from skillflow.promotion.redact import find_literals, source_literals
from skillflow.promotion.skillmd import parse_skill_md
from skillflow.promotion.validation import validate_skill
from tests.support.llm import T0, cancel_evidence, errored_failure


def test_offline_skill_from_realistic_evidence() -> None:
    ev = cancel_evidence(failures=[*cancel_evidence().failures, errored_failure()])
    outcome = OfflineDistiller().distill(ev, 4000)
    assert not outcome.insufficient and outcome.skill_md is not None
    assert (outcome.distiller, outcome.prompt_version) == ("offline", "offline-v1")
    skill = parse_skill_md(outcome.skill_md)
    assert skill.name == "cancel-reservation"
    assert skill.description.startswith("Use when the user asks to cancel a reservation")
    assert skill.allowed_tools == ["get_user_details", "get_reservation_details", "cancel_reservation"]
    assert "the user has given a <id> for `reservation_id`" in skill.preconditions
    assert skill.metadata["source"] == "learned" and skill.metadata["version"] == "1"
    assert skill.metadata["canonical-hash"] == ev.stats.canonical_hash
    assert skill.metadata["prompt-version"] == "offline-v1"
    procedure = skill.sections["Procedure"].splitlines()
    assert procedure[0] == "1. Call `get_user_details` with `user_id`: <id>."
    assert procedure[2] == "3. Call `cancel_reservation` with `reason`: <object>, `reservation_id`: <id>."
    failures = skill.sections["Failure modes observed"]
    assert "`cancel_reservation` failed with `ReservationNotFound`" in failures
    assert "1 sampled run(s) followed this path without a tool error" in failures
    assert "When NOT to apply" in skill.sections["When to apply"]
    assert "think" not in skill.sections["Worked example"]  # no-op tools are not part of the procedure
    assert find_literals(outcome.skill_md, source_literals(ev)) == []
    assert OfflineDistiller().distill(ev, 4000) == outcome  # deterministic


def test_offline_skill_passes_validation_with_the_offline_judge() -> None:
    ev = cancel_evidence(failures=[*cancel_evidence().failures, errored_failure()])
    outcome = OfflineDistiller().distill(ev, 4000)
    assert outcome.skill_md is not None
    result = validate_skill(outcome.skill_md, ev, OfflineJudge(), 4000)
    assert result.ok, result.reasons
    assert all(result.checks.values()) and "judge" in result.checks


def test_no_failures_says_none_observed() -> None:
    outcome = OfflineDistiller().distill(cancel_evidence(failures=[]), 4000)
    assert outcome.skill_md is not None
    assert parse_skill_md(outcome.skill_md).sections["Failure modes observed"] == "None observed in the sampled runs."


def test_the_worked_example_shows_a_run_that_carries_a_request() -> None:
    """A write made again with no new user message (the second of two cancellations) is stored with an empty
    request; when such a run was the newest success the worked example read `Request (redacted): ""` (an outside
    audit: 21 of a τ-bench class's 26 runs have none). The newest success with a request is shown instead."""
    ev = cancel_evidence()
    newest = max(ev.successes, key=lambda r: r.created_at)
    silent = replace(newest, id="silent", query="  ", created_at=newest.created_at + timedelta(minutes=5))
    outcome = OfflineDistiller().distill(replace(ev, successes=[*ev.successes, silent]), 4000)
    assert outcome.skill_md is not None, outcome.reasons
    assert 'Request (redacted): ""' not in outcome.skill_md and 'Request (redacted): "' in outcome.skill_md
    assert outcome.skill_md == OfflineDistiller().distill(ev, 4000).skill_md  # the newest run with a request
    only = OfflineDistiller().distill(replace(ev, successes=[replace(r, query="") for r in ev.successes]), 4000)
    assert only.skill_md is not None  # none carries a request: the newest is shown as before


def test_redistillation_carries_the_demotion_reason() -> None:
    ev = cancel_evidence(version=2, previous_demotion_reason="drift: rolling 0.40 vs baseline 0.90")
    outcome = OfflineDistiller().distill(ev, 4000)
    assert outcome.skill_md is not None
    skill = parse_skill_md(outcome.skill_md)
    assert skill.metadata["version"] == "2"
    assert (
        "History: version 1 was demoted (drift: rolling 0.40 vs baseline 0.90)"
        in skill.sections["Failure modes observed"]
    )


def test_insufficient_without_successes() -> None:
    outcome = OfflineDistiller().distill(cancel_evidence(successes=[]), 4000)
    assert outcome.insufficient and outcome.skill_md is None
    assert outcome.reasons == ["no successful runs in the evidence"]


def test_insufficient_when_failures_dominate() -> None:
    ev = cancel_evidence()
    ev = replace(ev, stats=replace(ev.stats, successes=2, failures=5, success_rate=2 / 7))
    assert OfflineDistiller().distill(ev, 4000).reasons == ["evidence contradicts: more failures than successes"]


def test_insufficient_when_samples_contradict_the_signature() -> None:
    ev = cancel_evidence()
    odd = EvidenceRun("odd", "cancel it", ev.successes[0].steps[:1], "success", T0 + timedelta(days=1))
    outcome = OfflineDistiller().distill(replace(ev, successes=[*ev.successes, odd]), 4000)
    assert outcome.insufficient
    assert outcome.reasons == ["evidence contradicts: sample runs do not follow the class signature"]


def test_insufficient_without_a_checkable_precondition() -> None:
    steps = [{"tool": "list_all_airports", "arguments": {}, "result": ["JFK"], "error": None}]
    runs = [EvidenceRun(f"r{i}", f"which airports do you serve {i}", steps, "success", T0) for i in range(3)]
    ev = cancel_evidence(
        successes=runs,
        failures=[],
        signature=[{"tool": "list_all_airports", "arg_keys": [], "errored": False}],
    )
    assert OfflineDistiller().distill(ev, 4000).reasons == ["no checkable precondition can be stated"]


def test_size_cap_drops_the_example_then_gives_up() -> None:
    ev = cancel_evidence()
    full = OfflineDistiller().distill(ev, 4000).skill_md
    assert full is not None
    shorter = OfflineDistiller().distill(ev, len(full) - 1)
    assert shorter.skill_md is not None and "Omitted to fit the size cap." in shorter.skill_md
    assert len(shorter.skill_md) < len(full)
    tiny = OfflineDistiller().distill(ev, 600)
    assert tiny.insufficient and tiny.reasons == ["skill does not fit in 600 characters"]


def test_factories_default_to_offline() -> None:
    settings = Settings(distiller="offline", judge="offline")
    assert isinstance(get_distiller(settings), OfflineDistiller)
    assert isinstance(get_judge(settings), OfflineJudge)


@pytest.mark.parametrize(("unit", "least"), [("turn", 8), ("conversation", 4)])
def test_every_tau_bench_class_distills_to_a_valid_leak_free_skill(
    tau_bench_path: Path, tmp_path: Path, unit: str, least: int
) -> None:
    """On the real τ-bench airline runs (per turn and per procedure): every frequent class's skill passes the gate."""
    from skills_ref.validator import validate as agentskills_validate

    runs = parse_tau_bench(tau_bench_path, unit=unit)  # type: ignore[arg-type]  # one of the two units
    classes: dict[str, list[tuple[RunInput, bool]]] = defaultdict(list)
    for run in runs:
        units = canonical.signature(run.steps)
        chash = canonical.canonical_hash(units)
        if chash:
            classes[chash].append((run, canonical.execution_succeeded(units, None)))
    toolbox = sorted({s.tool for r in runs for s in r.steps})
    frequent = sorted((c for c in classes.items() if len(c[1]) >= 5), key=lambda c: -len(c[1]))[:12]
    assert len(frequent) >= least
    names = []
    for chash, members in frequent:
        ev = _evidence(chash, members, toolbox)
        outcome = OfflineDistiller().distill(ev, 4000)
        if not ev.successes:  # an always-erroring procedure is never distilled
            assert outcome.insufficient and outcome.reasons == ["no successful runs in the evidence"]
            continue
        assert outcome.skill_md is not None, outcome.reasons
        result = validate_skill(outcome.skill_md, ev, OfflineJudge(), 4000)
        assert result.ok, (chash, result.reasons)
        assert find_literals(outcome.skill_md, source_literals(ev)) == []
        skill_dir = tmp_path / chash[:8] / result.parsed.name  # type: ignore[union-attr]  # ok implies parsed
        skill_dir.mkdir(parents=True)
        (skill_dir / "SKILL.md").write_text(outcome.skill_md, encoding="utf-8")
        assert agentskills_validate(skill_dir) == []
        names.append(result.parsed.name)  # type: ignore[union-attr]  # ok implies parsed
    assert len(names) >= 8 and "cancel-reservation" in names


def _evidence(chash: str, members: list[tuple[RunInput, bool]], toolbox: list[str]) -> Evidence:
    def as_run(i: int, run: RunInput, ok: bool) -> EvidenceRun:
        steps = [
            {
                "tool": s.tool,
                "arguments": s.arguments,
                "result": s.result,
                "error": s.error,
                "error_class": s.error_class,
            }
            for s in run.steps
        ]
        return EvidenceRun(run.run_id or str(i), run.query, steps, "success" if ok else "failure", T0)

    good = [as_run(i, r, ok) for i, (r, ok) in enumerate(members) if ok]
    bad = [as_run(i, r, ok) for i, (r, ok) in enumerate(members) if not ok]
    units = canonical.signature(members[0][0].steps)
    stats = ClassStats("tau", "shared", chash, len(members), len(good), len(bad), 0, len(good) / len(members),
                       len({canonical.normalize_query(r.query) for r, _ in members}), T0, T0,
                       canonical.tool_sequence(units))  # fmt: skip
    return Evidence(stats, [u.as_hashable() for u in units], good[-5:], bad[-2:], toolbox)
