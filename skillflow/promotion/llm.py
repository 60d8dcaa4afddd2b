"""LLM distiller and judge on the official OpenAI and Anthropic SDKs (any OpenAI-compatible ``base_url``).

Only ``redacted_evidence`` (and, for the judge, a skill that passed every machine check) is ever sent;
an error is logged by its type only. This wrapper is the one retry layer for provider calls
(docs/RELIABILITY.md, "Retries"): SDK retries are off (``max_retries=0``); the SDKs' rate-limit, timeout,
5xx and connection errors (and 408/409/425 answers) are recognised by type and retried here with exponential
backoff (honouring ``Retry-After``), then raised as ``TransientLLMError``, a ``TransientError`` marked as
retried, so no Prefect task retries it again. Any other provider error raises ``LLMError``. Prompts are
versioned files in ``skillflow/prompts``; the version is stamped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr

from skillflow.kernel.errors import TransientError
from skillflow.promotion.distill import INSUFFICIENT, DistillOutcome, provenance
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.judge import Verdict, parse_verdict
from skillflow.promotion.redact import find_literals, redacted_evidence, source_literals
from skillflow.promotion.skillmd import SkillMdError, with_metadata

if TYPE_CHECKING:
    from skillflow.kernel.config import Settings

log = logging.getLogger(__name__)
DISTILL_PROMPT = "distill_v2"
JUDGE_PROMPT = "judge_v3"
TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*)\n```$", re.DOTALL)
T = TypeVar("T")


class LLMError(RuntimeError):
    """A provider failure that a retry will not fix (auth, bad request, unusable answer)."""


class ProviderNotConfigured(LLMError):
    """The configured distiller or judge cannot be used as configured (its key is missing): a configuration error,
    raised before any class is distilled, never a class's rejection. The message names the variable to set."""


class TransientLLMError(LLMError, TransientError):
    """Rate limit, timeout, 5xx or connection failure that outlived this wrapper's retries (the one layer)."""

    retried = True


@cache
def load_prompt(name: str) -> str:
    """The text of ``skillflow/promotion/prompts/<name>.md`` (the file stem is the stamped prompt version)."""
    return resources.files("skillflow.promotion.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8")


def prompt_version(name: str) -> str:
    return name.replace("_", "-")


@dataclass(frozen=True)
class LLMOptions:
    model: str
    api_key: SecretStr | None = None
    base_url: str | None = None
    timeout: float = 60.0
    max_retries: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 30.0

    @classmethod
    def from_settings(cls, settings: Settings, key: SecretStr | None) -> LLMOptions:
        return cls(
            model=settings.llm_model,
            api_key=key,
            base_url=settings.llm_base_url,
            timeout=settings.llm_timeout_seconds,
            max_retries=settings.llm_max_retries,
        )


