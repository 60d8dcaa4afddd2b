-- 009_add_applicability_rules: applicability_rules, each tenant's fitted injection rule (floors, margin, view,
-- exemplars), keyed by the fingerprint of the live skills it was fitted for. See docs/guide/runtime.md.
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/009_add_applicability_rules.sql
-- Re-runnable: each step ignores only its own "already done" error (ORA-00955 name already used)
-- and re-raises anything else.

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

-- applicability_rules
begin
    execute immediate q'[
create table applicability_rules (
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    fingerprint varchar2(64 char) not null,
    model_id varchar2(255 char) not null,
    rule_view varchar2(20 char),
    cycle integer default 0 not null,
    fitted_at timestamp with time zone not null,
    rule clob not null,
    constraint pk_applicability_rules primary key (agent_id, user_id),
    constraint ck_applicability_rules_rule_is_json check (rule is json)
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
using (select 9 as version, '009_add_applicability_rules' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
