"""The configured distiller and judge: offline by default, or the official OpenAI/Anthropic SDKs."""

from __future__ import annotations

from skillflow.kernel.config import Settings, get_settings
from skillflow.promotion import llm
from skillflow.promotion.distill import Distiller, OfflineDistiller
from skillflow.promotion.judge import Judge, OfflineJudge


def get_distiller(settings: Settings | None = None) -> Distiller:
    """The configured distiller (``SKILLFLOW_DISTILLER``: offline | openai | anthropic)."""
    settings = settings or get_settings()
    if settings.distiller == "offline":
        return OfflineDistiller()
    if settings.distiller == "openai":
        return llm.OpenAIDistiller.from_settings(settings)
    if settings.distiller == "anthropic":
        return llm.AnthropicDistiller.from_settings(settings)
    raise ValueError(f"unknown distiller {settings.distiller!r}")


def get_judge(settings: Settings | None = None) -> Judge:
    """The configured judge (``SKILLFLOW_JUDGE``: offline | openai | anthropic)."""
    settings = settings or get_settings()
    if settings.judge == "offline":
        return OfflineJudge()
    if settings.judge == "openai":
        return llm.OpenAIJudge.from_settings(settings)
    if settings.judge == "anthropic":
        return llm.AnthropicJudge.from_settings(settings)
    raise ValueError(f"unknown judge {settings.judge!r}")


def check_providers(settings: Settings | None = None) -> None:
    """Raise :class:`skillflow.promotion.llm.ProviderNotConfigured` (naming the variable) when the configured
    distiller or judge cannot be built: a cycle checks before it distills anything, so a missing key fails it
    instead of rejecting and backing off every eligible class. Reads the settings only (no client is built)."""
    settings = settings or get_settings()
    for provider in {settings.distiller, settings.judge} & {"openai", "anthropic"}:
        key = settings.openai_api_key if provider == "openai" else settings.anthropic_api_key
        llm.missing_key(provider, llm.LLMOptions.from_settings(settings, key))
