      if go then
        if v == 1 then
          D.c[1] = D.c[1] + n
          if not lean or fl % 128 >= 64 then  -- the minute window's passes
            minute_at(D, (t - t % 1000) / 1000)
            D.wc = D.wc + n
          end
        elseif not lean and fl % 8 < 4 then
          local b = D.b
          if not b then
            b = {}
            for k = 1, SC do b[k] = 0 end
            D.b = b
          end
          b[1] = b[1] + n
        end
        local enc = encode_compact(D, IV, SC)
        if enc then  -- else a number outgrew it: the table model stores the map form
          redis.call('SET', K, enc, 'PX', ttl)
          return {v, wait, retry}
        end
      end
    end
  end
end
