-- fencelock revoke: an operator ends an acquisition, as an expiry would.
-- The holder (named by its token or its owner id) loses the lock key, and
-- the lock is handed over to the next waiter; a waiter (named by its owner
-- id) loses its queue entry and is woken, so that its next attempt finds
-- the entry gone and fails, and if the lock is free meanwhile the new head
-- of the queue is handed it.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] queue, KEYS[4] queue
-- expiries. ARGV[1] "token" or "owner": what ARGV[2] is, ":<token>" (the
-- value's suffix) or an owner id (the whole value, for a key another
-- library wrote); ARGV[3] the wake channels' prefix, ARGV[4] "1" for the
-- clock floor, ARGV[5] "1" to grant directly (see hand_over).
-- Returns 1 if revoked, 0 if no such acquisition holds or waits.
--#queue.lua
local by, who = ARGV[1], ARGV[2]
purge(KEYS[3], KEYS[4], now_ms())
local v = redis.call('GET', KEYS[1])
local held
if by == 'token' then
  held = v and string.sub(v, -#who) == who
else
  held = v and (v == who or token_of(v, who) ~= nil)
end
if held then
  redis.call('DEL', KEYS[1])
  v = false
elseif by == 'owner' and redis.call('ZSCORE', KEYS[3], who) then
  dequeue(KEYS[3], KEYS[4], who)
  wake(ARGV[3], who, who)
else
  return 0
end
if not v then
  hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5])
end
return 1
