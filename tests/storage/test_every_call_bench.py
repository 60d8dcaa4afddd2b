"""The every-call applicability bench on small inputs: the call points' labels, the figures, the grouped folds."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from skillflow.injection.calibration import Budget
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.rule import LiveSkill
from skillflow.kernel.config import PromotionConfig
from skillflow.lab.bench.call_points import CallPoint, Dialog, call_points, dialog
from skillflow.lab.bench.every_call import (
    Probe,
    Single,
    evaluate_calls,
    figures,
    hindsight,
    outer_folds,
    siblings,
    single_figures,
    tau_corpus,
)
from tests.conftest import CORPORA

CANCEL, BOOK = "cancel_reservation", "book_reservation"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def call(i: str, tool: str, result: str = "{}") -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": tool, "arguments": json.dumps({"user_id": "x"})}}
        ]},
        {"role": "tool", "tool_call_id": i, "name": tool, "content": result},
    ]  # fmt: skip


CONVERSATION = [
    {"role": "system", "content": "policy"},
    user("hi, cancel my trip"),
    say("your user id?"),  # 2: a text answer inside the cancel span
    user("mia_1"),
    *call("a", "get_user_details"),  # 4
    *call("b", CANCEL, "Error: not allowed"),  # 6: a failed write, retried
    *call("c", CANCEL),  # 8: closes the span
    say("done"),  # 10: after the write, no new user message; no write follows
    user("and my bags?"),
    *call("d", "get_user_details"),  # 12: read-only span
    say("two bags"),  # 14: no call follows
]


def test_every_assistant_message_is_a_call_point_labelled_with_the_write_closing_its_span() -> None:
    points = call_points(CONVERSATION)
    assert [(p.index, p.label, p.pre_write, p.writing, set(p.done)) for p in points] == [
        (2, CANCEL, False, None, set()),
        (4, CANCEL, False, None, set()),
        (6, CANCEL, False, CANCEL, set()),  # the failed attempt does not close the span
        (8, CANCEL, True, CANCEL, set()),
        (10, "read-only", False, None, {CANCEL}),  # the cancel succeeded since the latest user message
        (12, "read-only", True, None, set()),
        (14, "read-only", False, None, set()),
    ]


def _skill(intent: str) -> LiveSkill:
    return LiveSkill("k-" + intent, "k-" + intent, intent, (intent,))


def test_the_figures_count_the_probes() -> None:
    d = dialog("t1", "t1-0", CONVERSATION, frozenset({BOOK}))  # the gold write was a booking: cancel is wrong
    quiet = Dialog("t2", "t2-0", (), (CallPoint(1, "read-only", True, None, frozenset()),) * 2, frozenset())
    intents = frozenset({CANCEL, BOOK})
    cancel = _skill(CANCEL)
    got = {2: None, 4: cancel, 6: cancel, 8: None, 10: cancel, 12: None, 14: _skill(BOOK)}
    probes = [Probe(0, d, p, got[p.index], intents) for p in d.points]
    probes += [Probe(1, quiet, quiet.points[0], cancel, intents), Probe(1, quiet, quiet.points[1], None, intents)]
    f = figures(probes)
    assert f["calls"] == 9 and f["pre_write_P"] == 1 and f["pre_write_N"] == 3
    assert f["pre_write_hit"] == 0.0 and f["pre_write_false"] == 1 / 3  # the quiet dialog's first pre-write call
    assert f["misleading"] == 3 / 9  # 10 (cancel after cancel), 14 (book, no write follows), the quiet call
    assert f["no_write_calls"] == 2 and f["no_write_share"] == 0.5
    assert f["reinjections"] == 1  # call 10
    assert f["outside_gold"] == 4 / 9  # cancel at 4, 6, 10 and in the quiet dialog (whose gold has no write)
    assert f["wrong_writes"] == 2 and f["reinforcement"] == 0.5  # calls 6 (cancel injected) and 8 (none)
    assert f["right_writes"] == 0
    # Against the gold actions: call 14's booking is the write the task asked for and the agent never made.
    assert f["misleading_gold_write"] == 1 / 9
    assert (f["no_write_gold_calls"], f["no_write_none_calls"], f["no_write_none_share"]) == (0, 2, 0.5)
    failed = replace(quiet, conversation="t2-1", gold=frozenset({CANCEL}))  # the agent failed to cancel
    g = figures([Probe(1, failed, p, k, intents) for p, k in zip(failed.points, (cancel, None), strict=True)])
    assert (g["no_write_gold_calls"], g["no_write_gold_share"], g["no_write_none_calls"]) == (2, 0.5, 0)
    assert g["misleading_gold_write"] == 0.5 and g["no_write_share"] == 0.5
    s = single_figures([Single(0, CANCEL, cancel, intents), Single(0, "read-only", None, intents),
                        Single(1, "read-only", cancel, intents, frozenset({CANCEL})),
                        Single(1, BOOK, cancel, intents)])  # fmt: skip
    assert (s["P"], s["N"], s["hit"], s["wrong"], s["false"]) == (2, 2, 0.5, 0.5, 0.5)
    assert s["false_gold_write"] == 0.5  # the task asked for the cancel the agent never made


def test_single_turn_figures_also_leave_out_requests_seen_word_for_word_in_training() -> None:
    """A held-out first request identical to a training one (API-Bank's scenario groups share openings) is
    easier: the figures are also given over the requests whose text training never held (``unseen``)."""
    intents = frozenset({CANCEL})
    cancel = _skill(CANCEL)
    s = single_figures([
        Single(0, CANCEL, cancel, intents, twin=True), Single(0, CANCEL, None, intents),
        Single(0, "read-only", cancel, intents, twin=True), Single(1, "read-only", None, intents),
        Single(1, "read-only", cancel, intents),
    ])  # fmt: skip
    assert (s["P"], s["N"], s["hit"], s["false"], s["twins"]) == (2, 3, 0.5, 2 / 3, 2)
    assert (s["P_unseen"], s["N_unseen"], s["hit_unseen"], s["wrong_unseen"], s["false_unseen"]) == (1, 2, 0, 0, 0.5)


def test_a_first_request_is_a_twin_when_a_training_dialog_opened_with_the_same_words() -> None:
    from skillflow.lab.bench.every_call import first_request, twins

    train = [dialog("a", "a-1", [{"role": "user", "content": "Can you help me  DELETE my account?"}])]
    assert first_request(train[0].messages) == "Can you help me  DELETE my account?"
    assert twins(train) == {"can you help me delete my account?"}
    assert "can you help me delete my account?" in twins(train)
    assert first_request([{"role": "assistant", "content": "hi"}]) == ""


def test_the_hindsight_floor_is_chosen_on_the_probes_within_the_misleading_target() -> None:
    d = dialog("t1", "t1-0", CONVERSATION)
    intents = frozenset({CANCEL})
    cancel = _skill(CANCEL)
    scores = {10: 0.99, 8: 0.95, 2: 0.9, 4: 0.8, 6: 0.7, 12: 0.5, 14: 0.4}  # a re-injection scores highest
    probes = [Probe(0, d, p, None, intents, scores[p.index], cancel) for p in d.points]
    loose = hindsight(probes, Budget(wrong=0.0, false=1.0), target=1.0)
    assert loose["pre_write_hit"] == 1.0 and loose["misleading"] == 1 / 7 and loose["reinjections"] == 1
    strict = hindsight(probes, Budget(wrong=0.0, false=1.0), target=0.0)  # no mislead allowed: no floor low
    assert strict["pre_write_hit"] == 0.0 and strict["misleading"] == 0.0  # enough to reach the write


def test_the_hindsight_floor_within_every_target_keeps_the_no_write_share() -> None:
    """A quiet conversation's call scores above the write: within the misleading target alone the floor reaches
    the write, within the no-write target too it cannot (no floor keeps the quiet call out and lets the write in)."""
    d = dialog("t1", "t1-0", CONVERSATION)
    quiet = Dialog("t2", "t2-0", (), (CallPoint(1, "read-only", False, None, frozenset()),))
    intents, cancel = frozenset({CANCEL}), _skill(CANCEL)
    scores = {2: 0.1, 4: 0.1, 6: 0.1, 8: 0.95, 10: 0.1, 12: 0.1, 14: 0.1}
    probes = [Probe(0, d, p, None, intents, scores[p.index], cancel) for p in d.points]
    probes.append(Probe(1, quiet, quiet.points[0], None, intents, 0.99, cancel))
    budget = Budget(wrong=0.0, false=1.0)
    assert hindsight(probes, budget, target=0.2)["pre_write_hit"] == 1.0
    every = hindsight(probes, budget, target=0.2, quiet_target=0.05)
    assert every["pre_write_hit"] == 0.0 and every["no_write_share"] == 0.0


def test_siblings_count_the_tasks_whose_conversations_disagree_and_the_task_oracle() -> None:
    """Three trials of a cancel task (two cancel, one only looks up), two trials of a book task that agree, one
    task alone (left out): the oracle guesses each first request from the task's other trials."""
    cancel = [user("cancel my trip"), *call("a", "get_user_details"), *call("b", CANCEL), say("done")]
    look = [user("cancel my trip"), *call("a", "get_user_details"), say("not allowed")]
    book = [user("book paris"), *call("a", "search_direct_flight"), *call("b", BOOK), say("booked")]
    ds = [dialog("c", "c-0", cancel), dialog("c", "c-1", cancel), dialog("c", "c-2", look),
          dialog("b", "b-0", book), dialog("b", "b-1", book), dialog("x", "x-0", book)]  # fmt: skip
    sib = siblings(ds)
    assert (sib["tasks"], sib["tasks_same_writes"]) == (2, 1)
    assert (sib["no_write_conversations"], sib["no_write_with_writing_sibling"]) == (1, 1)
    # c-0 and c-1: the others are one cancel and one look-up, a tie: the oracle abstains; c-2: two cancels
    assert (sib["oracle_P"], sib["oracle_hit"], sib["oracle_wrong"]) == (4, 0.5, 0.0)  # b-0, b-1 right
    assert (sib["oracle_N"], sib["oracle_false"]) == (1, 1.0)
    # Cancel declared a hand-off: no skill of it exists, so its first requests are negatives and the oracle
    # abstains where the others cancelled (c-2 was its false injection; now every c trial is a right abstention).
    handed = siblings(ds, frozenset({CANCEL}))
    assert (handed["oracle_P"], handed["oracle_hit"], handed["oracle_N"], handed["oracle_false"]) == (2, 1.0, 3, 0.0)


def corpus(tmp_path: Path) -> Path:
    words = ["today", "please", "now", "thanks", "asap", "kindly", "soon", "quickly"]
    runs = []
    for task in range(12):
        for trial in range(3):
            w = f"{words[task % 8]} {words[(task + trial) % 8]}"
            if task % 3 == 0:
                traj = [user(f"cancel my reservation {w}"), *call("a", "get_user_details"), say("sure?")]
                traj += [user("yes, proceed"), *call("b", CANCEL), say("cancelled")]
                gold = [{"name": CANCEL if trial else BOOK}]
            elif task % 3 == 1:
                traj = [user(f"book a flight to paris {w}"), *call("a", "search_direct_flight")]
                traj += [*call("b", BOOK), say("booked")]
                gold = [{"name": BOOK}]
            else:
                traj = [user(f"what is my baggage allowance {w}"), *call("a", "get_user_details"), say("two")]
                gold = []
            runs.append({"task_id": task, "trial": trial, "reward": float(trial != 1), "traj": traj,
                         "info": {"task": {"actions": gold}}})  # fmt: skip
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(runs))
    return path


