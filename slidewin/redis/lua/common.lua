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
  local x = warm_tokens(stored, get('lf'), sec, q, warning, maxt, prev, cold_pass, busy)
  if x ~= nil then stored = x; set('st', x); set('lf', sec) end
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
