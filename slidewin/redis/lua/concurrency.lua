local c = tonumber(ARGV[11])
local t = clamp(now_ms)
local v = 0
if n > c then v = 2 elseif in_flight + n <= c then v = 1 end
return conclude(v, t, 0, -1, false, 0, true)
