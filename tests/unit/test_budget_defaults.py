"""The fitted rule's ``Budget`` defaults are the configuration's: one source for the wrong/false budgets."""

from __future__ import annotations

from skillflow.injection.calibration import Budget
from skillflow.kernel.config import PromotionConfig


def test_budget_defaults_are_the_promotion_config_defaults() -> None:
    config, budget = PromotionConfig(), Budget()
    assert budget.wrong == config.applicability_wrong_budget
    assert budget.false == config.applicability_false_budget
    assert budget.min_negatives == config.applicability_min_negatives
