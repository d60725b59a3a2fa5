"""The Lua scripts of slidewin.redis: one per behavior.

Each is HEAD (the time, the GET, the compact state's codec), for reject, throttle and warm_up
a straight-line path for the common decision on a compact state, then the table model
(GENERIC) and the behavior's body: the same window rules as the C core on every field of the
state by name; see the README, "Across hosts", and docs/design.md, "Across hosts: Redis"."""

HEAD = r"""
-- slidewin.redis: one decision of a limiter whose whole state is the string KEYS[1].
-- The same rules as the C core (docs/design.md §2-§5), with the same integers and doubles.
-- Lua numbers are doubles: time is whole ms since the epoch (exact below 2^53) plus the ns
-- within the ms; nanoseconds since the epoch are never formed.
-- ARGV: now_ms now_sub n flags layout ttl_ms interval_ms sample_count lease_id lease_ms
--       then the behavior's parameters (see the BEHAVIOR section at the end).
-- Three commands: TIME (unless now_ms is given), GET, SET PX.
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
local raw = redis.call('GET', K)

-- The compact state: msgpack integers one after another (decoded and encoded in C by
-- cmsgpack, a byte for 0-127, 3 for up to 65535, 5 for up to 2^32), written whenever the
-- state holds no more than these sections:
--   a header: bits 0-5 which sections follow, bit 6 an explicit layout (else 1000 ms / 2)
--   [interval_ms sample_count] if bit 6
--   1  window: newest bucket's index (start / bucket ms), then the PASS count of each
--      bucket from the newest back (sample_count numbers)
--   2  BLOCK counts, the same buckets (sample_count numbers)
--   4  minute: newest second's index, its passes, the previous second's passes
--   8  warm-up: stored tokens, index of the second last synced
--   16 warm-up: paused until (ms)
--   32 throttle: latest passed time (ms, ns within the ms)
-- The header is below 128, so the first byte never reads as a msgpack map (the other form,
-- kept for states with leases, future buckets or outcome counts: the table model below).
-- A default reject key holds 4 numbers: 10-12 bytes.
local TWO53 = 9007199254740992
-- the largest double below 2^63: a wait or retry in ns beyond it saturates here (as the C
-- core's int64 does); above it, Redis's conversion of the reply to an integer overflows
local NS_MAX = 9223372036854774784
local function bad_state()
  return redis.error_reply('slidewin: ' .. K .. ' holds no slidewin state')
end
local function decode(raw)  -- the sections as a table D, or nil for what no client wrote
  local V = {pcall(cmsgpack.unpack, raw)}
  if not V[1] then return nil end
  local nv = #V
  for i = 2, nv do
    local x = V[i]
    if type(x) ~= 'number' or x < 0 or x >= TWO53 or x ~= math.floor(x) then return nil end
  end
  local mask = V[2]
  if mask == nil or mask >= 128 then return nil end
  local iv, sc, p = 1000, 2, 3
  if mask >= 64 then iv = V[3]; sc = V[4]; p = 5; mask = mask - 64 end
  if sc == nil or iv == nil or sc < 1 or sc > 64 or iv < 1 then return nil end
  -- c[k], b[k]: the counts of the bucket k - 1 back from the newest; b false while no
  -- bucket has a BLOCK count (the fields made at once: one allocation)
  local D = {iv = iv, sc = sc, c = false, b = false, nwi = false}
  if mask % 2 == 1 then
    D.nwi = V[p]
    D.c = {unpack(V, p + 1, p + sc)}
    p = p + 1 + sc
  else
    D.nwi = nil
    local c = {}
    for k = 1, sc do c[k] = 0 end
    D.c = c
  end
  if mask % 4 >= 2 then
    if D.nwi == nil then return nil end
    D.b = {unpack(V, p, p + sc - 1)}
    p = p + sc
  end
  if mask % 8 >= 4 then D.mni = V[p]; D.wc = V[p + 1]; D.wp = V[p + 2]; p = p + 3 end
  if mask % 16 >= 8 then D.st = V[p]; D.lfi = V[p + 1]; p = p + 2 end
  if mask % 32 >= 16 then D.pu = V[p]; p = p + 1 end
  if mask >= 32 then D.lm = V[p]; D.ln = V[p + 1]; p = p + 2 end
  if p ~= nv + 1 then return nil end
  return D
end
local function fresh(IV, SC)
  local c = {}
  for k = 1, SC do c[k] = 0 end
  return {iv = IV, sc = SC, c = c, b = false, nwi = false}
end
local function encode_compact(D, IV, SC)
  local out = {0}
  local o = 1
  local mask = 0
  if IV ~= 1000 or SC ~= 2 then mask = 64; out[2] = IV; out[3] = SC; o = 3 end
  if D.nwi then
    mask = mask + 1
    out[o + 1] = D.nwi
    local c, b = D.c, D.b
    local anyb = false
    for k = 1, SC do out[o + 1 + k] = c[k] end
    if b then
      for k = 1, SC do if b[k] > 0 then anyb = true end end
    end
    o = o + 1 + SC
    if anyb then
      mask = mask + 2
      for k = 1, SC do out[o + k] = b[k] end
      o = o + SC
    end
  end
  if D.mni ~= nil then
    mask = mask + 4; out[o + 1] = D.mni; out[o + 2] = D.wc; out[o + 3] = D.wp; o = o + 3
  end
  if D.st ~= nil then mask = mask + 8; out[o + 1] = D.st; out[o + 2] = D.lfi; o = o + 2 end
  if D.pu ~= nil then mask = mask + 16; out[o + 1] = D.pu; o = o + 1 end
  if D.lm ~= nil then mask = mask + 32; out[o + 1] = D.lm; out[o + 2] = D.ln; o = o + 2 end
  out[1] = mask
  for i = 2, o do  -- whole numbers below 2^53 only (else the map form holds them)
    local x = out[i]
    if x < 0 or x >= TWO53 or x ~= math.floor(x) then return nil end
  end
  return cmsgpack.pack(unpack(out, 1, o))
end
"""


