/* test_warmup.c - the warm-up token bucket and the warm_up / warm_up_throttle limiters
 * (docs/design.md §5's numbers; slidewin's own rules, §8). */
#include "limiter_util.h"

static void test_tokens(void)
{
    struct sw_warmup w;
    struct sw_warm_state ws;
    CHECK_EQ(sw_warmup_init(&w, 10, 10, 3), SW_OK);
    sw_warm_state_init(&ws);
    CHECK_EQ(w.warning, 50);
    CHECK_EQ(w.max_token, 100);
    CHECK_NEAR(w.slope, 0.004, 1e-15);
    CHECK_EQ(w.cold_pass, 3);
    CHECK_EQ(ws.stored, SW_WARM_FRESH); /* a fresh bucket is cold: max at its first sync */
    CHECK_EQ(w.ramp, 1);
    CHECK_NEAR(sw_warmup_rate(&w, &ws), 10.0 / 3.0, 1e-12);
    CHECK(sw_warmup_rate(&w, &ws) == nextafter(1.0 / (50 * 0.004 + 0.1), INFINITY)); /* one ulp up */
    /* first sync: nothing elapsed, last second's passes subtracted */
    sw_warmup_sync(&w, &ws, 123456, 0, false);
    CHECK_EQ(ws.stored, 100);
    CHECK_EQ(ws.last_filled_ms, 123000);
    sw_warmup_sync(&w, &ws, 123999, 50, false); /* same second: no sync */
    CHECK_EQ(ws.stored, 100);
    sw_warmup_sync(&w, &ws, 124000, 3, false); /* 3 is not below 10 // 3: no refill */
    CHECK_EQ(ws.stored, 97);
    sw_warmup_sync(&w, &ws, 125000, 2, false); /* 2 < 3: refill (capped at max), then - 2 */
    CHECK_EQ(ws.stored, 98);
    sw_warmup_sync(&w, &ws, 126500, 60, false);
    CHECK_EQ(ws.stored, 38);
    CHECK_NEAR(sw_warmup_rate(&w, &ws), 10.0, 0); /* below warning: q */
    sw_warmup_sync(&w, &ws, 127000, 0, false); /* below warning: refill 1 s * 10 */
    CHECK_EQ(ws.stored, 48);
    sw_warmup_sync(&w, &ws, 129000, 0, false); /* 2 s: + 20 */
    CHECK_EQ(ws.stored, 68);
    sw_warmup_sync(&w, &ws, 130000, 0, false); /* above warning, 0 < 3: refill */
    CHECK_EQ(ws.stored, 78);
    sw_warmup_sync(&w, &ws, 1000000, 0, false); /* long idle: capped at max */
    CHECK_EQ(ws.stored, 100);
    sw_warmup_sync(&w, &ws, 1001000, 1000, false); /* floor 0 */
    CHECK_EQ(ws.stored, 0);
    sw_warmup_sync(&w, &ws, 999000, 0, false); /* time behind: nothing */
    CHECK_EQ(ws.stored, 0);
    /* exactly at warning: no refill either way */
    ws.stored = 50;
    sw_warmup_sync(&w, &ws, 1002000, 0, false);
    CHECK_EQ(ws.stored, 50);
    CHECK_NEAR(sw_warmup_rate(&w, &ws), 10.0, 1e-12);

    /* rule (b): max <= warning, no ramp */
    CHECK_EQ(sw_warmup_init(&w, 1, 1, 3), SW_OK);
    sw_warm_state_init(&ws);
    CHECK_EQ(w.warning, 0);
    CHECK_EQ(w.max_token, 0);
    CHECK_EQ(w.ramp, 0);
    CHECK(sw_warmup_rate(&w, &ws) == 1.0);
    CHECK_EQ(sw_warmup_init(&w, 5, 0, 3), SW_OK);
    sw_warm_state_init(&ws);
    CHECK_EQ(w.ramp, 0);
    CHECK(sw_warmup_rate(&w, &ws) == 5.0);
    CHECK_EQ(sw_warmup_init(&w, 0, 10, 3), SW_OK);
    sw_warm_state_init(&ws);
    CHECK_EQ(w.ramp, 0);

    /* checks */
    CHECK_EQ(sw_warmup_check(10, 10, 3), SW_OK);
    CHECK_EQ(sw_warmup_check(-1, 10, 3), SW_EINVAL);
    CHECK_EQ(sw_warmup_check(10, -1, 3), SW_EINVAL);
    CHECK_EQ(sw_warmup_check(10, 10, 1), SW_EINVAL);
    CHECK_EQ(sw_warmup_check(NAN, 10, 3), SW_EINVAL);
    CHECK_EQ(sw_warmup_check(10, INFINITY, 3), SW_EINVAL);
    CHECK_EQ(sw_warmup_check(10, 10, NAN), SW_EINVAL);
    CHECK_EQ(sw_warmup_check(1e10, 1e9, 3), SW_EINVAL);
    CHECK_EQ(sw_warmup_init(NULL, 10, 10, 3), SW_EINVAL);
    CHECK_EQ(sw_warmup_init(&w, 10, 10, 0.5), SW_EINVAL);
}