def test_the_outer_folds_never_put_a_task_on_both_sides(tmp_path: Path) -> None:
    segs, dialogs = tau_corpus(corpus(tmp_path))
    plan = outer_folds(segs, dialogs, 5, 0)
    assert sorted(i for _, test in plan for i in test) == list(range(len(dialogs)))
    for train, test in plan:
        held = {dialogs[i].task for i in test}
        assert held and not held & {segs[i].task for i in train}


def test_grouped_by_customer_a_customer_s_tasks_are_never_on_both_sides(tmp_path: Path) -> None:
    """``--tau-group customer``: one customer's tasks (often variants of one scenario) stay in one fold."""
    path = corpus(tmp_path)
    runs = json.loads(path.read_text())
    for run in runs:
        run["info"]["task"]["user_id"] = f"user_{run['task_id'] // 3}"  # four customers of three tasks each
    path.write_text(json.dumps(runs))
    segs, dialogs = tau_corpus(path, group="customer")
    assert {d.task for d in dialogs} == {f"customer:user_{k}" for k in range(4)}
    for train, test in outer_folds(segs, dialogs, 3, 0):
        held = {dialogs[i].task for i in test}
        assert held and not held & {segs[i].task for i in train}
    with pytest.raises(ValueError, match="group"):
        tau_corpus(path, group="episode")


