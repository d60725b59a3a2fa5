do  -- the straight-line path: a compact state (or none) and no lease (entry())
  local fl, SC = tonumber(ARGV[4]), tonumber(ARGV[8])
  if fl % 16 < 8 and SC <= 64 and FAST_PATH then
    local IV = tonumber(ARGV[7])
    local D
    if not raw then
      D = fresh(IV, SC)
    else
      local c1 = string.byte(raw, 1)
      if c1 ~= nil and c1 < 128 then
        D = decode(raw)
        if D ~= nil and (D.iv ~= IV or D.sc ~= SC) then D = nil end  -- reported below
      end
    end
    if D ~= nil then
      local n, ttl = tonumber(ARGV[3]), tonumber(ARGV[6])
      local WIN = IV / SC
      local lean = fl % 64 >= 32
      local go = true  -- false: the table model decides (below)
      -- clamp: a time before the newest bucket counts in the newest bucket
      local t = now_ms
      local ti = (t - t % WIN) / WIN
      local nwi = D.nwi
      -- more than a window ahead of now: another clock's state (a step back, or two
      -- clocks apart): the table model decides (GENERIC, "another clock")
      local sec0 = now_ms - now_ms % 1000
      if (nwi and (nwi - ti) * WIN > IV) or (D.mni ~= nil and D.mni * 1000 > sec0 + IV)
          or (D.lfi ~= nil and D.lfi * 1000 > sec0 + IV) then
        go = false
      end
      if not nwi then
        D.nwi = ti
      elseif ti < nwi then
        t = nwi * WIN
      elseif ti > nwi then
        local d, c, b = ti - nwi, D.c, D.b
        for k = SC, 1, -1 do
          if k > d then c[k] = c[k - d] else c[k] = 0 end
        end
        if b then
          for k = SC, 1, -1 do
            if k > d then b[k] = b[k - d] else b[k] = 0 end
          end
        end
        D.nwi = ti
      end
      local v, wait, retry = 0, 0, -1
