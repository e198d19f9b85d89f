-- fencelock revoke: an operator ends the acquisition holding token, as an
-- expiry would, and tells the waiters.
-- KEYS[1] lock key; ARGV[1] ":<token>" (the value's suffix), ARGV[2] release
-- channel. Returns 1 if deleted, 0 if the key was gone or held with another
-- token.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, -#ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '')
return 1
