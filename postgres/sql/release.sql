-- {p}_release_v1 ends the acquisition p_owner of lock p_name: its queue row
-- goes, and if it holds the lock, the next live waiter is granted it. It
-- returns 'released' (it held, unexpired), 'expired' (it held, but its
-- lease had ended: nobody else was granted the lock meanwhile), or 'none'
-- (it did not hold; a newer holder's row is never touched).
CREATE OR REPLACE FUNCTION {p}_release_v1(p_name text, p_owner text) RETURNS text
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
  -- The holder of a lock nobody waits for: one UPDATE frees it (expires
  -- stays, to tell 'released' from 'expired'; owner NULL is free).
  UPDATE {p}_locks SET owner = NULL, holder = NULL, metadata = NULL
  WHERE name = p_name AND owner = p_owner AND NOT queued
  RETURNING expires > clock_timestamp() INTO live;
  IF FOUND THEN
    RETURN CASE WHEN live THEN 'released' ELSE 'expired' END;
  END IF;
  SELECT * INTO l FROM {p}_locks WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'none';
  END IF;
  t := clock_timestamp();
  IF l.owner IS DISTINCT FROM p_owner THEN
    -- A waiter's release (a holder has no queue row: its grant took it).
    DELETE FROM {p}_waiters WHERE name = p_name AND owner = p_owner;
    RETURN 'none';
  END IF;
  PERFORM {p}_promote_v1(p_name, t);
  IF l.expires > t THEN
    RETURN 'released';
  END IF;
  RETURN 'expired';
END $$;