/* Drive a limiter every `step_ms` from `t0_ms` for `seconds` and count passes per second. */
static void drive(struct sw_limiter *lim, int64_t t0_ms, int64_t step_ms, int seconds,
                  int64_t *per_second)
{
    for (int s = 0; s < seconds; s++) {
        per_second[s] = 0;
        for (int64_t ms = 0; ms < 1000; ms += step_ms) {
            struct sw_decision d;
            int64_t now = MS(t0_ms + (int64_t)s * 1000 + ms) + 123; /* sub-ms noise */
            if (decide(lim, 1, now, 0, &d) == SW_PASS)
                per_second[s]++;
        }
    }
}

static void test_warm_up_limiter(void)
{
    static const int64_t expected[] = {3, 3, 3, 3, 3, 4, 4, 4, 5, 5, 6, 7, 10, 10, 10, 10};
    const int n = (int)(sizeof expected / sizeof expected[0]);
    int64_t got[16];
    /* from t = 0, and (rule a) from a clock far from 0: the same ramp */
    const int64_t starts[] = {0, INT64_C(86400000) * 365};
    for (size_t k = 0; k < 2; k++) {
        struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 10);
        struct sw_limiter *lim = lim_new(&c);
        if (lim == NULL)
            return;
        drive(lim, starts[k], 7, n, got);
        for (int s = 0; s < n; s++) {
            if (got[s] != expected[s])
                printf("  warm-up start %lld second %d:\n", (long long)starts[k], s);
            CHECK_EQ(got[s], expected[s]);
        }
        free(lim);
    }
    /* at rest it allows q / cf */
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 10);
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    drive(lim, 5000, 100, 1, got);
    CHECK_EQ(got[0], 3);
    /* n above the window limit: never */
    CHECK_EQ(decide(lim, 11, MS(7000), 0, NULL), SW_NEVER);
    /* cold allowance 3.33 per window: 3 fit, a 4th does not */
    CHECK_EQ(decide(lim, 3, MS(7000), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(7000), 0, NULL), SW_BLOCK);
    /* rule (c): the first request of an empty window passes whatever its size n <= L, so a
     * cold limiter fed only n=4 (above its 3.33 allowance) still admits and warms up */
    CHECK_EQ(decide(lim, 4, MS(9000), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(9000), 0, NULL), SW_BLOCK);

    /* rule (b): q=1, W=1 has no ramp: 1 per second at once (Sentinel: NaN, blocks all); nor
     * has W=0: q=5 per second at once. Every second driven admits q. */
    static const struct {
        double q, warm_up_s;
        int seconds;
    } at_once[] = {{1, 1, 3}, {5, 0, 2}};
    for (size_t i = 0; i < sizeof at_once / sizeof at_once[0]; i++) {
        c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, at_once[i].q);
        c.warm_up_s = at_once[i].warm_up_s;
        if (!lim_renew(&lim, &c))
            return;
        drive(lim, 0, 10, at_once[i].seconds, got);
        for (int s = 0; s < at_once[i].seconds; s++)
            CHECK_EQ(got[s], (int64_t)at_once[i].q);
    }

    /* rule (c): q=2 < cf: cold rate 0.67 would admit nothing; slidewin admits 1 per window
     * while cold, burns a token a second, and reaches q after 10 s */
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 2);
    if (!lim_renew(&lim, &c))
        return;
    drive(lim, 0, 10, 14, got);
    for (int s = 0; s < 10; s++)
        CHECK_EQ(got[s], 1);
    for (int s = 10; s < 14; s++)
        CHECK_EQ(got[s], 2);

    /* window of 2 s: the window admits allowed * 2 (cold: 6.67) */
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 10);
    c.interval_ms = 2000;
    c.sample_count = 4;
    if (!lim_renew(&lim, &c))
        return;
    drive(lim, 0, 10, 2, got);
    CHECK_EQ(got[0], 6);
    CHECK_EQ(got[1], 1); /* 97 -> 94 tokens: 3.62/s, 7.25 per window, 6 already in it */
    free(lim);
}

static void test_warm_up_throttle(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_WARM_UP_THROTTLE, 10);
    static const struct step cold[] = {
        {1, MS(1000), 0, SW_PASS, 0},       /* a fresh one admits at once */
        {1, MS(1000), 0, SW_PASS, MS(300)}, /* cold cost 300 ms */
        {1, MS(1000), 0, SW_BLOCK, MS(100)},
        {1, MS(1000), SW_F_TRY, SW_BLOCK, MS(600)},
        {1, MS(1600), SW_F_TRY, SW_PASS, 0},
    };
    CHECK_STEPS_FRESH(&c, cold);

    /* rule (b): no ramp, cost 1 s */
    static const struct step rule_b[] = {
        {1, 0, 0, SW_PASS, ANY_NS},
        {1, 0, 0, SW_BLOCK, MS(500)},
    };
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP_THROTTLE, 1);
    c.warm_up_s = 1;
    CHECK_STEPS_FRESH(&c, rule_b);

    /* rule (c): q=2, cold rate 0.67 -> at least 1 per second: cost 1 s, not 1.5 s */
    static const struct step rule_c[] = {
        {1, MS(3000), 0, SW_PASS, ANY_NS},
        {1, MS(3000), 0, SW_PASS, MS(1000)},
    };
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP_THROTTLE, 2);
    c.max_queueing_ms = 2000;
    CHECK_STEPS_FRESH(&c, rule_c);

    /* q = 0: never */
    static const struct step never[] = {{1, 0, 0, SW_NEVER, ANY_NS}};
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP_THROTTLE, 0);
    CHECK_STEPS_FRESH(&c, never);
}

void test_warmup(void)
{
    test_tokens();
    test_warm_up_limiter();
    test_warm_up_throttle();
}
