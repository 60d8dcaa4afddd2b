-- 012_add_live_name_key: live skill names unique per tenant (docs/design.md, "Identity and uniqueness").
-- skillbox.live_name_key is sha256 hex of agent_id || chr(31) || user_id || chr(31) || name while the skill is
-- live (candidate, shadow, active) and NULL otherwise; the unique index uq_skillbox_live_name_key (Oracle keeps
-- no index entry for a NULL key) admits one live skill per name per tenant. Names compare exactly (the Agent
-- Skills rule keeps them lowercase). The hash matches the application's only in an AL32UTF8 database.
--
-- Run after the earlier numbered files:
--     sql app_user@//db-host:1521/FREEPDB1 @sql/oracle/012_add_live_name_key.sql
-- Re-runnable: each DDL ignores only its own "already done" error (ORA-00955 name already used, ORA-01408 column
-- list already indexed, ORA-01430 column already exists) and re-raises anything else. The backfill keys only live
-- rows without a key, and never a row whose name an older live row of its tenant (or an already keyed one) holds:
-- such legacy duplicates keep NULL, so the index can always be built. The count query after it lists how many;
-- the data-quality warning skillbox.live_names_unique names them. Rename or retire them, then re-run this file.

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
alter table skillbox add (live_name_key varchar2(64 char))
]';
exception
    when others then
        if sqlcode not in (-1430) then
            raise;
        end if;
end;
/

-- the live rows, oldest first per name: a later live row with a name already held keeps NULL
update skillbox
set live_name_key = lower(rawtohex(standard_hash(agent_id || chr(31) || user_id || chr(31) || name, 'SHA256')))
where live_key is not null and live_name_key is null
and not exists (select 1 from skillbox o where o.agent_id = skillbox.agent_id
and o.user_id = skillbox.user_id and o.name = skillbox.name and o.live_key is not null and o.id <> skillbox.id
and (o.live_name_key is not null or o.created_at < skillbox.created_at
or (o.created_at = skillbox.created_at and o.id < skillbox.id)));

-- live skills left without a key (they share a name with an older live skill of their tenant)
select count(*) as unkeyed_live_duplicates from skillbox where live_key is not null and live_name_key is null;

begin
    execute immediate q'[
create unique index uq_skillbox_live_name_key on skillbox (live_name_key)
]';
exception
    when others then
        if sqlcode not in (-955, -1408) then
            raise;
        end if;
end;
/

merge into schema_migrations m
using (select 12 as version, '012_add_live_name_key' as name from dual) s
on (m.version = s.version)
when not matched then
    insert (version, name, applied_at) values (s.version, s.name, systimestamp at time zone 'UTC');

commit;
