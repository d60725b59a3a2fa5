/* test_limiter.c - the limiter: reject (QPS and concurrency), borrowing, counting, exits,
 * releases, stats, configuration errors and saturation. */
#include "limiter_util.h"

#include "sw_time.h"

static void test_defaults(void)
{
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    CHECK_EQ(c.grade, SW_GRADE_QPS);
    CHECK_EQ(c.behavior, SW_REJECT);
    CHECK(c.count == 0);
    CHECK(c.warm_up_s == 10);
    CHECK(c.cold_factor == 3);
    CHECK_EQ(c.max_queueing_ms, 500);
    CHECK_EQ(c.occupy_timeout_ms, 500);
    CHECK_EQ(c.interval_ms, 1000);
    CHECK_EQ(c.sample_count, 2);
    CHECK_EQ(sw_limiter_check(&c), SW_OK); /* count 0 is a valid "never" limiter */
}

static void test_reject_qps(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    CHECK(lim->rule.limit == 10.0);
    struct sw_decision d;
    for (int i = 0; i < 4; i++)
        CHECK_EQ(decide(lim, 1, MS(100), 0, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, 0);
    CHECK_EQ(d.occupied, 0);
    CHECK_EQ(decide(lim, 6, MS(600), 0, &d), SW_PASS);
    /* full: retry when bucket 0 (4 passes) slides out at 1000 */
    CHECK_EQ(decide(lim, 1, MS(700), SW_F_RETRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(300));
    CHECK_EQ(decide(lim, 1, MS(900) + 250000, SW_F_RETRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(100) - 250000);
    /* 5 fit only once bucket 500 slides out too (at 1500) */
    CHECK_EQ(decide(lim, 5, MS(900), SW_F_RETRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(600));
    CHECK_EQ(decide(lim, 10, MS(900), SW_F_RETRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(600));
    /* above the limit: never */
    CHECK_EQ(decide(lim, 11, MS(900), 0, &d), SW_NEVER);
    CHECK_EQ(d.retry_ns, -1);
    /* a refusal with NO_BLOCK is not counted */
    CHECK_EQ(decide(lim, 1, MS(900), SW_F_NO_BLOCK, &d), SW_BLOCK);
    CHECK_STATS(lim, MS(900), .pass = 10, .block = 1 + 1 + 5 + 10 + 11, .min_rt = SW_MIN_RT_INIT);
    /* the window slides: 4 fit at 1000 */
    for (int i = 0; i < 4; i++)
        CHECK_EQ(decide(lim, 1, MS(1000), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(1499), 0, NULL), SW_BLOCK);
    CHECK_EQ(decide(lim, 10, MS(1500), 0, NULL), SW_BLOCK); /* 4 in bucket 1000 */
    CHECK_EQ(decide(lim, 6, MS(1500), 0, NULL), SW_PASS);
    /* a caller-supplied earlier time counts into the newest bucket: still exact */
    CHECK_EQ(decide(lim, 1, MS(200), 0, NULL), SW_BLOCK);
    struct sw_stats st;
    sw_limiter_stats(lim, MS(1500), &st);
    CHECK_EQ(st.pass, 10);
    /* SW_F_ENTRY holds in-flight counts on a QPS limiter */
    CHECK_EQ(decide(lim, 3, MS(2500), SW_F_ENTRY, NULL), SW_PASS);
    CHECK_EQ(sw_limiter_in_flight(lim), 3);
    CHECK_EQ(decide(lim, 8, MS(2500), SW_F_ENTRY, NULL), SW_BLOCK);
    CHECK_EQ(sw_limiter_in_flight(lim), 3);
    CHECK_EQ(sw_limiter_exit(lim, 3, 12, SW_OUT_SUCCESS, MS(2600)), SW_OK);
    CHECK_EQ(sw_limiter_in_flight(lim), 0);

    /* interval 2000 / 4: L = 20 */
    c = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    c.interval_ms = 2000;
    c.sample_count = 4;
    if (!lim_renew(&lim, &c))
        return;
    CHECK(lim->rule.limit == 20.0);
    CHECK_EQ(decide(lim, 20, MS(0), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(1999), SW_F_RETRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(1));
    CHECK_EQ(decide(lim, 21, MS(1999), 0, NULL), SW_NEVER);
    CHECK_EQ(decide(lim, 20, MS(2000), 0, NULL), SW_PASS);

    free(lim);

    /* q = 0.5 over 2 s: one per window */
    static const struct step half[] = {
        {1, MS(0), 0, SW_PASS, ANY_NS},
        {1, MS(1999), 0, SW_BLOCK, ANY_NS},
        {2, MS(1999), 0, SW_NEVER, ANY_NS},
        {1, MS(2000), 0, SW_PASS, ANY_NS},
    };
    c = cfg_of(SW_GRADE_QPS, SW_REJECT, 0.5);
    c.interval_ms = 2000;
    CHECK_STEPS_FRESH(&c, half);

    /* q = 0: never */
    c = cfg_of(SW_GRADE_QPS, SW_REJECT, 0);
    CHECK_EQ(decide_fresh(&c, 1, MS(0), 0, &d), SW_NEVER);
    CHECK_EQ(d.retry_ns, -1);
}

static void test_occupy(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    struct sw_decision d;
    CHECK_EQ(decide(lim, 4, MS(100), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 6, MS(600), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(900), 0, &d), SW_BLOCK);
    /* TRY never borrows */
    CHECK_EQ(decide(lim, 1, MS(900), SW_F_PRIORITIZED | SW_F_TRY, &d), SW_BLOCK);
    CHECK_EQ(d.occupied, 0);
    /* prioritized: wait until bucket 1000 starts */
    CHECK_EQ(decide(lim, 1, MS(900) + 500000, SW_F_PRIORITIZED, &d), SW_PASS);
    CHECK_EQ(d.occupied, 1);
    CHECK_EQ(d.wait_ns, MS(100) - 500000);
    CHECK_EQ(decide(lim, 3, MS(900), SW_F_PRIORITIZED, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, MS(100));
    /* 10 + 4 waiting + 1 - 4 (oldest bucket) > 10 */
    CHECK_EQ(decide(lim, 1, MS(950), SW_F_PRIORITIZED, &d), SW_BLOCK);
    CHECK_EQ(d.occupied, 0);
    CHECK_STATS(lim, MS(950), .pass = 10, .block = 3, .min_rt = SW_MIN_RT_INIT, .waiting = 4,
                .occupied_pass = 4);
    /* at 1000 the granted passes are current: 6 (bucket 500) + 4; the occupied ones counted
     * in bucket 500, still in the window */
    CHECK_STATS(lim, MS(1000), .pass = 10, .block = 3, .min_rt = SW_MIN_RT_INIT,
                .occupied_pass = 4);
    CHECK_EQ(decide(lim, 1, MS(1000), 0, NULL), SW_BLOCK);
    /* previous second (minute window) does not count the borrowed passes as PASS */
    CHECK_EQ(sw_node_previous_second_pass(sw_limiter_node(lim), 1000), 10);

    /* occupy timeout 50: w = 50 at 950 is not below it, w = 49 at 951 is */
    c.occupy_timeout_ms = 50;
    if (!lim_renew(&lim, &c))
        return;
    CHECK_EQ(decide(lim, 10, MS(100), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(950), SW_F_PRIORITIZED, &d), SW_BLOCK);
    CHECK_EQ(decide(lim, 1, MS(951), SW_F_PRIORITIZED, &d), SW_PASS);
    CHECK_EQ(d.wait_ns, MS(49));
    CHECK_EQ(d.occupied, 1);
    /* bucket 0 slid out at 1000; bucket 1000 starts with the borrowed pass */
    struct sw_stats st2;
    sw_limiter_stats(lim, MS(1000), &st2);
    CHECK_EQ(st2.pass, 1);
    CHECK_EQ(decide(lim, 9, MS(1000), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(1000), 0, NULL), SW_BLOCK);

    /* behaviors other than reject ignore the flag */
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 10);
    c.warm_up_s = 0;
    if (!lim_renew(&lim, &c))
        return;
    CHECK(sw_node_fut(sw_limiter_node(lim)) != NULL); /* every state has the ring (shared layout) */
    CHECK_EQ(decide(lim, 10, MS(900), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(900), SW_F_PRIORITIZED, &d), SW_BLOCK);
    CHECK_EQ(d.occupied, 0);
    free(lim);
}

static void test_concurrency(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 2);
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    struct sw_decision d;
    CHECK_EQ(decide(lim, 1, MS(0), 0, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(0), 0, &d), SW_PASS);
    CHECK_EQ(sw_limiter_in_flight(lim), 2);
    CHECK_EQ(decide(lim, 1, MS(0), SW_F_RETRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, -1);
    CHECK_EQ(decide(lim, 3, MS(0), 0, &d), SW_NEVER);
    CHECK_EQ(sw_limiter_release(lim, 1), SW_OK);
    CHECK_EQ(sw_limiter_in_flight(lim), 1);
    CHECK_EQ(decide(lim, 2, MS(0), 0, &d), SW_BLOCK);
    CHECK_EQ(decide(lim, 1, MS(10), 0, &d), SW_PASS);
    CHECK_EQ(sw_limiter_exit(lim, 1, 5, SW_OUT_SUCCESS, MS(20)), SW_OK);
    CHECK_EQ(sw_limiter_exit(lim, 1, 0, SW_OUT_EXCEPTION, MS(20)), SW_OK);
    CHECK_EQ(sw_limiter_in_flight(lim), 0);
    CHECK_EQ(sw_limiter_release(lim, 1), SW_ESTATE);
    CHECK_EQ(sw_limiter_release(lim, 0), SW_EINVAL);
    CHECK_EQ(sw_limiter_release(lim, -1), SW_EINVAL);
    CHECK_EQ(decide(lim, 2, MS(30), 0, &d), SW_PASS);
    CHECK_EQ(sw_limiter_release(lim, 3), SW_ESTATE); /* refusal moves nothing */
    CHECK_EQ(sw_limiter_in_flight(lim), 2);
    CHECK_EQ(sw_limiter_exit(lim, 5, 0, SW_OUT_NONE, MS(40)), SW_OK); /* floors at 0 */
    CHECK_EQ(sw_limiter_in_flight(lim), 0);
    CHECK_EQ(sw_limiter_exit(lim, -1, 0, SW_OUT_NONE, MS(40)), SW_EINVAL);
    CHECK_EQ(sw_limiter_exit(lim, 1, -1, SW_OUT_SUCCESS, MS(40)), SW_EINVAL);
    CHECK_EQ(sw_limiter_exit(lim, 0, 0, SW_OUT_SUCCESS, MS(40)), SW_OK);
    /* min_rt: the RT 0 of the last exit, max(1, 0) */
    CHECK_STATS(lim, MS(40), .pass = 5, .block = 1 + 3 + 2, .success = 1, .exception = 1,
                .rt_sum = 5, .min_rt = 1);
    free(lim);

    /* concurrency 0: never */
    c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 0);
    CHECK_EQ(decide_fresh(&c, 1, MS(0), 0, NULL), SW_NEVER);
}

static void test_count_exit_stats(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_REJECT, 100);
    if (lim == NULL)
        return;
    CHECK_EQ(sw_limiter_count(lim, SW_EV_BLOCK, 2, MS(100)), SW_OK);
    CHECK_EQ(sw_limiter_count(lim, SW_EV_DEFAULT_COUNT, 1, MS(100)), SW_EEVENT);
    CHECK_EQ(sw_limiter_count(lim, SW_EV_PASS, -1, MS(100)), SW_EINVAL);
    CHECK_EQ(decide(lim, 3, MS(100), SW_F_ENTRY, NULL), SW_PASS);
    CHECK_EQ(sw_limiter_exit(lim, 1, 40, SW_OUT_SUCCESS, MS(150)), SW_OK);
    CHECK_EQ(sw_limiter_exit(lim, 1, 10, SW_OUT_SUCCESS, MS(600)), SW_OK);
    CHECK_EQ(sw_limiter_exit(lim, 1, 99, SW_OUT_EXCEPTION, MS(600)), SW_OK);
    CHECK_STATS(lim, MS(700), .pass = 3, .block = 2, .success = 2, .exception = 1, .rt_sum = 50,
                .min_rt = 10);
    CHECK_STATS(lim, MS(1100), .success = 1, .exception = 1, .rt_sum = 10, .min_rt = 10);
    struct sw_stats st;
    sw_limiter_stats(lim, MS(1600), &st);
    CHECK_EQ(st.min_rt, SW_MIN_RT_INIT);
    CHECK_EQ(st.rt_sum, 0);
    /* the locked window view sees the same ring */
    struct sw_window w;
    sw_limiter_window(lim, &w);
    CHECK(w.future != NULL);
    CHECK_EQ(sw_window_add(&w, SW_EV_PASS, 7, MS(1600)), SW_OK);
    sw_limiter_stats(lim, MS(1600), &st);
    CHECK_EQ(st.pass, 7);
    CHECK_EQ(decide(lim, 94, MS(1600), 0, NULL), SW_BLOCK);
    CHECK_EQ(decide(lim, 93, MS(1600), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(1600), 0, NULL), SW_BLOCK);
    CHECK_EQ(sw_limiter_decide(lim, 0, MS(1600), 0, &(struct sw_decision){0}), SW_EINVAL);
    CHECK_EQ(sw_limiter_decide(lim, -5, MS(1600), 0, &(struct sw_decision){0}), SW_EINVAL);
    /* SW_NOW paths */
    struct sw_decision d;
    CHECK_EQ(sw_limiter_decide(lim, 1, SW_NOW, 0, &d), SW_OK);
    CHECK(d.verdict == SW_PASS || d.verdict == SW_BLOCK);
    CHECK_EQ(sw_limiter_count(lim, SW_EV_BLOCK, 1, SW_NOW), SW_OK);
    CHECK_EQ(sw_limiter_exit(lim, 0, 1, SW_OUT_SUCCESS, SW_NOW), SW_OK);
    sw_limiter_stats(lim, SW_NOW, &st);
    CHECK(st.block >= 1 && st.success >= 0);
    free(lim);
}

static void test_check_errors(void)
{
    struct sw_limiter_cfg ok = cfg_of(SW_GRADE_QPS, SW_REJECT, 10), c;
    CHECK_EQ(sw_limiter_check(&ok), SW_OK);
    CHECK_EQ(sw_limiter_check(NULL), SW_EINVAL);
    CHECK(sw_limiter_size(NULL) == 0);
#define BAD(field, value)                                                                   \
    do {                                                                                    \
        c = ok;                                                                             \
        c.field = value;                                                                    \
        CHECK_EQ(sw_limiter_check(&c), SW_EINVAL);                                          \
        CHECK(sw_limiter_size(&c) == 0);                                                    \
    } while (0)
    BAD(grade, 2);
    BAD(grade, -1);
    BAD(behavior, -1);
    BAD(behavior, 4);
    BAD(count, -1);
    BAD(count, NAN);
    BAD(count, INFINITY);
    BAD(count, 1e16);
    BAD(count, 0.5); /* a window limit in (0, 1) can never admit anything */
    BAD(warm_up_s, -1);
    BAD(warm_up_s, NAN);
    BAD(warm_up_s, INFINITY);
    BAD(cold_factor, 1.0);
    BAD(cold_factor, 0.5);
    BAD(cold_factor, NAN);
    BAD(cold_factor, INFINITY);
    BAD(max_queueing_ms, -1);
    BAD(occupy_timeout_ms, -1);
    BAD(interval_ms, 0);
    BAD(interval_ms, -1000);
    BAD(interval_ms, 999);
    BAD(interval_ms, SW_MAX_INTERVAL_MS + 2);
    BAD(sample_count, 0);
    BAD(sample_count, 3);
    BAD(sample_count, SW_MAX_SAMPLES + 1);
#undef BAD
    c = cfg_of(SW_GRADE_CONCURRENCY, SW_WARM_UP, 10);
    CHECK_EQ(sw_limiter_check(&c), SW_EINVAL);
    c = cfg_of(SW_GRADE_CONCURRENCY, SW_THROTTLE, 10);
    CHECK_EQ(sw_limiter_check(&c), SW_EINVAL);
    /* ... but the limit-below-1 rule is for window limits only */
    c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 0.25);
    CHECK_EQ(sw_limiter_check(&c), SW_OK);
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 0.5);
    CHECK_EQ(sw_limiter_check(&c), SW_EINVAL);
    c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 0.5);
    CHECK_EQ(sw_limiter_check(&c), SW_OK);
    /* extremes that are valid */
    c = cfg_of(SW_GRADE_QPS, SW_REJECT, 9.0e15);
    c.max_queueing_ms = INT64_MAX;
    c.occupy_timeout_ms = INT64_MAX;
    c.cold_factor = 1e9;
    c.warm_up_s = 0;
    CHECK_EQ(sw_limiter_check(&c), SW_OK);
    struct sw_limiter *lim = lim_new(&c);
    if (lim != NULL) {
        CHECK_EQ(lim->rule.max_queue_ns, INT64_MAX);
        free(lim);
    }
    /* warm-up parameters whose tokens would not fit in 64 bits are refused, not UB */
    c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 1e9);
    c.warm_up_s = 1000;
    c.cold_factor = 1.0 + 1e-9;
    CHECK_EQ(sw_limiter_check(&c), SW_EINVAL);
    CHECK_EQ(sw_warmup_check(1e9, 1000, 1.0 + 1e-9), SW_EINVAL);
    c.cold_factor = 1.5;
    CHECK_EQ(sw_limiter_check(&c), SW_OK);
    /* init */
    CHECK_EQ(sw_limiter_init(NULL, &ok), SW_EINVAL);
    struct sw_limiter *l2 = calloc(1, sw_limiter_size(&ok));
    c = ok;
    c.sample_count = 0;
    CHECK_EQ(sw_limiter_init(l2, &c), SW_EINVAL);
    CHECK_EQ(sw_limiter_init(l2, NULL), SW_EINVAL);
    CHECK_EQ(sw_limiter_init(l2, &ok), SW_OK);
    free(l2);
}

