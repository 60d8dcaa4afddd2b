"""The bench bank, simulator and API-Bank applicability sets: splits that never leak, NONE history, honest rates."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from skillflow.capture.segments import READ_ONLY
from skillflow.injection.calibration import folds_by_group
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.kernel.config import PromotionConfig
from skillflow.lab.bench.applicability_bench import task_folds
from skillflow.lab.bench.applicability_sets import (
    api_bank_segments,
    bank_segments,
    bank_splits,
    run_api_bank,
    run_bank,
    simulator_segments,
)
from skillflow.lab.bench.paraphrase_bank import BANK
from skillflow.lab.simulator import conversation_messages, execute, good_procedure, held_out_requests


def test_bank_probes_are_never_history_and_every_intent_is_none_in_exactly_one_round() -> None:
    segs, history, probes = bank_segments()
    assert len(history) == sum(len(i.triggers) for i in BANK) and len(probes) == sum(len(i.held_out) for i in BANK)
    assert not {segs[i].span for i in history} & {segs[i].span for i in probes}
    none_rounds: Counter[str] = Counter()
    for train, test, skills in bank_splits(history, probes):
        assert train == history and test == probes
        live = {s.intent for s in skills}
        none_rounds.update(i.name for i in BANK if i.name not in live)
        negatives = [segs[i] for i in train if segs[i].intent not in live]
        assert len(negatives) >= PromotionConfig().applicability_min_negatives  # a feasible fit is possible
    assert set(none_rounds) == {i.name for i in BANK} and set(none_rounds.values()) == {1}


def test_bank_rates_add_up_and_the_fixed_rule_is_the_before() -> None:
    result = run_bank(HashingEmbedder(), PromotionConfig(), 0.70, lambda _: None)
    assert result.folds == 5 and result.segments == 200
    for row in ("fitted", "fixed", "ceiling"):
        r = result.rows[row]["intent"]
        assert (r.P, r.N) == (300, 75)
        assert abs(r.hit + r.wrong + r.miss - 1.0) < 1e-9
    assert result.rows["ceiling"]["intent"].miss == 0.0 and result.rows["ceiling"]["intent"].false == 1.0


def test_simulator_folds_are_grouped_by_template_family_never_by_episode() -> None:
    segs = simulator_segments(runs=120, conversations=40)
    assert all(not s.task.endswith(":?") for s in segs)  # every request maps back to its template
    assert any(":h" in s.task for s in segs) and any(":t" in s.task for s in segs)
    config = PromotionConfig()
    seen: set[int] = set()
    for train, test, _ in task_folds(segs, config, 5, 0):
        assert not {segs[i].task for i in train} & {segs[i].task for i in test}
        assert not {segs[i].conversation for i in train} & {segs[i].conversation for i in test}
        seen.update(test)
    assert seen == set(range(len(segs)))
    conversations = [s for s in segs if s.conversation.startswith("conv-")]
    assert conversations and any(len(s.so_far) >= 3 for s in conversations)  # greeting, request, confirmation


def test_a_conversation_confirms_before_its_first_write_and_segments_on_it() -> None:
    from skillflow.capture.segments import segment_conversation

    task = held_out_requests("cancel_reservation", 1, 3)[0]
    run = execute(good_procedure("cancel_reservation"), task)
    messages = conversation_messages(task.request, run.steps, run.answer, "Hi there.", "yes, please proceed")
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["Hi there.", task.request, "yes, please proceed"]
    ask = next(i for i, m in enumerate(messages) if m["role"] == "assistant" and "Shall I" in (m["content"] or ""))
    write = next(i for i, m in enumerate(messages) if any(
        c["function"]["name"] == "cancel_reservation" for c in m.get("tool_calls") or ()
    ))  # fmt: skip
    assert ask < write
    segments = segment_conversation(messages)
    assert [s.intent for s in segments] == ["cancel_reservation"]
    assert segments[0].query.split("\n") == users and segments[0].intent != READ_ONLY


def test_api_bank_dialogs_segment_into_conversations_and_folds_group_by_scenario(
    corpora_dir: Path, api_bank_half: Path
) -> None:
    segs = api_bank_segments(corpora_dir / "api-bank" / "level-1-given-desc")
    dialogs, scenarios = {s.conversation for s in segs}, {s.task for s in segs}
    assert len(dialogs) > 150 and len(scenarios) < len(dialogs)
    add = next(s for s in segs if s.conversation == "AddAgenda-level-1-1")
    assert add.task == "AddAgenda-level-1" and add.procedure == ("GetUserToken", "AddAgenda")
    assert add.so_far[0].startswith("Hi, can you help me add a new schedule")
    for fold in folds_by_group([s.task for s in segs], 5, 0):
        inside = {segs[i].task for i in fold}
        assert all(segs[i].task not in inside for i in range(len(segs)) if i not in fold)
    half = api_bank_segments(api_bank_half)
    assert 0 < len(half) < len(segs)
    result = run_api_bank(HashingEmbedder(), PromotionConfig(), 0.7, lambda _: None, api_bank_half)
    assert result is not None and result.folds == 5
    for levels in result.rows.values():
        for r in levels.values():
            assert len(half) == r.P + r.N and abs(r.hit + r.wrong + r.miss - 1) < 1e-9


def test_an_absent_api_bank_is_skipped_with_a_message(tmp_path: Path) -> None:
    said: list[str] = []
    assert run_api_bank(HashingEmbedder(), PromotionConfig(), 0.7, said.append, tmp_path / "none") is None
    assert "not found" in said[0]
