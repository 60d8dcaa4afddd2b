"""The three-arm evaluation harness: answer checks, invariants that raise, the scripted model, the real-
provider loops against a local fake server, and one offline end-to-end run."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update

from skillflow.injection.embeddings import Embedder, HashingEmbedder, get_embedder
from skillflow.injection.prompting import assemble, to_provider
from skillflow.injection.retrieval import ScoredSkill
from skillflow.lab.evaluation import arms as arm_setup
from skillflow.lab.evaluation.answers import answer_correct, facts_present, key_facts
from skillflow.lab.evaluation.cases import build_cases, trajectory_hash
from skillflow.lab.evaluation.eval_env import EvaluationConfigError, load_eval_settings, make_model
from skillflow.lab.evaluation.harness import PRODUCTION_INSTRUCTION, EvaluationResult, run_evaluation
from skillflow.lab.evaluation.invariants import (
    EvaluationInvariantError,
    enforce,
    has_developer_message,
    only_developer_arm_has_developer_message,
    same_requests,
    skill_arms_without_raw_workflows,
    skill_bodies_identical,
)
from skillflow.lab.evaluation.metrics import CaseResult
from skillflow.lab.evaluation.providers import AnthropicToolModel, OpenAIToolModel
from skillflow.lab.evaluation.scripted import OFFLINE_LABEL, ScriptedModel, choose_procedure
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import applicability_rules, skillbox
from tests.support.fake_provider_server import FakeProvider, fake_provider

# End-to-end runs of a bench or the evaluation harness: `make test` runs them, `make test-fast` does not.
pytestmark = pytest.mark.slow

SKILL_MD = """---
name: refund-order
description: "Use when the user asks for a refund of an order."
---

# refund-order

## Procedure

