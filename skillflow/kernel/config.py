"""Typed settings in one place: ``PromotionConfig`` (the README's configuration reference) and ``Settings``.

Precedence: explicit arguments > environment (``SKILLFLOW_…``) > ``config/skillflow.toml`` > defaults.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///.skillflow/skillflow.db"
CONFIG_PATH_ENV = "SKILLFLOW_CONFIG_PATH"


class PromotionConfig(BaseModel):
    """Every knob of the configuration reference (README), validated; unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_executions: int = Field(5, ge=1, description="Gate: runs of a class before eligible")
    min_success_rate: float = Field(0.80, ge=0.0, le=1.0, description="Gate: class success rate")
    min_distinct_queries: int = Field(2, ge=1, description="Gate: distinct normalized user queries")
    max_days_since_last_seen: int = Field(30, ge=1, description="Gate: recency window (days)")
    recency_halflife_days: float = Field(14, gt=0, description="Ranking decay half-life (days)")
    max_promotions_per_cycle: int = Field(3, ge=0, description="Cap per cycle")
    distill_sample_size: int = Field(5, ge=1, le=50, description="Success runs fed to the LLM")
    include_failure_samples: int = Field(2, ge=0, le=20, description="Failure runs fed to the LLM")
    skill_max_content_chars: int = Field(4000, ge=500, le=100_000, description="SKILL.md size cap")
    require_shadow: bool = Field(False, description="New skills land as SHADOW")
    shadow_evaluation_enabled: bool = Field(False, description="Opt in to passive evaluation of SHADOW skills")
    shadow_evaluation_max_candidates: int = Field(3, ge=1, le=50, description="SHADOW candidates per new workflow")
    shadow_evaluation_min_similarity: float | None = Field(
        None, ge=-1.0, le=1.0, description="Passive threshold; None uses retrieval_min_similarity"
    )
    shadow_evaluation_queue_size: int = Field(100, ge=1, le=100_000, description="Outbox rows per batch")
    shadow_evaluation_recent_window: int = Field(50, ge=0, le=1000, description="Recent evaluations kept in stats")
    shadow_readiness_min_observations: int = Field(10, ge=0, description="Readiness observation floor")
    shadow_readiness_min_trajectory_match_rate: float = Field(0.80, ge=0.0, le=1.0, description="Readiness match floor")
    shadow_readiness_min_matched_success_rate: float = Field(
        0.80, ge=0.0, le=1.0, description="Readiness success floor"
    )
    skill_injection_role: Literal["user", "developer"] = Field("user", description="Authority of new skills")
    retrieval_min_similarity: float = Field(
        0.70,
        ge=-1.0,
        le=1.0,
        description="Injection threshold: a cosine until the tenant's first fit, then the lower bound of the fitted "
        "rule's probability floors",
    )
    max_skills_in_context: int = Field(2, ge=0, le=20, description="Skills injected per turn")
    applicability_wrong_budget: float = Field(
        0.03, ge=0.0, le=1.0, description="Fitted rule: most wrong-skill injections per applicable request (inner CV)"
    )
    applicability_false_budget: float = Field(
        0.05, ge=0.0, le=1.0, description="Fitted rule: most injections per request no skill answers (inner CV)"
    )
    applicability_min_negatives: int = Field(
        10, ge=0, le=100_000, description="Fitted rule: requests without a skill needed before it injects at all"
    )
    applicability_history_runs: int = Field(
        2000, ge=10, le=100_000, description="Fitted rule: newest runs of the tenant it is fitted on"
    )
    include_exemplar: bool = Field(False, description="Deprecated; raw source runs are never co-injected")
    drift_window_activations: int = Field(10, ge=1, le=10_000, description="Rolling-rate window")
    demotion_success_delta: float = Field(0.25, ge=0.0, le=1.0, description="Demote when rolling < baseline - delta")
    min_activations_before_drift_check: int = Field(5, ge=0, description="Grace period (activations)")
    promotion_every_n_runs: int = Field(25, ge=0, description="Cycle cadence in stored runs (0 = manual)")
    # Beyond the configuration reference.
    noop_tools: tuple[str, ...] = Field(("think",), description="Tools dropped from canonical signatures")
    rejection_backoff_cycles: int = Field(
        3, ge=0, le=1000, description="Cycles a rejected class waits before the LLM is asked again"
    )
    max_trigger_queries: int = Field(8, ge=1, le=64, description="Trigger queries embedded per skill")
    max_unknown_share: float = Field(
        0.2, ge=0.0, le=1.0, description="Gate: most runs of a class whose evaluator failed (unknown outcome)"
    )
    rejection_requalify_runs: int = Field(
        5, ge=1, le=100_000, description="New runs a reviewer-rejected class needs before it is distilled again"
    )
    promote_trivial_classes: bool = Field(
        False, description="Gate: also promote a class that is a single read-only call (a lookup, not a procedure)"
    )

    @model_validator(mode="after")
    def _developer_requires_shadow(self) -> PromotionConfig:
        if self.skill_injection_role == "developer" and not self.require_shadow:
            raise ValueError('skill_injection_role="developer" requires require_shadow=True')
        return self

    @property
    def shadow_threshold(self) -> float:
        if self.shadow_evaluation_min_similarity is None:
            return self.retrieval_min_similarity
        return self.shadow_evaluation_min_similarity

    def merged(self, overrides: dict[str, Any] | None) -> PromotionConfig:
        """A new validated config with ``overrides`` applied (unknown keys raise)."""
        if not overrides:
            return self
        return PromotionConfig.model_validate({**self.model_dump(), **overrides})


