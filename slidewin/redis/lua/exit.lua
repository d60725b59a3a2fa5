local outcome, rt = tonumber(ARGV[11]), tonumber(ARGV[12])
if outcome == 4 then
  local renewed = 0
  for a = 13, #ARGV, 2 do
    local old = h['L' .. ARGV[a]]
    if old then old[2] = now_ms + lease_ms; old[3] = lease_ms; renewed = renewed + 1 end
  end
  if renewed == 0 and not raw then return {1, 0, 0} end  -- nothing there: write nothing
  return finish(1, renewed, 0)
end
local t = 0
if outcome ~= 0 then t = clamp(now_ms) end  -- a bare release touches no window
if outcome == 3 then
  count('b', n, t)
elseif outcome == 1 and not lean then
  add_sec('u', n, t)
  local i = refresh(t)
  set('r' .. i, num('r' .. i) + rt)
  local m = get('m' .. i) or 5000
  if rt < m then set('m' .. i, rt) end
elseif outcome == 2 and not lean then
  add_sec('x', n, t)
end
local given = 0
for a = 13, #ARGV, 2 do
  local f = 'L' .. ARGV[a]
  local k = tonumber(ARGV[a + 1])
  local old = h[f]
  if old then
    local have = old[1]
    local left = have - k
    if left > 0 then
      old[1] = left
      given = given + k
    else
      del(f)
      given = given + have
    end
  end
end
in_flight = in_flight - given
return finish(1, given, 0)
