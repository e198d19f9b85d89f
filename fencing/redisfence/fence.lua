-- fencelock redisfence: check the token, apply the staged writes, record the
-- token, in one script (atomic: Redis runs no other command meanwhile).
-- KEYS[1]   the resource's token key
-- KEYS[2]   the call's record key: it exists once this call was applied
-- KEYS[2+i] the key op i writes
-- ARGV[1]   the token: decimal, no sign, no leading zeros (compared as a
--           string: Lua numbers are doubles and lose integers above 2^53)
-- ARGV[2]   how long the record is kept, in milliseconds
-- then per op: name (SET, DEL, HSET), argument count n, n arguments
-- Returns {1, token} if applied, {2, token} if an earlier run of the same
-- call was (a client's retry after the answer was lost: nothing is applied
-- twice), {0, highest} if the token is stale.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local tok = ARGV[1]
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {2, tok}
end
local cur = redis.call('GET', KEYS[1])
if cur and less(tok, cur) then
  return {0, cur}
end
-- Validate every op before the first write: a script that fails half-way
-- keeps its earlier writes.
local ops = {}
local i, k = 3, 3
while i <= #ARGV do
  local name, n = ARGV[i], tonumber(ARGV[i + 1])
  local key = KEYS[k]
  if name == 'HSET' then
    local t = redis.call('TYPE', key).ok
    if t ~= 'hash' and t ~= 'none' then
      return redis.error_reply('WRONGTYPE redisfence: ' .. key .. ' is not a hash')
    end
  elseif name ~= 'SET' and name ~= 'DEL' then
    return redis.error_reply('ERR redisfence: unknown op ' .. name)
  end
  ops[#ops + 1] = {name, key, i + 2, n}
  i, k = i + 2 + n, k + 1
end
for _, op in ipairs(ops) do
  local args = {}
  for j = op[3], op[3] + op[4] - 1 do args[#args + 1] = ARGV[j] end
  redis.call(op[1], op[2], unpack(args))
end
redis.call('SET', KEYS[1], tok)
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return {1, tok}
