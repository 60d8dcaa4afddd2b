-- search_skills_approx: the :k skills of one tenant, in one lifecycle status, nearest to a query vector.
-- A skill has several applicability vectors (profile + trigger queries); its score is the best one,
-- 1 - VECTOR_DISTANCE(..., COSINE). Tenant, status and embedding-model filters apply before any top-k.
-- The approximate twin of search_skills.sql, for tenants whose skill pool outgrows exact search.
-- :candidates bounds the vectors searched; use :k * (1 + max_trigger_queries): in an exact search the best
-- vector of each of the top :k skills is then always among them. APPROX lets Oracle use the HNSW index; without an
-- index, or when the optimizer prefers it, the search is exact.
-- Binds: :query_vec (VECTOR(384, FLOAT32)), :agent_id, :user_id, :status, :model_id, :min_score,
-- :candidates, :k.
with nearest as (
    select
        v.skill_id,
        vector_distance(v.embedding, :query_vec, cosine) as distance
    from skill_vectors v
    join skillbox s
        on s.id = v.skill_id
    where s.agent_id = :agent_id
        and s.user_id = :user_id
        and s.status = :status
        and v.agent_id = :agent_id
        and v.user_id = :user_id
        and v.model_id = :model_id
    order by distance
    fetch approx first :candidates rows only with target accuracy 95
)

select
    skill_id,
    max(1 - distance) as score
from nearest
group by skill_id
having max(1 - distance) >= :min_score
order by score desc, skill_id
fetch first :k rows only