@cache
def _sdk_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(the SDKs' transient exception types, their API status error types); timeouts are connection errors."""
    transient: list[type[BaseException]] = [TimeoutError, ConnectionError]
    status: list[type[BaseException]] = []
    with contextlib.suppress(ImportError):
        import openai

        transient += [openai.RateLimitError, openai.APIConnectionError, openai.InternalServerError]
        status.append(openai.APIStatusError)
    with contextlib.suppress(ImportError):
        import anthropic

        transient += [anthropic.RateLimitError, anthropic.APIConnectionError, anthropic.InternalServerError]
        status.append(anthropic.APIStatusError)
    return tuple(transient), tuple(status)


def _is_transient(exc: Exception) -> bool:
    """A provider failure worth a retry, by type; another API status error by its code (408/409/425, 5xx)."""
    transient, status = _sdk_errors()
    if isinstance(exc, transient):
        return True
    code = getattr(exc, "status_code", 0) if isinstance(exc, status) else 0
    return code in TRANSIENT_STATUS or code >= 500


def _retry_after(exc: Exception) -> float | None:
    """The server's ``Retry-After`` in seconds, or None when it sends none or no delay (a date, ``-1``, ``nan``:
    the backoff's own delay then; ``time.sleep`` raised on the last two, failing a call that should be retried)."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def with_retries(call: Callable[[], T], options: LLMOptions, what: str) -> T:
    """``call()`` with exponential backoff on transient failures only."""
    for attempt in range(options.max_retries + 1):
        try:
            return call()
        except Exception as exc:
            if not _is_transient(exc):
                raise LLMError(f"{what} failed: {type(exc).__name__}") from exc
            if attempt >= options.max_retries:
                raise TransientLLMError(f"{what} failed after {attempt + 1} attempts: {type(exc).__name__}") from exc
            delay = _retry_after(exc)
            if delay is None:
                delay = options.backoff_base * 2**attempt * (1 + random.random() / 4)
            delay = min(delay, options.backoff_max)
            log.warning("%s: transient %s, retry %d in %.2fs", what, type(exc).__name__, attempt + 1, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def missing_key(provider: str, options: LLMOptions) -> None:
    """Raise :class:`ProviderNotConfigured`, naming the variable, when ``provider`` cannot be used as configured:
    the official OpenAI API without a key (a ``base_url`` server needs none), Anthropic without one."""
    if provider == "openai" and options.api_key is None and options.base_url is None:
        raise ProviderNotConfigured(
            "SKILLFLOW_OPENAI_API_KEY is required for the official OpenAI API (the pipeline does not read "
            "OPENAI_API_KEY); or set SKILLFLOW_LLM_BASE_URL to an OpenAI-compatible server"
        )
    if provider == "anthropic" and options.api_key is None:
        raise ProviderNotConfigured(
            "SKILLFLOW_ANTHROPIC_API_KEY is required for the Anthropic distiller/judge (the pipeline does not "
            "read ANTHROPIC_API_KEY)"
        )


class OpenAIChat:
    """One chat completion through ``openai.OpenAI`` (official API or any OpenAI-compatible server)."""

    provider = "openai"

    def __init__(self, options: LLMOptions) -> None:
        import openai

        missing_key("openai", options)
        # Local OpenAI-compatible servers (Ollama, vLLM) ignore the key but the SDK insists on one.
        key = options.api_key.get_secret_value() if options.api_key else "not-needed"
        self.options = options
        self.client = openai.OpenAI(api_key=key, base_url=options.base_url, timeout=options.timeout, max_retries=0)

    def complete(self, system: str, user: str, json_mode: bool = False, max_tokens: int = 2048) -> str:
        extra: dict[str, Any] = {"response_format": {"type": "json_object"}} if json_mode else {}

        def call() -> str:
            resp = self.client.chat.completions.create(
                model=self.options.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                temperature=0,
                max_tokens=max_tokens,
                **extra,
            )
            if not resp.choices:
                raise LLMError("openai returned no choices")
            return resp.choices[0].message.content or ""

        return with_retries(call, self.options, "openai chat completion")


class AnthropicChat:
    """One message through ``anthropic.Anthropic`` (the system prompt is the top-level ``system``)."""

    provider = "anthropic"

    def __init__(self, options: LLMOptions) -> None:
        import anthropic

        missing_key("anthropic", options)
        assert options.api_key is not None  # missing_key raised otherwise
        self.options = options
        self.client = anthropic.Anthropic(
            api_key=options.api_key.get_secret_value(),
            base_url=options.base_url,
            timeout=options.timeout,
            max_retries=0,
        )

    def complete(self, system: str, user: str, json_mode: bool = False, max_tokens: int = 2048) -> str:
        def call() -> str:
            resp = self.client.messages.create(
                model=self.options.model,
                system=system,
                messages=[{"role": "user", "content": user}],
                max_tokens=max_tokens,
            )
            return "".join(getattr(block, "text", "") for block in resp.content)

        return with_retries(call, self.options, "anthropic message")


Chat = OpenAIChat | AnthropicChat


def _unfence(text: str) -> str:
    body = text.strip()
    match = _FENCE.match(body)
    return match.group(1).strip() if match else body


# An answer this many times the skill's size limit is refused before its frontmatter is parsed (a 2.9 MB answer
# held its partition for about a minute); one within it that is still too long is validation's "size" refusal.
OVERSIZE_FACTOR = 2


class LLMDistiller:
    """Distillation through a chat model: redacted evidence in, one SKILL.md or ``INSUFFICIENT`` out."""

    def __init__(self, chat: Chat, prompt: str = DISTILL_PROMPT) -> None:
        self.chat = chat
        self.name = f"{chat.provider}:{chat.options.model}"
        self.prompt = prompt
        self.prompt_version = prompt_version(prompt)

    def request(self, evidence: Evidence, max_chars: int) -> str:
        """The user message: redacted evidence only (raises ``RedactionError`` rather than leak)."""
        return json.dumps(
            {
                "max_chars": max_chars,
                "required_metadata": provenance(evidence, self.name, self.prompt_version),
                "evidence": redacted_evidence(evidence),
            },
            ensure_ascii=False,
            indent=1,
        )

    def distill(self, evidence: Evidence, max_chars: int) -> DistillOutcome:
        user = self.request(evidence, max_chars)
        answer = _unfence(self.chat.complete(load_prompt(self.prompt), user, max_tokens=4096))
        if answer == INSUFFICIENT:
            return DistillOutcome(None, True, self.name, self.prompt_version, ["distillation returned INSUFFICIENT"])
        if not answer:
            return DistillOutcome(None, False, self.name, self.prompt_version, ["distiller returned an empty answer"])
        if len(answer) > max_chars * OVERSIZE_FACTOR:  # never parsed: its cost is what an oversized answer is after
            reason = f"content {len(answer)} chars > {max_chars}"
            return DistillOutcome(None, False, self.name, self.prompt_version, [reason])
        # An unparsable answer is returned as-is: validation rejects it with the parse reason.
        with contextlib.suppress(SkillMdError):
            answer = with_metadata(answer, provenance(evidence, self.name, self.prompt_version)) + "\n"
        return DistillOutcome(answer, False, self.name, self.prompt_version, [])


class LLMJudge:
    """Fail-closed judge through a chat model; the answer must be the strict JSON verdict."""

    def __init__(self, chat: Chat, prompt: str = JUDGE_PROMPT) -> None:
        self.chat = chat
        self.name = f"{chat.provider}:{chat.options.model}"
        self.prompt = prompt
        self.prompt_version = prompt_version(prompt)

    def judge(self, skill_md: str, evidence: Evidence) -> Verdict:
        if find_literals(skill_md, source_literals(evidence)):
            return Verdict(False, ["judge: not sent (skill contains source literals)"], "")
        user = json.dumps({"skill_md": skill_md, "evidence": redacted_evidence(evidence)}, ensure_ascii=False, indent=1)
        try:
            answer = self.chat.complete(load_prompt(self.prompt), user, json_mode=self.chat.provider == "openai")
        except TransientLLMError:
            raise
        except LLMError as exc:
            return Verdict(False, [f"judge: error ({exc.__cause__.__class__.__name__})"], "")
        return parse_verdict(answer)


class OpenAIDistiller(LLMDistiller):
    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIDistiller:
        return cls(OpenAIChat(LLMOptions.from_settings(settings, settings.openai_api_key)))


class AnthropicDistiller(LLMDistiller):
    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicDistiller:
        return cls(AnthropicChat(LLMOptions.from_settings(settings, settings.anthropic_api_key)))


class OpenAIJudge(LLMJudge):
    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIJudge:
        return cls(OpenAIChat(LLMOptions.from_settings(settings, settings.openai_api_key)))


class AnthropicJudge(LLMJudge):
    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicJudge:
        return cls(AnthropicChat(LLMOptions.from_settings(settings, settings.anthropic_api_key)))
