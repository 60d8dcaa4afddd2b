-- 015_add_agent_handoffs: agent_handoffs, the tools an agent declared hand-offs (register_tools(hands_off=...)),
-- kept apart from agent_tools: an agent process of a release before 013 registering its tools again rewrites
-- agent_tools without hands_off, and the promotion cycle's handoff gate (docs/guide/promotion.md, "Gates")
-- reads this table too, so such a process cannot switch the gate off. Backfilled from agent_tools.hands_off.
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/015_add_agent_handoffs.sql
-- Re-runnable: creating the table ignores only ORA-00955 (name already used) and re-raises anything else; the
-- backfill inserts only the rows that are missing.

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
create table agent_handoffs (
    agent_id varchar2(255 char) not null,
    tool_name varchar2(255 char) not null,
    declared_at timestamp with time zone not null,
    constraint pk_agent_handoffs primary key (agent_id, tool_name)
)
]';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/

merge into agent_handoffs h
using (select agent_id, tool_name, registered_at from agent_tools where hands_off = 1) t
on (h.agent_id = t.agent_id and h.tool_name = t.tool_name)
when not matched then
    insert (agent_id, tool_name, declared_at) values (t.agent_id, t.tool_name, t.registered_at);

merge into schema_migrations m
using (select 15 as version, '015_add_agent_handoffs' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
