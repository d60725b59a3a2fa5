      local q, maxq = tonumber(ARGV[11]), tonumber(ARGV[12])
      local cost = math.floor(1e9 * n / q + 0.5)
      local lm, ln = D.lm, D.ln
      if lm ~= nil and (lm - now_ms) * 1000000 + (ln - sub) > maxq + IV * 1000000 then
        go = false  -- another clock's pace (beyond any queue): the table model decides
      end
      if lm == nil or (now_ms - lm) * 1000000 + (sub - ln) >= cost then
        D.lm = now_ms; D.ln = sub
        v = 1
      else
        local w = (lm - now_ms) * 1000000 + (ln - sub) + cost
        if fl % 2 == 1 then
          retry = w
          if retry > NS_MAX then retry = NS_MAX end
        elseif w > maxq then
          retry = w - maxq
          if retry > NS_MAX then retry = NS_MAX end
        else
          local total = ln + cost
          local carry = math.floor(total / 1000000)
          D.lm = lm + carry; D.ln = total - carry * 1000000
          v = 1; wait = w
        end
      end
