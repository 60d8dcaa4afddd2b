-- 013_add_agent_tools_hands_off: agent_tools.hands_off, declared at registration (1 the tool hands the
-- conversation off to a human or another agent, 0 or NULL it does not). The promotion cycle's handoff gate holds
-- back a class that calls a declared hand-off tool (docs/guide/promotion.md, "Gates").
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/013_add_agent_tools_hands_off.sql
-- Re-runnable: each DDL ignores only its own "already done" error (ORA-01430 column already exists, ORA-02264
-- constraint name already used) and re-raises anything else.

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
alter table agent_tools add (hands_off smallint)
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
alter table agent_tools add constraint ck_agent_tools_hands_off check (hands_off in (0, 1))
]';
exception
    when others then
        if sqlcode not in (-2264) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 13 as version, '013_add_agent_tools_hands_off' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
