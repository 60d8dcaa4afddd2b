-- 007_add_skill_revisions: skill_revisions, every edited revision of a skill version (revision 1 is the
-- version as distilled or imported; skillbox holds the newest). See docs/guide/lifecycle.md.
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/007_add_skill_revisions.sql
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

-- skill_revisions
begin
    execute immediate q'[
create table skill_revisions (
    skill_id varchar2(64 char) not null,
    revision integer not null,
    agent_id varchar2(255 char) not null,
    user_id varchar2(255 char) not null,
    name varchar2(64 char) not null,
    description varchar2(1024 char) not null,
    content clob not null,
    editor varchar2(255 char) not null,
    reason varchar2(1000 char),
    created_at timestamp with time zone not null,
    validation clob,
    constraint pk_skill_revisions primary key (skill_id, revision),
    constraint ck_skill_revisions_validation_is_json check (validation is json)
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
using (select 7 as version, '007_add_skill_revisions' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
