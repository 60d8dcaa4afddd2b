"""Which failures are worth a retry: the one classification the flows' retry policy and the cycle share."""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

TRANSIENT_NAMES = frozenset(
    {"RateLimitError", "APITimeoutError", "APIConnectionError", "InternalServerError", "TransientLLMError"}
)


def is_transient(exc: BaseException) -> bool:
    """Network, rate-limit, timeout and lock errors are worth a retry; nothing else is."""
    if isinstance(exc, OperationalError | TimeoutError | ConnectionError):
        return True
    if getattr(exc, "transient", False) is True:
        return True
    return type(exc).__name__ in TRANSIENT_NAMES
