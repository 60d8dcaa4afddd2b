-- 003_add_shadow_evaluations: workflow_memory.shadow_evaluations, the JSON-constrained CLOB that is passive
-- shadow evaluation's auditable source of truth.
--
-- Run after 002_add_skill_injection_role.sql:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/003_add_shadow_evaluations.sql
-- Re-runnable: each step ignores only its own "already done" error (ORA-00955 name already used,
-- ORA-01430 column already exists, ORA-02264 constraint name already used) and re-raises anything else,
-- so a column added by hand without its IS JSON check still gets the check.

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
alter table workflow_memory add (shadow_evaluations clob)
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
alter table workflow_memory add constraint ck_workflow_memory_shadow_evaluations_is_json check (shadow_evaluations is json)
]';
exception
    when others then
        if sqlcode not in (-2264) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 3 as version, '003_add_shadow_evaluations' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
