-- fencelock acquire: take the lock key if it is free and issue a token.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] yield marker
-- ARGV[1] owner (this acquisition's id), ARGV[2] TTL in ms,
-- ARGV[3] "1" if a yield marker refuses this attempt, ARGV[4] "1" for the
-- clock floor (token >= server time in microseconds).
-- Returns {1, token} when granted, {0, ms} when not: ms is how long the
-- lock key (or the yield marker) will still live, -1 if it has no expiry.
local v = redis.call('GET', KEYS[1])
if v then
  local p = ARGV[1] .. ':'
  if string.sub(v, 1, #p) == p then
    -- Ours already: a retry of an attempt whose reply was lost.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(string.sub(v, #p + 1))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if ARGV[3] == '1' then
  local y = redis.call('PTTL', KEYS[3])
  if y > 0 then
    return {0, y}
  end
end
local t = redis.call('INCR', KEYS[2])
if ARGV[4] == '1' then
  local now = redis.call('TIME')
  local us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if t < us then
    t = us
    redis.call('SET', KEYS[2], string.format('%d', us))
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%d', t), 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
return {1, t}
