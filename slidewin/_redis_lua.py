"""The Lua scripts of slidewin.redis: one per behavior, each the common prelude and a body.

The prelude reads the state (one msgpack map in a string: GET, then SET PX), applies the same
window rules as the C core and writes it back; see the README, "Across hosts"."""

PRELUDE = r"""
-- slidewin.redis: one decision of a limiter whose whole state is the string KEYS[1].
-- The same rules as the C core (docs/design.md §2-§5), with the same integers and doubles.
-- Lua numbers are doubles: time is whole ms since the epoch (exact below 2^53) plus the ns
-- within the ms; nanoseconds since the epoch are never formed.
-- ARGV: now_ms now_sub n flags layout ttl_ms interval_ms sample_count lease_id lease_ms
--       then the behavior's parameters (see the BEHAVIOR section at the end).
local K = KEYS[1]
local now_ms, sub
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  local us = tonumber(tm[2])
  now_ms = tonumber(tm[1]) * 1000 + math.floor(us / 1000)
  sub = (us % 1000) * 1000
else
  now_ms = tonumber(ARGV[1]); sub = tonumber(ARGV[2])
end
local n = tonumber(ARGV[3])
local flags = tonumber(ARGV[4])
local layout = ARGV[5]
local ttl = tonumber(ARGV[6])
local IV = tonumber(ARGV[7])
local SC = tonumber(ARGV[8])
local lease_id = ARGV[9]
local lease_ms = tonumber(ARGV[10])
local WIN = IV / SC
local F_TRY, F_PRIO, F_NOBLOCK, F_ENTRY, F_RETRY, F_LEAN, F_MINUTE = 1, 2, 4, 8, 16, 32, 64
local function has(f) return math.floor(flags / f) % 2 == 1 end
local lean = has(F_LEAN)
local minute = not lean or has(F_MINUTE)

-- The state is one msgpack map (GET, then SET PX: two calls). Times are stored relative to
-- the newest bucket start nw (itself stored in windows): bucket starts s<i>, fs<i> in
-- windows, q<j> mn lf pu lm and lease expiries in ms, so they pack in a byte or two.
local raw = redis.call('GET', K)
local h = {}
if raw then
  local ok, d = pcall(cmsgpack.unpack, raw)
  if not ok or type(d) ~= 'table' or type(d.y) ~= 'string' then
    return redis.error_reply('slidewin: ' .. K .. ' holds no slidewin state')
  end
  if d.y ~= layout then return {3, d.y} end
  h = d
  h.y = nil
  local b = 0
  if h.nw then b = h.nw * WIN; h.nw = b end
  for f, v in pairs(h) do
    local c = string.byte(f, 1)
    if c == 76 then v[2] = v[2] + b  -- L<id> = {n, expiry}
    elseif c == 115 and f ~= 'st' then h[f] = b - v * WIN
    elseif c == 102 and string.byte(f, 2) == 115 then h[f] = b + v * WIN
    elseif c == 113 or f == 'mn' or f == 'lf' or f == 'pu' or f == 'lm' then h[f] = b + v end
  end
end
local function get(f) return h[f] end
local function num(f) return h[f] or 0 end
local function set(f, v) h[f] = v end
local function del(f) h[f] = nil end

-- the limiter's window (a ring of SC buckets) and its future ring (§2, §4)
local newest = get('nw')
local function clamp(t)
  if t < 0 then t = 0 end
  local s = t - t % WIN
  if newest ~= nil then
    if s == newest then return t end
    if s < newest then return newest end
  end
  newest = s; set('nw', s)
  return t
end
local function idx(s) return (s / WIN) % SC end
local EV = {'p', 'b', 'x', 'u', 'r', 'o'}  -- pass block exception success rt occupied_pass
local function refresh(t)
  local s = t - t % WIN
  local i = idx(s)
  if get('s' .. i) ~= s then
    set('s' .. i, s)
    for _, e in ipairs(EV) do del(e .. i) end
    del('m' .. i)
    if get('fs' .. i) == s and num('fp' .. i) > 0 then set('p' .. i, num('fp' .. i)) end
  end
  return i
end
local function held_sum(t, e)
  local s = t - t % WIN
  local total = 0
  for i = 0, SC - 1 do
    local st = get('s' .. i)
    if st ~= nil and st <= s and st > s - IV then total = total + num(e .. i) end
  end
  return total
end
local function find(start)  -- the slot holding exactly this start, or nil
  if start < 0 then return nil end
  local i = idx(start)
  if get('s' .. i) == start then return i end
  return nil
end
local function add_sec(e, k, t)
  local i = refresh(t)
  set(e .. i, num(e .. i) + k)
end
-- the minute window, of which only "last whole second's passes" is read (§5 warm-up):
-- two 1 s slots hold exactly what a ring of 60 would answer for the previous second
local mnewest = get('mn')
local function mclamp(t)
  local s = t - t % 1000
  if mnewest ~= nil then
    if s == mnewest then return t end
    if s < mnewest then return mnewest end
  end
  mnewest = s; set('mn', s)
  return t
end
local function add_min_pass(k, t)
  t = mclamp(t)
  local s = t - t % 1000
  local j = (s / 1000) % 2
  if get('q' .. j) ~= s then set('q' .. j, s); set('w' .. j, 0) end
  set('w' .. j, num('w' .. j) + k)
end
local function previous_second_pass(t)
  t = mclamp(t)
  local s = t - t % 1000 - 1000
  if s < 0 then return 0 end
  local j = (s / 1000) % 2
  if get('q' .. j) == s then return num('w' .. j) end
  return 0
end
local function count(e, k, t)
  if lean and e ~= 'p' then return end
  add_sec(e, k, t)
  if e == 'p' and minute then add_min_pass(k, t) end
end
local function ns_until(at_ms)
  local d = (at_ms - now_ms) * 1000000 - sub
  if d < 0 then return 0 end
  return d
end

-- in-flight counts: leases L<id> = {n, expiry ms}; expired ones are dropped
local in_flight = 0
for f, v in pairs(h) do
  if string.byte(f, 1) == 76 then
    if v[2] <= now_ms then h[f] = nil else in_flight = in_flight + v[1] end
  end
end
local function add_lease(k)
  local f = 'L' .. lease_id
  local old = h[f]
  local have = 0
  if old then have = old[1] end
  h[f] = {have + k, now_ms + lease_ms}
  in_flight = in_flight + k
end

local function encode()
  local b = h.nw or 0
  for f, v in pairs(h) do
    if f == 'nw' then h[f] = v / WIN
    else
      local c = string.byte(f, 1)
      if c == 76 then v[2] = v[2] - b
      elseif c == 115 and f ~= 'st' then h[f] = (b - v) / WIN
      elseif c == 102 and string.byte(f, 2) == 115 then h[f] = (v - b) / WIN
      elseif c == 113 or f == 'mn' or f == 'lf' or f == 'pu' or f == 'lm' then h[f] = v - b end
    end
  end
  h.y = layout
  return cmsgpack.pack(h)
end
local function finish(verdict, wait_ns, retry_ns)
  if in_flight > 0 and lease_ms + 1000 > ttl then ttl = lease_ms + 1000 end
  redis.call('SET', K, encode(), 'PX', ttl)
  return {verdict, wait_ns, retry_ns}
end
"""

