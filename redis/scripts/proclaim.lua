-- fencelock proclaim: replace an election candidate's value while its
-- acquisition holds the lock, keeping its token.
-- KEYS[1] lock key, KEYS[2] the acquisition's value key. ARGV[1] the lock
-- value the acquisition holds, "<owner>:<token>", ARGV[2] the new value,
-- ARGV[3] the value key's lifetime in ms (see keep_value in acquire.lua).
-- Returns 1 if stored, 0 (storing nothing) if the lock key is gone or
-- holds another value: the acquisition no longer holds the lock.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
