-- fencelock values: the election candidates' values that a status shows.
-- KEYS: value keys (see keep_value in acquire.lua). Returns their values in
-- the same order, false for a key that is gone (its acquisition ended).
-- A script, not MGET, so that the user needs no command beyond GET.
local values = {}
for i, k in ipairs(KEYS) do
  values[i] = redis.call('GET', k)
end
return values
