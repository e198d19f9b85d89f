-- fencelock token: the function that issues tokens, which every script
-- starts with (the acquire script's fast path, before the queue's
-- functions, needs it; see queue.lua).

-- delay_of returns the lock-delay in ms of an acquisition whose owner id
-- carries one ("<locker>.<seq>D<delay ms>.<ttl ms>"), else nil.
local function delay_of(owner)
  local d = string.match(owner, 'D(%d+)%.')
  if d then
    return tonumber(d)
  end
  return nil
end

-- renew_delay keeps the lock-delay marker of owner, which holds lock,
-- for ttl + its delay (ms, numbers): it outlives the lock key by the delay.
local function renew_delay(lock, owner, ttl)
  local d = delay_of(owner)
  if d then
    redis.call('SET', lock .. ':delay', owner, 'PX', ttl + d)
  end
end

-- delayed reports whether the lock whose key is lock is in the lock-delay
-- of a holder whose lease ended other than by its release: its marker
-- (lock .. ':delay', under the lock's hash tag) lives on. A free lock is
-- granted to nobody then.
local function delayed(lock)
  -- PTTL, not EXISTS: the minimal ACL (see the package documentation)
  -- allows it already.
  return redis.call('PTTL', lock .. ':delay') ~= -2
end

-- issue sets the lock key to owner with a new token, for ms milliseconds
-- (a string of digits, as the scripts' arguments are), and returns the
-- token as a string of digits: the counter's next value, or with floor ==
-- '1' at least the server's clock in microseconds (the counter raised to
-- it). Numbers are kept as strings where they can be: Redis turns a Lua
-- number given to redis.call into a string with printf, and tonumber
-- parses with strtod, together a sizeable share of a grant's server time.
local function issue(lock, counter, owner, ms, floor)
  local t
  if floor == '1' then
    local tm = redis.call('TIME')
    -- The clock in microseconds, as digits: seconds, then microseconds
    -- padded to 6.
    local us = tm[1] .. string.sub('00000' .. tm[2], -6)
    local c = redis.call('GET', counter)
    if not c or not string.find(c, '%D') and (#c < #us or #c == #us and c < us) then
      -- The counter (digits only, so compared as numbers by length, then
      -- as text) is behind the clock, as it is unless grants come faster
      -- than one per microsecond: raised to it.
      t = us
      redis.call('SET', counter, t)
    else
      local n = redis.call('INCR', counter)
      if n < tonumber(us) then
        n = tonumber(us)
        redis.call('SET', counter, us)
      end
      t = string.format('%d', n)
    end
  else
    t = string.format('%d', redis.call('INCR', counter))
  end
  redis.call('SET', lock, owner .. ':' .. t, 'PX', ms)
  -- The holder's lock-delay marker, renewed with the lock key and deleted
  -- by its clean release.
  renew_delay(lock, owner, tonumber(ms))
  return t
end
