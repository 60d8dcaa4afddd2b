-- 004_add_covering_indexes: a covering index for the per-tenant class aggregation, and a (tenant, updated_at)
-- index for the retrieval cache's version check; drops ix_workflow_memory_class, which the covering index
-- supersedes (its four columns are the covering index's prefix, so every query it served keeps an index).
--
-- Run after 003_add_shadow_evaluations.sql:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/004_add_covering_indexes.sql
-- Re-runnable: each step ignores only its own "already done" error (ORA-00955 name already used,
-- ORA-01408 column list already indexed, ORA-01418 index does not exist) and re-raises anything else.
-- The covering index is built before the old index is dropped, so the aggregation always has an index.
-- On a large, busy workflow_memory a DBA may build it beforehand with "online" (Enterprise Edition): this
-- script then skips it.

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
create index ix_workflow_memory_class_cover on workflow_memory
    (agent_id, user_id, canonical_hash, created_at, outcome, query_fingerprint, promoted_skill_id)
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
create index ix_skillbox_tenant_updated on skillbox (agent_id, user_id, updated_at)
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
drop index ix_workflow_memory_class
]';
exception
    when others then
        if sqlcode not in (-1418) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 4 as version, '004_add_covering_indexes' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
