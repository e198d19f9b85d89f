-- fencelock waiting queue: functions the acquire, refresh, release, revoke
-- and inspect scripts share (each of them has this file inserted at its
-- line "--#queue.lua", after what it can do without them: defining them
-- is a cost of every call). issue (token.lua) comes before.
-- A lock's queue is two sorted sets under its hash tag: Q maps each waiting
-- acquisition's owner id to its arrival number (the order of grants), E to
-- the server time in ms at which the entry lapses unless renewed (a waiter
-- renews it every TTL/3, so a crashed waiter's entry goes after one TTL).
-- Constant arguments to redis.call are strings ('0', not 0): Redis turns a
-- Lua number into a string with printf, a cost of every call.

-- now_ms is the server's clock in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- purge removes the entries that lapsed by now and returns how many.
local function purge(q, e, now)
  local dead = redis.call('ZRANGEBYSCORE', e, '-inf', now)
  for _, owner in ipairs(dead) do
    redis.call('ZREM', q, owner)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', e, '-inf', now)
  end
  return #dead
end

-- token_of returns the token in lock value v if v is owner's
-- ("<owner>:<token>"), else nil.
local function token_of(v, owner)
  local p = owner .. ':'
  if v and string.sub(v, 1, #p) == p then
    return tonumber(string.sub(v, #p + 1))
  end
  return nil
end

-- foreign returns 1 if lock value v is set but is not a fencelock value
-- ("<locker id (hex)>.<seq>.<ttl ms>:<token>"), else 0: another tool holds
-- the key (redsync's and bsm/redislock's values are base64, with neither
-- '.' nor ':'; an operator's SET), and its release will publish nothing.
-- A value misread either way costs only waiting time, never exclusion.
local function foreign(v)
  if v and not string.match(v, '^%x+%.[%w.]+:%d+$') then
    return 1
  end
  return 0
end

-- head returns the owner next in line, or nil.
local function head(q)
  return redis.call('ZRANGE', q, '0', '0')[1]
end

-- left returns the ms left to owner's entry in expiries e.
local function left(e, owner, now)
  return tonumber(redis.call('ZSCORE', e, owner)) - now
end

-- keep makes key k live at least ms more, so that the queue keys vanish
-- once every entry in them has lapsed.
local function keep(k, ms)
  if redis.call('PTTL', k) < ms then
    redis.call('PEXPIRE', k, ms)
  end
end

-- enqueue puts owner at the tail, or leaves it where it is, and renews its
-- entry for ms.
local function enqueue(q, e, owner, ms, now)
  if not redis.call('ZSCORE', q, owner) then
    local last = redis.call('ZRANGE', q, '-1', '-1', 'WITHSCORES')
    local n = 1
    if last[2] then
      n = tonumber(last[2]) + 1
    end
    redis.call('ZADD', q, n, owner)
  end
  redis.call('ZADD', e, now + ms, owner)
  keep(q, ms)
  keep(e, ms)
end

-- dequeue removes owner's entry, if any.
local function dequeue(q, e, owner)
  redis.call('ZREM', q, owner)
  redis.call('ZREM', e, owner)
end

-- wake publishes msg to the wake channel of owner's Locker (wake_prefix
-- followed by the Locker id, the owner id up to its first '.').
local function wake(wake_prefix, owner, msg)
  redis.call('PUBLISH', wake_prefix .. string.match(owner, '^[^.]*'), msg)
end

-- hand_over gives the free lock to the next waiter, if any: with direct ==
-- '1' it grants it (the TTL is the one in the owner id,
-- "<locker>.<seq>[D<delay ms>].<ttl ms>") and sends "<owner>:<token>"; otherwise (or
-- for an owner id without a TTL) it only sends "<owner>", and the waiter
-- takes the lock with its own script.
local function hand_over(lock, counter, q, e, wake_prefix, floor, direct)
  local h = head(q)
  if not h or delayed(lock) then
    -- In a lock-delay, the head's own attempt takes the lock once it
    -- ends (its wait is the marker's time left).
    return
  end
  local ms = string.match(h, '%.(%d+)$')
  if direct ~= '1' or not ms or tonumber(ms) <= 0 then
    wake(wake_prefix, h, h)
    return
  end
  dequeue(q, e, h)
  local t = issue(lock, counter, h, ms, floor)
  wake(wake_prefix, h, h .. ':' .. t)
end
