-- fencelock refresh: renew this acquisition, held or waiting.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue expiries, KEYS[4] an
-- election candidate's value key (absent for a lock); ARGV[1] owner,
-- ARGV[2] TTL in ms, ARGV[3] with KEYS[4]: the value key's lifetime in ms
-- (see keep_value in acquire.lua), renewed with the lock key or the entry.
-- Returns 1 if the lock key is this acquisition's (its expiry moved to TTL
-- from now; a waiter may have been granted it by a release), 2 if it waits
-- in the queue (its entry renewed), 3 if it waits, is next and the lock is
-- free (it should try now), 0 if it is neither: the lock key is gone or
-- someone else's and no entry of it waits. It never re-creates a vanished
-- key. A holder with a lock-delay renews its marker (see issue) too; a
-- free lock in a lock-delay is not the next waiter's to try yet (2).
--#queue.lua
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
if token_of(v, owner) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  renew_delay(KEYS[1], owner, ttl)
  if KEYS[4] then
    redis.call('PEXPIRE', KEYS[4], ARGV[3])
  end
  return 1
end
local now = now_ms()
purge(KEYS[2], KEYS[3], now)
if not redis.call('ZSCORE', KEYS[2], owner) then
  return 0
end
enqueue(KEYS[2], KEYS[3], owner, ttl, now)
if KEYS[4] then
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
end
if not v and head(KEYS[2]) == owner and not delayed(KEYS[1]) then
  return 3
end
return 2
