-- lockwatch renew: extends each lock only while it still holds our value.
-- KEYS[i] is a lock key and ARGV[i] the value we hold it with. The TTLs in
-- milliseconds follow the values: one per key (ARGV[n+i]), or a single one
-- for every key (ARGV[n+1]) when the call carries n+1 arguments.
-- When every lock was renewed the reply is n, the number of keys (the usual
-- case, and the cheapest to send). Otherwise it is one integer per key: 1
-- (renewed), 0 (the key is gone) or -1 (the key holds another value or is
-- not a string). It never creates a key and never changes a value: PEXPIRE
-- runs only on a key that exists with our value.
-- Values are read with one MGET per 1000 keys (MGET answers nil for a key of
-- another type, which EXISTS then tells from a missing key).
local n = #KEYS
local shared = #ARGV == n + 1
local res = nil
for from = 1, n, 1000 do
  local to = math.min(from + 999, n)
  local cur = redis.call("MGET", unpack(KEYS, from, to))
  for i = from, to do
    local v = cur[i - from + 1]
    local r
    if v == ARGV[i] then
      local ttl = ARGV[n + i]
      if shared then
        ttl = ARGV[n + 1]
      end
      r = redis.call("PEXPIRE", KEYS[i], ttl)
    elseif v == false and redis.call("EXISTS", KEYS[i]) == 0 then
      r = 0
    else
      r = -1
    end
    if r ~= 1 and not res then
      res = {}
      for j = 1, i - 1 do
        res[j] = 1
      end
    end
    if res then
      res[i] = r
    end
  end
end
return res or n