# helpers shared by the bodies (after the prelude: they use its locals)
_COMMON = r"""
local function nextafter_up(x)
  local _, e = math.frexp(x)
  return x + math.ldexp(1, e - 53)
end
local function conclude(verdict, t, wait, retry, occupied, grant, concurrency)
  if verdict == 1 then
    if occupied then
      if not lean then add_sec('o', n, t) end
      local s = grant - grant % WIN
      local i = idx(s)
      if get('fs' .. i) ~= s then set('fs' .. i, s); set('fp' .. i, 0) end
      set('fp' .. i, num('fp' .. i) + n)
      wait = ns_until(grant)
    else
      count('p', n, t)
    end
    if concurrency or has(F_ENTRY) then add_lease(n) end
  elseif not has(F_NOBLOCK) then
    count('b', n, t)
  end
  return finish(verdict, wait, retry)
end
-- warm-up tokens (docs/design.md §5), synced once per whole second; the allowed rate
local function warm_rate(t, q, warning, maxt, ramp, slope, cold_pass, min_rate)
  local pu = get('pu')
  local busy = pu ~= nil and pu > t - t % 1000 - 1000
  local prev = previous_second_pass(t)
  local sec = t - t % 1000
  local stored = get('st')
  if stored == nil or stored < 0 then stored = maxt; set('st', stored) end
  local lf = get('lf')
  if not (lf ~= nil and sec <= lf) then
    local elapsed = 0
    if lf ~= nil then elapsed = sec - lf end
    local v = stored
    if stored < warning or (stored > warning and prev < cold_pass and not busy) then
      local nv = stored + elapsed * q / 1000
      if nv >= maxt then v = maxt else v = math.floor(nv) end
    end
    if v > maxt then v = maxt end
    v = v - prev
    if v < 0 then v = 0 end
    stored = v
    set('st', v); set('lf', sec)
  end
  local rate = q
  if ramp == 1 and stored >= warning then
    rate = nextafter_up(1.0 / ((stored - warning) * slope + 1.0 / q))
  end
  if rate < min_rate then rate = min_rate end
  return rate
end
local function window_limit(rate)
  if IV == 1000 then return rate end
  return rate * (IV / 1000)
end
"""

