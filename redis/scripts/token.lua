-- fencelock token: the function that issues tokens, which every script
-- starts with (the acquire script's fast path, before the queue's
-- functions, needs it; see queue.lua).

-- issue sets the lock key to owner with a new token and returns the token:
-- the counter's next value, or with floor == '1' at least the server's
-- clock in microseconds (the counter raised to it).
local function issue(lock, counter, owner, ms, floor)
  local t = redis.call('INCR', counter)
  if floor == '1' then
    local tm = redis.call('TIME')
    local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
    if t < us then
      t = us
      redis.call('SET', counter, string.format('%d', us))
    end
  end
  redis.call('SET', lock, owner .. ':' .. string.format('%d', t), 'PX', ms)
  return t
end
