-- lockwatch renew: extends each lock only while it still holds our value.
-- KEYS[i] is a lock key and ARGV[i] the value we hold it with. The TTLs in
-- milliseconds follow the values: one per key (ARGV[n+i]), or a single one
-- for every key (ARGV[n+1]) when the call carries n+1 arguments.
-- Per key the reply is 1 (renewed), 0 (the key is gone) or -1 (the key
-- holds another value or is not a string). It never creates a key and never
-- changes a value: PEXPIRE runs only on a key that exists with our value.
-- Values are read with one MGET per 1000 keys (MGET answers nil for a key of
-- another type, which EXISTS then tells from a missing key).
local n = #KEYS
local shared = #ARGV == n + 1
local res = {}
for from = 1, n, 1000 do
  local to = math.min(from + 999, n)
  local cur = redis.call("MGET", unpack(KEYS, from, to))
  for i = from, to do
    local v = cur[i - from + 1]
    if v == ARGV[i] then
      res[i] = redis.call("PEXPIRE", KEYS[i], shared and ARGV[n + 1] or ARGV[n + i])
    elseif v == false and redis.call("EXISTS", KEYS[i]) == 0 then
      res[i] = 0
    else
      res[i] = -1
    end
  end
end
return res
