-- 010_add_class_stats: maintained per-class statistics (docs/guide/aggregate.md). workflow_memory.stats_pending
-- marks runs not yet folded into class_stats (NULL on the rows stored before this migration, default 1 for
-- every new row; Oracle keeps no index entry for a NULL key, so the index holds pending rows only);
-- class_stats holds one row per (tenant, class), class_fingerprints the newest run per distinct query of a
-- class, class_stats_state the bookkeeping of the fold and the recount.
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/010_add_class_stats.sql
-- Re-runnable: each step ignores only its own "already done" error (ORA-00955 name already used,
-- ORA-01408 column list already indexed, ORA-01430 column already exists, ORA-02264 constraint name
-- already used) and re-raises anything else. Setting the default again is harmless.

whenever sqlerror exit failure rollback
set define off

-- migration bookkeeping (present already when 001_init.sql ran)
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

begin
    execute immediate q'[
alter table workflow_memory add (stats_pending smallint)
]';
exception
    when others then
        if sqlcode not in (-1430) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
alter table workflow_memory add constraint ck_workflow_memory_stats_pending check (stats_pending = 1)
]';
exception
    when others then
        if sqlcode not in (-2264) then
            raise;
        end if;
end;
/

-- only new rows are pending: the rows already stored are counted by the first recount
begin
    execute immediate q'[
alter table workflow_memory modify (stats_pending default 1)
]';
end;
/

begin
    execute immediate q'[
create index ix_workflow_memory_stats_pending on workflow_memory (stats_pending)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

-- class_stats
begin
    execute immediate q'[
create table class_stats (
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    canonical_hash varchar2(64 char) not null,
    successes integer default 0 not null,
    failures integer default 0 not null,
    unknown integer default 0 not null,
    distinct_queries integer default 0 not null,
    stamped integer default 0 not null,
    first_seen timestamp with time zone,
    last_seen timestamp with time zone,
    newest_at timestamp with time zone not null,
    tool_sequence varchar2(4000 char),
    since timestamp with time zone,
    stale smallint default 0 not null,
    updated_at timestamp with time zone not null,
    constraint pk_class_stats primary key (agent_id, user_id, canonical_hash),
    constraint ck_class_stats_stale check (stale in (0, 1))
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

-- class_fingerprints
begin
    execute immediate q'[
create table class_fingerprints (
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    canonical_hash varchar2(64 char) not null,
    query_fingerprint varchar2(64 char) not null,
    last_seen timestamp with time zone not null,
    constraint pk_class_fingerprints primary key (agent_id, user_id, canonical_hash, query_fingerprint)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

-- class_stats_state
begin
    execute immediate q'[
create table class_stats_state (
    id integer not null,
    recounted_at timestamp with time zone not null,
    folded_at timestamp with time zone not null,
    last_folded integer default 0 not null,
    constraint pk_class_stats_state primary key (id)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 10 as version, '010_add_class_stats' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
