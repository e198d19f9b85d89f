-- fencelock refresh: extend the lock key only if it is this acquisition's.
-- KEYS[1] lock key; ARGV[1] "<owner>:" (the value's prefix), ARGV[2] TTL in ms.
-- Returns 1 if extended, 0 if the key is gone or someone else's (never
-- re-creates it).
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