def test_prepare_is_probed_before_every_model_call_of_the_held_out_conversations(tmp_path: Path) -> None:
    segs, dialogs = tau_corpus(corpus(tmp_path))
    assert sum(1 for s in segs if not s.ok) == 0
    assert sum(1 for s in tau_corpus(corpus(tmp_path), "reward")[0] if not s.ok) > 0  # trial 1 has reward 0
    config = PromotionConfig(min_executions=3, applicability_min_negatives=3)
    result = evaluate_calls(segs, dialogs, HashingEmbedder(), config, folds=3)
    assistant = sum(1 for d in dialogs for m in d.messages if m["role"] == "assistant")
    assert result.calls == result.pooled["calls"] == assistant == sum(f["calls"] for f in result.per_fold)
    assert result.single["P"] + result.single["N"] == len(dialogs)  # one first request per conversation
    assert result.pooled["no_write_calls"] == 12 * 2  # the baggage conversations: two calls each, never a write
    assert result.pooled["wrong_writes"] == 4  # tasks 0, 3, 6 and 9, trial 0: the cancel was not the gold booking
    assert 0.0 <= result.hindsight["misleading"] <= 0.03 + 1e-9
    assert len(result.fitted) == 3 and all(f["examples"] > 0 for f in result.fitted)


@pytest.mark.parametrize("outcome", ["execution", "reward"])
def test_the_single_turn_side_alone(tmp_path: Path, outcome: str) -> None:
    segs, dialogs = tau_corpus(corpus(tmp_path), outcome)
    config = PromotionConfig(min_executions=3, applicability_min_negatives=3)
    result = evaluate_calls(segs, dialogs, HashingEmbedder(), config, folds=3, every_call=False, outcome=outcome)
    assert result.calls == 0 and result.single["P"] + result.single["N"] == len(dialogs)
    assert sum(f["P"] + f["N"] for f in result.single_per_fold) == len(dialogs)


