/* test_throttle.c - the pacing controller (design.md §5): nanosecond costs, queueing, try. */
#include "limiter_util.h"

static void test_cost(void)
{
    CHECK_EQ(sw_throttle_cost(10, 1), MS(100));
    CHECK_EQ(sw_throttle_cost(10, 3), MS(300));
    CHECK_EQ(sw_throttle_cost(4000, 1), 250000);
    CHECK_EQ(sw_throttle_cost(3000, 1), 333333);   /* 333333.33 */
    CHECK_EQ(sw_throttle_cost(1500, 1), 666667);   /* 666666.67 */
    CHECK_EQ(sw_throttle_cost(4e8, 1), 3);         /* 2.5 rounds half up */
    CHECK_EQ(sw_throttle_cost(0.25, 1), INT64_C(4000000000));
    CHECK_EQ(sw_throttle_cost(0, 1), INT64_MAX);
    CHECK_EQ(sw_throttle_cost(-1, 1), INT64_MAX);
    CHECK_EQ(sw_throttle_cost(NAN, 1), INT64_MAX);
    CHECK_EQ(sw_throttle_cost(1, INT64_MAX), INT64_MAX);
    CHECK_EQ(sw_throttle_cost(1e-300, 1), INT64_MAX);
    CHECK_EQ(sw_throttle_cost(9e15, 1), 1); /* at least 1 ns: 0 would admit without end */
    CHECK_EQ(sw_throttle_cost(2.5e9, 1), 1);
}

static void test_reserve(void)
{
    struct sw_throttle th;
    sw_throttle_init(&th);
    int64_t w = -1, r = -2;
    CHECK(sw_throttle_reserve(&th, 100, 5000, 0, false, &w, &r));
    CHECK_EQ(w, 0);
    CHECK_EQ(r, -1);
    CHECK_EQ(th.last_ns, 5000);
    /* queue 0: only a zero wait passes */
    CHECK(!sw_throttle_reserve(&th, 100, 5050, 0, false, &w, &r));
    CHECK_EQ(r, 50);
    CHECK(sw_throttle_reserve(&th, 100, 5100, 0, false, &w, &r));
    CHECK_EQ(th.last_ns, 5100);
    /* an earlier caller never moves last backwards */
    CHECK(sw_throttle_reserve(&th, 100, 1000, 5000, false, &w, &r));
    CHECK_EQ(w, 4200);
    CHECK_EQ(th.last_ns, 5200);
    CHECK(!sw_throttle_reserve(&th, 100, 1000, 4200, false, &w, &r));
    CHECK_EQ(r, 100);
    CHECK_EQ(th.last_ns, 5200);
    /* try: a refusal moves nothing */
    CHECK(!sw_throttle_reserve(&th, 100, 5250, INT64_MAX, true, &w, &r));
    CHECK_EQ(r, 50);
    CHECK_EQ(th.last_ns, 5200);
    CHECK(sw_throttle_reserve(&th, 100, 5300, INT64_MAX, true, &w, &r));
    CHECK_EQ(th.last_ns, 5300);
    /* a cost of INT64_MAX saturates */
    CHECK(!sw_throttle_reserve(&th, INT64_MAX, INT64_MAX - 1, 0, false, &w, &r));
    /* at the end of time the wait is still the cost, not what fits below INT64_MAX */
    struct sw_throttle t2;
    sw_throttle_init(&t2);
    CHECK(sw_throttle_reserve(&t2, 1000, INT64_MAX - 5, 500, false, &w, &r));
    CHECK(!sw_throttle_reserve(&t2, 1000, INT64_MAX - 5, 500, false, &w, &r));
    CHECK_EQ(r, 500);
    CHECK(sw_throttle_reserve(&t2, 1000, INT64_MAX - 5, 1000, false, &w, &r));
    CHECK_EQ(w, 1000);
}

