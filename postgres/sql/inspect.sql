-- {p}_inspect_v1 lists the live acquisitions of lock p_name from one
-- snapshot: the holder first (r_held), then the waiters in the order they
-- will be granted, each with the ms left before it lapses unless renewed.
-- VOLATILE: it reads clock_timestamp(), which a STABLE function may not.
CREATE OR REPLACE FUNCTION {p}_inspect_v1(p_name text)
RETURNS TABLE (r_held boolean, r_owner text, r_token bigint, r_ttl_ms bigint, r_holder text, r_metadata text)
LANGUAGE sql VOLATILE AS $$
  WITH t AS (SELECT clock_timestamp() AS now)
  SELECT a.held, a.owner, a.token, a.ttl_ms, a.holder, a.metadata FROM (
    SELECT true AS held, l.owner, l.token, floor(extract(epoch FROM l.expires - t.now) * 1000)::bigint AS ttl_ms,
      l.holder, l.metadata::text AS metadata, 0::bigint AS k
    FROM {p}_locks l, t WHERE l.name = p_name AND l.owner IS NOT NULL AND l.expires > t.now
    UNION ALL
    SELECT false, w.owner, 0::bigint, floor(extract(epoch FROM w.expires - t.now) * 1000)::bigint,
      w.holder, w.metadata::text, w.seq
    FROM {p}_waiters w, t WHERE w.name = p_name AND w.expires > t.now
  ) a ORDER BY a.held DESC, a.k
$$;
