-- lockwatch renew: extends each lock only while it still holds our value.
-- It never creates a key and never changes a value: it sets an expiry
-- only on keys that exist with our value (PEXPIRE; on Redis 7 and newer
-- PEXPIREAT, see below). On Redis 7 and newer it never shortens a TTL
-- either (GT), so a renewal that reaches Redis after the holder's own
-- refresh to a longer TTL changes nothing.
--
-- KEYS are the locks' keys. ARGV[1] says how the other arguments are laid
-- out; in upper case ("S", "P", "M") it says that the values are SHA1
-- digests (hex) of the values the locks are held with, sent instead of
-- long values, and compared with redis.sha1hex of the values Redis holds:
--   "s"  one key per lock; ARGV[2..n+1] the values; ARGV[n+2] one TTL in
--        milliseconds for every lock
--   "p"  one key per lock; ARGV[2..n+1] the values; ARGV[n+2..2n+1] a TTL
--        per lock
--   "m"  locks over one or more keys, their keys consecutive in KEYS; per
--        lock three arguments: its number of keys, its value, its TTL. A
--        lock is renewed only when every one of its keys holds its value.
-- When every lock was renewed the reply is the number of locks (the usual
-- case, and the cheapest to send). Otherwise it is one integer per lock:
-- 1 renewed, 0 gone (a key does not exist), -1 taken (a key holds another
-- value or is not a string).
-- Values are read with MGET, at most 1000 keys a call (MGET answers nil
-- for a key of another type; EXISTS then tells it from a missing key).
local mode = ARGV[1]
local hashed = mode == "S" or mode == "P" or mode == "M"
local gt = (redis.REDIS_VERSION_NUM or 0) >= 0x070000
local n = #KEYS
local res = nil
-- On Redis 7 and newer a key is renewed with PEXPIREAT ... GT to the
-- server's time when the script began (TIME) plus the TTL: the command
-- Redis itself turns each PEXPIRE into for its replicas and its AOF, so it
-- is spared that rewrite of every command (about 8 % of the CPU a call
-- costs it, BENCHMARKS.md, Throughput). The script begins after the call
-- was sent, so no key expires before the send time plus the TTL, the
-- expiry the watchdog counts on. GT refuses an expiry earlier than the
-- key's own; one already past (a server stopped in the middle of a script
-- for longer than the TTL) is refused while the key's own expiry is
-- later, and otherwise ends the key at once, as its own expiry would.
-- Where TIME is refused (a renamed command, an ACL) the script uses
-- PEXPIRE ... GT; where PEXPIREAT is (an ACL that admits PEXPIRE only),
-- the first key of the call finds out and the rest use PEXPIRE ... GT.
local now = nil
if gt then
  local t = redis.pcall("TIME")
  if type(t) == "table" and t[1] and t[2] then
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
end
local tried = false -- whether a PEXPIREAT of this call went through

-- expire renews key k for ttl milliseconds (a string).
local function expire(k, ttl)
  if now and tried then
    redis.call("PEXPIREAT", k, string.format("%d", now + tonumber(ttl)), "GT")
    return
  end
  if now then
    local r = redis.pcall("PEXPIREAT", k, string.format("%d", now + tonumber(ttl)), "GT")
    if type(r) ~= "table" or not r.err then
      tried = true
      return
    end
    now = nil
  end
  if gt then
    redis.call("PEXPIRE", k, ttl, "GT")
  else
    redis.call("PEXPIRE", k, ttl)
  end
end

-- answer records lock i's result r: the reply stays the number of locks
-- while every lock so far was renewed, and turns into one result per lock
-- at the first that was not.
local function answer(i, r)
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

-- holds reports whether v, a value Redis holds (false for none), is the
-- lock's: want is the value, or its digest.
local function holds(v, want)
  if hashed then
    return v ~= false and redis.sha1hex(v) == want
  end
  return v == want
end

if mode == "m" or mode == "M" then
  local cur = {}
  for from = 1, n, 1000 do
    local to = math.min(from + 999, n)
    local got = redis.call("MGET", unpack(KEYS, from, to))
    for i = from, to do
      cur[i] = got[i - from + 1]
    end
  end
  local locks, k = 0, 1
  for a = 2, #ARGV - 2, 3 do
    locks = locks + 1
    local last = k + tonumber(ARGV[a]) - 1
    local val, ttl = ARGV[a + 1], ARGV[a + 2]
    local r = 1
    for i = k, last do
      local v = cur[i]
      if not holds(v, val) then
        if v == false and redis.call("EXISTS", KEYS[i]) == 0 then
          if r == 1 then r = 0 end
        else
          r = -1
        end
      end
    end
    if r == 1 then
      for i = k, last do
        expire(KEYS[i], ttl)
      end
    end
    answer(locks, r)
    k = last + 1
  end
  return res or locks
end

local shared = mode == "s" or mode == "S"
for from = 1, n, 1000 do
  local to = math.min(from + 999, n)
  local got = redis.call("MGET", unpack(KEYS, from, to))
  -- all: every key of this MGET holds its lock's value (compared as
  -- values, not digests), as in almost every call; then the keys are
  -- renewed in a loop that does nothing else, for about 6 % less of
  -- Redis's CPU a call than the loop below (BENCHMARKS.md, Throughput).
  local all = not res and not hashed
  if all then
    for j = 1, #got do
      if got[j] ~= ARGV[from + j] then
        all = false
        break
      end
    end
  end
  if all then
    if shared then
      local ttl, first = ARGV[n + 2], from
      if not tried then
        expire(KEYS[first], ttl)
        first = first + 1
      end
      if now then
        local at = string.format("%d", now + tonumber(ttl))
        for i = first, to do
          redis.call("PEXPIREAT", KEYS[i], at, "GT")
        end
      else
        for i = first, to do
          expire(KEYS[i], ttl)
        end
      end
    else
      for i = from, to do
        expire(KEYS[i], ARGV[n + 1 + i])
      end
    end
  else
    for i = from, to do
      local v = got[i - from + 1]
      local r = 1
      if holds(v, ARGV[i + 1]) then
        local ttl
        if shared then
          ttl = ARGV[n + 2]
        else
          ttl = ARGV[n + 1 + i]
        end
        expire(KEYS[i], ttl)
      elseif v == false and redis.call("EXISTS", KEYS[i]) == 0 then
        r = 0
      else
        r = -1
      end
      answer(i, r)
    end
  end
end
return res or n
