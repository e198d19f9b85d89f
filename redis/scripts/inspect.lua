-- fencelock status: the lock key's value and its remaining TTL.
-- KEYS[1] lock key. Returns {value or false, PTTL in ms}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
