"""The SQLAlchemy Core schema, one definition for SQLite, PostgreSQL and Oracle.

``build_metadata(level)`` returns the schema as it stands after migration ``level``: migration 001
creates the upstream-era shape, 002 adds ``skillbox.injection_role`` and 003 adds
``workflow_memory.shadow_evaluations``, 004 replaces ``ix_workflow_memory_class`` by the covering index
``ix_workflow_memory_class_cover`` (its prefix is the old index, so nothing loses an index) and adds
``ix_skillbox_tenant_updated``, 007 adds ``skill_revisions`` (every edited revision of a skill version, see
docs/guide/lifecycle.md, "Edit, history and rollback"), 008 adds ``workflow_memory.conversation_id`` and
``segment_index`` (runs recorded per conversation, docs/guide/runtime.md) and ``agent_tools.changes_state``,
009 adds ``applicability_rules`` (each tenant's fitted injection rule, docs/guide/runtime.md), 010 adds
``workflow_memory.stats_pending`` and the maintained class statistics ``class_stats``, ``class_fingerprints``,
``class_stats_state`` (docs/guide/aggregate.md), 011 adds ``partition_state.runs_folded`` (each partition's
folded runs, kept by the fold: the cycle's listing and cadence read it, docs/guide/aggregate.md), 012 adds
``skillbox.live_name_key`` and its unique index (live skill names unique per tenant, docs/design.md), 013 adds
``agent_tools.hands_off`` (a declared hand-off tool, docs/guide/promotion.md "Gates"); 014 changes no table (the
class statistics are recounted: distinct queries count successful runs only), 015 adds ``agent_handoffs`` (the
declared hand-off tools, which an agent of a release before 013 cannot clear by registering its tools again), so
fresh installs and upgrades follow one path.
It is the one definition: ``storage.migrations`` compiles each migration's DDL from it, and ``sql/oracle/*.sql``
mirror it for DBAs (``tests/storage/test_oracle_sql.py`` keeps them in step, both ways, at every level).
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from skillflow.storage.types import JSONText, UTCDateTime, Vector

LATEST = 15
EMBEDDING_DIM = 384
ID = 64  # identifiers are uuid4 hex or caller-supplied keys up to 64 chars
TENANT = 255
STATUSES = ("candidate", "shadow", "active", "deprecated", "demoted", "rejected")
OUTCOMES = ("success", "failure", "unknown")
ROLES = ("user", "developer")
# What the per-tenant class aggregation reads; migration 004 indexes exactly these, in this order.
CLASS_COVER_COLUMNS = (
    "agent_id",
    "user_id",
    "canonical_hash",
    "created_at",
    "outcome",
    "query_fingerprint",
    "promoted_skill_id",
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}


def _in(col: str, values: tuple[str, ...]) -> str:
    return f"{col} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def json_check(col: str, name: str) -> CheckConstraint:
    """``col IS JSON`` on Oracle, ``json_valid`` on SQLite (NULL allowed), none needed on PostgreSQL."""
    return CheckConstraint(f"{col} IS NULL OR json_valid({col})", name=name).ddl_if(dialect="sqlite")


def oracle_json_check(col: str, name: str) -> CheckConstraint:
    return CheckConstraint(f"{col} IS JSON", name=name).ddl_if(dialect="oracle")


def _json_col(table_cols: list, name: str, nullable: bool = True) -> None:
    table_cols.append(Column(name, JSONText(), nullable=nullable))
    table_cols.append(json_check(name, f"{name}_json"))
    table_cols.append(oracle_json_check(name, f"{name}_is_json"))


def build_metadata(level: int = LATEST) -> MetaData:
    """The schema after migration ``level`` (1..LATEST)."""
    md = MetaData(naming_convention=NAMING)

    Table(
        "schema_migrations",
        md,
        Column("version", Integer, primary_key=True),
        Column("name", String(100), nullable=False),
        Column("applied_at", UTCDateTime(), nullable=False),
    )

    wf: list = [
        Column("id", String(ID), primary_key=True),
        Column("agent_id", String(TENANT), nullable=False),
        Column("user_id", String(TENANT), nullable=False),
        Column("query", Text(), nullable=False),
        Column("query_fingerprint", String(64)),
        Column("canonical_hash", String(64)),
        Column("tool_sequence", String(4000)),
        Column("step_count", Integer, nullable=False, server_default=text("0")),
        Column("outcome", String(16), nullable=False),
        Column("execution_outcome", String(16), nullable=False),
        Column("outcome_source", String(16), nullable=False),
        Column("learning_error", String(500)),
        Column("promoted_skill_id", String(ID)),
        Column("shadow_pending", SmallInteger, nullable=False, server_default=text("0")),
        Column("shadow_claimed_at", UTCDateTime()),
        Column("created_at", UTCDateTime(), nullable=False),
        CheckConstraint(_in("outcome", OUTCOMES), name="outcome"),
        CheckConstraint(_in("execution_outcome", OUTCOMES), name="execution_outcome"),
        CheckConstraint("shadow_pending IN (0, 1)", name="shadow_pending"),
    ]
    _json_col(wf, "steps", nullable=False)
    _json_col(wf, "signature")
    _json_col(wf, "skills_activated", nullable=False)
    _json_col(wf, "metadata")
    if level >= 3:
        _json_col(wf, "shadow_evaluations")
    if level >= 8:  # a run may belong to a conversation, and be the procedure at ``segment_index`` of it
        wf.append(Column("conversation_id", String(TENANT)))
        wf.append(Column("segment_index", Integer))
        wf.append(Index("ix_workflow_memory_conversation", "agent_id", "user_id", "conversation_id"))
    if level >= 10:  # 1 = not yet folded into class_stats (new rows), NULL = folded; only pending rows are indexed
        wf.append(Column("stats_pending", SmallInteger, server_default=text("1")))
        wf.append(CheckConstraint("stats_pending = 1", name="stats_pending"))
        pending = text("stats_pending IS NOT NULL")
        wf.append(
            Index("ix_workflow_memory_stats_pending", "stats_pending", postgresql_where=pending, sqlite_where=pending)
        )
    if level >= 4:
        # Covers the per-tenant GROUP BY canonical_hash (aggregate.aggregate_query) without touching table
        # rows; its first four columns are the old ix_workflow_memory_class, which 004 drops as redundant.
        wf.append(Index("ix_workflow_memory_class_cover", *CLASS_COVER_COLUMNS))
    else:
        wf.append(Index("ix_workflow_memory_class", *CLASS_COVER_COLUMNS[:4]))
    Table(
        "workflow_memory",
        md,
        *wf,
        Index("ix_workflow_memory_tenant_created", "agent_id", "user_id", "created_at"),
        Index("ix_workflow_memory_promoted", "promoted_skill_id"),
        Index("ix_workflow_memory_outbox", "shadow_pending", "created_at"),
    )

    sk: list = [
        Column("id", String(ID), primary_key=True),
        Column("agent_id", String(TENANT), nullable=False),
        Column("user_id", String(TENANT), nullable=False),
        Column("canonical_hash", String(64), nullable=False),
        Column("version", Integer, nullable=False),
        Column("name", String(64), nullable=False),
        Column("description", String(1024), nullable=False),
        Column("status", String(16), nullable=False),
        Column("live_key", String(64)),
        Column("content", Text(), nullable=False),
        Column("prompt_version", String(32), nullable=False),
        Column("distiller", String(100), nullable=False),
        Column("embedding_model", String(200)),
        Column("demotion_reason", String(1000)),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("updated_at", UTCDateTime(), nullable=False),
        Column("activated_at", UTCDateTime()),
        Column("demoted_at", UTCDateTime()),
        CheckConstraint(_in("status", STATUSES), name="status"),
        UniqueConstraint("live_key", name="uq_skillbox_live_key"),
        UniqueConstraint("agent_id", "user_id", "canonical_hash", "version", name="uq_skillbox_version"),
    ]
    for name in ("preconditions", "tools", "trigger_queries", "source_workflow_ids", "baseline", "stats", "validation"):
        _json_col(sk, name)
    if level >= 2:
        sk.append(Column("injection_role", String(20), nullable=False, server_default=text("'user'")))
        sk.append(CheckConstraint(_in("injection_role", ROLES), name="injection_role"))
    if level >= 4:  # the retrieval cache's version stamp (newest updated_at of a tenant) is one index seek
        sk.append(Index("ix_skillbox_tenant_updated", "agent_id", "user_id", "updated_at"))
    if level >= 12:  # sha256(agent, user, name) while live: one live skill per name per tenant (a unique index,
        # the one unique form SQLite can add to an existing table)
        sk.append(Column("live_name_key", String(64)))
        sk.append(Index("uq_skillbox_live_name_key", "live_name_key", unique=True))
    Table(
        "skillbox",
        md,
        *sk,
        Index("ix_skillbox_tenant_status", "agent_id", "user_id", "status"),
        Index("ix_skillbox_class", "agent_id", "user_id", "canonical_hash"),
    )

    Table(
        "skill_vectors",
        md,
        Column("skill_id", String(ID), primary_key=True),
        Column("ordinal", Integer, primary_key=True),
        Column("agent_id", String(TENANT), nullable=False),
        Column("user_id", String(TENANT), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("model_id", String(200), nullable=False),
        Column("embedding", Vector(EMBEDDING_DIM), nullable=False),
        CheckConstraint(_in("kind", ("profile", "trigger")), name="kind"),
        Index("ix_skill_vectors_tenant_model", "agent_id", "user_id", "model_id"),
    )

    ev: list = [
        Column("id", String(ID), primary_key=True),
        Column("skill_id", String(ID), nullable=False),
        Column("agent_id", String(TENANT), nullable=False),
        Column("user_id", String(TENANT), nullable=False),
        Column("event", String(32), nullable=False),
        Column("from_status", String(16)),
        Column("to_status", String(16)),
        Column("actor", String(255), nullable=False),
        Column("reason", String(1000)),
        Column("flow_run_id", String(64)),
        Column("created_at", UTCDateTime(), nullable=False),
        Index("ix_skill_events_skill", "skill_id", "created_at"),
    ]
    _json_col(ev, "details")
    Table("skill_events", md, *ev)

    # Normalized index of workflow_memory.skills_activated, written in the run's own transaction.
    Table(
        "skill_activations",
        md,
        Column("run_id", String(ID), primary_key=True),
        Column("skill_id", String(ID), primary_key=True),
        Column("agent_id", String(TENANT), nullable=False),
        Column("user_id", String(TENANT), nullable=False),
        Column("canonical_hash", String(64)),
        Column("outcome", String(16), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Index("ix_skill_activations_skill", "skill_id", "created_at"),
    )

    # Normalized index of workflow_memory.shadow_evaluations (one row per idempotency key).
    Table(
        "shadow_observations",
        md,
        Column("idempotency_key", String(200), primary_key=True),
        Column("run_id", String(ID), nullable=False),
        Column("skill_id", String(ID), nullable=False),
        Column("agent_id", String(TENANT), nullable=False),
        Column("user_id", String(TENANT), nullable=False),
        Column("similarity", Float, nullable=False),
        Column("trajectory_match", SmallInteger, nullable=False),
        Column("matched_succeeded", SmallInteger),
        Column("observed_outcome", String(16), nullable=False),
        Column("evaluator_version", String(16), nullable=False),
        Column("evaluated_at", UTCDateTime(), nullable=False),
        Index("ix_shadow_observations_skill", "skill_id", "evaluated_at"),
    )

    rep: list = [
        Column("id", String(ID), primary_key=True),
        Column("kind", String(32), nullable=False),
        Column("agent_id", String(TENANT)),
        Column("user_id", String(TENANT)),
        Column("flow_run_id", String(64)),
        Column("dry_run", SmallInteger, nullable=False, server_default=text("0")),
        Column("created_at", UTCDateTime(), nullable=False),
        Index("ix_reports_kind_created", "kind", "created_at"),
    ]
    _json_col(rep, "body", nullable=False)
    Table("reports", md, *rep)

    cs: list = [
        Column("agent_id", String(TENANT), primary_key=True),
        Column("user_id", String(TENANT), primary_key=True),
        Column("canonical_hash", String(64), primary_key=True),
        Column("rejections", Integer, nullable=False, server_default=text("0")),
        Column("last_rejected_cycle", Integer),
        Column("retry_after_cycle", Integer),
        Column("updated_at", UTCDateTime(), nullable=False),
    ]
    _json_col(cs, "last_reasons")
    Table("class_state", md, *cs)

    ps: list = [
        Column("agent_id", String(TENANT), primary_key=True),
        Column("user_id", String(TENANT), primary_key=True),
        Column("cycle_count", Integer, nullable=False, server_default=text("0")),
        Column("runs_at_last_cycle", Integer, nullable=False, server_default=text("0")),
        Column("last_cycle_at", UTCDateTime()),
    ]
    if level >= 11:  # runs of the partition folded into class_stats (storage.class_stats keeps it)
        ps.append(Column("runs_folded", Integer, nullable=False, server_default=text("0")))
    Table("partition_state", md, *ps)

    Table(
        "leases",
        md,
        Column("name", String(300), primary_key=True),
        Column("holder", String(64), nullable=False),
        Column("expires_at", UTCDateTime(), nullable=False),
    )

    if level >= 7:
        # Revision 1 is the version as distilled (or imported), written when the first edit lands; skillbox
        # always holds the newest revision, so readers that ignore this table see what is reviewed.
        rv: list = [
            Column("skill_id", String(ID), primary_key=True),
            Column("revision", Integer, primary_key=True),
            Column("agent_id", String(TENANT), nullable=False),
            Column("user_id", String(TENANT), nullable=False),
            Column("name", String(64), nullable=False),
            Column("description", String(1024), nullable=False),
            Column("content", Text(), nullable=False),
            Column("editor", String(255), nullable=False),
            Column("reason", String(1000)),
            Column("created_at", UTCDateTime(), nullable=False),
        ]
        _json_col(rv, "validation")
        Table("skill_revisions", md, *rv)

    if level >= 9:
        # The tenant's fitted applicability rule (skillflow.injection.calibration), keyed by the fingerprint of
        # the live skills it was fitted for: a rule whose fingerprint no longer matches is never applied.
        ar: list = [
            Column("agent_id", String(TENANT), primary_key=True),
            Column("user_id", String(TENANT), primary_key=True),
            Column("fingerprint", String(64), nullable=False),
            Column("model_id", String(255), nullable=False),
            Column("rule_view", String(20)),
            Column("cycle", Integer, nullable=False, server_default=text("0")),
            Column("fitted_at", UTCDateTime(), nullable=False),
        ]
        _json_col(ar, "rule", nullable=False)
        Table("applicability_rules", md, *ar)

    if level >= 10:
        _class_stats_tables(md)

    tools: list = [
        Column("agent_id", String(TENANT), primary_key=True),
        Column("tool_name", String(255), primary_key=True),
        Column("registered_at", UTCDateTime(), nullable=False),
    ]
    if level >= 8:  # declared at registration: 1 changes state, 0 read-only, NULL = the tool-name verb rule
        tools.append(Column("changes_state", SmallInteger))
        tools.append(CheckConstraint("changes_state IN (0, 1)", name="changes_state"))
    if level >= 13:  # declared at registration: 1 hands the conversation off (to a human, another agent), else 0
        tools.append(Column("hands_off", SmallInteger))
        tools.append(CheckConstraint("hands_off IN (0, 1)", name="hands_off"))
    Table("agent_tools", md, *tools)
    if level >= 15:  # the agent's declared hand-off tools, kept apart from agent_tools: a release before 013 that
        # registers the toolbox again rewrites agent_tools without hands_off; it never touches this table
        Table(
            "agent_handoffs",
            md,
            Column("agent_id", String(TENANT), primary_key=True),
            Column("tool_name", String(255), primary_key=True),
            Column("declared_at", UTCDateTime(), nullable=False),
        )
    return md


def _class_stats_tables(md: MetaData) -> None:
    """Migration 010: per-class statistics kept current by ``storage.class_stats`` (docs/guide/aggregate.md)."""
    counts = ("successes", "failures", "unknown", "distinct_queries", "stamped")
    Table(
        "class_stats",
        md,
        Column("agent_id", String(TENANT), primary_key=True),
        Column("user_id", String(TENANT), primary_key=True),
        Column("canonical_hash", String(64), primary_key=True),
        *(Column(name, Integer, nullable=False, server_default=text("0")) for name in counts),
        Column("first_seen", UTCDateTime()),
        Column("last_seen", UTCDateTime()),
        Column("newest_at", UTCDateTime(), nullable=False),
        Column("tool_sequence", String(4000)),
        Column("since", UTCDateTime()),
        Column("stale", SmallInteger, nullable=False, server_default=text("0")),
        Column("updated_at", UTCDateTime(), nullable=False),
        CheckConstraint("stale IN (0, 1)", name="stale"),
    )
    Table(
        "class_fingerprints",
        md,
        Column("agent_id", String(TENANT), primary_key=True),
        Column("user_id", String(TENANT), primary_key=True),
        Column("canonical_hash", String(64), primary_key=True),
        Column("query_fingerprint", String(64), primary_key=True),
        Column("last_seen", UTCDateTime(), nullable=False),
    )
    Table(
        "class_stats_state",
        md,
        Column("id", Integer, primary_key=True),
        Column("recounted_at", UTCDateTime(), nullable=False),
        Column("folded_at", UTCDateTime(), nullable=False),
        Column("last_folded", Integer, nullable=False, server_default=text("0")),
    )


metadata = build_metadata(LATEST)
workflow_memory = metadata.tables["workflow_memory"]
skillbox = metadata.tables["skillbox"]
skill_vectors = metadata.tables["skill_vectors"]
skill_events = metadata.tables["skill_events"]
skill_activations = metadata.tables["skill_activations"]
shadow_observations = metadata.tables["shadow_observations"]
reports = metadata.tables["reports"]
class_state = metadata.tables["class_state"]
partition_state = metadata.tables["partition_state"]
leases = metadata.tables["leases"]
agent_tools = metadata.tables["agent_tools"]
agent_handoffs = metadata.tables["agent_handoffs"]
schema_migrations = metadata.tables["schema_migrations"]
skill_revisions = metadata.tables["skill_revisions"]
applicability_rules = metadata.tables["applicability_rules"]
class_stats = metadata.tables["class_stats"]
class_fingerprints = metadata.tables["class_fingerprints"]
class_stats_state = metadata.tables["class_stats_state"]
