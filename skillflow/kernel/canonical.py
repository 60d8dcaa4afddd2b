"""Canonical run identity: ordered (tool, argument-key shape, error class) units, retries collapsed.

Clean runs hash exactly as upstream (docs/design.md, Identity: the golden vector). Beyond upstream: an errored unit
carries its error class, configured no-op tools are dropped, and a retried-then-successful run is a
success.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from skillflow.kernel.errors import InputError
from skillflow.kernel.models import Step, Unit
from skillflow.kernel.textnorm import fold

DEFAULT_NOOP_TOOLS: tuple[str, ...] = ("think",)
# The closed vocabulary of error kinds a free-text tool error is mapped to (``Error:<kind>``); anything that
# reaches an LLM as an error class is either one of these or an exception-like identifier (docs/SECURITY.md).
ERROR_KINDS: tuple[str, ...] = (
    "not_found",
    "unavailable",
    "insufficient_funds",
    "invalid_argument",
    "not_allowed",
    "conflict",
    "unauthorized",
    "timeout",
    "rate_limited",
    "no_result",
    "other",
)
MAX_KEY_CHARS = 200
KEY_DIGEST_CHARS = 16
# A skill's class key: a run's canonical hash (64 lowercase hex), or an imported skill's key (``imported-`` and 55
# hex of its name: ``skillflow.lifecycle.transfer.import_class_key``).
CLASS_KEY = r"[0-9a-f]{64}|imported-[0-9a-f]{55}"
_STEP_KEY = re.compile(r"^\s*step\s*\d+\s*:\s*(?P<tool>.+?)\s*$", re.IGNORECASE)
_WS = re.compile(r"\s+")


def _parse_ts(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _comparable(ts: datetime) -> float:
    # Naive timestamps are taken as UTC so mixed inputs still order.
    if ts.tzinfo is None:
        from datetime import UTC

        ts = ts.replace(tzinfo=UTC)
    return ts.timestamp()


def order_steps(steps: Sequence[Step]) -> list[Step]:
    """Sort by timestamp only when every step has a parseable one; otherwise keep insertion order."""
    stamps = [_parse_ts(s.timestamp) for s in steps]
    if steps and all(t is not None for t in stamps):
        keyed = sorted(zip(stamps, range(len(steps)), steps, strict=True), key=lambda x: (_comparable(x[0]), x[1]))  # type: ignore[arg-type]  # all stamps checked non-None above
        return [s for _, _, s in keyed]
    return list(steps)


def normalize_tool(name: Any) -> str:
    """A tool name as identity sees it: surrounding whitespace stripped (capture, the CLI and backfill agree)."""
    return str(name).strip()


def normalize_key(key: Any) -> str:
    """A mapping key as it is stored and hashed: NUL replaced, and a key longer than ``MAX_KEY_CHARS`` cut to a
    prefix plus a digest of the WHOLE key, so two long keys that differ late stay distinct. Idempotent."""
    text = str(key).replace("\x00", "\ufffd")
    if len(text) <= MAX_KEY_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_DIGEST_CHARS]
    return f"{text[: MAX_KEY_CHARS - KEY_DIGEST_CHARS - 1]}~{digest}"


def arg_keys(arguments: Any) -> tuple[str, ...]:
    """Sorted, normalized top-level argument names; ``()`` when the arguments are not a mapping."""
    if isinstance(arguments, Mapping):
        return tuple(sorted(normalize_key(k) for k in arguments))
    return ()


def signature(steps: Sequence[Step], noop_tools: Iterable[str] = DEFAULT_NOOP_TOOLS) -> list[Unit]:
    """The canonical units of a run, retries collapsed into the unit they retry."""
    skip = set(noop_tools)
    units: list[Unit] = []
    for step in order_steps(steps):
        tool = normalize_tool(step.tool)
        if tool in skip:
            continue
        keys = arg_keys(step.arguments)
        errored = step.errored
        error_class = (step.error_class or "ToolError") if errored else None
        prev = units[-1] if units else None
        if prev is not None and prev.errored and prev.tool == tool and prev.arg_keys == keys:
            units[-1] = Unit(tool, keys, errored, error_class, prev.retry_count + 1)
        else:
            units.append(Unit(tool, keys, errored, error_class))
    return units


def signature_json(units: Sequence[Unit]) -> str:
    """The exact text that is hashed (upstream's ``json.dumps`` settings, ASCII escaping on)."""
    return json.dumps([u.as_hashable() for u in units], sort_keys=True, separators=(",", ":"))


def canonical_hash(units: Sequence[Unit]) -> str | None:
    """sha256 hex of the signature; ``None`` for an empty signature (no identity)."""
    if not units:
        return None
    return hashlib.sha256(signature_json(units).encode("utf-8")).hexdigest()


MAX_TOOL_SEQUENCE = 4000  # characters of a tool sequence a row stores (its column); a longer one is cut there


def tool_sequence(units: Sequence[Unit]) -> str:
    """Human-readable ``a > b > c`` form of a signature (errored units marked ``!``)."""
    return " > ".join(u.tool + ("!" if u.errored else "") for u in units)


def stored_sequence(units: Sequence[Unit]) -> str | None:
    """:func:`tool_sequence` as a row stores it: cut to :data:`MAX_TOOL_SEQUENCE` characters (the promotion gates
    refuse a class whose sequence is that long), None when empty."""
    return tool_sequence(units)[:MAX_TOOL_SEQUENCE] or None


def sequence_tools(tool_sequence: str | None) -> tuple[str, ...]:
    """The tools of a :func:`tool_sequence` in order, errored or not: ``a > b! > c`` → ``("a", "b", "c")``."""
    return tuple(t.strip().rstrip("!") for t in (tool_sequence or "").split(">") if t.strip())


def execution_succeeded(units: Sequence[Unit], execution_error: str | None) -> bool:
    """The default outcome (docs/design.md, Identity): no exception and no tool error left unrecovered."""
    return not execution_error and not any(u.errored for u in units)


def normalize_query(query: str | None) -> str:
    """Strip, lowercase, collapse whitespace; the basis of distinct-query counting.

    A request that is not ASCII is read first as every other check reads text (``textnorm.fold``: invisible
    characters dropped, look-alike and fullwidth letters read as the letters they show) and case-folded, so one
    request padded with a zero-width space or spelled with a Cyrillic ``е`` is one distinct query, not several. An
    ASCII request is normalized as before (its stored fingerprint stands)."""
    text = (query or "").strip()
    if not text.isascii():
        text = fold(text).casefold()
    return _WS.sub(" ", text.strip().lower())


def query_fingerprint(query: str | None) -> str | None:
    """sha256 of the normalized query (``None`` for an empty one, which is not counted)."""
    norm = normalize_query(query)
    return hashlib.sha256(norm.encode("utf-8")).hexdigest() if norm else None


def steps_from_document(doc: Mapping[str, Any]) -> list[Step]:
    """Steps from a workflow document in the upstream shape or the project's own.

    Upstream stores ``steps`` as an ordered mapping ``"Step N: tool" -> {arguments, result, error,
    timestamp}``; the project stores a list of ``{tool, arguments, result, error, error_class,
    timestamp}``.
    """
    raw = doc.get("steps", [])
    items: list[tuple[str, Any]]
    if isinstance(raw, Mapping):
        items = []
        for key, body in raw.items():
            match = _STEP_KEY.match(str(key))
            tool = match.group("tool") if match else str(key).split(":", 1)[-1].strip()
            items.append((tool, body))
    elif isinstance(raw, list):
        items = [(str(b.get("tool") or b.get("name") or "") if isinstance(b, Mapping) else "", b) for b in raw]
    else:
        raise InputError("steps must be a mapping of 'Step N: tool' or a list of step objects")
    steps = []
    for tool, body in items:
        body = body if isinstance(body, Mapping) else {}
        if not tool:
            raise InputError("every step needs a tool name")
        error = body.get("error")
        steps.append(
            Step(
                tool=tool,
                arguments=body.get("arguments", body.get("args", {})),
                result=body.get("result"),
                error=None if error in (None, "") else str(error),
                error_class=body.get("error_class"),
                timestamp=body.get("timestamp"),
            )
        )
    return steps