def test_the_bench_gates_its_classes_with_the_promotion_gates() -> None:
    """``gated_skills`` is the cycle's ``evaluate_gates``: a read-only class, a thin class and a class calling a
    declared hand-off are held back; what passes becomes a live skill of its write."""
    from skillflow.lab.bench.applicability_bench import conversation_segs, gated_skills

    transfer = "transfer_to_human_agents"
    segs = []
    for i in range(6):
        cancel = [user(f"cancel trip {i}"), *call("a", "get_user_details"), *call("b", CANCEL), say("done")]
        hand = [user(f"a person please {i}"), *call("a", "get_user_details"), *call("b", transfer), say("ok")]
        look = [user(f"what is booked {i}"), *call("a", "get_user_details"), *call("b", "get_reservation_details")]
        segs += conversation_segs("t", f"c{i}", cancel) + conversation_segs("t", f"h{i}", hand)
        segs += conversation_segs("t", f"l{i}", [*look, say("this")])
    segs += conversation_segs("t", "b0", [user("book"), *call("a", "search_direct_flight"), *call("b", BOOK)])
    config = PromotionConfig()
    assert sorted(s.intent for s in gated_skills(segs, config)) == [CANCEL, transfer]
    assert [s.intent for s in gated_skills(segs, config, frozenset({transfer}))] == [CANCEL]
    opted = config.model_copy(update={"promote_handoff_classes": True, "promote_read_only_classes": True})
    assert sorted(s.intent for s in gated_skills(segs, opted, frozenset({transfer}))) == [
        CANCEL, "read-only", transfer
    ]  # fmt: skip


def test_the_open_pre_write_hit_leaves_out_a_repeat_of_a_write_done_since_the_request() -> None:
    """Two cancels asked in one message: the second write's call comes after the first succeeded, where no
    skill of the intent may be injected; the open hit counts the first only."""
    twice = [user("cancel both trips"), *call("a", "get_user_details"), *call("b", CANCEL), *call("c", CANCEL),
             say("both cancelled")]  # fmt: skip
    d = dialog("t1", "t1-0", twice)
    assert [(p.index, p.pre_write, set(p.done)) for p in d.points if p.pre_write] == [
        (3, True, set()), (5, True, {CANCEL})
    ]  # fmt: skip
    cancel = _skill(CANCEL)
    probes = [Probe(0, d, p, cancel if p.index == 3 else None, frozenset({CANCEL})) for p in d.points]
    f = figures(probes)
    assert (f["pre_write_P"], f["pre_write_hit"]) == (2, 0.5)
    assert (f["pre_write_open_P"], f["pre_write_open_hit"]) == (1, 1.0)


