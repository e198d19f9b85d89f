-- fencelock revoke: an operator ends the acquisition holding token, as an
-- expiry would, and tells the next waiter.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue expiries; ARGV[1]
-- ":<token>" (the value's suffix), ARGV[2] the wake channels' prefix.
-- Returns 1 if deleted, 0 if the key was gone or held with another token.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, -#ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
purge(KEYS[2], KEYS[3], now_ms())
wake_next(KEYS[2], ARGV[2])
return 1
