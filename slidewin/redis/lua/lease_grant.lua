-- slidewin.redis: leased quotas, the part that grants (after lease_return.lua): up to n
-- permits of the current bucket, counted as PASS now, recorded under KEYS[2]. The reply:
-- {1, granted, bucket start (ms), ns until the bucket ends}; a lease id already recorded
-- (a retry) gets its recorded grant again and changes nothing.
local prev = n > 0 and redis.call('GET', KEYS[2])
if prev then
  local k, s = lease_record(prev)
  if k == nil then return bad_state() end
  save()
  return {1, k, s, ns_until(s + WIN)}
end
if n == 0 then  -- only given back (and the refusals counted)
  if blocks > 0 then count('b', blocks, clamp(now_ms)) end
  save()
  return {1, 0, 0, 0}
end
local t = clamp(now_ms)
local start = t - t % WIN
if blocks > 0 then count('b', blocks, t) end
refresh(t)
local k = 0
if L > 0 then
  k = math.floor(L - held_sum(t, 'p'))
  if k > n then k = n end
  if k < need then k = 0 end
end
if k > 0 then count('p', k, t) end
redis.call('SET', KEYS[2], string.format('%.17g %.17g %.17g', k, start, t), 'PX', rttl)
save()
return {1, k, start, ns_until(start + WIN)}
