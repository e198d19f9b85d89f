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

-- Mixed fleets. Another tool's clients (redsync, bsm/redislock) take the
-- lock key with SET NX whenever they find it free, and never queue; a
-- release of ours hands the key straight to our next waiter, so while our
-- queue is never empty they would never find it free. So once a foreign
-- holder was seen on a lock (seen_foreign: its mark key exists, for
-- foreign_memory ms after the last sighting), the first handoff at least
-- an interval after the key was last free instead leaves the key free for
-- a gap (gap_due): our waiters take nothing while the gap key lives,
-- theirs can. Without a mark, a handoff costs one GET more.

-- foreign_memory is how long (ms) a lock stays marked after a foreign
-- holder was last seen on it.
local foreign_memory = '600000'

-- foreign_recent is how long (ms) after a foreign holder was last seen
-- (the mark's PTTL tells: it is set to foreign_memory at each sighting) a
-- gap lasts three times gap_ms, for foreign clients that wait at once: a
-- gap of one retry interval (gap_ms is longer than the foreign clients')
-- is sure to serve one of them only, and one whose retry fails while
-- another holds the key (which that one may take again and again, back
-- to back) retries at least twice more in a gap three times as long.
local foreign_recent = 60000

-- seen_foreign marks the lock whose foreign-holder mark is mark with the
-- time the key was last free, now (server ms): a foreign holder has the
-- key, so it was free when it took it. During a gap (the mark says the
-- key is free until a later time) the gap's end stays: a foreign client
-- taking the key in the gap must not end it for our waiters, or the next
-- release of ours would hand the key on inside it.
local function seen_foreign(mark, now)
  local free = tonumber(redis.call('GET', mark) or '0')
  redis.call('SET', mark, math.max(free, now), 'PX', foreign_memory)
end

-- gap_due reports whether a handoff at now on a lock marked by
-- seen_foreign (with always == '1', one not marked is marked now, as if
-- seen) comes at least every ms (digits; '0': never) after the key was
-- last free: then the gap key lives for gap_ms (three times that within
-- foreign_recent of the last sighting), the mark says the key is free
-- until the gap ends, and the key must be left free. During a gap (a
-- waiter that was woken for it released meanwhile) the key is left free
-- too.
local function gap_due(mark, gap, every, gap_ms, always, now)
  if every == '0' then
    return false
  end
  local free = redis.call('GET', mark)
  if not free then
    if always == '1' then
      seen_foreign(mark, now)
    end
    return false
  end
  local since = now - tonumber(free)
  if since < 0 then
    return true
  end
  if since < tonumber(every) then
    return false
  end
  local ms = tonumber(gap_ms)
  if redis.call('PTTL', mark) > tonumber(foreign_memory) - foreign_recent then
    ms = 3 * ms
  end
  redis.call('SET', mark, now + ms, 'KEEPTTL')
  redis.call('SET', gap, '1', 'PX', ms)
  return true
end

-- hand_over gives the free lock to the next waiter, if any: with direct ==
-- '1' it grants it (the TTL is the one in the owner id,
-- "<locker>.<seq>[D<delay ms>].<ttl ms>") and sends "<owner>:<token>"; otherwise (or
-- for an owner id without a TTL) it only sends "<owner>", and the waiter
-- takes the lock with its own script. With fair ({mark, gap, every,
-- gap_ms, always, now}: see gap_due), a handoff that is due for a gap only
-- sends "<owner>": the waiter's script then tells it how long the gap
-- lasts.
local function hand_over(lock, counter, q, e, wake_prefix, floor, direct, fair)
  local h = head(q)
  if not h or delayed(lock) then
    -- In a lock-delay, the head's own attempt takes the lock once it
    -- ends (its wait is the marker's time left).
    return
  end
  if fair and gap_due(fair[1], fair[2], fair[3], fair[4], fair[5], fair[6]) then
    wake(wake_prefix, h, h)
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
