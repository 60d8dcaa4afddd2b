"""`skillflow cycle` shows the injection rule it fitted in one line (it was only in ``--json``): a floor of 1.0
(the rule injects only for requests like the ones it learned from) was invisible to a first-time user."""

from __future__ import annotations

import pytest

from skillflow.cli.commands.promotion import print_report
from skillflow.promotion.report import PromotionReport


def _summary(intent: str, floor: float | None, injects: bool = True) -> dict[str, object]:
    return {
        "fingerprint": "0" * 16, "injects": injects, "reason": "fitted", "view": "joint", "margin": 0.0,
        "strength": None, "floors": {intent: floor}, "opening_floors": {}, "lower_bound": 0.7, "live_skills": 1,
        "intents": [intent], "exemplars": 10,
        "inner": {"hits": 87, "positives": 87, "wrong": 0, "false": 0, "negatives": 51},
    }  # fmt: skip


def test_the_fitted_rule_is_one_line_under_the_tables(capsys: pytest.CaptureFixture[str]) -> None:
    rule = _summary("issue_refund", 1.0)
    print_report(PromotionReport(agent_id="support-agent", user_id="alice", cycle=1, applicability=rule))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("injection rule:"))
    assert "1 live skill(s)" in line and "injects (fitted)" in line and "issue_refund ≥ 1.000" in line
    assert "inner CV 87/87 hits, 0 wrong, 0/51 false" in line


def test_an_intent_the_rule_never_injects_and_a_rule_that_injects_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(PromotionReport(agent_id="a", user_id="u", cycle=2, applicability=_summary("lookup[/]", None, False)))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("injection rule:"))
    assert "injects nothing (fitted)" in line and "lookup[/] never" in line  # a tool name is shown literally


def test_no_line_without_a_rule(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(PromotionReport(agent_id="a", user_id="u", cycle=1))
    assert "injection rule" not in capsys.readouterr().out
