      local L = tonumber(ARGV[11])
      local pass = 0
      for k = 1, SC do pass = pass + D.c[k] end
      if n > L then
        v = 2
      elseif pass + n <= L then
        v = 1
      elseif fl % 32 >= 16 or (fl % 4 >= 2 and fl % 2 == 0) then
        go = false  -- retry_after, or a prioritized wait: the table model
      end