def _fast(cond: str, body: str) -> str:
    """The straight-line path of a behavior: its condition and body between the shared
    opening (decode, clamp) and closing (count, SET)."""
    return FAST_OPEN.replace("%(cond)s", cond) + body + FAST_CLOSE


FAST_OPEN = r"""
do  -- the straight-line path: a compact state (or none) and no lease (entry())
  local fl, SC = tonumber(ARGV[4]), tonumber(ARGV[8])
  if fl % 16 < 8 and SC <= 64 and %(cond)s then
    local IV = tonumber(ARGV[7])
    local D
    if not raw then
      D = fresh(IV, SC)
    else
      local c1 = string.byte(raw, 1)
      if c1 ~= nil and c1 < 128 then
        D = decode(raw)
        if D ~= nil and (D.iv ~= IV or D.sc ~= SC) then D = nil end  -- reported below
      end
    end
    if D ~= nil then
      local n, ttl = tonumber(ARGV[3]), tonumber(ARGV[6])
      local WIN = IV / SC
      local lean = fl % 64 >= 32
      local go = true  -- false: the table model decides (below)
      -- clamp: a time before the newest bucket counts in the newest bucket
      local t = now_ms
      local ti = (t - t % WIN) / WIN
      local nwi = D.nwi
      -- more than a window ahead of now: another clock's state (a step back, or two
      -- clocks apart): the table model decides (GENERIC, "another clock")
      local sec0 = now_ms - now_ms % 1000
      if (nwi and (nwi - ti) * WIN > IV) or (D.mni ~= nil and D.mni * 1000 > sec0 + IV)
          or (D.lfi ~= nil and D.lfi * 1000 > sec0 + IV) then
        go = false
      end
      if not nwi then
        D.nwi = ti
      elseif ti < nwi then
        t = nwi * WIN
      elseif ti > nwi then
        local d, c, b = ti - nwi, D.c, D.b
        for k = SC, 1, -1 do
          if k > d then c[k] = c[k - d] else c[k] = 0 end
        end
        if b then
          for k = SC, 1, -1 do
            if k > d then b[k] = b[k - d] else b[k] = 0 end
          end
        end
        D.nwi = ti
      end
      local v, wait, retry = 0, 0, -1
"""