static void test_limiter_saturation(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    struct sw_decision d;
    CHECK_EQ(decide(lim, INT64_MAX, MS(0), 0, &d), SW_NEVER);
    CHECK_EQ(decide(lim, 1, -1, 0, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, INT64_MIN + 1, 0, &d), SW_PASS); /* negative: time 0 */
    CHECK_EQ(decide(lim, 8, 0, 0, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, 0, SW_F_RETRY, &d), SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(1000));
    CHECK_EQ(decide(lim, 1, -MS(5), SW_F_RETRY, &d), SW_BLOCK);
    CHECK(d.retry_ns >= MS(1000));
    CHECK_EQ(decide(lim, 10, INT64_MAX - MS(600), 0, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, INT64_MAX, SW_F_RETRY, &d), SW_BLOCK);
    CHECK(d.retry_ns >= 0);
    CHECK_EQ(decide(lim, 1, INT64_MAX, SW_F_PRIORITIZED, &d), SW_PASS);
    CHECK(d.occupied == 1 && d.wait_ns >= 0);
    struct sw_stats st;
    sw_limiter_stats(lim, INT64_MAX, &st);
    CHECK_EQ(st.pass, 10);
    CHECK_EQ(st.waiting, 1);
    CHECK_EQ(sw_limiter_count(lim, SW_EV_PASS, INT64_MAX, INT64_MAX), SW_OK);
    CHECK_EQ(sw_limiter_count(lim, SW_EV_PASS, INT64_MAX, INT64_MAX), SW_OK);
    sw_limiter_stats(lim, INT64_MAX, &st);
    CHECK_EQ(st.pass, INT64_MAX);
    CHECK_EQ(decide(lim, 1, INT64_MAX, 0, &d), SW_BLOCK);
    CHECK_EQ(decide(lim, INT64_MAX, INT64_MAX, SW_F_ENTRY, &d), SW_NEVER);

    c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 9.0e15);
    if (!lim_renew(&lim, &c))
        return;
    CHECK_EQ(decide(lim, INT64_C(9000000000000000), MS(1), 0, &d), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(1), 0, &d), SW_BLOCK);
    CHECK_EQ(decide(lim, INT64_MAX, MS(1), 0, &d), SW_NEVER);
    CHECK_EQ(sw_limiter_release(lim, INT64_MAX), SW_ESTATE);
    CHECK_EQ(sw_limiter_exit(lim, INT64_MAX, INT64_MAX, SW_OUT_SUCCESS, INT64_MAX), SW_OK);
    CHECK_EQ(sw_limiter_in_flight(lim), 0);
    free(lim);
}

void test_limiter(void)
{
    test_defaults();
    test_reject_qps();
    test_occupy();
    test_concurrency();
    test_count_exit_stats();
    test_check_errors();
    test_limiter_saturation();
}
