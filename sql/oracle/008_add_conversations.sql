-- 008_add_conversations: workflow_memory.conversation_id and segment_index (runs recorded per conversation,
-- one per procedure; see docs/guide/runtime.md) with a (tenant, conversation) index, and
-- agent_tools.changes_state (declared at registration: 1 changes state, 0 read-only, NULL = verb rule).
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/008_add_conversations.sql
-- Re-runnable: each step ignores only its own "already done" error (ORA-00955 name already used,
-- ORA-01408 column list already indexed, ORA-01430 column already exists, ORA-02264 constraint name
-- already used) and re-raises anything else.

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
alter table workflow_memory add (conversation_id varchar2(255 char))
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
alter table workflow_memory add (segment_index integer)
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
alter table agent_tools add (changes_state smallint)
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
alter table agent_tools add constraint ck_agent_tools_changes_state check (changes_state in (0, 1))
]';
exception
    when others then
        if sqlcode not in (-2264) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
create index ix_workflow_memory_conversation on workflow_memory (agent_id, user_id, conversation_id)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 8 as version, '008_add_conversations' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