FAST_CLOSE = r"""
      if go then
        if v == 1 then
          D.c[1] = D.c[1] + n
          if not lean or fl % 128 >= 64 then  -- the minute window's passes
            local si = (t - t % 1000) / 1000
            local mni = D.mni
            if mni == nil then
              D.mni = si; D.wc = 0; D.wp = 0
            elseif si > mni then
              if si == mni + 1 then D.wp = D.wc else D.wp = 0 end
              D.wc = 0; D.mni = si
            end
            D.wc = D.wc + n
          end
        elseif not lean and fl % 8 < 4 then
          local b = D.b
          if not b then
            b = {}
            for k = 1, SC do b[k] = 0 end
            D.b = b
          end
          b[1] = b[1] + n
        end
        local enc = encode_compact(D, IV, SC)
        if enc then  -- else a number outgrew it: the table model stores the map form
          redis.call('SET', K, enc, 'PX', ttl)
          return {v, wait, retry}
        end
      end
    end
  end
end
"""

GENERIC = r"""

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
-- STATS (VIEW_ONLY) reads a state that is behind as started afresh and writes nothing.
local VIEW_ONLY = false
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
REJECT = HEAD + _fast("tonumber(ARGV[11]) > 0", r"""
      local L = tonumber(ARGV[11])
      local pass = 0
      for k = 1, SC do pass = pass + D.c[k] end
      if n > L then
        v = 2
      elseif pass + n <= L then
        v = 1
      elseif fl % 32 >= 16 or (fl % 4 >= 2 and fl % 2 == 0) then
        go = false  -- retry_after, or a prioritized wait: the table model
      end
""") + GENERIC + _COMMON + r"""
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
CONCURRENCY = HEAD + GENERIC + _COMMON + r"""
local c = tonumber(ARGV[11])
local t = clamp(now_ms)
local v = 0
if n > c then v = 2 elseif in_flight + n <= c then v = 1 end
return conclude(v, t, 0, -1, false, 0, true)
"""

