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
-- the smallest double above x
local function nextafter_up(x)
  local _, e = math.frexp(x)
  return x + math.ldexp(1, e - 53)
end
-- the compact state's minute counters moved to whole second si (its passes wc, the
-- previous second's wp)
local function minute_at(D, si)
  local mni = D.mni
  if mni == nil then
    D.mni = si; D.wc = 0; D.wp = 0
  elseif si > mni then
    if si == mni + 1 then D.wp = D.wc else D.wp = 0 end
    D.wc = 0; D.mni = si
  end
end
-- the warm-up tokens synced at whole second sec (ms) from `stored`, last synced at lf (ms,
-- or nil), prev the last second's passes; nil when already synced this second
local function warm_tokens(stored, lf, sec, q, warning, maxt, prev, cold_pass, busy)
  if lf ~= nil and sec <= lf then return nil end
  local elapsed = 0
  if lf ~= nil then elapsed = sec - lf end
  local x = stored
  if stored < warning or (stored > warning and prev < cold_pass and not busy) then
    local nv = stored + elapsed * q / 1000
    if nv >= maxt then x = maxt else x = math.floor(nv) end
  end
  if x > maxt then x = maxt end
  x = x - prev
  if x < 0 then x = 0 end
  return x
end
-- a throttle's decision on its pace (lm ms, ln ns within it; lm nil: none yet) for a
-- request of cost ns at now, queueing up to maxq ns unless `try`: the verdict (1 pass),
-- its wait, its retry (-1: none) and the new pace (nil: unchanged)
local function pace_step(lm, ln, cost, maxq, try)
  if lm == nil or (now_ms - lm) * 1000000 + (sub - ln) >= cost then
    return 1, 0, -1, now_ms, sub
  end
  local w = (lm - now_ms) * 1000000 + (ln - sub) + cost
  if try or w > maxq then
    local retry = w
    if not try then retry = w - maxq end
    if retry > NS_MAX then retry = NS_MAX end
    return 0, 0, retry, nil, nil
  end
  local total = ln + cost
  local carry = math.floor(total / 1000000)
  return 1, w, -1, lm + carry, total - carry * 1000000
end
