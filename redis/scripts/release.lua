-- fencelock release: delete the lock key only if it is this acquisition's,
-- and tell the waiters.
-- KEYS[1] lock key, KEYS[2] yield marker; ARGV[1] "<owner>:" (the value's
-- prefix), ARGV[2] release channel, ARGV[3] yield window in ms.
-- Returns 1 if deleted, 0 if the key was gone or someone else's.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('PUBLISH', ARGV[2], '') > 0 then
  -- Someone is listening: newcomers (the releaser's next attempt included)
  -- stand back for a moment so that a woken waiter gets the lock.
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
end
return 1
