-- fencelock revoke: an operator ends the acquisition holding token, as an
-- expiry would, and hands the lock over to the next waiter.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] queue, KEYS[4] queue
-- expiries. ARGV[1] ":<token>" (the value's suffix), ARGV[2] the wake
-- channels' prefix, ARGV[3] "1" for the clock floor, ARGV[4] "1" to grant
-- directly (see hand_over).
-- Returns 1 if deleted, 0 if the key was gone or held with another token.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, -#ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
purge(KEYS[3], KEYS[4], now_ms())
hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4])
return 1
