-- {p}_acquire_v1 takes lock p_name for the acquisition p_owner
-- ("<Locker id>.<n>"), or queues it. p_mode: 0 try (never queue), 1 join
-- the queue, 2 stay in it (the acquisition's queue row must still be there,
-- else it is lost). A grant, or finding the lock already this owner's (a
-- promotion whose notification was missed), sets expires to now + p_ttl_ms.
-- Returns r_status 'granted' with r_token; 'held' (mode 0); 'queued' with
-- r_wait_ms, the ms until the holder's lease ends (the waiter's fallback
-- timer); or 'lost' (mode 2: the queue row lapsed or was revoked). A lock
-- whose holder's lease lapsed is free once its lock-delay has passed too
-- (see {p}_delay_v1), and r_wait_ms counts it.
-- A grant's token is the larger of the lock's last token + 1 and the
-- server's clock in microseconds (the clock floor, see the package doc's
-- Tokens), so that a promoted standby that lost the last grants does not
-- hand their tokens out again.
CREATE OR REPLACE FUNCTION {p}_acquire_v1(p_name text, p_owner text, p_ttl_ms bigint, p_mode integer,
    p_holder text, p_metadata text, OUT r_status text, OUT r_token bigint, OUT r_wait_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  l {p}_locks%ROWTYPE;
  t timestamptz;
  ttl interval := p_ttl_ms * interval '1 millisecond';
  head text;
BEGIN
  -- The statements below rely on READ COMMITTED: each sees what committed
  -- before it, and a row lock waited for is followed by its newest
  -- version. Under REPEATABLE READ or SERIALIZABLE (a database's or role's
  -- default_transaction_isolation) they would fail with 40001 or read a
  -- stale queue, so refuse with SQLSTATE ZF001 instead.
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION USING ERRCODE = 'ZF001',
      MESSAGE = 'fencelock: the transaction isolation is ' || current_setting('transaction_isolation')
        || ', the lock functions need read committed',
      HINT = 'set default_transaction_isolation to ''read committed'' for the Lockers'' role or database (ALTER ROLE ... SET default_transaction_isolation = ''read committed'')';
  END IF;
  r_wait_ms := 0;
  IF p_mode <> 2 THEN
    -- A free or lapsed lock with an empty queue: granted by this one
    -- UPDATE. Its conditions are all on the lock's row, which it locks; if
    -- a concurrent grant or waiter changed the row meanwhile, PostgreSQL
    -- checks them again on the row's newest version (a subquery on the
    -- queue would see only this statement's snapshot, and could let a
    -- waiter that queued meanwhile be overtaken).
    t := clock_timestamp();
    UPDATE {p}_locks SET owner = p_owner, token = greatest(token + 1, floor(extract(epoch FROM t) * 1000000)::bigint),
      expires = t + ttl, granted = t, holder = p_holder, metadata = p_metadata::jsonb
    WHERE name = p_name AND NOT queued AND (owner IS NULL OR expires + {p}_delay_v1(owner) <= t)
    RETURNING token INTO r_token;
    IF FOUND THEN
      r_status := 'granted';
      RETURN;
    END IF;
  END IF;
  r_token := 0;
  IF p_mode = 0 THEN
    -- A TryAcquire of a lock that another acquisition holds, as far as
    -- what has committed shows, answers without waiting for the row lock:
    -- a renewal whose commit waits for a synchronous standby that is away
    -- holds it until the standby answers.
    SELECT * INTO l FROM {p}_locks WHERE name = p_name;
    t := clock_timestamp();
    IF FOUND AND l.owner <> p_owner AND l.expires + {p}_delay_v1(l.owner) > t THEN
      r_status := 'held';
      r_wait_ms := greatest(ceil(extract(epoch FROM l.expires + {p}_delay_v1(l.owner) - t) * 1000), 0);
      RETURN;
    END IF;
  END IF;
  SELECT * INTO l FROM {p}_locks WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO {p}_locks (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    SELECT * INTO l FROM {p}_locks WHERE name = p_name FOR UPDATE;
  END IF;
  t := clock_timestamp();
  IF l.owner = p_owner AND l.expires > t THEN
    UPDATE {p}_locks SET expires = t + ttl WHERE name = p_name;
    r_status := 'granted';
    r_token := l.token;
    RETURN;
  END IF;
  IF l.owner IS NULL OR l.expires + {p}_delay_v1(l.owner) <= t THEN
    SELECT owner INTO head FROM {p}_waiters WHERE name = p_name AND seq > l.served AND expires > t ORDER BY seq LIMIT 1;
    IF head IS NULL AND p_mode = 2 THEN
      r_status := 'lost';
      RETURN;
    END IF;
    IF head IS NULL OR head = p_owner THEN
      IF head IS NOT NULL THEN
        DELETE FROM {p}_waiters WHERE name = p_name AND owner = p_owner;
      ELSIF l.queued THEN
        -- No live waiter above served: the rows there have all lapsed
        -- (a lapsed row is never renewed), and go before queued is
        -- cleared, as promote_v1 deletes them when it finds none.
        DELETE FROM {p}_waiters WHERE name = p_name AND seq > l.served;
      END IF;
      -- With no live waiter the queue is empty now (queued false); with
      -- this one at its head, others may wait behind it.
      UPDATE {p}_locks SET owner = p_owner, token = greatest(token + 1, floor(extract(epoch FROM t) * 1000000)::bigint),
        expires = t + ttl, granted = t, holder = p_holder, metadata = p_metadata::jsonb, queued = queued AND head IS NOT NULL
      WHERE name = p_name
      RETURNING token INTO r_token;
      r_status := 'granted';
      RETURN;
    END IF;
    -- Free, but an earlier waiter is first in line: it gets the lock.
    PERFORM {p}_promote_v1(p_name, t);
    SELECT * INTO l FROM {p}_locks WHERE name = p_name;
  END IF;
  r_wait_ms := greatest(ceil(extract(epoch FROM l.expires + {p}_delay_v1(l.owner) - t) * 1000), 0);
  IF p_mode = 0 THEN
    r_status := 'held';
    RETURN;
  END IF;
  IF p_mode = 1 THEN
    -- Queue rows of waiters that stopped renewing (crashed) are skipped,
    -- and deleted by the grant that passes them (promote_v1) or finds no
    -- live waiter (promote_v1, or the grant above). This is an
    -- acquisition's first statement: its owner id is new, so the
    -- conflict is only a retry of this same statement.
    INSERT INTO {p}_waiters (name, owner, expires, since, holder, metadata)
    VALUES (p_name, p_owner, t + ttl, t, p_holder, p_metadata::jsonb)
    ON CONFLICT (name, owner) DO UPDATE SET expires = EXCLUDED.expires;
    IF NOT l.queued THEN
      UPDATE {p}_locks SET queued = true WHERE name = p_name;
    END IF;
  ELSE
    UPDATE {p}_waiters SET expires = t + ttl WHERE name = p_name AND owner = p_owner AND expires > t;
    IF NOT FOUND THEN
      r_status := 'lost';
      RETURN;
    END IF;
  END IF;
  r_status := 'queued';
END $$;
