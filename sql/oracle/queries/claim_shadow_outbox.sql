-- claim_shadow_outbox: pending shadow-evaluation runs that no live worker holds, oldest first.
-- Concurrent workers never wait on or double-claim a row: SKIP LOCKED passes over rows another
-- transaction has locked. Oracle rejects FETCH FIRST with FOR UPDATE, so fetch at most the batch size
-- from the cursor (rows are locked as they are fetched), then in the same transaction set
-- shadow_claimed_at = :now for the fetched ids and commit.
-- Binds: :stale_before (claims older than this are abandoned and may be taken over).
select
    w.id
from workflow_memory w
where w.shadow_pending = 1
    and (w.shadow_claimed_at is null or w.shadow_claimed_at < :stale_before)
order by w.created_at
for update of w.shadow_claimed_at skip locked
