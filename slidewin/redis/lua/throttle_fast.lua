      local q, maxq = tonumber(ARGV[11]), tonumber(ARGV[12])
      local cost = math.floor(1e9 * n / q + 0.5)
      local lm, ln = D.lm, D.ln
      if lm ~= nil and (lm - now_ms) * 1000000 + (ln - sub) > maxq + IV * 1000000 then
        go = false  -- another clock's pace (beyond any queue): the table model decides
      end
      local nlm, nln
      v, wait, retry, nlm, nln = pace_step(lm, ln, cost, maxq, fl % 2 == 1)
      if nlm ~= nil then D.lm = nlm; D.ln = nln end