class Settings(BaseSettings):
    """Process settings from the environment (prefix ``SKILLFLOW_``); secrets only from the environment."""

    model_config = SettingsConfigDict(env_prefix="SKILLFLOW_", extra="ignore")

    database_url: str = Field(DEFAULT_DATABASE_URL, description="SQLAlchemy URL of the skillflow database")
    continual_learning: bool = Field(False, description="Turn continual learning on for every agent in the process")
    embedder: Literal["minilm", "hashing", "openai"] = Field("minilm", description="Applicability embedder")
    embedder_threads: int = Field(
        1, ge=0, le=64, description="torch threads of the local MiniLM embedder (0 = torch default; 1 for one query)"
    )
    distiller: Literal["offline", "openai", "anthropic"] = Field("offline", description="Skill distiller")
    judge: Literal["offline", "openai", "anthropic"] = Field("offline", description="Validation judge")
    llm_model: str = Field("gpt-4o-mini", description="Model for the OpenAI/Anthropic distiller and judge")
    llm_base_url: str | None = Field(None, description="OpenAI-compatible base URL (Ollama, vLLM, ...)")
    llm_timeout_seconds: float = Field(60.0, gt=0, le=600, description="Per-request LLM timeout")
    llm_max_retries: int = Field(3, ge=0, le=10, description="Retries on 429/5xx/timeouts")
    openai_api_key: SecretStr | None = Field(None, description="OpenAI key (environment only)")
    anthropic_api_key: SecretStr | None = Field(None, description="Anthropic key (environment only)")
    config_path: Path = Field(
        Path("config/skillflow.toml"), description="Reviewed TOML settings file ([promotion], [schedules])"
    )


def config_path() -> Path:
    """``$SKILLFLOW_CONFIG_PATH`` or ``config/skillflow.toml`` (the same value as ``Settings.config_path``)."""
    return Path(os.environ.get(CONFIG_PATH_ENV, "config/skillflow.toml"))


def _toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open("rb") as fh:
        return tomllib.load(fh)


def _coerce_env(value: str) -> Any:
    low = value.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    return value


def load_promotion_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> PromotionConfig:
    """``[promotion]`` from the TOML file, then ``SKILLFLOW_PROMOTION__<KEY>`` variables, then overrides."""
    path = path or config_path()
    data: dict[str, Any] = dict(_toml(path).get("promotion", {}))
    prefix = "SKILLFLOW_PROMOTION__"
    for key, value in os.environ.items():
        if key.startswith(prefix):
            name = key[len(prefix) :].lower()
            if name not in PromotionConfig.model_fields:
                raise ValueError(f"unknown promotion setting in environment: {key}")
            data[name] = _coerce_env(value) if PromotionConfig.model_fields[name].annotation is bool else value
    if overrides:
        data.update(overrides)
    return PromotionConfig.model_validate(data)


def load_schedules(path: Path | None = None) -> dict[str, str | None]:
    """``[schedules]``: flow name -> cron (empty string or absent = manual only)."""
    path = path or config_path()
    raw = _toml(path).get("schedules", {})
    return {str(k): (str(v) or None) for k, v in raw.items()}


def continual_learning_default() -> bool:
    """``SKILLFLOW_CONTINUAL_LEARNING=1`` turns continual learning on for every agent in the process."""
    return bool(_coerce_env(os.environ.get("SKILLFLOW_CONTINUAL_LEARNING", "0")) is True)


def get_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)
