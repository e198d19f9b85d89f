-- {p}_revoke_v1 ends an acquisition of lock p_name as an expiry would: the
-- holder with token p_token (p_owner NULL), or the acquisition p_owner,
-- holding or waiting. A revoked holder's lock goes to the next waiter, and
-- a notification 'r:<owner>' on the acquisition's Locker's channel tells it
-- at once. It returns whether a live acquisition was found.
CREATE OR REPLACE FUNCTION {p}_revoke_v1(p_name text, p_token bigint, p_owner text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  l {p}_locks%ROWTYPE;
  t timestamptz;
  live boolean;
BEGIN
  SELECT * INTO l FROM {p}_locks WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  t := clock_timestamp();
  IF l.owner IS NOT NULL AND (l.owner = p_owner OR p_owner IS NULL AND l.token = p_token) THEN
    PERFORM {p}_promote_v1(p_name, t);
    PERFORM pg_notify('{p}:' || split_part(l.owner, '.', 1), 'r:' || l.owner);
    RETURN l.expires > t;
  END IF;
  IF p_owner IS NULL THEN
    RETURN false;
  END IF;
  DELETE FROM {p}_waiters WHERE name = p_name AND owner = p_owner RETURNING expires > t INTO live;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM pg_notify('{p}:' || split_part(p_owner, '.', 1), 'r:' || p_owner);
  RETURN live;
END $$;
