-- {p}_delay_v1 is the lock-delay (backend.WithLockDelay) of the
-- acquisition p_owner: its owner id's third part, in ms
-- ("<Locker id>.<n>.<delay ms>"), zero for an owner id of two parts (no
-- lock-delay) or NULL. A lock whose holder's lease ended other than by its
-- release (owner still set, expires passed) is free only once
-- expires + the delay has passed; a release frees it at once (owner NULL).
CREATE OR REPLACE FUNCTION {p}_delay_v1(p_owner text) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(nullif(split_part(p_owner, '.', 3), '')::bigint, 0) * interval '1 millisecond'
$$;
