      local q, L = tonumber(ARGV[11]), tonumber(ARGV[12])
      local warning, maxt = tonumber(ARGV[13]), tonumber(ARGV[14])
      -- the warm-up tokens, synced once per whole second (warm_rate below)
      local pu = D.pu
      if pu ~= nil and pu > now_ms + IV + math.ceil(L * 1000 / tonumber(ARGV[18])) then
        go = false  -- another clock's pause: the table model decides
      end
      local sec = t - t % 1000
      local busy = pu ~= nil and pu > sec - 1000
      local si = sec / 1000
      minute_at(D, si)
      local prev = D.wp  -- the last whole second's passes
      local stored, lf = D.st, D.lfi
      if stored == nil then stored = maxt end
      if lf ~= nil then lf = lf * 1000 end
      local x = warm_tokens(stored, lf, sec, q, warning, maxt, prev, tonumber(ARGV[17]), busy)
      if x ~= nil then stored = x; D.st = x; D.lfi = si end
      local rate = q
      if ARGV[15] == '1' and stored >= warning then
        rate = nextafter_up(1.0 / ((stored - warning) * tonumber(ARGV[16]) + 1.0 / q))
      end
      local min_rate = tonumber(ARGV[18])
      if rate < min_rate then rate = min_rate end
      local allowed = rate
      if IV ~= 1000 then allowed = rate * (IV / 1000) end
      local pass = 0
      for k = 1, SC do pass = pass + D.c[k] end
      if n > L then
        v = 2
      elseif pu ~= nil and t < pu then
        if fl % 32 >= 16 then
          retry = (pu - now_ms) * 1000000 - sub
          if retry < 0 then retry = 0 end
        end
      elseif pass + n <= allowed then
        v = 1
      elseif pass == 0 then
        v = 1
        D.pu = t + math.ceil(n * 1000 / rate)
      end
