-- slidewin.redis: leased quotas (docs/redis.md, "Leased quotas"), the part that gives back.
-- KEYS[1] the limiter's state, KEYS[2] the record of the lease granted now (lease_grant),
-- KEYS[3..] records of leases given back. ARGV[1..10] as a decision's (ARGV[3]: how many
-- permits are wanted, 0 = only give back); ARGV[11] the window's limit L, [12] the fewest
-- worth granting, [13] refusals made on slices (counted as BLOCK), [14] a record's ttl (ms),
-- [15..] how many of the lease of KEYS[3..] go back unused.
-- A record "k start at" (k permits, counted at `at` in the bucket starting at `start`, ms)
-- is written once per lease id; " R" is appended once it was given back, so a grant or a
-- give-back retried after a timeout applies once.
local L, need = tonumber(ARGV[11]), tonumber(ARGV[12])
local blocks, rttl = tonumber(ARGV[13]), tonumber(ARGV[14])
local function lease_record(rec)
  local k, s, at, rest = string.match(rec, '^(%S+) (%S+) (%S+)(.*)$')
  if k == nil then return nil end
  return tonumber(k), tonumber(s), tonumber(at), rest == ' R'
end
-- unused permits out of the bucket they were counted in, while that bucket is in the ring
-- (and out of the minute's second, for warm-up's "previous second")
local function refund(start, at, back)
  if back <= 0 then return end
  local i = find(start)
  if i ~= nil then
    local p = num('p' .. i) - back
    if p > 0 then set('p' .. i, p) else del('p' .. i) end
  end
  if minute and at ~= nil then
    local sec = at - at % 1000
    local j = (sec / 1000) % 2
    if get('q' .. j) == sec then
      local w = num('w' .. j) - back
      if w < 0 then w = 0 end
      set('w' .. j, w)
    end
  end
end
for j = 3, #KEYS do
  local rec = redis.call('GET', KEYS[j])
  if rec then
    local k, s, at, done = lease_record(rec)
    if k ~= nil and not done then
      local back = tonumber(ARGV[12 + j]) or 0
      if back > k then back = k end
      refund(s, at, back)
      redis.call('SET', KEYS[j], rec .. ' R', 'PX', rttl)
    end
  end
end
local function save()
  if in_flight > 0 and lease_ms + 1000 > ttl then ttl = lease_ms + 1000 end
  redis.call('SET', K, encode(), 'PX', ttl)
end
