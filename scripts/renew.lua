-- lockwatch renew: extends each lock only while it still holds our value.
-- KEYS[i] is a lock key; ARGV[2i-1] the value we hold it with, ARGV[2i] the
-- TTL in milliseconds. Per key the reply is 1 (renewed), 0 (the key is
-- gone) or -1 (the key holds another value or another type). It never
-- creates a key and never changes a value: PEXPIRE runs only on a key that
-- exists with our value.
local res = {}
for i = 1, #KEYS do
  local cur = redis.pcall("GET", KEYS[i])
  if cur == ARGV[2 * i - 1] then
    res[i] = redis.call("PEXPIRE", KEYS[i], ARGV[2 * i])
  elseif cur == false then
    res[i] = 0
  else
    res[i] = -1
  end
end
return res
