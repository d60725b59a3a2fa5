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
