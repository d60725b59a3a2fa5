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
