"""Typed settings in one place: ``PromotionConfig`` (the README's configuration reference) and ``Settings``.

Precedence: explicit arguments > environment (``SKILLFLOW_…``) > the TOML file > defaults, in one
pydantic-settings model (:class:`ConfigFile`). Which TOML file: ``$SKILLFLOW_CONFIG_PATH``, else
``$SKILLFLOW_HOME/config/skillflow.toml``, else the nearest ``config/skillflow.toml`` from the current folder
up; a configured file that is missing is an error, and no file at all means built-in defaults, which the
loaded config says (``source == "defaults"``) (docs/guide/ops.md, "Which config file").
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_DATABASE_URL = "sqlite:///.skillflow/skillflow.db"
CONFIG_PATH_ENV = "SKILLFLOW_CONFIG_PATH"
HOME_ENV = "SKILLFLOW_HOME"
PROJECT_CONFIG = Path("config") / "skillflow.toml"
DEFAULTS = "defaults"


class ConfigError(ValueError):
    """A configuration file the operator must fix: configured but missing, or not valid TOML."""


class PromotionConfig(BaseModel):
    """Every knob of the configuration reference (README), validated; unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _source: str = PrivateAttr("arguments")

    min_executions: int = Field(5, ge=1, description="Gate: runs of a class before eligible")
    min_success_rate: float = Field(0.80, ge=0.0, le=1.0, description="Gate: class success rate")
    min_distinct_queries: int = Field(2, ge=1, description="Gate: distinct normalized user queries of successful runs")
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
        0.03,
        ge=0.0,
        le=1.0,
        description="Fitted rule: most wrong-skill injections per call point a skill answers (inner CV)",
    )
    applicability_false_budget: float = Field(
        0.05, ge=0.0, le=1.0, description="Fitted rule: most injections per call point no skill answers (inner CV)"
    )
    applicability_min_negatives: int = Field(
        10, ge=0, le=100_000, description="Fitted rule: call points without a skill needed before it injects at all"
    )
    applicability_history_runs: int = Field(
        2000, ge=10, le=100_000, description="Fitted rule: newest runs of the tenant it is fitted on"
    )
    include_exemplar: bool = Field(False, description="Deprecated; raw source runs are never co-injected")
    drift_window_activations: int = Field(10, ge=1, le=10_000, description="Rolling-rate window")
    demotion_success_delta: float = Field(0.25, ge=0.0, le=1.0, description="Demote when rolling < baseline - delta")
    min_activations_before_drift_check: int = Field(
        5, ge=0, description="Grace period (activations with a known outcome)"
    )
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
    promote_read_only_classes: bool = Field(
        False,
        description="Gate: also promote a class without a state-changing call when the tenant changes state (a "
        "tenant whose tools are all declared read-only, or all read by name, always keeps them eligible)",
    )
    promote_handoff_classes: bool = Field(
        False,
        description="Gate: also promote a class that calls a tool the agent declared a hand-off (a transfer to a "
        "human or another agent: a skill of it teaches the agent to give the conversation away)",
    )

    @model_validator(mode="after")
    def _developer_requires_shadow(self) -> PromotionConfig:
        if self.skill_injection_role == "developer" and not self.require_shadow:
            raise ValueError('skill_injection_role="developer" requires require_shadow=True')
        return self

    @property
    def source(self) -> str:
        """Where the values came from: the TOML file's path, ``"defaults"`` (no file found) or ``"arguments"``."""
        return self._source

    @property
    def shadow_threshold(self) -> float:
        if self.shadow_evaluation_min_similarity is None:
            return self.retrieval_min_similarity
        return self.shadow_evaluation_min_similarity

    def merged(self, overrides: dict[str, Any] | None) -> PromotionConfig:
        """A new validated config with ``overrides`` applied (unknown keys raise)."""
        if not overrides:
            return self
        merged = PromotionConfig.model_validate({**self.model_dump(), **overrides})
        merged._source = self._source
        return merged