def test_the_bench_s_live_skills_are_what_the_promotion_cycle_promotes(tmp_path: Path, engine: Any) -> None:
    """One composition: the every-call protocol makes the training folds' gated classes live
    (``gated_skills``); the shipped path (register the tools, ``record_conversation``, promotion cycles with the
    offline distiller and validation until nothing more is promoted) must make exactly those classes live. They
    differed on API-Bank while validation refused words beside a placeholder (docs/BENCHMARKS.md)."""
    from skillflow.lab.bench.applicability_bench import gated_skills

    segs, dialogs = tau_corpus(corpus(tmp_path))
    config = PromotionConfig(min_executions=3, applicability_min_negatives=3, promotion_every_n_runs=0)
    train, _ = outer_folds(segs, dialogs, 3, 0)[0]
    bench = {s.canonical_hash for s in gated_skills([segs[i] for i in train], config)}
    assert bench and promoted(engine, tmp_path, segs, dialogs, train, config) == bench


def promoted(engine: Any, *args: Any, **kwargs: Any) -> set[str]:
    """The classes the shipped path (:func:`shipped`, the same arguments) makes live from the training
    conversations."""
    from skillflow.injection.applicability import live_skills

    shipped(engine, *args, **kwargs)
    with engine.connect() as conn:
        return {s.canonical_hash for s in live_skills(conn, "a", "u")}


def shipped(
    engine: Any,
    tmp_path: Path,
    segs: Any,
    dialogs: Any,
    train: list[int],
    config: PromotionConfig,
    handoffs: Sequence[str] = (),
    strict: bool = True,
    embedder: Any = None,
) -> Any:
    """The shipped path on the training conversations: register the tools (``handoffs`` declared),
    ``record_conversation``, promotion cycles (offline distiller) until nothing more is promoted; the agent's
    ``Skillflow`` handle (agent ``a``, user ``u``; ``embedder``, default the hashing one). ``strict``: every
    procedure must be stored."""
    from skillflow.promotion.cycle import run_partition
    from skillflow.runtime import Skillflow

    sf = Skillflow(
        agent_id="a", engine=engine, config=config, embedder=embedder or HashingEmbedder(), spool_dir=tmp_path / "s",
        continual_learning=True,
    )  # fmt: skip
    sf.register_tools(sorted({t for s in segs for t in s.procedure} | set(handoffs)), hands_off=sorted(handoffs))
    kept = {segs[i].conversation for i in train}
    for d in dialogs:
        if d.conversation in kept:
            results = sf.record_conversation(list(d.messages), "u", conversation_id=d.conversation)
            assert not strict or all(r.stored for r in results)
    for _ in range(10):
        if not run_partition(engine, "a", "u", config, force=True).promoted:
            break
    return sf


def test_a_procedure_without_a_request_of_its_own_counts_no_distinct_query(tmp_path: Path, engine: Any) -> None:
    """A write made again with no new user message ("cancel both": the second cancel) is a procedure whose
    request is empty; the cycle never counts an empty request as a distinct query, so a class of such
    procedures plus one asked in words has one distinct query and fails the gate. The bench's gates counted
    the empty request as one more (τ-bench folds 2-4 had live skills the cycle never promotes)."""
    from skillflow.lab.bench.applicability_bench import gated_skills

    runs = []
    for i in range(6):
        traj = [user(f"cancel both my trips {i}"), *call("a", "get_user_details"), *call("b", CANCEL)]
        if i == 0:  # the other one asked for in words
            traj += [say("the first is cancelled"), user("and the other one too")]
        traj += [*call("c", CANCEL), say("both cancelled")]
        runs.append({"task_id": i, "trial": 0, "reward": 1.0, "traj": traj, "info": {"task": {"actions": []}}})
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(runs))
    segs, dialogs = tau_corpus(path)
    alone = {s.klass for s in segs if s.procedure == (CANCEL,)}
    assert len(alone) == 1 and sum(s.procedure == (CANCEL,) for s in segs) == 6
    config = PromotionConfig(promotion_every_n_runs=0)
    bench = {s.canonical_hash for s in gated_skills(segs, config)}
    assert not bench & alone  # one distinct request: the gate holds it back
    assert promoted(engine, tmp_path, segs, dialogs, list(range(len(segs))), config) == bench


