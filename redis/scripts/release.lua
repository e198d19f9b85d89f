-- fencelock release: delete the lock key if it is this acquisition's, drop
-- its queue entry if any, and tell the next waiter when the lock is free.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue expiries; ARGV[1] owner,
-- ARGV[2] the wake channels' prefix.
-- Returns 1 if the lock key was deleted, 0 if it was gone or someone else's.
local owner = ARGV[1]
local v = redis.call('GET', KEYS[1])
local p = owner .. ':'
if v and string.sub(v, 1, #p) == p then
  redis.call('DEL', KEYS[1])
  purge(KEYS[2], KEYS[3], now_ms())
  wake_next(KEYS[2], ARGV[2])
  return 1
end
local was_next = head(KEYS[2]) == owner
dequeue(KEYS[2], KEYS[3], owner)
if not v and (purge(KEYS[2], KEYS[3], now_ms()) > 0 or was_next) then
  -- A free lock that was promised to us (or to waiters that lapsed): the
  -- next waiter may not know.
  wake_next(KEYS[2], ARGV[2])
end
return 0
