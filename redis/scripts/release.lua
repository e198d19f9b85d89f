-- fencelock release: delete the lock key if it is this acquisition's and
-- hand the lock over to the next waiter; drop this acquisition's queue
-- entry if any.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] queue, KEYS[4] queue
-- expiries, KEYS[5] the foreign-holder mark and KEYS[6] the gap key (see
-- gap_due in queue.lua), KEYS[7] this acquisition's end mark, KEYS[8] an
-- election candidate's value key (absent for a lock), deleted: the
-- acquisition is over whatever the lock key holds. ARGV[1] owner, ARGV[2]
-- the wake channels' prefix, ARGV[3] "1" for the clock floor, ARGV[4] "1"
-- to grant directly (see hand_over), ARGV[5] how long (ms) to keep the end
-- mark, "0" for none: an acquisition whose last attempt's fate is unknown
-- leaves one, so that the attempt, if it still arrives, takes nothing;
-- ARGV[6] how long (ms) the key of a lock a foreign holder was seen on
-- may go from waiter to waiter of ours before a gap ("0": no gaps),
-- ARGV[7] the gap's length in ms, ARGV[8] "1" to leave gaps whether or
-- not a foreign holder was seen; ARGV[9] "1" for the holder's own
-- release, which lifts its lock-delay, "0" for one after a loss, which
-- leaves it.
-- Returns 1 if the lock key was deleted, 0 if it was gone or someone else's.
local owner = ARGV[1]
if ARGV[5] ~= '0' then
  redis.call('SET', KEYS[7], '1', 'PX', ARGV[5])
end
if KEYS[8] then
  redis.call('DEL', KEYS[8])
end
local v = redis.call('GET', KEYS[1])
local deleted = 0
-- This acquisition's value is "<owner>:<token>" (token_of in queue.lua).
if v and string.sub(v, 1, #owner + 1) == owner .. ':' then
  redis.call('DEL', KEYS[1])
  deleted = 1
  -- The holder's own release lifts its lock-delay; a release after a loss
  -- (ARGV[9] "0") leaves the marker to expire.
  if ARGV[9] == '1' and delay_of(owner) and redis.call('GET', KEYS[1] .. ':delay') == owner then
    redis.call('DEL', KEYS[1] .. ':delay')
  end
end
-- An empty queue holds no entry of ours, none to purge and nobody to
-- hand over to: done, before the queue's functions are defined (a cost of
-- every call).
if not redis.call('ZRANGE', KEYS[3], '0', '0')[1] then
  return deleted
end
--#queue.lua
dequeue(KEYS[3], KEYS[4], owner)
if deleted == 1 or not v then
  local now = now_ms()
  purge(KEYS[3], KEYS[4], now)
  hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4],
    {KEYS[5], KEYS[6], ARGV[6], ARGV[7], ARGV[8], now})
end
return deleted
