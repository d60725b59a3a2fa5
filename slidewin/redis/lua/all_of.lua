-- slidewin.redis: all or nothing over the states of several limiters (all_of), one script,
-- one round trip. KEYS: the members' keys (one cluster slot). ARGV: now_ms now_sub, then
-- for each member: its behavior's script (1 reject, 2 concurrency, 3 warm_up, 4 throttle;
-- 5 charge: the group's charge(), every member's n counted, never refused),
-- the count a of its arguments, then its own script's ARGV[3..] (a of them): the group's
-- time stands for each member's ARGV[1..2].
-- Each member is decided on its own state by its own script (BODIES, above: the scripts as
-- functions), its SET held back: decide all, then write all. Every member admitted: every
-- SET is written. Else only the refusers' (their BLOCK counts, as a refusal alone would
-- write), none of the others': a refused request charges them nothing. A member's error
-- (a state no slidewin client wrote) or another layout writes nothing at all.
-- Reply: one {verdict, wait_ns, retry_ns} per member, or the error of the first member
-- that has one (its script's error reply, or a command's on its key: WRONGTYPE), ending in
-- ' (all_of member <i>)': the client names that member's key.
local now_ms, sub = ARGV[1], ARGV[2]
if now_ms == '' then  -- one clock for every member: the server's, read once
  local tm = redis.call('TIME')
  local us = tonumber(tm[2])
  now_ms = string.format('%d', tonumber(tm[1]) * 1000 + math.floor(us / 1000))
  sub = string.format('%d', (us % 1000) * 1000)
end
local real = redis
local results, writes = {}, {}
local all, abort = true, false
local p = 3
for i = 1, #KEYS do
  local which, a = tonumber(ARGV[p]), tonumber(ARGV[p + 1])
  local argv = {now_ms, sub}
  for j = 1, a do argv[j + 2] = ARGV[p + 1 + j] end
  p = p + 2 + a
  local held, failed = false, false
  local proxy = {
    call = function(cmd, ...)
      if cmd == 'SET' then held = {...}; return true end
      local res = real.pcall(cmd, ...)
      if type(res) == 'table' and res.err then failed = res.err; error(res) end
      return res
    end,
    error_reply = real.error_reply,
  }
  local ok, r = pcall(BODIES[which], {KEYS[i]}, argv, proxy)
  if not ok then
    if not failed then error(r, 0) end
    r = {err = failed}
  end
  if type(r) == 'table' and r.err then  -- writes nothing
    return real.error_reply(r.err .. ' (all_of member ' .. i .. ')')
  end
  results[i] = r
  writes[i] = held
  if r[1] == 3 then abort = true elseif r[1] ~= 1 then all = false end
end
if abort then return results end  -- another layout: nothing written
for i = 1, #KEYS do
  local w = writes[i]
  if w and (all or results[i][1] ~= 1) then real.call('SET', KEYS[i], unpack(w, 2)) end
end
return results