# ARGV[11..]: q L warning max_token ramp slope cold_pass min_rate
WARM_UP = HEAD + _fast("tonumber(ARGV[11]) > 0", r"""
      local q, L = tonumber(ARGV[11]), tonumber(ARGV[12])
      local warning, maxt = tonumber(ARGV[13]), tonumber(ARGV[14])
      -- the warm-up tokens, synced once per whole second (warm_rate below)
      local pu = D.pu
      if pu ~= nil and pu > now_ms + IV + math.ceil(L * 1000 / tonumber(ARGV[18])) then
        go = false  -- another clock's pause: the table model decides
      end
      local sec = t - t % 1000
      local busy = pu ~= nil and pu > sec - 1000
      local si = sec / 1000
      local mni = D.mni
      if mni == nil then
        D.mni = si; D.wc = 0; D.wp = 0
      elseif si > mni then
        if si == mni + 1 then D.wp = D.wc else D.wp = 0 end
        D.wc = 0; D.mni = si
      end
      local prev = D.wp  -- the last whole second's passes
      local stored, lf = D.st, D.lfi
      if stored == nil then stored = maxt end
      if lf ~= nil then lf = lf * 1000 end
      if not (lf ~= nil and sec <= lf) then
        local elapsed = 0
        if lf ~= nil then elapsed = sec - lf end
        local x = stored
        if stored < warning or (stored > warning and prev < tonumber(ARGV[17]) and not busy) then
          local nv = stored + elapsed * q / 1000
          if nv >= maxt then x = maxt else x = math.floor(nv) end
        end
        if x > maxt then x = maxt end
        x = x - prev
        if x < 0 then x = 0 end
        stored = x
        D.st = x; D.lfi = si
      end
      local rate = q
      if ARGV[15] == '1' and stored >= warning then
        local x = 1.0 / ((stored - warning) * tonumber(ARGV[16]) + 1.0 / q)
        local _, e = math.frexp(x)
        rate = x + math.ldexp(1, e - 53)
      end
      local min_rate = tonumber(ARGV[18])
      if rate < min_rate then rate = min_rate end
      local allowed = rate
      if IV ~= 1000 then allowed = rate * (IV / 1000) end
      local pass = 0
      for k = 1, SC do pass = pass + D.c[k] end
      if n > L then
        v = 2
      elseif pu ~= nil and t < pu then
        if fl % 32 >= 16 then
          retry = (pu - now_ms) * 1000000 - sub
          if retry < 0 then retry = 0 end
        end
      elseif pass + n <= allowed then
        v = 1
      elseif pass == 0 then
        v = 1
        D.pu = t + math.ceil(n * 1000 / rate)
      end
""") + GENERIC + _COMMON + r"""
local q, L = tonumber(ARGV[11]), tonumber(ARGV[12])
local t = clamp(now_ms)
local v, retry = 0, -1
if q <= 0 then
  v = 2
else
  if another_clocks(get('pu'), now_ms + IV + math.ceil(L * 1000 / tonumber(ARGV[18]))) then
    del('pu')  -- another clock's pause
  end
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
THROTTLE = HEAD + _fast("ARGV[13] ~= '1' and tonumber(ARGV[11]) > 0", r"""
      local q, maxq = tonumber(ARGV[11]), tonumber(ARGV[12])
      local cost = math.floor(1e9 * n / q + 0.5)
      local lm, ln = D.lm, D.ln
      if lm ~= nil and (lm - now_ms) * 1000000 + (ln - sub) > maxq + IV * 1000000 then
        go = false  -- another clock's pace (beyond any queue): the table model decides
      end
      if lm == nil or (now_ms - lm) * 1000000 + (sub - ln) >= cost then
        D.lm = now_ms; D.ln = sub
        v = 1
      else
        local w = (lm - now_ms) * 1000000 + (ln - sub) + cost
        if fl % 2 == 1 then
          retry = w
          if retry > NS_MAX then retry = NS_MAX end
        elseif w > maxq then
          retry = w - maxq
          if retry > NS_MAX then retry = NS_MAX end
        else
          local total = ln + cost
          local carry = math.floor(total / 1000000)
          D.lm = lm + carry; D.ln = total - carry * 1000000
          v = 1; wait = w
        end
      end
""") + GENERIC + _COMMON + r"""
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
  if lm ~= nil and another_clocks((lm - now_ms) * 1000000 + (ln - sub), maxq + IV * 1000000) then
    lm = nil; del('lm'); del('ln')  -- another clock's pace (beyond any queue)
  end
  if lm == nil or (now_ms - lm) * 1000000 + (sub - ln) >= cost then
    set('lm', now_ms); set('ln', sub)
    v = 1
  else
    local w = (lm - now_ms) * 1000000 + (ln - sub) + cost
    if has(F_TRY) then
      retry = w
      if retry > NS_MAX then retry = NS_MAX end
    elseif w > maxq then
      retry = w - maxq
      if retry > NS_MAX then retry = NS_MAX end
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

# ARGV[11..]: outcome (0 none, 1 success, 2 exception, 3 block, 4 renew) rt_ms, then pairs
# lease_id k. Renew: each lease named that still exists expires lease_ms from now (never
# made: a lease that is gone stays gone); the reply's second number is how many.
EXIT = HEAD + GENERIC + r"""
local outcome, rt = tonumber(ARGV[11]), tonumber(ARGV[12])
if outcome == 4 then
  local renewed = 0
  for a = 13, #ARGV, 2 do
    local old = h['L' .. ARGV[a]]
    if old then old[2] = now_ms + lease_ms; old[3] = lease_ms; renewed = renewed + 1 end
  end
  if renewed == 0 and not raw then return {1, 0, 0} end  -- nothing there: write nothing
  return finish(1, renewed, 0)
end
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
STATS = HEAD + GENERIC.replace("local VIEW_ONLY = false", "local VIEW_ONLY = true", 1) + r"""
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
for k = 1, #r do  -- sums past int64 saturate (read back as 2^63 - 1, the core's)
  if r[k] > NS_MAX then r[k] = NS_MAX end
end
if not (VIEW_ONLY and clock_restart) then finish(1, 0, 0) end  -- a view: writes nothing
return r
"""
