-- fencelock acquire: take the lock key if it is free and no earlier waiter
-- is in line, and issue a token; otherwise (when asked to) join the queue.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] queue, KEYS[4] queue
-- expiries. ARGV[1] owner (this acquisition's id), ARGV[2] TTL in ms,
-- ARGV[3] "1" to queue when not granted, ARGV[4] "1" for the clock floor
-- (token >= server time in microseconds), ARGV[5] the wake channels' prefix.
-- Returns {1, token} when granted, {0, ms, next} when not: next is 1 if no
-- earlier waiter is in line, and ms how long the lock key will still live
-- (-1: no expiry); else next is 0 and ms the time left to the first
-- waiter's entry (it may have crashed).
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local purged = purge(KEYS[3], KEYS[4], now)
local v = redis.call('GET', KEYS[1])
if v then
  local p = owner .. ':'
  if string.sub(v, 1, #p) == p then
    -- Ours already: a retry of an attempt whose reply was lost.
    redis.call('PEXPIRE', KEYS[1], ttl)
    dequeue(KEYS[3], KEYS[4], owner)
    return {1, tonumber(string.sub(v, #p + 1))}
  end
  if ARGV[3] == '1' then
    enqueue(KEYS[3], KEYS[4], owner, ttl, now)
  end
  local h = head(KEYS[3])
  if h == owner or not h then
    return {0, redis.call('PTTL', KEYS[1]), 1}
  end
  return {0, left(KEYS[4], h, now), 0}
end
local h = head(KEYS[3])
if h and h ~= owner then
  -- Free, but promised to an earlier waiter.
  if ARGV[3] == '1' then
    enqueue(KEYS[3], KEYS[4], owner, ttl, now)
  end
  if purged > 0 then
    -- The entries ahead lapsed (their waiters crashed): nobody has told
    -- the new head yet.
    wake(ARGV[5], h)
  end
  return {0, left(KEYS[4], h, now), 0}
end
dequeue(KEYS[3], KEYS[4], owner)
local t = redis.call('INCR', KEYS[2])
if ARGV[4] == '1' then
  local tm = redis.call('TIME')
  local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  if t < us then
    t = us
    redis.call('SET', KEYS[2], string.format('%d', us))
  end
end
redis.call('SET', KEYS[1], owner .. ':' .. string.format('%d', t), 'PX', ttl)
return {1, t}
