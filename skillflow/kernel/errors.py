"""Which failures are worth a retry, by type, and which of them were already retried (docs/RELIABILITY.md, "Retries").

A source of transient failures wraps them into :class:`TransientError` at its boundary, by ``isinstance`` on
the exceptions it knows (the LLM wrapper in ``promotion.llm`` wraps the SDKs' rate-limit, timeout, 5xx and
connection errors). Database failures arrive as SQLAlchemy's ``OperationalError`` (lost connection, lock or
statement timeout), classified here by type. Each class of failure has one retry layer: a provider error is
retried by the LLM wrapper only, so the one it gives up on is ``retried`` and no Prefect task retries it again;
a database error is retried by the Prefect task (``tasks.common.retry_transient``).
"""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy.exc import OperationalError


class InputError(ValueError):
    """Input the project refuses. Its message names a field or a position, never a value, so callers may show it;
    any other exception met while reading a caller's input is reported by its type only."""


class TransientError(Exception):
    """A failure a later attempt may not meet: rate limit, timeout, 5xx, lost connection, lock timeout."""

    retried: ClassVar[bool] = False  # True: its one retry layer already spent its attempts on it


def is_transient(exc: BaseException) -> bool:
    """Network, rate-limit, timeout and lock errors are transient; nothing else is."""
    return isinstance(exc, TransientError | OperationalError | TimeoutError | ConnectionError)


def should_retry(exc: BaseException) -> bool:
    """Transient and not yet retried by its own layer: what a Prefect task's retry condition retries."""
    return is_transient(exc) and not (isinstance(exc, TransientError) and exc.retried)


class WeightsNotInstalled(RuntimeError):
    """The MiniLM weights package is not installed (raised by :mod:`skillflow.injection.minilm`; defined here so
    that the agent's runtime can name it without loading the encoder)."""
