-- {p}_promote_v1 hands lock p_name, whose row the caller has locked, to the
-- first live waiter: its queue row (and the lapsed ones before it) goes, the lock row takes its owner, a new
-- token and the queue row's expiry, and ONE notification on the waiter's
-- Locker's channel names it and its token (one wake-up per release). With
-- no live waiter the lock is free, and its queue known to be empty
-- (queued false). It returns the new owner, or NULL.
CREATE OR REPLACE FUNCTION {p}_promote_v1(p_name text, p_now timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  w {p}_waiters%ROWTYPE;
  tok bigint;
  after bigint;
BEGIN
  SELECT served INTO after FROM {p}_locks WHERE name = p_name;
  SELECT * INTO w FROM {p}_waiters WHERE name = p_name AND seq > after AND expires > p_now ORDER BY seq LIMIT 1;
  IF NOT FOUND THEN
    DELETE FROM {p}_waiters WHERE name = p_name AND seq > after; -- lapsed, all of them
    UPDATE {p}_locks SET owner = NULL, expires = NULL, holder = NULL, metadata = NULL, queued = false WHERE name = p_name;
    RETURN NULL;
  END IF;
  -- The head, and the lapsed rows it passed.
  DELETE FROM {p}_waiters WHERE name = p_name AND seq > after AND seq <= w.seq;
  UPDATE {p}_locks SET owner = w.owner, token = greatest(token + 1, floor(extract(epoch FROM p_now) * 1000000)::bigint),
    expires = w.expires, granted = p_now,
    holder = w.holder, metadata = w.metadata, served = w.seq
  WHERE name = p_name
  RETURNING token INTO tok;
  PERFORM pg_notify('{p}:' || split_part(w.owner, '.', 1), 'g:' || w.owner || ':' || tok);
  RETURN w.owner;
END $$;
