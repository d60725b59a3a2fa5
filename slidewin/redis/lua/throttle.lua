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
  local nlm, nln
  v, wait, retry, nlm, nln = pace_step(lm, ln, cost, maxq, has(F_TRY))
  if nlm ~= nil then set('lm', nlm); set('ln', nln) end
end
return conclude(v, t, wait, retry, false, 0, false)
