
-- slidewin.redis: one decision of a limiter whose whole state is the string KEYS[1].
-- The same rules as the C core (docs/design.md §2-§5), with the same integers and doubles.
-- Lua numbers are doubles: time is whole ms since the epoch (exact below 2^53) plus the ns
-- within the ms; nanoseconds since the epoch are never formed.
-- ARGV: now_ms now_sub n flags layout ttl_ms interval_ms sample_count lease_id lease_ms
--       then the behavior's parameters (see the BEHAVIOR section at the end).
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

-- The table model: every field of the state by name, times in ms. Stored compact when it
-- fits (above), else as one msgpack map with times relative to the newest bucket start nw
-- (itself in windows): bucket starts s<i>, fs<i> in windows, q<j> mn lf pu lm and lease
-- expiries in ms, so they pack in a byte or two.
-- the compact state as the table model and back (the table's times are absolute ms here)
local function to_table(D)
  local t = {}
  if D.nwi then
    t.nw = D.nwi * WIN
    for k = 0, SC - 1 do
      local s = (D.nwi - k) * WIN
      local c, b = D.c[k + 1], D.b and D.b[k + 1] or 0
      if s >= 0 and (c > 0 or b > 0) then
        local i = (D.nwi - k) % SC
        t['s' .. i] = s
        if c > 0 then t['p' .. i] = c end
        if b > 0 then t['b' .. i] = b end
      end
    end
  end
  if D.mni ~= nil then
    t.mn = D.mni * 1000
    if D.wc > 0 then t['q' .. (D.mni % 2)] = D.mni * 1000; t['w' .. (D.mni % 2)] = D.wc end
    if D.wp > 0 and D.mni >= 1 then
      local j = (D.mni - 1) % 2
      t['q' .. j] = (D.mni - 1) * 1000; t['w' .. j] = D.wp
    end
  end
  if D.st ~= nil then t.st = D.st; t.lf = D.lfi * 1000 end
  if D.pu ~= nil then t.pu = D.pu end
  if D.lm ~= nil then t.lm = D.lm; t.ln = D.ln end
  return t
end
local function nat(x)  -- a whole number the varints hold exactly
  return type(x) == 'number' and x >= 0 and x < TWO53 and x == math.floor(x)
end
local COMPACT = {nw = 1, mn = 1, st = 1, lf = 1, pu = 1, lm = 1, ln = 1}
for i = 0, SC - 1 do COMPACT['s' .. i] = 1; COMPACT['p' .. i] = 1; COMPACT['b' .. i] = 1 end
COMPACT.q0 = 1; COMPACT.q1 = 1; COMPACT.w0 = 1; COMPACT.w1 = 1
-- the compact state of the table, or nil when it holds more (msgpack then)
local function from_table(t)
  if SC > 64 then return nil end
  for f, v in pairs(t) do
    if COMPACT[f] == nil or not nat(v) then return nil end
  end
  local D = {c = {}, b = {}}
  for k = 1, SC do D.c[k] = 0; D.b[k] = 0 end
  if t.nw ~= nil then
    local nwi = t.nw / WIN
    if nwi ~= math.floor(nwi) then return nil end
    D.nwi = nwi
    for i = 0, SC - 1 do
      local s = t['s' .. i]
      if s ~= nil then
        local k = (t.nw - s) / WIN
        if k ~= math.floor(k) or k < 0 or (s / WIN) % SC ~= i then return nil end
        if k < SC then D.c[k + 1] = t['p' .. i] or 0; D.b[k + 1] = t['b' .. i] or 0 end
      elseif t['p' .. i] ~= nil or t['b' .. i] ~= nil then
        return nil
      end
    end
  else
    for i = 0, SC - 1 do
      if t['s' .. i] ~= nil or t['p' .. i] ~= nil or t['b' .. i] ~= nil then return nil end
    end
  end
  if t.mn ~= nil then
    if t.mn % 1000 ~= 0 then return nil end
    D.mni = t.mn / 1000
    D.wc, D.wp = 0, 0
    for j = 0, 1 do
      local q, w = t['q' .. j], t['w' .. j]
      if q == nil then
        if w ~= nil then return nil end
      elseif q == t.mn then D.wc = w or 0
      elseif q == t.mn - 1000 then D.wp = w or 0
      elseif q > t.mn or q % 1000 ~= 0 or (q / 1000) % 2 ~= j then return nil
      end
    end
  elseif t.q0 ~= nil or t.q1 ~= nil or t.w0 ~= nil or t.w1 ~= nil then
    return nil
  end
  if t.st ~= nil or t.lf ~= nil then
    if t.st == nil or t.lf == nil or t.lf % 1000 ~= 0 then return nil end
    D.st = t.st; D.lfi = t.lf / 1000
  end
  D.pu = t.pu
  if t.lm ~= nil or t.ln ~= nil then
    if t.lm == nil or t.ln == nil then return nil end
    D.lm = t.lm; D.ln = t.ln
  end
  return D
end
local h = {}
if raw and string.byte(raw, 1) ~= nil and string.byte(raw, 1) < 128 then
  local D = decode(raw)
  if D == nil then return bad_state() end
  if D.iv ~= IV or D.sc ~= SC then return {3, string.format('%d/%d', D.iv, D.sc)} end
  h = to_table(D)
elseif raw then
  local ok, d = pcall(cmsgpack.unpack, raw)
  if not ok or type(d) ~= 'table' or type(d.y) ~= 'string' then return bad_state() end
  if d.y ~= layout then return {3, d.y} end
  h = d
  h.y = nil
  local b = 0
  local nw = h.nw
  if nw ~= nil then
    -- the newest bucket (in windows): a time in ms the doubles hold exactly
    if type(nw) ~= 'number' or nw < 0 or nw ~= math.floor(nw) or nw * WIN >= TWO53 then
      return bad_state()
    end
    b = nw * WIN; h.nw = b
  end
  local HUGE = math.huge
  for f, v in pairs(h) do
    -- every field a finite number, a lease {n, expiry}: else no client wrote it
    if type(f) ~= 'string' then return bad_state() end
    local c = string.byte(f, 1)
    if c == 76 then
      if type(v) ~= 'table' then return bad_state() end
      local k, e, l = v[1], v[2], v[3]  -- n, expiry, and the lease's own lease_ms
      if type(k) ~= 'number' or type(e) ~= 'number' or not (k >= 0 and k < HUGE)
          or not (e > -HUGE and e < HUGE)
          or (l ~= nil and (type(l) ~= 'number' or not (l >= 0 and l < HUGE))) then
        return bad_state()
      end
    elseif type(v) ~= 'number' or not (v > -HUGE and v < HUGE) then
      return bad_state()
    end
    if c == 76 then v[2] = v[2] + b  -- L<id> = {n, expiry}
    elseif c == 115 and f ~= 'st' then h[f] = b - v * WIN
    elseif c == 102 and string.byte(f, 2) == 115 then h[f] = b + v * WIN
    elseif c == 113 or f == 'mn' or f == 'lf' or f == 'pu' or f == 'lm' or f == 'ca' then
      h[f] = b + v
    end
  end
end
-- Another clock: the state more than a window ahead of now (its newest bucket, minute, or
-- warm-up sync). A server restarted or failed over with its clock behind, a client's now_ns
-- an hour ahead -- or two clocks apart taking turns (two hosts' now_ns, the server's clock
-- and a host's). Hysteresis: the first decision behind notes when (ca, ms on its clock) and
-- counts as the core does (in the newest bucket: the limit holds across both clocks); only
-- when decisions have stayed behind for a whole window of their clock does the window (and
-- the future ring, the outcome counts) start afresh, the minute and the warm-up's last sync
-- come back to now, and the throttle's pace and the warm-up's pause beyond any queue or
-- pause are dropped (by the behavior, clock_restart). A decision not behind clears ca.
-- STATS (VIEW_ONLY: declared before this file by the script's assembly, _scripts.py) reads
-- a state that is behind as started afresh and writes nothing.
local clock_behind, clock_restart = false, false
do
  local cur = now_ms - now_ms % WIN
  local sec = now_ms - now_ms % 1000
  clock_behind = (h.nw ~= nil and h.nw > cur + IV) or (h.mn ~= nil and h.mn > sec + IV)
    or (h.lf ~= nil and h.lf > sec + IV)
  local ca = h.ca
  if ca ~= nil and ca > now_ms then ca = now_ms end  -- noted on a clock ahead of this one
  if not clock_behind then
    h.ca = nil
  elseif VIEW_ONLY or (ca ~= nil and now_ms - ca >= IV) then
    clock_restart = true
    h.ca = nil
    for f, _ in pairs(h) do
      if f == 'nw' or string.find(f, '^[sbpxuorm]%d+$') or string.find(f, '^f[sp]%d+$') then
        h[f] = nil
      end
    end
    if h.mn ~= nil and h.mn > sec + IV then
      h.mn = nil; h.q0 = nil; h.q1 = nil; h.w0 = nil; h.w1 = nil
    end
    if h.lf ~= nil and h.lf > sec + IV then h.lf = sec end
  else
    h.ca = ca or now_ms
  end
end
-- a pace or pause further ahead than any queue or pause: dropped when the clock restarts,
-- or when nothing else is behind (kept while the window is, so the limit holds)
local function another_clocks(x, beyond) return x ~= nil and x > beyond
  and (clock_restart or not clock_behind) end
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

-- in-flight counts: leases L<id> = {n, expiry ms, lease_ms}; expired ones are dropped. An
-- expiry further ahead than its lease_ms is another clock's: clamped to now + lease_ms.
local in_flight = 0
for f, v in pairs(h) do
  if string.byte(f, 1) == 76 then
    local most = now_ms + (v[3] or lease_ms)
    if v[2] > most then v[2] = most end
    if v[2] <= now_ms then h[f] = nil else in_flight = in_flight + v[1] end
  end
end
local function add_lease(k)
  local f = 'L' .. lease_id
  local old = h[f]
  local have = 0
  if old then have = old[1] end
  h[f] = {have + k, now_ms + lease_ms, lease_ms}
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
      elseif c == 113 or f == 'mn' or f == 'lf' or f == 'pu' or f == 'lm' or f == 'ca' then
        h[f] = v - b
      end
    end
  end
  h.y = layout
  return cmsgpack.pack(h)
end
local encode_msgpack = encode
encode = function()
  local D = from_table(h)
  if D then
    local e = encode_compact(D, IV, SC)
    if e then return e end
  end
  return encode_msgpack()
end
local function finish(verdict, wait_ns, retry_ns)
  if in_flight > 0 and lease_ms + 1000 > ttl then ttl = lease_ms + 1000 end
  redis.call('SET', K, encode(), 'PX', ttl)
  return {verdict, wait_ns, retry_ns}
end
