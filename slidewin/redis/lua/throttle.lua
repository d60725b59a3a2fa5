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