static void test_throttle_limiter(void)
{
    static const struct step burst[] = {
        /* 7 requests at one instant: 0, 100, ..., 500 ms, the 7th blocked */
        {1, MS(1000), 0, SW_PASS, 0},
        {1, MS(1000), 0, SW_PASS, MS(100)},
        {1, MS(1000), 0, SW_PASS, MS(200)},
        {1, MS(1000), 0, SW_PASS, MS(300)},
        {1, MS(1000), 0, SW_PASS, MS(400)},
        {1, MS(1000), 0, SW_PASS, MS(500)},
        {1, MS(1000), 0, SW_BLOCK, MS(100)},
    };
    static const struct step after_burst[] = {
        {1, MS(1100), 0, SW_PASS, MS(500)}, /* later: the queue drained by 100 ms */
        /* an earlier caller-supplied time: last never moves back */
        {1, MS(500), 0, SW_BLOCK, MS(700)}, /* wait 1200 ms - queue 500 ms */
        /* idle: passes at once and restarts from now */
        {1, MS(5000), 0, SW_PASS, 0},
        {2, MS(5000), 0, SW_PASS, MS(200)},
    };
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 10);
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    CHECK_STEPS(lim, burst);
    struct sw_stats st;
    sw_limiter_stats(lim, MS(1000), &st);
    CHECK_EQ(st.pass, 6);
    CHECK_EQ(st.block, 1);
    CHECK_STEPS(lim, after_burst);
    free(lim);

    /* a fresh throttle admits at once, whatever the clock reads (0 included) */
    static const struct step fresh[] = {
        {1, 0, 0, SW_PASS, 0},
        {1, MS(100), 0, SW_PASS, 0},
    };
    CHECK_STEPS_FRESH(&c, fresh);

    /* try: admits only when the wait is 0; a refusal moves nothing */
    lim = lim_new(&c);
    if (lim == NULL)
        return;
    struct sw_decision d;
    CHECK_EQ(decide(lim, 1, MS(1), SW_F_TRY, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(1), SW_F_TRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(100));
    CHECK_EQ(decide(lim, 1, MS(1), SW_F_TRY | SW_F_NO_BLOCK, &d), SW_BLOCK);
    CHECK_EQ(decide(lim, 1, MS(1), 0, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, MS(100));
    CHECK_EQ(decide(lim, 1, MS(150), SW_F_TRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(51));
    CHECK_EQ(decide(lim, 1, MS(201), SW_F_TRY, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, 0);
    sw_limiter_stats(lim, MS(201), &st);
    CHECK_EQ(st.block, 2);
    CHECK_EQ(st.pass, 3);

    /* exact ns pacing above 1000 QPS */
    c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 3000);
    if (!lim_renew(&lim, &c))
        return;
    int64_t t0 = MS(1000) + 17;
    for (int i = 0; i < 1500; i++) {
        CHECK_EQ(decide(lim, 1, t0, 0, &d), SW_PASS);
        if (d.wait_ns != (int64_t)i * 333333) {
            CHECK_EQ(d.wait_ns, (int64_t)i * 333333);
            break;
        }
    }
    CHECK_EQ(decide(lim, 1, t0, 0, &d), SW_PASS); /* 1500 * 333333 = 499.9995 ms */
    CHECK_EQ(decide(lim, 1, t0, 0, &d), SW_BLOCK);
    c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 100000);
    if (!lim_renew(&lim, &c))
        return;
    /* cost 10 us: one request every 10 us passes at once, 100000 in a second */
    int passed = 0;
    for (int64_t k = 0; k < 100000; k++)
        if (decide(lim, 1, MS(10) + k * 10000, SW_F_TRY, &d) == SW_PASS && d.wait_ns == 0)
            passed++;
    CHECK_EQ(passed, 100000);
    CHECK_EQ(decide(lim, 1, MS(10) + 100000 * INT64_C(10000) - 1, SW_F_TRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, 1);
    CHECK_EQ(decide(lim, 1, MS(10) + 100000 * INT64_C(10000) - 1, 0, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, 1);

    /* 0 < q < 0.5: one per 4 s */
    c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 0.25);
    c.max_queueing_ms = 5000;
    if (!lim_renew(&lim, &c))
        return;
    CHECK_EQ(decide(lim, 1, MS(0), 0, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(0), 0, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, MS(4000));
    CHECK_EQ(decide(lim, 1, MS(0), 0, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(3000));
    free(lim);

    /* q = 0: never */
    c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 0);
    CHECK_EQ(decide_fresh(&c, 1, MS(0), 0, &d), SW_NEVER);
    CHECK_EQ(d.retry_ns, -1);

    /* saturation: huge n, the end of time, negative times */
    c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 10);
    lim = lim_new(&c);
    if (lim == NULL)
        return;
    CHECK_EQ(decide(lim, 1, -MS(1000), 0, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, -MS(1000), 0, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, MS(100));
    CHECK_EQ(decide(lim, INT64_MAX, 0, 0, &d), SW_BLOCK);
    CHECK_EQ(decide(lim, 1, INT64_MAX - 5, 0, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, 0);
    CHECK_EQ(decide(lim, 1, INT64_MAX - 5, 0, &d), SW_PASS); /* wait = the cost, 100 ms */
    CHECK_EQ(d.wait_ns, MS(100));
    free(lim);
}

void test_throttle(void)
{
    test_cost();
    test_reserve();
    test_throttle_limiter();
}
