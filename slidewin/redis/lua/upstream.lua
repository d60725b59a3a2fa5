-- slidewin.Upstream's board on Redis: the pause of a 429/503 and the server's view of each
-- budget, for every host calling one upstream. KEYS[1]: a hash; times are the server's
-- (TIME, microseconds), so hosts with skewed clocks share one pause. ARGV[1]: the operation.
-- Fields: pause (until), k (backoff step), then per budget b (0 requests, 1 tokens):
-- reset<b> (the view's end), cost<b> (microseconds per unit), next<b> (its next free slot).
-- Everything ends by time: the key expires an hour after its last write.
local key, op = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function num(field)
  return tonumber(redis.call('HGET', key, field) or '0') or 0
end
local function touched()
  redis.call('PEXPIRE', key, 3600000)
end
if op == 'left' then
  return math.max(0, num('pause') - now)
elseif op == 'pause' then
  -- ARGV[2]: the pause in microseconds, or -1 for the next step of the backoff
  local us = tonumber(ARGV[2])
  if us < 0 then
    local k = num('k')
    us = math.min(1000000 * 2 ^ math.min(k, 30), 60000000)
    redis.call('HSET', key, 'k', k + 1)
  end
  local old = num('pause')
  local untl = now + us
  local grew = math.max(0, untl - math.max(old, now))
  if untl > old then
    redis.call('HSET', key, 'pause', string.format('%d', untl))
  end
  touched()
  return grew
elseif op == 'settle' then
  if num('k') ~= 0 then
    redis.call('HSET', key, 'k', 0)
    touched()
  end
  return 0
elseif op == 'reserve' then
  -- ARGV[2], ARGV[3]: the units of each budget; ARGV[4]: the earliest slot, from now (us)
  local at = now + tonumber(ARGV[4])
  local wait = 0
  for b = 0, 1 do
    local n = tonumber(ARGV[2 + b])
    local reset = num('reset' .. b)
    if n > 0 and reset > now then
      local slot = math.max(at, num('next' .. b))
      if slot <= reset then
        redis.call('HSET', key, 'next' .. b, string.format('%d', slot + num('cost' .. b) * n))
        wait = math.max(wait, slot - now)
      end
    end
  end
  return wait
elseif op == 'view' then
  -- ARGV[2]: budget; ARGV[3]: remaining; ARGV[4]: reset (us from now); ARGV[5]: the
  -- configured cost (us per unit): the server's view is followed only when slower
  local b, remaining = ARGV[2], tonumber(ARGV[3])
  local reset = now + tonumber(ARGV[4])
  local floor = tonumber(ARGV[5])
  if remaining <= 0 then
    redis.call('HSET', key, 'reset' .. b, string.format('%d', reset), 'cost' .. b, 0,
               'next' .. b, string.format('%d', math.max(num('next' .. b), reset)))
  else
    local cost = tonumber(ARGV[4]) / remaining
    if cost <= floor then
      if num('reset' .. b) > now and num('next' .. b) > now then
        redis.call('HSET', key, 'reset' .. b, string.format('%d', now))
      else
        return 0
      end
    else
      redis.call('HSET', key, 'reset' .. b, string.format('%d', reset), 'cost' .. b,
                 tostring(cost), 'next' .. b,
                 string.format('%d', math.max(num('next' .. b), now)))
    end
  end
  touched()
  return 0
elseif op == 'refund' then
  -- ARGV[2]: budget; ARGV[3]: units not used: the view's slots given back, never before now
  local b, n = ARGV[2], tonumber(ARGV[3])
  local nxt = num('next' .. b)
  if num('reset' .. b) > now and nxt > now and n > 0 then
    redis.call('HSET', key, 'next' .. b,
               string.format('%d', math.max(now, nxt - num('cost' .. b) * n)))
    touched()
  end
  return 0
end
return redis.error_reply('slidewin upstream.lua: unknown operation ' .. tostring(op))
