-- charge: n more PASS now, without a decision (Limiter.charge): what a request used beyond
-- its admission. Never refuses; the window may then hold more than its limit until the
-- charge slides out. A throttle's pace moves by the cost of n, as for n admitted now, but
-- at most max_queueing_ms + interval_ms ahead of now: a pace further ahead reads as another
-- clock's (the throttle's rule above) and would be dropped, forgetting the whole charge.
-- ARGV[11]: the member's decision script (1 reject, 2 concurrency, 3 warm_up, 4 throttle),
-- then that script's parameters from ARGV[12]. A concurrency limiter is charged 0 only
-- (the client refuses more before sending). Reply {1, 0, 0}, or a layout / state error.
local kind = tonumber(ARGV[11])
if not (n > 0) or kind == 2 then return {1, 0, 0} end  -- nothing to count: nothing written
do
  local t = clamp(now_ms)
  if kind == 4 then
    local q, maxq, warm = tonumber(ARGV[12]), tonumber(ARGV[13]), ARGV[14] == '1'
    if q > 0 then
      local rate = q
      if warm then
        rate = warm_rate(t, q, tonumber(ARGV[15]), tonumber(ARGV[16]), tonumber(ARGV[17]),
                         tonumber(ARGV[18]), tonumber(ARGV[19]), tonumber(ARGV[20]))
      end
      local cost = math.floor(1e9 * n / rate + 0.5)
      local most = maxq + IV * 1000000
      local lm, ln = get('lm'), get('ln')
      if lm ~= nil and another_clocks((lm - now_ms) * 1000000 + (ln - sub), most) then
        lm = nil; del('lm'); del('ln')
      end
      if lm == nil or (now_ms - lm) * 1000000 + (sub - ln) >= cost then
        set('lm', now_ms); set('ln', sub)
      else
        local ahead = (lm - now_ms) * 1000000 + (ln - sub) + cost
        if ahead <= most then  -- the throttle's own step
          local total = ln + cost
          local carry = math.floor(total / 1000000)
          set('lm', lm + carry); set('ln', total - carry * 1000000)
        else  -- saturated: as far ahead as a pace is kept
          local total = sub + most
          local carry = math.floor(total / 1000000)
          set('lm', now_ms + carry); set('ln', total - carry * 1000000)
        end
      end
    end
  end
  count('p', n, t)
  -- the counts saturate at the core's int64 maximum (a charge of 2^63 - 1, twice)
  for _, f in ipairs({'p0', 'p1', 'w0', 'w1'}) do
    if num(f) > NS_MAX then set(f, NS_MAX) end
  end
  for i = 2, SC - 1 do
    if num('p' .. i) > NS_MAX then set('p' .. i, NS_MAX) end
  end
end
return finish(1, 0, 0)