@pytest.mark.slow
@pytest.mark.skipif(not (CORPORA / "api-bank").exists(), reason=f"corpora not present at {CORPORA}")
def test_on_api_bank_the_cycle_promotes_the_bench_s_classes(
    tmp_path: Path, sqlite_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check on API-Bank level-1 (seed 0, fold 0, the default configuration). Validation refused the
    register, delete-account and open-account procedures at every cycle (words beside a placeholder read as
    secrets), so the shipped path made 12 classes live where the bench made 15. Which classes go live does not
    depend on the embedder (it embeds for the rule's fit and the skills' vectors, after the gates): the hashing one
    keeps the cycles' calibration to seconds (MiniLM re-embedded the history at each of them, about 100 s)."""
    from skillflow.kernel.config import load_promotion_config

    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    from skillflow.lab.bench.applicability_bench import gated_skills
    from skillflow.lab.bench.every_call import api_bank_corpus

    segs, dialogs = api_bank_corpus(CORPORA / "api-bank" / "level-1-given-desc")
    config = load_promotion_config().model_copy(update={"require_shadow": False, "promotion_every_n_runs": 0})
    train, _ = outer_folds(segs, dialogs, 5, 0)[0]
    bench = {s.canonical_hash for s in gated_skills([segs[i] for i in train], config)}
    live = promoted(sqlite_engine, tmp_path, segs, dialogs, train, config, strict=False)
    assert len(bench) == 15 and live == bench


@pytest.mark.slow
@pytest.mark.skipif(not (CORPORA / "tau-bench").exists(), reason=f"corpora not present at {CORPORA}")
def test_on_tau_bench_the_cycle_promotes_the_bench_s_classes_and_prepare_injects_what_the_bench_probed(
    tmp_path: Path, sqlite_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check on τ-bench (execution outcome, seed 0, fold 4, the default configuration, the hand-offs
    declared). The bench's gates counted an empty request (a write made again with no new user message) as a
    distinct query and made a single-call cancel and flight-change class live that the cycle never promotes:
    6 classes against the cycle's 4. Then the figures' own check: ``prepare`` on the shipped tenant (the rule the
    cycle fitted and stored) before every call of the held-out conversations injects the skill of the class the
    bench's probe of that call injected (:func:`probe_fold`), or none where it injected none; MiniLM on both
    sides, as the bench runs (the hashing embedder's fits sit at the similarity floor, where a changed budget
    moves no call)."""
    from skillflow.injection.embeddings import get_embedder
    from skillflow.kernel.config import load_promotion_config
    from skillflow.lab.bench.applicability_bench import gated_skills
    from skillflow.lab.bench.every_call import _so_far, probe_fold
    from skillflow.lab.bench.retrieval_bench import CachedEmbedder
    from skillflow.lab.ingest.tau_bench import HANDOFF_TOOLS

    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "minilm")  # the cycle's calibration, as the handle and the bench
    minilm = CachedEmbedder(get_embedder("minilm"))
    segs, dialogs = tau_corpus(CORPORA / "tau-bench" / "gpt-4o-airline.json")
    config = load_promotion_config().model_copy(update={"require_shadow": False, "promotion_every_n_runs": 0})
    train, test = outer_folds(segs, dialogs, 5, 0)[4]
    bench = {s.canonical_hash for s in gated_skills([segs[i] for i in train], config, HANDOFF_TOOLS)}
    sf = shipped(
        sqlite_engine, tmp_path, segs, dialogs, train, config, sorted(HANDOFF_TOOLS), strict=False, embedder=minilm
    )
    with sqlite_engine.connect() as conn:
        from skillflow.injection.applicability import live_skills

        live = {s.skill_id: s.canonical_hash for s in live_skills(conn, "a", "u")}
    assert len(bench) == 4 and set(live.values()) == bench

    fold = probe_fold(segs, dialogs, train, test, minilm, config, k=4, handoffs=HANDOFF_TOOLS)
    differ = []
    for probe in fold.probes:
        query, history, conv = _so_far(probe.dialog.messages[: probe.point.index])
        got = sf.prepare(query, "u", history=history, conversation=conv).skill_ids
        mine = live[got[0]] if got else None
        theirs = probe.injected.canonical_hash if probe.injected else None
        if mine != theirs:
            differ.append((probe.dialog.conversation, probe.point.index, theirs, mine))
    injected = sum(p.injected is not None for p in fold.probes)
    assert len(fold.probes) > 400 and injected >= 20, (len(fold.probes), injected)  # a comparison, not all-none
    assert not differ, (len(differ), sum(d[3] is None for d in differ), sum(d[2] is None for d in differ), differ[:10])
