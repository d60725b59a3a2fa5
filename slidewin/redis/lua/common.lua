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