# ARGV[11..]: L occupy_timeout_ms
REJECT = PRELUDE + _COMMON + r"""
local L, occ = tonumber(ARGV[11]), tonumber(ARGV[12])
local t = clamp(now_ms)
local v, retry, occupied, grant = 0, -1, false, 0
if L <= 0 then
  v = 2
else
  refresh(t)
  local pass = held_sum(t, 'p')
  if n > L then
    v = 2
  elseif pass + n <= L then
    v = 1
  else
    if has(F_PRIO) and not has(F_TRY) then
      local waiting = 0
      for i = 0, SC - 1 do
        local fs = get('fs' .. i)
        if fs ~= nil and fs > t then waiting = waiting + num('fp' .. i) end
      end
      local w = WIN - t % WIN
      if waiting < L and w < occ then
        local oi = find(t - t % WIN - (SC - 1) * WIN)
        local op = 0
        if oi ~= nil then op = num('p' .. oi) end
        if pass + waiting + n - op <= L then v = 1; occupied = true; grant = t + w end
      end
    end
    if v == 0 and has(F_RETRY) then
      local cur = t - t % WIN
      local gone = 0
      for k = SC - 1, 0, -1 do
        local start = cur - k * WIN
        local i = find(start)
        if i ~= nil then gone = gone + num('p' .. i) end
        if pass - gone + n <= L then
          local at = start + IV - t
          if at < 0 then at = 0 end
          retry = ns_until(t + at)
          break
        end
      end
    end
  end
end
return conclude(v, t, 0, retry, occupied, grant, false)
"""

# ARGV[11]: concurrency
CONCURRENCY = PRELUDE + _COMMON + r"""
local c = tonumber(ARGV[11])
local t = clamp(now_ms)
local v = 0
if n > c then v = 2 elseif in_flight + n <= c then v = 1 end
return conclude(v, t, 0, -1, false, 0, true)
"""

