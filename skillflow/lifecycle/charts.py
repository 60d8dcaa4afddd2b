"""Pictures of a skill's evidence: the series come from rows (tested), matplotlib only draws them.

Three series per skill: the class's daily success rate, the daily shadow trajectory-match rate, and — for
an ACTIVE skill — its rolling success over the drift window against the frozen baseline and the demotion
line (baseline − ``demotion_success_delta``). :func:`render_png` imports matplotlib lazily with the Agg
backend, so nothing on the agent's path (``skillflow.runtime``) loads it; :func:`markdown_image` embeds the
PNG as base64 so a Markdown artifact or an HTML file needs no other file.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.storage.schema import shadow_observations, skill_activations, workflow_memory
from skillflow.storage.skills import SkillRecord

DEFAULT_DAYS = 90


@dataclass(frozen=True)
class DailyRate:
    day: date
    total: int
    hits: int

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else 0.0


@dataclass
class SkillCharts:
    """The plotted data of one skill (what the tests assert on)."""

    skill_id: str
    title: str
    class_success: list[DailyRate] = field(default_factory=list)
    shadow_match: list[DailyRate] = field(default_factory=list)
    rolling: list[tuple[int, float]] = field(default_factory=list)  # (activation number, rolling success)
    baseline: float | None = None
    demotion_line: float | None = None

    @property
    def empty(self) -> bool:
        return not (self.class_success or self.shadow_match or self.rolling)


def _daily(pairs: list[tuple[datetime, bool]]) -> list[DailyRate]:
    days: dict[date, list[int]] = {}
    for at, hit in pairs:
        cell = days.setdefault(at.date(), [0, 0])
        cell[0] += 1
        cell[1] += int(hit)
    return [DailyRate(d, n, h) for d, (n, h) in sorted(days.items())]


def class_daily_success(
    conn: Connection, agent_id: str, user_id: str, canonical_hash: str, days: int = DEFAULT_DAYS
) -> list[DailyRate]:
    """Runs with a known outcome per UTC day over the last ``days`` days, and how many succeeded."""
    wm = workflow_memory.c
    q = select(wm.created_at, wm.outcome).where(
        wm.agent_id == agent_id,
        wm.user_id == user_id,
        wm.canonical_hash == canonical_hash,
        wm.outcome.in_(("success", "failure")),
        wm.created_at >= utcnow() - timedelta(days=days),
    )
    return _daily([(r.created_at, r.outcome == "success") for r in conn.execute(q)])


def shadow_daily_match(conn: Connection, skill: SkillRecord, days: int = DEFAULT_DAYS) -> list[DailyRate]:
    """Shadow observations per UTC day and how many matched the skill's trajectory."""
    so = shadow_observations.c
    q = select(so.evaluated_at, so.trajectory_match).where(
        so.skill_id == skill.id,
        so.agent_id == skill.agent_id,
        so.user_id == skill.user_id,
        so.evaluated_at >= utcnow() - timedelta(days=days),
    )
    return _daily([(r.evaluated_at, bool(r.trajectory_match)) for r in conn.execute(q)])


def rolling_success(conn: Connection, skill: SkillRecord, window: int) -> list[tuple[int, float]]:
    """After each known-outcome activation since activation: the success rate of the last ``window`` of them
    (the same figure drift demotion compares with the baseline)."""
    sa = skill_activations.c
    q = select(sa.outcome).where(sa.skill_id == skill.id, sa.outcome.in_(("success", "failure")))
    if skill.activated_at is not None:
        q = q.where(sa.created_at >= skill.activated_at)
    outcomes = [r.outcome == "success" for r in conn.execute(q.order_by(sa.created_at, sa.run_id))]
    out = []
    for i in range(len(outcomes)):
        recent = outcomes[max(0, i + 1 - window) : i + 1]
        out.append((i + 1, sum(recent) / len(recent)))
    return out


def skill_charts(conn: Connection, skill: SkillRecord, config: PromotionConfig) -> SkillCharts:
    """Every series of one skill; the rolling series and the lines for an ACTIVE skill, and for a DEMOTED one
    (what it did while live, against the line it crossed)."""
    charts = SkillCharts(skill.id, f"{skill.name} v{skill.version} ({skill.status})")
    charts.class_success = class_daily_success(conn, skill.agent_id, skill.user_id, skill.canonical_hash)
    charts.shadow_match = shadow_daily_match(conn, skill)
    value = (skill.baseline or {}).get("success_rate")
    if skill.status in (SkillStatus.ACTIVE.value, SkillStatus.DEMOTED.value):
        charts.rolling = rolling_success(conn, skill, config.drift_window_activations)
        if isinstance(value, int | float):
            charts.baseline = float(value)
            charts.demotion_line = max(0.0, float(value) - config.demotion_success_delta)
    return charts


def render_png(charts: SkillCharts, dpi: int = 90) -> bytes:
    """One figure, one panel per non-empty series (matplotlib, Agg backend, imported here only)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    panels: list[tuple[str, Any]] = []
    if charts.class_success:
        panels.append(("class success rate per day", charts.class_success))
    if charts.shadow_match:
        panels.append(("shadow trajectory-match rate per day", charts.shadow_match))
    if charts.rolling:
        panels.append(("rolling success since activation", charts.rolling))
    fig = Figure(figsize=(7.5, 2.3 * max(1, len(panels))), dpi=dpi)
    axes = fig.subplots(max(1, len(panels)), 1, squeeze=False)[:, 0]
    if not panels:
        axes[0].text(0.5, 0.5, "no runs, observations or activations yet", ha="center", va="center")
        axes[0].set_axis_off()
    for ax, (label, series) in zip(axes, panels, strict=False):
        if series is charts.rolling:
            ax.plot([x for x, _ in series], [y for _, y in series], marker=".", label="rolling success")
            if charts.baseline is not None:
                ax.axhline(charts.baseline, color="tab:green", linestyle="--", label="baseline")
            if charts.demotion_line is not None:
                ax.axhline(charts.demotion_line, color="tab:red", linestyle=":", label="demotion line")
            ax.set_xlabel("activation")
            ax.legend(loc="lower left", fontsize="small")
        else:
            _plot_days(ax, series)
            fig.autofmt_xdate()
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(label, fontsize="medium")
        ax.grid(alpha=0.3)
    fig.suptitle(charts.title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _plot_days(ax: Any, series: list[DailyRate]) -> None:
    """Daily rates with a day-wide margin (one day alone would otherwise stretch the axis over years)."""
    from matplotlib.dates import AutoDateLocator, DateFormatter

    days = [p.day for p in series]
    ax.plot(days, [p.rate for p in series], marker="o")
    ax.set_xlim(min(days) - timedelta(days=1), max(days) + timedelta(days=1))
    ax.xaxis.set_major_locator(AutoDateLocator(minticks=2, maxticks=8))  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(DateFormatter("%Y-%m-%d"))  # type: ignore[no-untyped-call]


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def markdown_image(png: bytes, alt: str) -> str:
    return f"![{alt}]({data_uri(png)})"
