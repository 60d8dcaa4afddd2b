"""Eligibility gates of a trajectory class (docs/design.md, Promotion): pure, inclusive thresholds, stable reasons."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from skillflow.kernel.canonical import MAX_TOOL_SEQUENCE, sequence_tools
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import ClassStats
from skillflow.kernel.state import changes_state

COVERED = "already covered by a live skill"
UNKNOWN_CLASS = "unknown trajectory class"
INSUFFICIENT = "distillation returned INSUFFICIENT"
TRIVIAL = "trivial: a single read-only call"
READ_ONLY_CLASS = "read-only: no state-changing call"
HANDOFF_CLASS = "hand-off: calls a declared hand-off tool"
TOO_LONG = f"too long: the procedure's tool sequence exceeds {MAX_TOOL_SEQUENCE} characters"
GATE_NAMES = (
    "not_covered",
    "length",
    "not_trivial",
    "read_only",
    "handoff",
    "executions",
    "success_rate",
    "unknown_share",
    "distinct_queries",
    "recency",
)
_EPS = 1e-9  # 4/5 must pass a 0.80 gate despite binary floating point


@dataclass(frozen=True)
class GateResult:
    """The verdict for one class: ``reasons`` holds the first failure; ``checks`` holds every gate."""

    canonical_hash: str
    eligible: bool
    reasons: list[str]
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        return self.reasons[0] if self.reasons else None


def days_since(last_seen: datetime, now: datetime) -> float:
    """Fractional days between ``last_seen`` and ``now`` (never negative)."""
    return max(0.0, (now - last_seen).total_seconds() / 86400.0)


def whole_days_since(last_seen: datetime, now: datetime) -> int:
    return max(0, (now - last_seen).days)


def unknown_share(stats: ClassStats) -> float:
    """Share of the class's runs whose outcome is unknown (the business evaluator failed on a success)."""
    total = stats.executions + stats.unknown
    return stats.unknown / total if total else 0.0


def is_trivial(stats: ClassStats, declared: Mapping[str, bool] | None = None) -> bool:
    """A class whose signature is one read-only call (declared, or by the tool-name verb rule)."""
    sequence = stats.tool_sequence or ""
    if not sequence or " > " in sequence:
        return False
    return not changes_state(sequence.removesuffix("!"), declared)


def is_read_only(stats: ClassStats, declared: Mapping[str, bool] | None = None) -> bool:
    """A class none of whose calls changes state (declared flag, else the tool-name verb rule)."""
    return not any(changes_state(t, declared) for t in sequence_tools(stats.tool_sequence))


def calls_handoff(stats: ClassStats, handoffs: Collection[str]) -> bool:
    """A class one of whose calls is a tool the agent declared a hand-off."""
    return any(t in handoffs for t in sequence_tools(stats.tool_sequence))


def handoff_problem(tools: Iterable[str], handoffs: Collection[str]) -> str | None:
    """Why a skill declaring ``tools`` may not be live: the hand-off tools among them, named; None without any."""
    handing = sorted(set(tools) & set(handoffs))
    return f"{HANDOFF_CLASS} ({', '.join(handing)})" if handing else None


def read_only_gated(declared: Mapping[str, bool] | None, tools: Iterable[str] = ()) -> bool:
    """Whether the read-only gate applies: the tenant changes state. A tool it declared state-changing, or one of
    ``tools`` (those it registered and those its classes call) that changes state by its declared flag, else the
    tool-name verb rule. A tenant whose every tool is declared read-only, or reads by name, changes nothing."""
    flags = declared or {}
    return any(flags.values()) or any(changes_state(t, flags) for t in tools)


def evaluate_gates(
    stats: ClassStats,
    config: PromotionConfig,
    now: datetime,
    live_skill: bool,
    declared: Mapping[str, bool] | None = None,
    handoffs: Collection[str] = (),
    tools: Iterable[str] = (),
) -> GateResult:
    """All gates of one class; the first failing gate (docs/design.md, Promotion) is the reported reason.

    ``declared`` is the agent's declared state-changing flags (``storage.skills.declared_state_changes``);
    without it the trivial gate uses the tool-name verb rule. The read-only gate (a class without a
    state-changing call) applies when the tenant changes state (:func:`read_only_gated` over ``declared`` and
    ``tools``, the tenant's tools: those the agent registered and those its classes call): only a tenant that
    declared every tool read-only, or whose tools all read by name, keeps read-only classes eligible.
    ``handoffs`` are the tools the agent declared hand-offs (``storage.skills.declared_handoffs``): a class
    calling one is held back unless ``promote_handoff_classes``.
    """
    days = whole_days_since(stats.last_seen, now)
    ordered: list[tuple[str, bool, str]] = [
        ("not_covered", not (live_skill or stats.stamped > 0), COVERED),
        # Capture stores a class's tool sequence cut to its column: the gates below would read a cut procedure
        # (a hand-off or the only write past the cut unseen), so a procedure that long is not read at all.
        ("length", len(stats.tool_sequence or "") < MAX_TOOL_SEQUENCE, TOO_LONG),
        ("not_trivial", config.promote_trivial_classes or not is_trivial(stats, declared), TRIVIAL),
        (
            "read_only",
            config.promote_read_only_classes
            or not is_read_only(stats, declared)
            or not read_only_gated(declared, tools),
            READ_ONLY_CLASS,
        ),
        (
            "handoff",
            config.promote_handoff_classes or not calls_handoff(stats, handoffs),
            HANDOFF_CLASS,
        ),
        (
            "executions",
            stats.executions >= config.min_executions,
            f"executions {stats.executions} < {config.min_executions}",
        ),
        (
            "success_rate",
            stats.success_rate + _EPS >= config.min_success_rate,
            f"success_rate {stats.success_rate:.2f} < {config.min_success_rate}",
        ),
        (
            "unknown_share",
            unknown_share(stats) <= config.max_unknown_share + _EPS,
            f"unknown_share {unknown_share(stats):.2f} > {config.max_unknown_share}",
        ),
        (
            "distinct_queries",
            stats.distinct_queries >= config.min_distinct_queries,
            f"distinct_queries {stats.distinct_queries} < {config.min_distinct_queries}",
        ),
        ("recency", days <= config.max_days_since_last_seen, f"stale: last seen {days}d ago"),
    ]
    checks = {name: ok for name, ok, _ in ordered}
    first = next((reason for _, ok, reason in ordered if not ok), None)
    return GateResult(stats.canonical_hash, first is None, [first] if first else [], checks)
