-- 002_add_skill_injection_role: skillbox.injection_role (user | developer), legacy skills default to 'user'.
--
-- Run after 001_init.sql, or on an existing manually managed schema:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/002_add_skill_injection_role.sql
-- Re-runnable, and a schema that already has the column (even nullable, or without its check constraint)
-- ends identical to a fresh install: each step ignores only its own "already done" error
-- (ORA-00955 name already used, ORA-01430 column already exists, ORA-01442 already NOT NULL,
-- ORA-02264 constraint name already used) and re-raises anything else.

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
alter table skillbox add (injection_role varchar2(20 char) default 'user' not null)
]';
exception
    when others then
        if sqlcode not in (-1430) then
            raise;
        end if;
end;
/

-- a column added by hand may be nullable: legacy rows keep the pre-upgrade trust level
update skillbox set injection_role = 'user' where injection_role is null;

commit;

begin
    execute immediate q'[
alter table skillbox modify (injection_role default 'user')
]';
end;
/

begin
    execute immediate q'[
alter table skillbox modify (injection_role not null)
]';
exception
    when others then
        if sqlcode not in (-1442) then
            raise;
        end if;
end;
/

begin
    execute immediate q'[
alter table skillbox add constraint ck_skillbox_injection_role check (injection_role in ('user', 'developer'))
]';
exception
    when others then
        if sqlcode not in (-2264) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 2 as version, '002_add_skill_injection_role' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
