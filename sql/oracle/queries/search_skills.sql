-- search_skills: the :k skills of one tenant, in one lifecycle status, nearest to a query vector.
-- A skill has several applicability vectors (profile + trigger queries); its score is the best one,
-- 1 - VECTOR_DISTANCE(embedding, :query_vec, COSINE). Tenant, status and embedding-model filters and the
-- :min_score threshold apply before FETCH FIRST, so another tenant's or a retired skill can never take a
-- top-k slot. Exact: a tenant's vectors are few (ix_skill_vectors_tenant_model finds them);
-- search_skills_approx.sql is the HNSW variant for very large pools.
-- Binds: :query_vec (VECTOR(384, FLOAT32)), :agent_id, :user_id, :status, :model_id, :min_score, :k.
with scored as (
    select
        v.skill_id,
        1 - vector_distance(v.embedding, :query_vec, cosine) as similarity
    from skill_vectors v
    join skillbox s
        on s.id = v.skill_id
    where s.agent_id = :agent_id
        and s.user_id = :user_id
        and s.status = :status
        and v.agent_id = :agent_id
        and v.user_id = :user_id
        and v.model_id = :model_id
)

select
    skill_id,
    max(similarity) as score
from scored
group by skill_id
having max(similarity) >= :min_score
order by score desc, skill_id
fetch first :k rows only
