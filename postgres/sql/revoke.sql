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
  IF current_setting('transaction_isolation') <> 'read committed' THEN -- see {p}_acquire_v1
    RAISE EXCEPTION USING ERRCODE = 'ZF001',
      MESSAGE = 'fencelock: the transaction isolation is ' || current_setting('transaction_isolation')
        || ', the lock functions need read committed',
      HINT = 'set default_transaction_isolation to ''read committed'' for the Lockers'' role or database (ALTER ROLE ... SET default_transaction_isolation = ''read committed'')';
  END IF;
  SELECT * INTO l FROM {p}_locks WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  t := clock_timestamp();
  IF l.owner IS NOT NULL AND (l.owner = p_owner OR p_owner IS NULL AND l.token = p_token) THEN
    IF {p}_delay_v1(l.owner) > interval '0' THEN
      -- A holder with a lock-delay: its lease ends now, as by expiry, and
      -- the lock is free once the delay has passed (see {p}_delay_v1).
      UPDATE {p}_locks SET expires = least(expires, t) WHERE name = p_name;
    ELSE
      PERFORM {p}_promote_v1(p_name, t);
    END IF;
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
