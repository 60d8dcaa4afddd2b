-- 014_recount_distinct_queries: no schema change. class_stats.distinct_queries counts the requests of
-- successful runs only (docs/guide/aggregate.md); an earlier release folded every run's request into it and
-- into class_fingerprints. The fold's bookkeeping row is removed, so the next fold recounts the whole store
-- with the new rule (until then the promotion cycle reads the reference aggregation, which counts so already).
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/014_recount_distinct_queries.sql
-- Re-runnable: removing the bookkeeping row again only makes the next fold a recount once more.

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

-- the next fold recounts every class from its runs
delete from class_stats_state;

merge into schema_migrations m
using (select 14 as version, '014_recount_distinct_queries' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
