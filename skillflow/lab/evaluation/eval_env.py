"""Evaluation settings (``SKILLFLOW_EVAL_…``) and the model they select."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from skillflow.kernel.config import get_settings
from skillflow.lab.evaluation.cases import DEFAULT_INTENTS
from skillflow.lab.evaluation.execution import Model

DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-3-5-haiku-latest"}


class EvaluationConfigError(ValueError):
    """The requested provider cannot be used (e.g. no API key)."""


class EvalSettings(BaseSettings):
    """How the three-arm evaluation runs. Keys come from ``SKILLFLOW_OPENAI_API_KEY`` /
    ``SKILLFLOW_ANTHROPIC_API_KEY`` (or the SDKs' own ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``)."""

    model_config = SettingsConfigDict(env_prefix="SKILLFLOW_EVAL_", extra="ignore")

    provider: Literal["offline", "openai", "anthropic"] = Field("offline", description="Model provider")
    model: str | None = Field(None, description="Model name (default per provider)")
    base_url: str | None = Field(None, description="Provider base URL (OpenAI-compatible server, proxy, test server)")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature (omitted when unset)")
    timeout_seconds: float = Field(60.0, gt=0, le=600, description="Per-request timeout")
    intents: tuple[str, ...] = Field(DEFAULT_INTENTS, min_length=1, description="Simulator intents evaluated")
    cases: int = Field(4, ge=1, le=50, description="Held-out requests per intent")
    repeats: int = Field(1, ge=1, le=20, description="Runs of every (case, arm)")
    case_seed: int = Field(0, description="Seed of the held-out requests")
    training_runs: int = Field(200, ge=20, le=5000, description="Simulated training runs ingested into every arm")
    training_seed: int = Field(7, description="Seed of the training traffic")
    min_similarity: float | None = Field(
        None,
        ge=-1.0,
        le=1.0,
        description="Lower bound of the arms' fitted rule (default: production's retrieval_min_similarity)",
    )
    phrasing: Literal["held_out", "seen"] = Field(
        "held_out", description="Cases phrased with templates the training never used, or with its own"
    )
    baseline_workflows: int = Field(3, ge=1, le=10, description="Raw workflows replayed into the baseline")
    include_no_memory: bool = Field(True, description="Also run the no-memory arm")
    embedder: Literal["minilm", "hashing", "openai"] | None = Field(
        None, description="Applicability embedder (default: SKILLFLOW_EMBEDDER)"
    )

    @property
    def model_name(self) -> str:
        if self.provider == "offline":
            return "scripted"
        return self.model or DEFAULT_MODELS[self.provider]


def load_eval_settings(**overrides: Any) -> EvalSettings:
    """Settings from the environment (``SKILLFLOW_EVAL_…``) with explicit overrides on top."""
    return EvalSettings(**overrides)


def make_model(settings: EvalSettings) -> Model:
    """The scripted offline model, or a real tool-calling loop when the provider's key (or a base URL) is set."""
    from skillflow.lab.evaluation.scripted import ScriptedModel

    if settings.provider == "offline":
        return ScriptedModel()
    core = get_settings()
    if settings.provider == "openai":
        from skillflow.lab.evaluation.providers import OpenAIToolModel

        secret = core.openai_api_key.get_secret_value() if core.openai_api_key else os.environ.get("OPENAI_API_KEY")
        if not secret and not settings.base_url:
            raise EvaluationConfigError("provider openai needs SKILLFLOW_OPENAI_API_KEY (or OPENAI_API_KEY)")
        return OpenAIToolModel(
            settings.model_name,
            api_key=secret or "not-needed",  # local OpenAI-compatible servers ignore the key
            base_url=settings.base_url,
            timeout=settings.timeout_seconds,
            temperature=settings.temperature,
        )
    from skillflow.lab.evaluation.providers import AnthropicToolModel

    secret = (
        core.anthropic_api_key.get_secret_value() if core.anthropic_api_key else os.environ.get("ANTHROPIC_API_KEY")
    )
    if not secret:
        raise EvaluationConfigError("provider anthropic needs SKILLFLOW_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY)")
    return AnthropicToolModel(
        settings.model_name,
        api_key=secret,
        base_url=settings.base_url,
        timeout=settings.timeout_seconds,
        temperature=settings.temperature,
    )
