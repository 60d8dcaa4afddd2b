"""The data-quality suites, defined in code: one function per table, each check blocking or warning.

Blocking checks guard invariants the flows rely on (identity, domains, parseable JSON, review before
developer authority, stamping, known evaluator versions, time). Warnings flag things an operator should
look at but that do not corrupt decisions (un-backfilled runs, unstamped runs of an active class,
class fragmentation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from great_expectations.expectations.core.expect_column_values_to_be_between import ExpectColumnValuesToBeBetween
from great_expectations.expectations.core.expect_column_values_to_be_in_set import ExpectColumnValuesToBeInSet
from great_expectations.expectations.core.expect_column_values_to_match_regex import ExpectColumnValuesToMatchRegex
from great_expectations.expectations.core.unexpected_rows_expectation import UnexpectedRowsExpectation
from great_expectations.expectations.metadata_types import FailureSeverity

from skillflow.kernel.canonical import CLASS_KEY
from skillflow.quality import dialects as d
from skillflow.quality.model import Check, QualityOptions, Severity
from skillflow.storage.schema import OUTCOMES, ROLES, STATUSES

HASH_REGEX = r"^[0-9a-f]{64}$"
SKILL_CLASS_REGEX = rf"^(?:{CLASS_KEY})$"  # a skill's class: a run's hash or an import's key
LIVE = ("candidate", "shadow", "active")
# Actors that run unattended: an 'activated' event by one of them is not a review.
AUTOMATED_ACTORS = (
    "system",
    "flow:promotion-cycle",
    "flow:distill-class",
    "flow:shadow-evaluation",
    "flow:drift-demotion",
    "flow:data-quality",
    "flow:backfill-canonical-hashes",
)
WORKFLOW_JSON = ("steps", "signature", "skills_activated", "metadata", "shadow_evaluations")
SKILL_JSON = ("preconditions", "tools", "trigger_queries", "source_workflow_ids", "baseline", "stats", "validation")
TIMESTAMPS = {
    "workflow_memory": ("created_at", "shadow_claimed_at"),
    "skillbox": ("created_at", "updated_at", "activated_at", "demoted_at"),
    "skill_events": ("created_at",),
    "shadow_observations": ("evaluated_at",),
}


@dataclass(frozen=True)
class SuiteContext:
    dialect: str
    options: QualityOptions


def _sev(severity: Severity) -> FailureSeverity:
    return FailureSeverity.CRITICAL if severity == "blocking" else FailureSeverity.WARNING


def _check(
    asset: str, name: str, severity: Severity, description: str, factory: Callable[..., object], **kw: object
) -> Check:
    check_id = f"{asset}.{name}"
    expectation = factory(
        severity=_sev(severity), description=description, meta={"check": check_id, "severity": severity},
        **kw,
    )  # fmt: skip
    return Check(id=check_id, asset=asset, severity=severity, description=description, expectation=expectation)


def result_format(check: Check) -> str:
    """COMPLETE is the only format in which UnexpectedRowsExpectation returns the offending rows (ids only
    here, at most GX's fetch cap); column-map checks use SUMMARY (counts plus a few values)."""
    return "COMPLETE" if isinstance(check.expectation, UnexpectedRowsExpectation) else "SUMMARY"


def _rows(asset: str, name: str, severity: Severity, description: str, query: str) -> Check:
    return _check(asset, name, severity, description, UnexpectedRowsExpectation, unexpected_rows_query=query)


def _in_set(asset: str, column: str, values: tuple[str, ...]) -> Check:
    return _check(
        asset,
        f"{column}_domain",
        "blocking",
        f"{column} is one of {', '.join(values)}",
        ExpectColumnValuesToBeInSet,
        column=column,
        value_set=list(values),
    )


def _json(ctx: SuiteContext, asset: str, columns: tuple[str, ...]) -> Check:
    bad = " OR ".join(d.json_invalid(ctx.dialect, c) for c in columns)
    return _rows(
        asset,
        "json_parses",
        "blocking",
        f"JSON columns parse ({', '.join(columns)})",
        f"SELECT id FROM {{batch}} WHERE {bad}",
    )


def _time(ctx: SuiteContext, asset: str, key: str = "id") -> list[Check]:
    cols = TIMESTAMPS[asset]
    bound = d.future_bound(ctx.dialect)
    future = " OR ".join(f"{c} > {bound}" for c in cols)
    checks = [
        _rows(
            asset,
            "timestamps_not_future",
            "blocking",
            f"timestamps not in the future ({', '.join(cols)})",
            f"SELECT {key} FROM {{batch}} WHERE {future}",
        )
    ]
    typed = d.naive_timestamp_columns(ctx.dialect, (asset,))
    if typed is not None:
        checks.append(
            _rows(asset, "timestamps_timezone_aware", "blocking", "timestamp columns carry a time zone", typed)
        )
    else:
        for col in cols:  # SQLite: naive UTC text by design; anything else (an offset, garbage) is a defect
            checks.append(
                _check(
                    asset,
                    f"{col}_utc_text",
                    "blocking",
                    f"{col} is stored as naive UTC text",
                    ExpectColumnValuesToMatchRegex,
                    column=col,
                    regex=d.SQLITE_TIMESTAMP_REGEX,
                )
            )
    return checks


def workflow_memory_checks(ctx: SuiteContext) -> list[Check]:
    a = "workflow_memory"
    versions = list(ctx.options.known_evaluator_versions)
    return [
        _check(
            a,
            "canonical_hash_format",
            "blocking",
            "canonical_hash is 64 lowercase hex",
            ExpectColumnValuesToMatchRegex,
            column="canonical_hash",
            regex=HASH_REGEX,
        ),
        _rows(
            a,
            "hash_present_with_signature",
            "blocking",
            "a run with a signature has a canonical_hash",
            "SELECT id FROM {batch} WHERE canonical_hash IS NULL AND signature IS NOT NULL AND signature <> '[]'",
        ),
        _rows(
            a,
            "hash_null_only_without_tools",
            "warning",
            "canonical_hash is null only for runs without tool calls (run backfill-canonical-hashes; "
            "runs of only no-op tools also land here)",
            "SELECT id FROM {batch} WHERE canonical_hash IS NULL AND step_count > 0 AND signature IS NULL",
        ),
        _in_set(a, "outcome", OUTCOMES),
        _in_set(a, "execution_outcome", OUTCOMES),
        _check(
            a,
            "shadow_pending_domain",
            "blocking",
            "shadow_pending is 0 or 1",
            ExpectColumnValuesToBeInSet,
            column="shadow_pending",
            value_set=[0, 1],
        ),
        _json(ctx, a, WORKFLOW_JSON),
        _rows(
            a,
            "stamp_points_to_active_skill",
            "blocking",
            "every stamped run points to an ACTIVE skill of the same tenant and class",
            "SELECT w.id FROM {batch} w LEFT JOIN skillbox s ON s.id = w.promoted_skill_id "
            "AND s.agent_id = w.agent_id AND s.user_id = w.user_id AND s.canonical_hash = w.canonical_hash "
            "AND s.status = 'active' WHERE w.promoted_skill_id IS NOT NULL AND s.id IS NULL",
        ),
        _rows(
            a,
            "active_class_runs_stamped",
            "warning",
            "every run of a class with an ACTIVE skill is stamped",
            "SELECT w.id FROM {batch} w JOIN skillbox s ON s.agent_id = w.agent_id AND s.user_id = w.user_id "
            "AND s.canonical_hash = w.canonical_hash AND s.status = 'active' WHERE w.promoted_skill_id IS NULL",
        ),
        _rows(
            a,
            "shadow_records_known_version",
            "blocking",
            f"shadow_evaluations is an array of records with evaluator_version in {versions}",
            d.bad_shadow_records(ctx.dialect, ctx.options.known_evaluator_versions),
        ),
        *_time(ctx, a),
    ]


# Another skill of row s's tenant with its name; a JOIN, so GX substitutes ``{batch}`` by the table and ``s`` binds.
SAME_NAME = "o.agent_id = s.agent_id AND o.user_id = s.user_id AND o.name = s.name AND o.id <> s.id"


def skillbox_checks(ctx: SuiteContext) -> list[Check]:
    a = "skillbox"
    role = d.json_member(ctx.dialect, "e.details", "role")
    automated = ", ".join(f"'{x}'" for x in AUTOMATED_ACTORS)
    live = ", ".join(f"'{s}'" for s in LIVE)
    return [
        _check(
            a,
            "canonical_hash_format",
            "blocking",
            "canonical_hash is 64 lowercase hex, or an imported skill's key (imported- and 55 hex)",
            ExpectColumnValuesToMatchRegex,
            column="canonical_hash",
            regex=SKILL_CLASS_REGEX,
        ),
        _in_set(a, "status", STATUSES),
        _in_set(a, "injection_role", ROLES),
        _json(ctx, a, SKILL_JSON),
        _rows(
            a,
            "developer_active_reviewed",
            "blocking",
            "no ACTIVE developer-role skill without a review event (activated as developer by a person)",
            "SELECT s.id FROM {batch} s LEFT JOIN (SELECT DISTINCT e.skill_id FROM skill_events e "
            f"WHERE e.event = 'activated' AND {role} = 'developer' AND e.actor NOT IN ({automated}) "
            "AND e.actor NOT LIKE 'schedule%') r ON r.skill_id = s.id "
            "WHERE s.status = 'active' AND s.injection_role = 'developer' AND r.skill_id IS NULL",
        ),
        _rows(
            a,
            "live_key_iff_live",
            "blocking",
            "live_key is set exactly while the skill is live",
            f"SELECT id FROM {{batch}} WHERE (status IN ({live}) AND live_key IS NULL) "
            f"OR (status NOT IN ({live}) AND live_key IS NOT NULL)",
        ),
        _rows(
            a,
            "live_name_key_iff_live",
            "blocking",
            "live_name_key is set exactly while the skill is live (a live skill without it only when another live "
            "skill of the tenant holds the name: a legacy duplicate, see live_names_unique)",
            f"SELECT s.id FROM {{batch}} s LEFT JOIN skillbox o ON {SAME_NAME} AND o.live_name_key IS NOT NULL "
            f"WHERE (s.status NOT IN ({live}) AND s.live_name_key IS NOT NULL) "
            f"OR (s.status IN ({live}) AND s.live_name_key IS NULL AND o.id IS NULL)",
        ),
        _rows(
            a,
            "live_names_unique",
            "warning",
            "no two live skills of a tenant share a name (duplicates from before migration 012: rename or retire "
            "all but one)",
            f"SELECT DISTINCT s.id FROM {{batch}} s JOIN skillbox o ON {SAME_NAME} "
            f"WHERE s.status IN ({live}) AND o.status IN ({live})",
        ),
        *_time(ctx, a),
    ]


def shadow_observations_checks(ctx: SuiteContext) -> list[Check]:
    a = "shadow_observations"
    return [
        _check(
            a,
            "evaluator_version_known",
            "blocking",
            f"evaluator_version in {list(ctx.options.known_evaluator_versions)}",
            ExpectColumnValuesToBeInSet,
            column="evaluator_version",
            value_set=list(ctx.options.known_evaluator_versions),
        ),
        _in_set(a, "observed_outcome", OUTCOMES),
        *_time(ctx, a, key="idempotency_key"),
    ]


def skill_events_checks(ctx: SuiteContext) -> list[Check]:
    a = "skill_events"
    return [_json(ctx, a, ("details",)), *_time(ctx, a)]


FRAGMENTATION_QUERY = (
    "SELECT agent_id, user_id, COUNT(canonical_hash) AS hashed_runs, "
    "100.0 * COUNT(DISTINCT canonical_hash) / COUNT(canonical_hash) AS classes_per_100_runs "
    "FROM workflow_memory WHERE canonical_hash IS NOT NULL GROUP BY agent_id, user_id"
)


def tenant_fragmentation_checks(ctx: SuiteContext) -> list[Check]:
    """Query asset over workflow_memory: distinct classes per 100 hashed runs, per tenant."""
    o = ctx.options
    return [
        _check(
            "tenant_fragmentation",
            "classes_per_100_runs",
            "warning",
            f"at most {o.fragmentation_warn_per_100:g} classes per 100 runs per tenant (tenants with at least "
            f"{o.fragmentation_min_runs} hashed runs); heavy fragmentation means the canonicalization rules "
            "need tuning",
            ExpectColumnValuesToBeBetween,
            column="classes_per_100_runs",
            max_value=o.fragmentation_warn_per_100,
            row_condition=f'col("hashed_runs")>={int(o.fragmentation_min_runs)}',
            condition_parser="great_expectations",
        )
    ]


TABLE_SUITES: dict[str, Callable[[SuiteContext], list[Check]]] = {
    "workflow_memory": workflow_memory_checks,
    "skillbox": skillbox_checks,
    "shadow_observations": shadow_observations_checks,
    "skill_events": skill_events_checks,
}
