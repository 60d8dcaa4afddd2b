"""Settings: the documented defaults, validation, TOML and environment precedence, the process-wide switch."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from skillflow.kernel.config import PromotionConfig, continual_learning_default, load_promotion_config, load_schedules
from skillflow.runtime import LearningOptions

SEED_DEFAULTS = {
    "min_executions": 5,
    "min_success_rate": 0.80,
    "min_distinct_queries": 2,
    "max_days_since_last_seen": 30,
    "recency_halflife_days": 14,
    "max_promotions_per_cycle": 3,
    "distill_sample_size": 5,
    "include_failure_samples": 2,
    "skill_max_content_chars": 4000,
    "require_shadow": False,
    "shadow_evaluation_enabled": False,
    "shadow_evaluation_max_candidates": 3,
    "shadow_evaluation_min_similarity": None,
    "shadow_evaluation_queue_size": 100,
    "shadow_evaluation_recent_window": 50,
    "shadow_readiness_min_observations": 10,
    "shadow_readiness_min_trajectory_match_rate": 0.80,
    "shadow_readiness_min_matched_success_rate": 0.80,
    "skill_injection_role": "user",
    "retrieval_min_similarity": 0.70,
    "max_skills_in_context": 2,
    "include_exemplar": False,
    "drift_window_activations": 10,
    "demotion_success_delta": 0.25,
    "min_activations_before_drift_check": 5,
    "promotion_every_n_runs": 25,
}


def test_every_seed_key_has_the_seed_default() -> None:
    cfg = PromotionConfig()
    for key, value in SEED_DEFAULTS.items():
        assert getattr(cfg, key) == value, key


def test_unknown_key_is_an_error_naming_the_key() -> None:
    with pytest.raises(ValidationError, match="min_executionz"):
        PromotionConfig.model_validate({"min_executionz": 3})


def test_developer_authority_requires_shadow() -> None:
    with pytest.raises(ValidationError, match="require_shadow"):
        PromotionConfig(skill_injection_role="developer")
    assert PromotionConfig(skill_injection_role="developer", require_shadow=True).skill_injection_role == "developer"


def test_bounds_are_enforced() -> None:
    with pytest.raises(ValidationError):
        PromotionConfig(min_success_rate=1.5)
    with pytest.raises(ValidationError):
        PromotionConfig(min_executions=0)


def test_shadow_threshold_falls_back_to_retrieval_threshold() -> None:
    assert PromotionConfig().shadow_threshold == 0.70
    assert PromotionConfig(shadow_evaluation_min_similarity=0.5).shadow_threshold == 0.5


def test_toml_then_environment_then_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "skillflow.toml"
    path.write_text(
        "[promotion]\nmin_executions = 7\nrequire_shadow = true\n"
        '[schedules]\npromotion-cycle = "*/5 * * * *"\ndistill-class = ""\n'
    )
    assert load_promotion_config(path).min_executions == 7
    monkeypatch.setenv("SKILLFLOW_PROMOTION__MIN_EXECUTIONS", "9")
    monkeypatch.setenv("SKILLFLOW_PROMOTION__SHADOW_EVALUATION_ENABLED", "true")
    cfg = load_promotion_config(path)
    assert cfg.min_executions == 9 and cfg.shadow_evaluation_enabled is True and cfg.require_shadow is True
    assert load_promotion_config(path, {"min_executions": 3}).min_executions == 3
    assert load_schedules(path) == {"promotion-cycle": "*/5 * * * *", "distill-class": None}
    monkeypatch.setenv("SKILLFLOW_PROMOTION__NOPE", "1")
    with pytest.raises(ValueError, match="SKILLFLOW_PROMOTION__NOPE"):
        load_promotion_config(path)


def test_toml_typo_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "skillflow.toml"
    path.write_text("[promotion]\nmin_sucess_rate = 0.5\n")
    with pytest.raises(ValidationError, match="min_sucess_rate"):
        load_promotion_config(path)


def test_project_toml_is_valid() -> None:
    cfg = load_promotion_config(Path(__file__).resolve().parents[2] / "config" / "skillflow.toml")
    assert cfg.require_shadow is True  # the recommended initial posture


def test_process_wide_switch_forces_memory_and_skillbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKILLFLOW_CONTINUAL_LEARNING", raising=False)
    assert continual_learning_default() is False
    monkeypatch.setenv("SKILLFLOW_CONTINUAL_LEARNING", "1")
    assert continual_learning_default() is True
    opts = LearningOptions(continual_learning=True, workflow_memory=False, skillbox=False)
    assert opts.workflow_memory and opts.skillbox
