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
