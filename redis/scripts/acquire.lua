-- fencelock acquire: take the lock key if it is free and no earlier waiter
-- is in line, and issue a token; otherwise (when asked to) join the queue.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] queue, KEYS[4] queue
-- expiries, KEYS[5] the foreign-holder mark and KEYS[6] the gap key (see
-- gap_due in queue.lua), KEYS[7] this acquisition's end mark (see
-- release.lua), KEYS[8] an election candidate's value key (absent for a
-- lock: see keep_value).
-- ARGV[1] owner (this acquisition's id), ARGV[2] TTL in ms,
-- ARGV[3] what to do with the queue when not granted: "0" nothing, "1" join
-- it, "2" renew the entry an earlier attempt made; ARGV[4] "1" for the
-- clock floor, ARGV[5] the wake channels' prefix, ARGV[6] "1" to grant a
-- free lock to an earlier waiter directly (see hand_over); with KEYS[8]:
-- ARGV[7] the candidate's value, ARGV[8] its value key's lifetime in ms.
-- A candidate's value is stored (or kept) whenever the acquisition is
-- granted or queued, never when it is refused without queueing or fails.
-- Returns the token when granted (a string of digits: a bulk reply, the
-- shortest for the server to write), {0, ms, next, foreign} when not: next
-- is 1 if no earlier waiter is in line, ms how long the lock key will still
-- live (-1: no expiry), and foreign 1 if the key holds a value that is not
-- fencelock's (another tool's holder, whose release publishes nothing: the
-- waiter polls); while a gap leaves the free key to other tools (see
-- gap_due in queue.lua), ms is the time left to the gap and foreign 0;
-- else next and foreign are 0 and ms is the time left to
-- the first waiter's entry (it may have crashed); {-1} if ARGV[3] is "2" and the
-- entry is gone (it lapsed, or an operator removed it), or if the
-- acquisition has ended (a late copy of an attempt it gave up on). A free
-- lock in a lock-delay (see delayed in token.lua) is granted to nobody:
-- ms is then the time left to the delay's end.
local owner = ARGV[1]
if redis.call('GET', KEYS[7]) then
  return {-1}
end
local v = redis.call('GET', KEYS[1])
-- Fast path: a free lock and an empty queue (so no entry to purge, and
-- none of ours to drop) is granted at once.
if not v and ARGV[3] ~= '2' and not redis.call('ZRANGE', KEYS[3], '0', '0')[1] and not delayed(KEYS[1]) then
  if KEYS[8] then
    -- A candidate's first attempt: its value key is new.
    redis.call('SET', KEYS[8], ARGV[7], 'PX', ARGV[8])
  end
  return issue(KEYS[1], KEYS[2], owner, ARGV[2], ARGV[4])
end
--#queue.lua

-- keep_value stores an election candidate's value v in its value key k
-- for ms, or, if an earlier attempt of the acquisition stored it, extends
-- its expiry and leaves the value (a Proclaim may have replaced it since,
-- and a late copy of an attempt must not undo that); nothing for a lock
-- (k nil). A value key lives twice its acquisition's TTL past its last
-- renewal, so that it outlives the lock key or queue entry it belongs to:
-- a release grants the next waiter a lock key that lives one TTL from the
-- grant, which comes less than one TTL after the waiter's last renewal.
local function keep_value(k, v, ms)
  if k and not redis.call('SET', k, v, 'NX', 'PX', ms) then
    redis.call('PEXPIRE', k, ms)
  end
end

local ttl = tonumber(ARGV[2])
local now = now_ms()
purge(KEYS[3], KEYS[4], now)
local mine = token_of(v, owner)
local fv = foreign(v)
if fv == 1 then
  seen_foreign(KEYS[5], now)
end
if mine then
  -- Ours already: a retry of an attempt whose reply was lost, or a grant
  -- by a release whose message this waiter has not seen.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  renew_delay(KEYS[1], owner, ttl)
  dequeue(KEYS[3], KEYS[4], owner)
  keep_value(KEYS[8], ARGV[7], ARGV[8])
  return string.sub(v, #owner + 2)
end
if ARGV[3] == '2' and not redis.call('ZSCORE', KEYS[3], owner) then
  return {-1}
end
-- The time left to a gap (PTTL: -2 if there is none).
local gap = -2
if not v then
  gap = redis.call('PTTL', KEYS[6])
end
if not v and gap <= 0 and not delayed(KEYS[1]) then
  local h = head(KEYS[3])
  if not h or h == owner then
    dequeue(KEYS[3], KEYS[4], owner)
    keep_value(KEYS[8], ARGV[7], ARGV[8])
    return issue(KEYS[1], KEYS[2], owner, ARGV[2], ARGV[4])
  end
  -- Free, but it is an earlier waiter's turn (its holder expired, or the
  -- entries ahead of it lapsed, and nobody told it).
  hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[5], ARGV[4], ARGV[6])
end
if ARGV[3] ~= '0' then
  enqueue(KEYS[3], KEYS[4], owner, ttl, now)
  keep_value(KEYS[8], ARGV[7], ARGV[8])
end
local h = head(KEYS[3])
if gap > 0 then
  -- Left free for other tools' clients: try again after the gap.
  local next = 0
  if h == owner or not h then
    next = 1
  end
  return {0, gap, next, 0}
end
if h == owner or not h then
  local ms = redis.call('PTTL', KEYS[1])
  if ms == -2 then
    -- Free, in a lock-delay: its turn comes when the marker expires.
    ms = redis.call('PTTL', KEYS[1] .. ':delay')
  end
  return {0, ms, 1, fv}
end
return {0, left(KEYS[4], h, now), 0, 0}
