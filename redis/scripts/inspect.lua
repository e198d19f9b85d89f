-- fencelock status: the lock key's value and remaining TTL, and the queue.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue expiries.
-- Returns {value or false, PTTL in ms, {owner, ms left, owner, ms left, ...}
-- in the order of grants}.
--#queue.lua
local now = now_ms()
local waiters = {}
for _, owner in ipairs(redis.call('ZRANGE', KEYS[2], '0', '-1')) do
  local at = redis.call('ZSCORE', KEYS[3], owner)
  if at and tonumber(at) > now then
    table.insert(waiters, owner)
    table.insert(waiters, tonumber(at) - now)
  end
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), waiters}