1. Call `lookup_order` with `order_id`: <string>.
2. Call `issue_refund` with `amount`: <number>, `order_id`: <string>.
"""


def _skill(role: str, content: str = SKILL_MD) -> ScoredSkill:
    return ScoredSkill("s1", "refund-order", 1, 0.9, role, "active", content, "h", (), "refund")


def _case(arm: str, case: str = "c1", dev: bool = False, raw: int = 0, request: str = "r") -> CaseResult:
    return CaseResult(
        arm=arm,
        case_id=case,
        repeat=0,
        request=request,
        expected_hash="h",
        observed_hash="h",
        expected_answer="a",
        answer="a",
        prompt_tokens=1,
        completion_tokens=1,
        llm_calls=1,
        inference_latency_ms=1.0,
        end_to_end_latency_ms=1.0,
        raw_workflows_in_prompt=raw,
        developer_message=dev,
        retrieved_workflows=raw,
        skills_in_prompt=0 if arm in ("baseline", "no_memory") else 1,
    )


def _fair() -> list[CaseResult]:
    return [_case("baseline", raw=3), _case("skill_user"), _case("skill_developer", dev=True), _case("no_memory")]


# -- answers -------------------------------------------------------------------------------------------
def test_key_facts_of_simulator_answers() -> None:
    facts = key_facts("Booked flight HAT342 for 2 passenger(s), total 1,560.00.")
    assert facts.ids == {"HAT342"} and facts.amounts == {1560.0}
    assert key_facts("Order #W4794493 was already refunded.").outcome_words == {"already refunded"}
    assert key_facts("Reservation 249VZM is cancelled; 320.00 will be refunded.").ids == {"249VZM"}


def test_key_fact_answer_check() -> None:
    expected = "Reservation HRNXZF is cancelled; 1737.00 will be refunded."
    assert facts_present("Done! HRNXZF is cancelled and $1,737 goes back to your card.", expected)
    assert not facts_present("Done! HRNXZF is cancelled and $1,700 goes back to your card.", expected)
    assert not facts_present("Done! Your reservation is cancelled, $1737.00 refunded.", expected)
    assert not facts_present("Booked flight HAT342, total 560.00.", "The payment for flight HAT342 was declined.")
    assert answer_correct(expected, expected, "exact") and not answer_correct(expected + "!", expected, "exact")


def test_case_result_uses_its_answer_check() -> None:
    row = CaseResult(**{**_case("skill_user").__dict__, "expected_answer": "Refunded 5.00.", "answer": "I refunded 5."})
    assert not row.answer_correct
    keyed = CaseResult(**{**row.__dict__, "answer_check": "key_facts"})
    assert keyed.answer_correct and keyed.metric_values()["answer_accuracy"] == 1.0


# -- invariants --------------------------------------------------------------------------------------------
def test_fair_results_pass_every_check() -> None:
    checks = [
        skill_arms_without_raw_workflows(_fair()),
        only_developer_arm_has_developer_message(_fair()),
        same_requests(_fair()),
        skill_bodies_identical({"skill_user": {"h": SKILL_MD}, "skill_developer": {"h": SKILL_MD}}),
    ]
    assert all(c.passed for c in checks), checks
    enforce(checks)


def test_developer_message_in_the_user_arm_raises() -> None:
    results = [_case("baseline", raw=3), _case("skill_user", dev=True), _case("skill_developer", dev=True)]
    check = only_developer_arm_has_developer_message(results)
    assert not check.passed and "skill_user" in check.detail
    with pytest.raises(EvaluationInvariantError, match="skill_user"):
        enforce([check])


def test_developer_arm_without_developer_message_fails() -> None:
    results = [_case("baseline"), _case("skill_user"), _case("skill_developer", dev=False)]
    assert not only_developer_arm_has_developer_message(results).passed


def test_raw_workflows_in_a_skill_arm_fail() -> None:
    results = [_case("baseline", raw=3), _case("skill_user"), _case("skill_developer", dev=True, raw=1)]
    assert not skill_arms_without_raw_workflows(results).passed


def test_bodies_differing_by_one_byte_fail() -> None:
    check = skill_bodies_identical({"skill_user": {"h": SKILL_MD}, "skill_developer": {"h": SKILL_MD + "\n"}})
    assert not check.passed
    assert not skill_bodies_identical({"skill_user": {"h": SKILL_MD}, "skill_developer": {}}).passed


def test_arms_seeing_different_requests_fail() -> None:
    results = [*_fair(), _case("skill_user", case="c2")]
    assert not same_requests(results).passed


def test_developer_message_is_found_in_every_provider_shape() -> None:
    dev = assemble("refund #W1", skills=[_skill("developer")])
    user = assemble("refund #W1", skills=[_skill("user")])
    for provider in ("openai", "anthropic", "ollama"):
        assert has_developer_message(to_provider(dev, provider))
        assert not has_developer_message(to_provider(user, provider))


# -- the scripted offline model ------------------------------------------------------------------------
def test_scripted_model_follows_the_procedure_in_context() -> None:
    skill = to_provider(assemble("refund", skills=[_skill("developer")]), "openai")
    assert choose_procedure(skill, "refund_order").procedure.name == "refund_checked"
    assert choose_procedure(skill, "refund_order").source == "skill:refund-order"
    # a skill for another intent is not forced onto this request: the naive default is used
    assert choose_procedure(skill, "cancel_reservation").source == "default"
    workflows = [
        {"id": f"w{i}", "canonical_hash": "x", "outcome": "success", "tool_sequence": seq, "query": "q"}
        for i, seq in enumerate(["lookup_order > issue_refund", "issue_refund", "lookup_order > issue_refund"])
    ]
    replay = to_provider(assemble("refund", skills=[], workflows=workflows), "openai")
    assert choose_procedure(replay, "refund_order").procedure.name == "refund_checked"
    empty = to_provider(assemble("refund", skills=[]), "openai")
    assert choose_procedure(empty, "refund_order").procedure.name == "refund_stated_amount"


def test_scripted_model_executes_tools_and_estimates_tokens() -> None:
    case = next(c for c in build_cases(("refund_order",), 3) if len(c.expected_tools) == 2)
    request = to_provider(assemble(case.request, skills=[_skill("user")]), "openai")
    run = ScriptedModel().run(request, case.task)
    assert trajectory_hash(run.steps) == case.expected_hash and run.answer == case.expected_answer
    assert run.steps[0].result["id"] in case.request  # a real lookup in the task's world
    assert run.llm_calls == 3 and run.prompt_tokens > 3 * len(json.dumps(request)) // 4 and run.completion_tokens > 0


# -- real providers against a local fake server ------------------------------------------------------------
@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as srv:
        yield srv


def _tool_call(i: int, name: str, args: dict[str, object]) -> dict[str, object]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_openai_tool_loop_executes_calls_for_real(fake: FakeProvider) -> None:
    case = next(c for c in build_cases(("refund_order",), 3) if len(c.expected_tools) == 2)
    order_id = case.task.slots["order_id"]
    amount = case.task.world.orders[order_id].amount
    fake.openai_script = [
        {"tool_calls": [_tool_call(1, "lookup_order", {"order_id": order_id})]},
        {"tool_calls": [_tool_call(2, "issue_refund", {"order_id": order_id, "amount": amount})]},
        {"content": f"All done: I refunded ${amount:,.0f} for order {order_id}."},
    ]
    model = OpenAIToolModel("gpt-test", api_key="k", base_url=fake.openai_base_url)
    request = to_provider(
        assemble(case.request, skills=[_skill("developer")], system_prompt=PRODUCTION_INSTRUCTION), "openai"
    )
    run = model.run(request, case.task)
    assert run.llm_calls == 3 and run.prompt_tokens == 3 and run.completion_tokens == 3
    assert trajectory_hash(run.steps) == case.expected_hash
    assert case.task.world.orders[order_id].status == "delivered"  # the world was copied, not mutated
    assert answer_correct(run.answer, case.expected_answer, "key_facts")
    bodies = fake.bodies("/chat/completions")
    assert [m["role"] for m in bodies[0]["messages"]] == ["system", "developer", "user"]
    assert {t["function"]["name"] for t in bodies[0]["tools"]} >= {"lookup_order", "issue_refund"}
    tool_msg = bodies[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and json.loads(tool_msg["content"])["result"]["amount"] == amount


def test_anthropic_loop_sends_developer_skills_in_system(fake: FakeProvider) -> None:
    case = build_cases(("refund_order",), 1)[0]
    model = AnthropicToolModel("claude-test", api_key="k", base_url=fake.anthropic_base_url)
    request = to_provider(assemble(case.request, skills=[_skill("developer")]), "anthropic")
    run = model.run(request, case.task)
    assert run.answer == "ok" and run.llm_calls == 1 and run.steps == []
    body = fake.bodies("/messages")[0]
    assert 'authority="developer"' in body["system"] and body["tools"][0]["input_schema"]["type"] == "object"
    assert [m["role"] for m in body["messages"]] == ["user"]


def test_real_provider_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SKILLFLOW_OPENAI_API_KEY", "OPENAI_API_KEY", "SKILLFLOW_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(EvaluationConfigError, match="OPENAI_API_KEY"):
        make_model(load_eval_settings(provider="openai"))
    with pytest.raises(EvaluationConfigError, match="ANTHROPIC_API_KEY"):
        make_model(load_eval_settings(provider="anthropic"))
    assert make_model(load_eval_settings()).label == OFFLINE_LABEL


def test_harness_against_the_fake_openai_server(
    fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    settings = load_eval_settings(
        provider="openai",
        base_url=fake.openai_base_url,
        intents=("refund_order",),
        cases=2,
        training_runs=120,
        phrasing="seen",  # phrased like the training traffic: the production rule injects the skill
    )
    result = run_evaluation(settings, embedder=HashingEmbedder(), workdir=tmp_path)
    assert result.provider == "openai" and "openai model" in result.label
    assert all(c.passed for c in result.checks)
    bodies = fake.bodies("/chat/completions")
    assert len(bodies) == 2 * 4  # every case in every arm: one answer ("ok"), no tool calls
    with_dev = [b for b in bodies if any(m["role"] == "developer" for m in b["messages"])]
    injected = [r for r in result.results if r.arm == "skill_developer" and r.skills_in_prompt]
    assert len(injected) == 2 and len(with_dev) == 2  # exactly the developer arm's requests, seen on the wire
    assert all(r.answer_check == "key_facts" for r in result.results)


# -- one offline end-to-end run --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return get_embedder("minilm")


@pytest.fixture(scope="module")
def offline_run(minilm: Embedder, tmp_path_factory: pytest.TempPathFactory) -> tuple[EvaluationResult, Path]:
    workdir = tmp_path_factory.mktemp("eval")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKILLFLOW_EMBEDDER", "hashing")  # the training DB's own vectors; the arms use MiniLM
        # Four requests per intent: on two the rule's floors (a standard deviation to spare over 51 negatives)
        # happened to leave every request below them; the assertions below hold for any number.
        settings = load_eval_settings(cases=4, training_runs=150, phrasing="seen")
        result = run_evaluation(settings, embedder=minilm, workdir=workdir)
    return result, workdir


def test_offline_end_to_end_at_the_production_configuration(offline_run: tuple[EvaluationResult, Path]) -> None:
    result, workdir = offline_run
    assert result.label == OFFLINE_LABEL and result.offline
    assert [c.name for c in result.checks if c.passed] == [c.name for c in result.checks] and len(result.checks) == 5
    assert result.settings["min_similarity"] is None and "(lower bound 0.70, production)" in result.notes[0]
    # Every skill arm holds the rule its own history fitted, stored like a cycle's calibration stage does.
    rules = result.training["applicability"]
    assert set(rules) == {"skill_user", "skill_developer"} and all(r["live_skills"] == 3 for r in rules.values())
    for arm in rules:
        engine = make_engine(f"sqlite:///{workdir / arm}.db")
        try:
            with engine.connect() as conn:
                assert conn.execute(select(applicability_rules.c.rule_view)).scalar() == rules[arm]["view"]
        finally:
            engine.dispose()
    agg = result.aggregate()
    n = sum(1 for r in result.results if r.arm == "no_memory")  # requests, each run once per arm
    assert n == 12
    assert set(agg) == {"baseline", "skill_user", "skill_developer", "no_memory"}
    assert agg["baseline"]["raw_workflow_prompt_rate"] == 1.0 and agg["baseline"]["skill_prompt_rate"] == 0.0
    assert agg["skill_user"]["raw_workflow_prompt_rate"] == 0.0 == agg["skill_developer"]["raw_workflow_prompt_rate"]
    for arm in ("skill_user", "skill_developer"):  # the rule injects some, never a wrong one, and says how many not
        assert agg[arm]["skill_prompt_rate"] > 0 and agg[arm]["wrong_skill_rate"] == 0.0
        assert agg[arm]["target_skill_rate"] == agg[arm]["skill_prompt_rate"]
        without = sum(1 for r in result.results if r.arm == arm and not r.skills_in_prompt)
        assert f"{arm}: no skill injected for {without}/{n} request(s)" in result.notes
        # Each case says why (the rule's reason), and the notes set the fit's own estimate at single-turn requests
        # (the openings: these cases' form) beside what the cases got.
        rows = [r for r in result.results if r.arm == arm]
        assert {r.selection for r in rows if r.skills_in_prompt} == {"injected"}
        why = Counter(r.selection for r in rows if not r.skills_in_prompt)
        assert all(why) and "unknown" not in why
        if why:
            assert f"{arm}: why not: " + "; ".join(f"{w} {k}" for w, k in why.most_common()) in result.notes
        inner = rules[arm]["inner"]
        assert inner["opening_positives"] > 0  # a record_run history's requests are openings
        right = sum(1 for r in rows if r.target_skill_in_prompt)
        assert any(
            x.startswith(f"{arm}: the fit's inner CV at single-turn requests: the right skill at ")
            and x.endswith(f"these cases: the right skill at {right}/{n} ({right / n:.2f})")
            for x in result.notes
        )
    assert all(r.selection == "" for r in result.results if r.arm in ("baseline", "no_memory"))
    dev = agg["skill_developer"]
    assert (
        dev["developer_message_rate"] == dev["skill_prompt_rate"] and agg["skill_user"]["developer_message_rate"] == 0
    )
    # Per case: with a skill the procedure is right; without one (and no raw workflow) the arm is no memory.
    by = {(r.arm, r.case_id): r for r in result.results}
    for r in result.results:
        if r.arm in ("skill_user", "skill_developer"):
            if r.skills_in_prompt:
                assert r.workflow_correct and r.procedure_source.startswith("skill:")
            else:
                assert r.observed_hash == by[("no_memory", r.case_id)].observed_hash and r.procedure_source == "default"
    assert agg["no_memory"]["workflow_accuracy"] < agg["baseline"]["workflow_accuracy"]
    assert all(r.prompt_tokens > 0 and r.llm_calls >= 1 for r in result.results)
    d = result.deltas()
    assert d["no_memory"]["workflow_accuracy"].high < 0  # the naive default is reliably worse
    # Better / equal / worse per case, next to the deltas: consistent with the rows.
    out = result.outcomes()
    assert set(out) == {"baseline", "no_memory"} and set(out["no_memory"]) == {"skill_user", "skill_developer"}
    for arm, per in out["baseline"].items():
        task = per["task_accuracy"]
        rows = [r for r in result.case_rows() if r["arm"] == arm]
        assert task["pairs"] == n == task["better"] + task["equal"] + task["worse"]
        assert task["worse"] == sum(r["vs_baseline"] == "worse" for r in rows)
        assert task["regression_rate"] == task["worse"] / n
    for arm in ("skill_user", "skill_developer"):
        assert out["baseline"][arm]["task_accuracy"]["worse"] == round(n * (1 - agg[arm]["skill_prompt_rate"]))
        assert out["no_memory"][arm]["task_accuracy"]["worse"] == 0
    assert out["baseline"]["no_memory"]["task_accuracy"]["regression_rate"] == 1.0
    summary = json.loads(json.dumps(result.summary()))
    assert summary["all_checks_passed"] and summary["label"] == OFFLINE_LABEL and summary["outcomes"] == out
    assert len({s["sha256"] for s in summary["skills"]}) == len(summary["skills"]) == 3


def test_outcome_counts_and_the_developer_invariant_without_injection() -> None:
    from skillflow.lab.evaluation.metrics import case_outcomes, verdict

    assert verdict(1, 0) == "better" and verdict(0, 1) == "worse" and verdict(1, 1) == "equal"
    assert verdict(100, 200, higher_is_better=False) == "better"
    base, treated = _case("baseline", raw=3), _case("skill_user")
    worse = CaseResult(**{**treated.__dict__, "case_id": "c2", "observed_hash": "other"})
    rows = [base, CaseResult(**{**base.__dict__, "case_id": "c2"}), treated, worse]
    task = case_outcomes(rows, "baseline")["skill_user"]["task_accuracy"]
    assert (task.better, task.equal, task.worse, task.regression_rate) == (0, 1, 1, 0.5)
    with pytest.raises(ValueError, match="same requests"):
        case_outcomes([*rows, _case("skill_user", case="c3")], "baseline")
    # A developer arm whose rule injected nothing carries no developer message: that is not a violation.
    quiet = CaseResult(**{**_case("skill_developer").__dict__, "skills_in_prompt": 0})
    check = only_developer_arm_has_developer_message([_case("baseline"), _case("skill_user"), quiet])
    assert check.passed and "abstained" in check.detail


def test_held_out_phrasings_at_the_production_configuration_are_reported_not_hidden(tmp_path: Path) -> None:
    settings = load_eval_settings(intents=("refund_order",), cases=2, training_runs=120)
    result = run_evaluation(settings, embedder=HashingEmbedder(), workdir=tmp_path)
    assert all(c.passed for c in result.checks)
    assert "cases phrased with templates the training traffic never used" in result.notes
    for arm in ("skill_user", "skill_developer"):
        rows = [r for r in result.results if r.arm == arm]
        without = sum(1 for r in rows if not r.skills_in_prompt)
        assert f"{arm}: no skill injected for {without}/2 request(s)" in " ".join(result.notes)
        assert all(r.raw_workflows_in_prompt == 0 == r.retrieved_workflows for r in rows)


def test_tampered_skill_body_is_detected_read_back_from_the_databases(
    offline_run: tuple[EvaluationResult, Path],
) -> None:
    _, workdir = offline_run
    user, dev = (make_engine(f"sqlite:///{workdir / name}.db") for name in ("skill_user", "skill_developer"))
    try:
        bodies = {"skill_user": arm_setup.stored_bodies(user), "skill_developer": arm_setup.stored_bodies(dev)}
        assert skill_bodies_identical(bodies).passed
        with dev.begin() as conn:
            conn.execute(update(skillbox).values(content=skillbox.c.content + " "))
        bodies["skill_developer"] = arm_setup.stored_bodies(dev)
        with pytest.raises(EvaluationInvariantError, match="skill_bodies_byte_identical"):
            enforce([skill_bodies_identical(bodies)])
    finally:
        user.dispose()
        dev.dispose()


# -- the CLI ---------------------------------------------------------------------------------------------
def test_eval_command_json_and_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from skillflow.cli import app

    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    monkeypatch.setenv("SKILLFLOW_EVAL_INTENTS", '["refund_order"]')
    monkeypatch.setenv("SKILLFLOW_EVAL_TRAINING_RUNS", "120")
    runner = CliRunner()
    out = runner.invoke(app, ["eval", "--cases", "1", "--embedder", "hashing", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["label"] == OFFLINE_LABEL and doc["all_checks_passed"] and len(doc["results"]) == 4
    text = runner.invoke(app, ["eval", "--cases", "1", "--embedder", "hashing", "--show-cases"])
    assert text.exit_code == 0, text.output
    assert OFFLINE_LABEL in text.output and "skill_bodies_byte_identical" in text.output and "Per case" in text.output
    bad = runner.invoke(app, ["eval", "--provider", "anthropic"], env={"ANTHROPIC_API_KEY": ""})
    assert bad.exit_code == 2 and "ANTHROPIC_API_KEY" in bad.output