# ARGV[11..]: q L warning max_token ramp slope cold_pass min_rate
WARM_UP = PRELUDE + _COMMON + r"""
local q, L = tonumber(ARGV[11]), tonumber(ARGV[12])
local t = clamp(now_ms)
local v, retry = 0, -1
if q <= 0 then
  v = 2
else
  local rate = warm_rate(t, q, tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15]),
                         tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18]))
  local allowed = window_limit(rate)
  refresh(t)
  local pass = held_sum(t, 'p')
  local pu = get('pu')
  if n > L then
    v = 2
  elseif pu ~= nil and t < pu then
    if has(F_RETRY) then retry = ns_until(pu) end
  elseif pass + n <= allowed then
    v = 1
  elseif pass == 0 then
    v = 1
    set('pu', t + math.ceil(n * 1000 / rate))
  end
end
return conclude(v, t, 0, retry, false, 0, false)
"""

# ARGV[11..]: q max_queue_ns warm(0/1) [warning max_token ramp slope cold_pass min_rate]
THROTTLE = PRELUDE + _COMMON + r"""
local q, maxq, warm = tonumber(ARGV[11]), tonumber(ARGV[12]), ARGV[13] == '1'
local t = clamp(now_ms)
local v, wait, retry = 0, 0, -1
if q <= 0 then
  v = 2
else
  local rate = q
  if warm then
    rate = warm_rate(t, q, tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16]),
                     tonumber(ARGV[17]), tonumber(ARGV[18]), tonumber(ARGV[19]))
  end
  local cost = math.floor(1e9 * n / rate + 0.5)
  local lm, ln = get('lm'), get('ln')
  if lm == nil or (now_ms - lm) * 1000000 + (sub - ln) >= cost then
    set('lm', now_ms); set('ln', sub)
    v = 1
  else
    local w = (lm - now_ms) * 1000000 + (ln - sub) + cost
    if has(F_TRY) then
      retry = w
    elseif w > maxq then
      retry = w - maxq
    else
      local total = ln + cost
      local carry = math.floor(total / 1000000)
      set('lm', lm + carry); set('ln', total - carry * 1000000)
      v = 1; wait = w
    end
  end
end
return conclude(v, t, wait, retry, false, 0, false)
"""

# ARGV[11..]: outcome (0 none, 1 success, 2 exception) rt_ms, then pairs lease_id k
EXIT = PRELUDE + r"""
local outcome, rt = tonumber(ARGV[11]), tonumber(ARGV[12])
local t = 0
if outcome ~= 0 then t = clamp(now_ms) end  -- a bare release touches no window
if outcome == 3 then
  count('b', n, t)
elseif outcome == 1 and not lean then
  add_sec('u', n, t)
  local i = refresh(t)
  set('r' .. i, num('r' .. i) + rt)
  local m = get('m' .. i) or 5000
  if rt < m then set('m' .. i, rt) end
elseif outcome == 2 and not lean then
  add_sec('x', n, t)
end
local given = 0
for a = 13, #ARGV, 2 do
  local f = 'L' .. ARGV[a]
  local k = tonumber(ARGV[a + 1])
  local old = h[f]
  if old then
    local have = old[1]
    local left = have - k
    if left > 0 then
      old[1] = left
      given = given + k
    else
      del(f)
      given = given + have
    end
  end
end
in_flight = in_flight - given
return finish(1, given, 0)
"""

# the window's sums at now: pass block exception success rt occupied min_rt in_flight waiting
STATS = PRELUDE + r"""
local t = clamp(now_ms)
refresh(t)
local r = {}
for _, e in ipairs(EV) do r[#r + 1] = held_sum(t, e) end
local s = t - t % WIN
local m = 5000
for i = 0, SC - 1 do
  local st = get('s' .. i)
  if st ~= nil and st <= s and st > s - IV then
    local mi = get('m' .. i) or 5000
    if mi < m then m = mi end
  end
end
if m < 1 then m = 1 end
local waiting = 0
for i = 0, SC - 1 do
  local fs = get('fs' .. i)
  if fs ~= nil and fs > t then waiting = waiting + num('fp' .. i) end
end
r[#r + 1] = m
r[#r + 1] = in_flight
r[#r + 1] = waiting
finish(1, 0, 0)
return r
"""
