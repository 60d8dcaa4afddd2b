-- 011_add_partition_runs_folded: partition_state.runs_folded, each partition's runs folded into class_stats
-- (docs/guide/aggregate.md). The promotion cycle lists its partitions and judges its cadence from these
-- counters instead of counting workflow_memory. They start at 0, so the bookkeeping row of the fold is
-- removed: the next fold is a recount, which sets every counter from a COUNT (until then the listing and the
-- cadence count workflow_memory).
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/011_add_partition_runs_folded.sql
-- Re-runnable: adding the column ignores only ORA-01430 (column already exists) and re-raises anything else;
-- removing the bookkeeping row again only makes the next fold a recount once more.

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
alter table partition_state add (runs_folded integer default 0 not null)
]';
exception
    when others then
        if sqlcode not in (-1430) then
            raise;
        end if;
end;
/

-- the next fold recounts: it sets every partition's counter from a COUNT of its runs
delete from class_stats_state;

merge into schema_migrations m
using (select 11 as version, '011_add_partition_runs_folded' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
