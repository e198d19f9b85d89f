-- {p}_renew_v1 extends the acquisition p_owner of lock p_name by p_ttl_ms
-- from now, only where it is still this acquisition's: the lock row if it
-- holds ('held', with its token: also when it was promoted while waiting),
-- else its queue row ('queued'; 'free' if the lock has no live holder, so
-- that the waiter tries again at once). A row that lapsed is never revived:
-- 'lost'.
CREATE OR REPLACE FUNCTION {p}_renew_v1(p_name text, p_owner text, p_ttl_ms bigint,
    OUT r_status text, OUT r_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
  l {p}_locks%ROWTYPE;
  t timestamptz;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN -- see {p}_acquire_v1
    RAISE EXCEPTION USING ERRCODE = 'ZF001',
      MESSAGE = 'fencelock: the transaction isolation is ' || current_setting('transaction_isolation')
        || ', the lock functions need read committed',
      HINT = 'set default_transaction_isolation to ''read committed'' for the Lockers'' role or database (ALTER ROLE ... SET default_transaction_isolation = ''read committed'')';
  END IF;
  r_token := 0;
  SELECT * INTO l FROM {p}_locks WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    r_status := 'lost';
    RETURN;
  END IF;
  t := clock_timestamp();
  IF l.owner = p_owner THEN
    IF l.expires > t THEN
      UPDATE {p}_locks SET expires = t + p_ttl_ms * interval '1 millisecond' WHERE name = p_name;
      r_status := 'held';
      r_token := l.token;
    ELSE
      r_status := 'lost';
    END IF;
    RETURN;
  END IF;
  UPDATE {p}_waiters SET expires = t + p_ttl_ms * interval '1 millisecond'
  WHERE name = p_name AND owner = p_owner AND expires > t;
  IF NOT FOUND THEN
    r_status := 'lost';
  ELSIF l.owner IS NULL OR l.expires + {p}_delay_v1(l.owner) <= t THEN
    r_status := 'free';
  ELSE
    r_status := 'queued';
  END IF;
END $$;