class Settings(BaseSettings):
    """Process settings from the environment (prefix ``SKILLFLOW_``); secrets only from the environment."""

    model_config = SettingsConfigDict(env_prefix="SKILLFLOW_", extra="ignore")

    database_url: str = Field(DEFAULT_DATABASE_URL, description="SQLAlchemy URL of the skillflow database")
    continual_learning: bool = Field(False, description="Turn continual learning on for every agent in the process")
    embedder: Literal["minilm", "hashing", "openai"] = Field("minilm", description="Applicability embedder")
    distiller: Literal["offline", "openai", "anthropic"] = Field("offline", description="Skill distiller")
    judge: Literal["offline", "openai", "anthropic"] = Field("offline", description="Validation judge")
    llm_model: str = Field("gpt-4o-mini", description="Model for the OpenAI/Anthropic distiller and judge")
    llm_base_url: str | None = Field(None, description="OpenAI-compatible base URL (Ollama, vLLM, ...)")
    llm_timeout_seconds: float = Field(60.0, gt=0, le=600, description="Per-request LLM timeout")
    llm_max_retries: int = Field(3, ge=0, le=10, description="Retries on 429/5xx/timeouts")
    capture_connect_timeout_seconds: int = Field(
        2, ge=2, le=600, description="Agent runtime: seconds to wait for a PostgreSQL connection (libpq's floor is 2)"
    )
    capture_timeout_seconds: float = Field(
        2.0,
        gt=0,
        le=600,
        description="Agent runtime: seconds a capture (or the start-up schema check, prepare's whole skill read, "
        "or a learned-skill tool call) may wait on the database before the run is spooled (the request goes "
        "without skills); also its PostgreSQL statement timeout and SQLite busy timeout",
    )
    capture_breaker_seconds: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="Agent runtime: after the database failed a capture or a skill read, seconds during which "
        "captures spool and prepare goes without skills at once, without waiting on the database (0: every "
        "call tries it)",
    )
    openai_api_key: SecretStr | None = Field(None, description="OpenAI key (environment only)")
    anthropic_api_key: SecretStr | None = Field(None, description="Anthropic key (environment only)")
    config_path: Path | None = Field(
        None, description="Reviewed TOML settings file ([promotion], [schedules]); must exist when set"
    )
    home: Path | None = Field(
        None,
        description="Project folder: its config/skillflow.toml is read (unset: the nearest config/skillflow.toml "
        "from the current folder up)",
    )
    debug: bool = Field(False, description="CLI: show the traceback of a failure instead of one error line")


_TOML: ContextVar[Path | None] = ContextVar("skillflow_config_toml", default=None)


class ConfigFile(BaseSettings):
    """The TOML file's ``[promotion]`` and ``[schedules]`` with ``SKILLFLOW_PROMOTION__<KEY>`` over them."""

    model_config = SettingsConfigDict(env_prefix="SKILLFLOW_", env_nested_delimiter="__", extra="ignore")

    promotion: PromotionConfig = Field(default_factory=PromotionConfig, description="The promotion settings")
    schedules: dict[str, str] = Field(default_factory=dict, description="Flow name -> cron (empty: manual only)")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _TOML.get()
        if path is None:
            return init_settings, env_settings
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=path)


def config_path() -> Path | None:
    """The TOML file settings are read from, or None (built-in defaults); a configured file must exist."""
    settings = Settings()
    if settings.config_path is not None:
        return _must_exist(settings.config_path, CONFIG_PATH_ENV)
    if settings.home is not None:
        return _must_exist(settings.home / PROJECT_CONFIG, HOME_ENV)
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / PROJECT_CONFIG).is_file():
            return folder / PROJECT_CONFIG
    return None


def _must_exist(path: Path, configured_by: str) -> Path:
    if not path.is_file():
        raise ConfigError(f"config file {path} (from {configured_by}) does not exist: fix the path or unset it")
    return path


def load_config_file(path: Path | None = None, overrides: dict[str, Any] | None = None) -> tuple[ConfigFile, str]:
    """The validated settings model and its source (the file's path or ``"defaults"``).

    ``path`` must exist when given. A ``ValidationError`` carries one note per problem naming where the value
    came from (environment variable, override or file) so the CLI can say what to fix.
    """
    if path is not None:
        _must_exist(path, "the caller")
    found = path or config_path()
    token = _TOML.set(found)
    try:
        init: dict[str, Any] = {"promotion": overrides} if overrides else {}
        return ConfigFile(**init), DEFAULTS if found is None else str(found)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{found} is not valid TOML: {exc}") from exc
    except ValidationError as exc:
        for note in _origins(exc, found, overrides or {}):
            exc.add_note(note)
        raise
    finally:
        _TOML.reset(token)


def _origins(exc: ValidationError, path: Path | None, overrides: dict[str, Any]) -> list[str]:
    env = {k.upper() for k in os.environ}
    notes = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        key = loc[1] if len(loc) > 1 and loc[0] == "promotion" else None
        name = f"SKILLFLOW_{'__'.join(loc[:2]).upper()}"
        if key is not None and name in env:
            origin = f"environment variable {name}"
        elif key is not None and key in overrides:
            origin = "an override (--set or config_overrides)"
        else:
            origin = f"{path} [{loc[0]}]" if path is not None else "built-in defaults"
        problem = "unknown setting" if err["type"] == "extra_forbidden" else err["msg"]
        notes.append(f"{'.'.join(loc)} ({origin}): {problem}")
    return notes


def load_promotion_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> PromotionConfig:
    """``[promotion]`` from the TOML file, then ``SKILLFLOW_PROMOTION__<KEY>`` variables, then overrides."""
    loaded, source = load_config_file(path, overrides)
    config = loaded.promotion
    config._source = source
    return config


def load_schedules(path: Path | None = None) -> dict[str, str | None]:
    """``[schedules]``: flow name -> cron (empty string or absent = manual only)."""
    loaded, _ = load_config_file(path)
    return {name: (cron or None) for name, cron in loaded.schedules.items()}


def continual_learning_default() -> bool:
    """``SKILLFLOW_CONTINUAL_LEARNING=1`` turns continual learning on for every agent in the process."""
    return Settings().continual_learning


def get_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)


@contextmanager
def pinned_environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` while the block runs (settings read from the environment, by this process
    and the flows it runs in it), then the environment as it was: a caller's process keeps its own settings."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
