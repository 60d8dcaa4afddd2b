-- 001_init: the skillflow schema as of migration 001 (mirrors skillflow.storage.schema.build_metadata(1)).
--
-- Oracle Database 23ai. Run as the schema owner with SQL*Plus or SQLcl:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/001_init.sql
-- Re-runnable: every DDL runs in a PL/SQL block that ignores only "already exists" errors
-- (ORA-00955 name already used, ORA-01408 column list already indexed) and re-raises anything else.
-- JSON columns are CLOB CHECK (col IS JSON); timestamps are UTC TIMESTAMP WITH TIME ZONE bound by the
-- application. Then run 002_add_skill_injection_role.sql, 003_add_shadow_evaluations.sql and 004_add_covering_indexes.sql.

whenever sqlerror exit failure rollback
set define off

-- schema_migrations
begin
    execute immediate q'[
create table schema_migrations (
    version integer not null,
    name varchar2(100 char) not null,
    applied_at timestamp with time zone not null,
    constraint pk_schema_migrations primary key (version)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

-- workflow_memory
begin
    execute immediate q'[
create table workflow_memory (
    id varchar2(64 char) not null,
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    query clob not null,
    query_fingerprint varchar2(64 char),
    canonical_hash varchar2(64 char),
    tool_sequence varchar2(4000 char),
    step_count integer default 0 not null,
    outcome varchar2(16 char) not null,
    execution_outcome varchar2(16 char) not null,
    outcome_source varchar2(16 char) not null,
    learning_error varchar2(500 char),
    promoted_skill_id varchar2(64 char),
    shadow_pending smallint default 0 not null,
    shadow_claimed_at timestamp with time zone,
    created_at timestamp with time zone not null,
    steps clob not null,
    signature clob,
    skills_activated clob not null,
    metadata clob,
    constraint pk_workflow_memory primary key (id),
    constraint ck_workflow_memory_outcome check (outcome in ('success', 'failure', 'unknown')),
    constraint ck_workflow_memory_execution_outcome check (execution_outcome in ('success', 'failure', 'unknown')),
    constraint ck_workflow_memory_shadow_pending check (shadow_pending in (0, 1)),
    constraint ck_workflow_memory_steps_is_json check (steps is json),
    constraint ck_workflow_memory_signature_is_json check (signature is json),
    constraint ck_workflow_memory_skills_activated_is_json check (skills_activated is json),
    constraint ck_workflow_memory_metadata_is_json check (metadata is json)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_workflow_memory_class on workflow_memory (agent_id, user_id, canonical_hash, created_at)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_workflow_memory_outbox on workflow_memory (shadow_pending, created_at)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_workflow_memory_promoted on workflow_memory (promoted_skill_id)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_workflow_memory_tenant_created on workflow_memory (agent_id, user_id, created_at)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- skillbox
begin
    execute immediate q'[
create table skillbox (
    id varchar2(64 char) not null,
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    canonical_hash varchar2(64 char) not null,
    version integer not null,
    name varchar2(64 char) not null,
    description varchar2(1024 char) not null,
    status varchar2(16 char) not null,
    live_key varchar2(64 char),
    content clob not null,
    prompt_version varchar2(32 char) not null,
    distiller varchar2(100 char) not null,
    embedding_model varchar2(200 char),
    demotion_reason varchar2(1000 char),
    created_at timestamp with time zone not null,
    updated_at timestamp with time zone not null,
    activated_at timestamp with time zone,
    demoted_at timestamp with time zone,
    preconditions clob,
    tools clob,
    trigger_queries clob,
    source_workflow_ids clob,
    baseline clob,
    stats clob,
    validation clob,
    constraint pk_skillbox primary key (id),
    constraint ck_skillbox_status check (status in ('candidate', 'shadow', 'active', 'deprecated', 'demoted', 'rejected')),
    constraint uq_skillbox_live_key unique (live_key),
    constraint uq_skillbox_version unique (agent_id, user_id, canonical_hash, version),
    constraint ck_skillbox_preconditions_is_json check (preconditions is json),
    constraint ck_skillbox_tools_is_json check (tools is json),
    constraint ck_skillbox_trigger_queries_is_json check (trigger_queries is json),
    constraint ck_skillbox_source_workflow_ids_is_json check (source_workflow_ids is json),
    constraint ck_skillbox_baseline_is_json check (baseline is json),
    constraint ck_skillbox_stats_is_json check (stats is json),
    constraint ck_skillbox_validation_is_json check (validation is json)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_skillbox_class on skillbox (agent_id, user_id, canonical_hash)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_skillbox_tenant_status on skillbox (agent_id, user_id, status)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- skill_vectors
begin
    execute immediate q'[
create table skill_vectors (
    skill_id varchar2(64 char) not null,
    ordinal integer not null,
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    kind varchar2(16 char) not null,
    model_id varchar2(200 char) not null,
    embedding vector(384, float32) not null,
    constraint pk_skill_vectors primary key (skill_id, ordinal),
    constraint ck_skill_vectors_kind check (kind in ('profile', 'trigger'))
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_skill_vectors_tenant_model on skill_vectors (agent_id, user_id, model_id)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- skill_events
begin
    execute immediate q'[
create table skill_events (
    id varchar2(64 char) not null,
    skill_id varchar2(64 char) not null,
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    event varchar2(32 char) not null,
    from_status varchar2(16 char),
    to_status varchar2(16 char),
    actor varchar2(255 char) not null,
    reason varchar2(1000 char),
    flow_run_id varchar2(64 char),
    created_at timestamp with time zone not null,
    details clob,
    constraint pk_skill_events primary key (id),
    constraint ck_skill_events_details_is_json check (details is json)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_skill_events_skill on skill_events (skill_id, created_at)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- skill_activations
begin
    execute immediate q'[
create table skill_activations (
    run_id varchar2(64 char) not null,
    skill_id varchar2(64 char) not null,
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    canonical_hash varchar2(64 char),
    outcome varchar2(16 char) not null,
    created_at timestamp with time zone not null,
    constraint pk_skill_activations primary key (run_id, skill_id)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_skill_activations_skill on skill_activations (skill_id, created_at)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- shadow_observations
begin
    execute immediate q'[
create table shadow_observations (
    idempotency_key varchar2(200 char) not null,
    run_id varchar2(64 char) not null,
    skill_id varchar2(64 char) not null,
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    similarity float not null,
    trajectory_match smallint not null,
    matched_succeeded smallint,
    observed_outcome varchar2(16 char) not null,
    evaluator_version varchar2(16 char) not null,
    evaluated_at timestamp with time zone not null,
    constraint pk_shadow_observations primary key (idempotency_key)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_shadow_observations_skill on shadow_observations (skill_id, evaluated_at)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- reports
begin
    execute immediate q'[
create table reports (
    id varchar2(64 char) not null,
    kind varchar2(32 char) not null,
    agent_id varchar2(255 char),
    user_id varchar2(255 char),
    flow_run_id varchar2(64 char),
    dry_run smallint default 0 not null,
    created_at timestamp with time zone not null,
    body clob not null,
    constraint pk_reports primary key (id),
    constraint ck_reports_body_is_json check (body is json)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_reports_kind_created on reports (kind, created_at)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- class_state
begin
    execute immediate q'[
create table class_state (
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    canonical_hash varchar2(64 char) not null,
    rejections integer default 0 not null,
    last_rejected_cycle integer,
    retry_after_cycle integer,
    updated_at timestamp with time zone not null,
    last_reasons clob,
    constraint pk_class_state primary key (agent_id, user_id, canonical_hash),
    constraint ck_class_state_last_reasons_is_json check (last_reasons is json)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

-- partition_state
begin
    execute immediate q'[
create table partition_state (
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    cycle_count integer default 0 not null,
    runs_at_last_cycle integer default 0 not null,
    last_cycle_at timestamp with time zone,
    constraint pk_partition_state primary key (agent_id, user_id)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

-- leases
begin
    execute immediate q'[
create table leases (
    name varchar2(300 char) not null,
    holder varchar2(64 char) not null,
    expires_at timestamp with time zone not null,
    constraint pk_leases primary key (name)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

-- agent_tools
begin
    execute immediate q'[
create table agent_tools (
    agent_id varchar2(255 char) not null,
    tool_name varchar2(255 char) not null,
    registered_at timestamp with time zone not null,
    constraint pk_agent_tools primary key (agent_id, tool_name)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

-- Approximate-search index for skill retrieval (HNSW). Needs a vector pool (VECTOR_MEMORY_SIZE > 0) and
-- a release with HNSW transaction support (the first 23ai release, 23.4, refuses DML on the table: ORA-51928).
begin
    execute immediate q'[
create vector index ix_skill_vectors_embedding on skill_vectors (embedding)
organization inmemory neighbor graph
distance cosine
with target accuracy 95
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 1 as version, '001_init' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
