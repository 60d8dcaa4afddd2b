"""The τ-bench applicability bench at tiny size: segments, grouped folds, rates, prepare timing (no timing asserts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillflow.injection.calibration import folds_by_group
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.kernel.config import PromotionConfig
from skillflow.lab.bench.applicability_bench import evaluate, run_tau_bench, tau_segments, time_prepare

EMB = HashingEmbedder()
WORDS = ["today", "please", "now", "thanks", "asap", "kindly", "soon", "quickly"]


def call(i: str, tool: str) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": tool, "arguments": json.dumps({"user_id": "x"})}}
        ]},
        {"role": "tool", "tool_call_id": i, "name": tool, "content": "{}"},
    ]  # fmt: skip


def corpus(tmp_path: Path) -> Path:
    runs = []
    for task in range(12):
        for trial in range(3):
            w = f"{WORDS[task % 8]} {WORDS[(task + trial) % 8]}"
            if task % 3 == 0:
                traj = [{"role": "user", "content": f"cancel my reservation {w}"}, *call("a", "get_user_details")]
                traj += [{"role": "user", "content": "yes, proceed"}, *call("b", "cancel_reservation")]
            elif task % 3 == 1:
                traj = [{"role": "user", "content": f"book a flight to paris {w}"}, *call("a", "search_direct_flight")]
                traj += [*call("b", "book_reservation")]
            else:
                traj = [
                    {"role": "user", "content": f"what is my baggage allowance {w}"},
                    *call("a", "get_user_details"),
                ]
            runs.append({"task_id": task, "trial": trial, "reward": 1.0, "info": {}, "traj": traj})
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(runs))
    return path


def test_segments_keep_the_confirmation_turn_and_the_conversation(tmp_path: Path) -> None:
    segs = tau_segments(corpus(tmp_path))
    cancel = next(s for s in segs if s.intent == "cancel_reservation")
    assert cancel.procedure == ("get_user_details", "cancel_reservation")
    assert cancel.span[-1] == "yes, proceed" and cancel.so_far[0].startswith("cancel my reservation")
    assert {s.intent for s in segs} == {"cancel_reservation", "book_reservation", "read-only"}


def test_outer_folds_are_grouped_by_task_and_rates_add_up(tmp_path: Path) -> None:
    segs = tau_segments(corpus(tmp_path))
    for fold in folds_by_group([s.task for s in segs], 5, 0):
        tasks = {segs[i].task for i in fold}
        assert all(segs[i].task not in tasks for i in range(len(segs)) if i not in fold)
    config = PromotionConfig(min_executions=3, applicability_min_negatives=3)
    result = evaluate(segs, EMB, config, folds=3)
    assert set(result.rows) == {"fitted", "hindsight", "fixed", "ceiling"} and len(result.fitted) == 3
    for levels in result.rows.values():
        for r in levels.values():
            assert len(segs) == r.P + r.N
            assert r.hit + r.wrong + r.miss == pytest.approx(1.0)
    assert result.rows["ceiling"]["intent"].miss == 0.0  # the ceiling never abstains on a positive
    assert result.rows["fitted"]["intent"].wrong <= result.rows["ceiling"]["intent"].wrong


def test_absent_corpus_is_skipped_with_a_message(tmp_path: Path) -> None:
    said: list[str] = []
    assert run_tau_bench(tmp_path / "missing.json", EMB, PromotionConfig(), 0.7, said.append) is None
    assert "not found" in said[0]


def test_prepare_is_timed_through_the_runtime(tmp_path: Path) -> None:
    segs = tau_segments(corpus(tmp_path))
    ms = time_prepare(segs, EMB, PromotionConfig(min_executions=3, applicability_min_negatives=3), n=8, filler=500)
    assert 0 < ms["p50"] <= ms["p95"] and 0 < ms["next_p50"] <= ms["next_p95"] and 0 < ms["rule_p50"] <= ms["rule_p95"]
    assert ms["probes"] == 8 and 0 < ms["injected"] <= 8 and ms["skills"] > 500


def test_the_hindsight_floor_is_the_best_single_floor_within_the_budgets() -> None:
    from skillflow.injection.calibration import Budget
    from skillflow.injection.rule import LiveSkill
    from skillflow.lab.bench.applicability_bench import Seg, hindsight

    def seg(intent: str) -> Seg:
        return Seg("t", "c", intent, "k-" + intent, (intent,), ("q",), ("q",), True, "q")

    cancel = LiveSkill("k-cancel", "k-cancel", "cancel", ("cancel",))
    book = LiveSkill("k-book", "k-book", "book", ("book",))
    scored = [  # (score, probe, skill the rule's score picks, positive at intent level, positive at class level)
        (0.99, seg("cancel"), cancel, True, True),
        (0.95, seg("cancel"), cancel, True, True),
        (0.90, seg("read-only"), cancel, False, False),  # a false injection
        (0.85, seg("book"), book, True, True),
        (0.80, seg("book"), cancel, True, True),  # a wrong skill
        (0.70, seg("cancel"), cancel, True, True),
        (0.60, seg("read-only"), None, False, False),
    ]
    strict = hindsight(scored, Budget(wrong=0.0, false=0.0))
    assert strict["intent"].hit == 2 / 5 and strict["intent"].wrong == 0 and strict["intent"].false == 0
    loose = hindsight(scored, Budget(wrong=0.2, false=0.5))  # one wrong of 5 and one false of 2 allowed
    assert loose["intent"].hit == 4 / 5 and loose["intent"].wrong == 1 / 5 and loose["intent"].false == 1 / 2
    assert loose["class"].hit == 4 / 5
