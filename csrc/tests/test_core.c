/* test_core.c - the slidewin C core's tests: leap array, window API, borrow ring, node,
 * errors and saturation. Entry point of the test binary (see harness.h). */
#include "harness.h"
#include "ring_util.h"

#include "sw_limiter.h"
#include "sw_time.h"

#include <stdlib.h>
#include <string.h>

long sw_t_passed = 0;
long sw_t_failed = 0;

/* docs/design.md §2's worked example, on the unlocked building blocks and on the locked view. */
static void test_worked_example(void)
{
    /* {now ms, the window's sum then}: 3 at 100 ms and 4 at 600 ms in a 1000 ms window of 2 */
    static const int64_t sums[][2] = {{600, 7}, {999, 7}, {1000, 4}, {1499, 4}, {1500, 0}};
    struct sw_leap_cfg c = {1000, 2, SW_EV_DEFAULT_COUNT, true};
    struct sw_leap *l = calloc(1, sw_leap_size(&c));
    CHECK_EQ(sw_leap_init(l, &c), SW_OK);
    sw_leap_add(l, NULL, SW_EV_PASS, 3, 100);
    sw_leap_add(l, NULL, SW_EV_PASS, 4, 600);
    for (size_t i = 0; i < sizeof sums / sizeof sums[0]; i++)
        CHECK_EQ(sw_leap_sum(l, NULL, SW_EV_PASS, sums[i][0]), sums[i][1]);
    free(l);

    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 3, MS(100)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 4, MS(600) + 999999), SW_OK);
    for (size_t i = 0; i < sizeof sums / sizeof sums[0]; i++)
        CHECK_EQ(wsum(&r, SW_EV_PASS, sums[i][0]), sums[i][1]);
    /* the other events stayed 0 */
    CHECK_EQ(wsum(&r, SW_EV_BLOCK, 1500), 0);
    ring_close(&r);
}

static void test_slot_math(void)
{
    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(r.leap->window_ms, 500);
    CHECK_EQ(sw_leap_start_of(r.leap, 0), 0);
    CHECK_EQ(sw_leap_start_of(r.leap, 499), 0);
    CHECK_EQ(sw_leap_start_of(r.leap, 500), 500);
    CHECK_EQ(sw_leap_start_of(r.leap, 1234), 1000);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 1, MS(1700)), SW_OK);
    /* slot (1700 / 500) % 2 = 1, start 1500 */
    CHECK_EQ(r.leap->newest, 1500);
    CHECK_EQ(r.leap->newest_idx, 1);
    CHECK_EQ(sw_leap_cslot(r.leap, 1)[SW_SLOT_START], 1500);
    CHECK_EQ(sw_leap_cslot(r.leap, 1)[SW_SLOT_COUNTS + SW_EV_PASS], 1);
    CHECK_EQ(sw_leap_cslot(r.leap, 0)[SW_SLOT_START], SW_LEAP_EMPTY);
    CHECK(sw_leap_find(r.leap, 1500) == sw_leap_cslot(r.leap, 1));
    CHECK(sw_leap_find(r.leap, 1000) == NULL);
    CHECK(sw_leap_find(r.leap, -500) == NULL);
    ring_close(&r);

    /* 3 x 300 ms: t=1000 -> start 900, slot 3 % 3 = 0; t=1250 -> start 1200, slot 1 */
    ring_open(&r, 900, 3, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_leap_start_of(r.leap, 1000), 900);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_BLOCK, 2, MS(1000)), SW_OK);
    CHECK_EQ(sw_leap_cslot(r.leap, 0)[SW_SLOT_START], 900);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_BLOCK, 5, MS(1250)), SW_OK);
    CHECK_EQ(sw_leap_cslot(r.leap, 1)[SW_SLOT_START], 1200);
    CHECK_EQ(wsum(&r, SW_EV_BLOCK, 1250), 7);
    CHECK_EQ(wsum(&r, SW_EV_BLOCK, 1799), 7);
    CHECK_EQ(wsum(&r, SW_EV_BLOCK, 1800), 5); /* bucket 900 slid out at 900 + 900 */
    CHECK_EQ(wsum(&r, SW_EV_BLOCK, 2100), 0);
    ring_close(&r);
}

static void test_reset_in_place_and_refresh(void)
{
    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    const int64_t *s0 = sw_leap_cslot(r.leap, 0);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 3, MS(100)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&r.w, 40, MS(100)), SW_OK);
    CHECK_EQ(s0[SW_SLOT_START], 0);
    CHECK_EQ(s0[SW_SLOT_MIN_RT], 40);
    /* t=1100 falls in the same slot: reset in place, then add */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 2, MS(1100)), SW_OK);
    CHECK(sw_leap_cslot(r.leap, 0) == s0);
    CHECK_EQ(s0[SW_SLOT_START], 1000);
    CHECK_EQ(s0[SW_SLOT_COUNTS + SW_EV_PASS], 2);
    CHECK_EQ(s0[SW_SLOT_COUNTS + SW_EV_RT], 0);
    CHECK_EQ(s0[SW_SLOT_MIN_RT], SW_MIN_RT_INIT);
    ring_close(&r);

    /* a read refreshes the slot of t */
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    s0 = sw_leap_cslot(r.leap, 0);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 3, MS(100)), SW_OK);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 1100), 0);
    CHECK_EQ(s0[SW_SLOT_START], 1000);
    CHECK_EQ(s0[SW_SLOT_COUNTS + SW_EV_PASS], 0);
    /* a current read refreshes too */
    CHECK_EQ(wcur(&r, SW_EV_PASS, 1600), 0);
    CHECK_EQ(sw_leap_cslot(r.leap, 1)[SW_SLOT_START], 1500);
    /* reset forgets everything, the newest time included */
    sw_window_reset(&r.w);
    CHECK_EQ(r.leap->newest, SW_LEAP_EMPTY);
    CHECK_EQ(s0[SW_SLOT_START], SW_LEAP_EMPTY);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 1, MS(100)), SW_OK);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 100), 1);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 100), 1);
    ring_close(&r);
}

static void test_previous(void)
{
    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 3, MS(100)), SW_OK);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 100), 0); /* bucket -500 does not exist */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 4, MS(600)), SW_OK);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 600), 3);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 999), 3);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 1000), 4);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 1499), 4);
    /* previous refreshes nothing: slot 0 still holds bucket 0, not 1000 */
    CHECK_EQ(sw_leap_cslot(r.leap, 0)[SW_SLOT_START], 0);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 1500), 0); /* bucket 1000 never started */
    /* ... but the clamp applies: 1500 is now the newest, an earlier time reads 1500 */
    CHECK_EQ(r.leap->newest, 1500);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 700), 0);
    ring_close(&r);

    /* sample_count == 1: the previous bucket shares the current bucket's slot */
    ring_open(&r, 1000, 1, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 5, MS(100)), SW_OK);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 100), 0);  /* not the current bucket (Sentinel #3309) */
    CHECK_EQ(wcur(&r, SW_EV_PASS, 100), 5);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 1500), 5); /* slot still holds bucket 0 */
    CHECK_EQ(wcur(&r, SW_EV_PASS, 1500), 0);  /* now it holds bucket 1000 */
    CHECK_EQ(wprev(&r, SW_EV_PASS, 1500), 0);
    CHECK_EQ(wprev(&r, SW_EV_PASS, 3500), 0); /* bucket 2000 never existed */
    ring_close(&r);
}

static void test_clamp(void)
{
    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 1, MS(1200)), SW_OK);
    /* a time behind the newest bucket lands in the newest bucket: no lost count */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 2, MS(700)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 4, MS(300)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 8, 0), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 16, -MS(5)), SW_OK);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 1000), 31);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 1499), 31);
    /* reads are clamped too: an earlier read sees the newest bucket, not an old one */
    CHECK_EQ(wsum(&r, SW_EV_PASS, 200), 31);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 200), 31);
    /* a time inside the newest bucket but before an earlier call's time is not clamped */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 1, MS(1010)), SW_OK);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 1499), 32);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 2499), 0);
    /* now 2000 is the newest: 1900 counts into it */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 3, MS(1900)), SW_OK);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 2000), 3);
    CHECK_EQ(sw_leap_clamp(r.leap, 10), 2000);
    CHECK_EQ(sw_leap_clamp(r.leap, 2100), 2100);
    CHECK_EQ(sw_leap_clamp(r.leap, -1), 2000);
    ring_close(&r);

    /* a fresh ring clamps negatives to 0 */
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_leap_clamp(r.leap, -7), 0);
    CHECK_EQ(r.leap->newest, 0);
    ring_close(&r);
}

static void test_min_rt(void)
{
    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(wminrt(&r, 0), SW_MIN_RT_INIT); /* no data */
    CHECK_EQ(sw_window_add_rt(&r.w, 30, MS(100)), SW_OK);
    CHECK_EQ(wminrt(&r, 100), 30);
    CHECK_EQ(sw_window_add_rt(&r.w, 7000, MS(600)), SW_OK); /* only goes down */
    CHECK_EQ(wminrt(&r, 600), 30);
    CHECK_EQ(sw_window_add_rt(&r.w, 20, MS(700)), SW_OK);
    CHECK_EQ(wminrt(&r, 999), 20);
    CHECK_EQ(wminrt(&r, 1100), 20); /* bucket 500 still valid */
    CHECK_EQ(sw_window_add_rt(&r.w, 25, MS(1100)), SW_OK);
    CHECK_EQ(wminrt(&r, 1499), 20);
    CHECK_EQ(wminrt(&r, 1500), 25);
    CHECK_EQ(wminrt(&r, 2000), SW_MIN_RT_INIT); /* window empty again */
    CHECK_EQ(sw_window_add_rt(&r.w, 0, MS(2000)), SW_OK);
    CHECK_EQ(wminrt(&r, 2000), 1); /* max(1, min) */
    int64_t m = 0, rt = 0, succ = -1;
    CHECK_EQ(sw_window_rt(&r.w, MS(2000), &m, &rt, &succ), SW_OK);
    CHECK_EQ(m, 1);
    CHECK_EQ(rt, 0);
    CHECK_EQ(succ, 0);
    CHECK_EQ(sw_window_add_rt(&r.w, 12, MS(2100)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_SUCCESS, 2, MS(2100)), SW_OK);
    CHECK_EQ(sw_window_rt(&r.w, MS(2100), &m, &rt, &succ), SW_OK);
    CHECK_EQ(m, 1);
    CHECK_EQ(rt, 12);
    CHECK_EQ(succ, 2);
    CHECK_EQ(sw_window_add_rt(&r.w, -1, MS(2100)), SW_EINVAL);
    ring_close(&r);
}

static void test_user_events_and_window_errors(void)
{
    struct ring r;
    ring_open(&r, 4000, 4, 3, false, false);
    CHECK_EQ(r.leap->window_ms, 1000);
    CHECK_EQ(sw_window_add(&r.w, 2, 10, MS(100)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, 0, 1, MS(1100)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, 1, 5, MS(2100)), SW_OK);
    CHECK_EQ(wprev(&r, 1, 3000), 5);
    CHECK_EQ(wsum(&r, 2, 3999), 10);
    CHECK_EQ(wsum(&r, 2, 4000), 0);
    CHECK_EQ(wsum(&r, 0, 4000), 1);
    CHECK_EQ(wsum(&r, 1, 4000), 5);
    CHECK_EQ(wprev(&r, 1, 3000), 0); /* clamped to 4000: bucket 3000 */
    /* errors */
    int64_t v = 77;
    CHECK_EQ(sw_window_add(&r.w, 3, 1, MS(100)), SW_EEVENT);
    CHECK_EQ(sw_window_add(&r.w, 99, 1, MS(100)), SW_EEVENT);
    CHECK_EQ(sw_window_add(&r.w, 0, -1, MS(100)), SW_EINVAL);
    CHECK_EQ(sw_window_add(&r.w, 0, 0, MS(5000)), SW_OK); /* n = 0 is allowed */
    CHECK_EQ(sw_window_add_rt(&r.w, 5, MS(100)), SW_ENORT);
    CHECK_EQ(sw_window_rt(&r.w, MS(100), &v, NULL, NULL), SW_ENORT);
    CHECK_EQ(v, 77);
    CHECK_EQ(sw_window_read(&r.w, SW_READ_SUM, 3, MS(100), &v), SW_EEVENT);
    CHECK_EQ(v, 77);
    ring_close(&r);

    /* a user set may have up to SW_MAX_EVENTS */
    ring_open(&r, 1000, 1, SW_MAX_EVENTS, false, false);
    CHECK_EQ(sw_window_add(&r.w, SW_MAX_EVENTS - 1, 9, MS(1)), SW_OK);
    CHECK_EQ(wsum(&r, SW_MAX_EVENTS - 1, 1), 9);
    CHECK_EQ(sw_window_add(&r.w, SW_MAX_EVENTS, 9, MS(1)), SW_EEVENT);
    ring_close(&r);
}

static void test_buckets(void)
{
    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    int64_t out[2 * (2 + SW_EV_DEFAULT_COUNT)];
    const size_t st = 2 + SW_EV_DEFAULT_COUNT;
    CHECK_EQ(sw_window_buckets(&r.w, MS(100), out), 1); /* bucket -500 is skipped */
    CHECK_EQ(out[SW_SLOT_START], 0);
    CHECK_EQ(out[SW_SLOT_MIN_RT], SW_MIN_RT_INIT);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 3, MS(100)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 4, MS(600)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&r.w, 9, MS(600)), SW_OK);
    memset(out, 0xff, sizeof out);
    CHECK_EQ(sw_window_buckets(&r.w, MS(700), out), 2);
    CHECK_EQ(out[SW_SLOT_START], 0);
    CHECK_EQ(out[SW_SLOT_COUNTS + SW_EV_PASS], 3);
    CHECK_EQ(out[st + SW_SLOT_START], 500);
    CHECK_EQ(out[st + SW_SLOT_COUNTS + SW_EV_PASS], 4);
    CHECK_EQ(out[st + SW_SLOT_MIN_RT], 9);
    CHECK_EQ(out[st + SW_SLOT_COUNTS + SW_EV_RT], 9);
    /* clamped: an earlier time gives the same buckets */
    CHECK_EQ(sw_window_buckets(&r.w, MS(200), out), 2);
    CHECK_EQ(out[st + SW_SLOT_START], 500);
    /* later: missing buckets come out as zeros, oldest first */
    CHECK_EQ(sw_window_buckets(&r.w, MS(1600), out), 2);
    CHECK_EQ(out[SW_SLOT_START], 1000);
    CHECK_EQ(out[SW_SLOT_COUNTS + SW_EV_PASS], 0);
    CHECK_EQ(out[st + SW_SLOT_START], 1500);
    CHECK_EQ(out[st + SW_SLOT_COUNTS + SW_EV_PASS], 0);
    ring_close(&r);
}

static void test_leap_check(void)
{
    struct sw_leap_cfg ok = {1000, 2, SW_EV_DEFAULT_COUNT, true};
    CHECK_EQ(sw_leap_check(&ok), SW_OK);
    /* header + 2 slots of 8 words + 2 total words per event + the min_rt deque (2 x 4 B) */
    CHECK(sw_leap_size(&ok) == sizeof(struct sw_leap) + (2 * 8 + 2 * 6) * sizeof(int64_t) + 8);
    struct sw_leap_cfg user = {1000, 2, 3, false};
    CHECK(sw_leap_size(&user) == sizeof(struct sw_leap) + (2 * 5 + 2 * 3) * sizeof(int64_t));
    CHECK_EQ(sw_leap_check(NULL), SW_EINVAL);
    CHECK(sw_leap_size(NULL) == 0);
    struct sw_leap_cfg bad[] = {
        {0, 2, 6, true},                        /* interval 0 */
        {-1000, 2, 6, true},                    /* negative */
        {SW_MAX_INTERVAL_MS + 2, 2, 6, true},   /* too long */
        {1000, 0, 6, true},                     /* no samples */
        {200002, SW_MAX_SAMPLES + 1, 6, true},  /* too many samples (interval divisible) */
        {1000, 3, 6, true},                     /* not divisible */
        {1000, 2, 0, false},                    /* no events */
        {1000, 2, SW_MAX_EVENTS + 1, false},    /* too many events */
        {1000, 2, 3, true},                     /* RT needs the default set */
        {1000, 2000, 6, true},                  /* window of 0 ms (1000 % 2000 != 0) */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ(sw_leap_check(&bad[i]), SW_EINVAL);
        CHECK(sw_leap_size(&bad[i]) == 0);
    }
    struct sw_leap_cfg edge[] = {
        {SW_MAX_INTERVAL_MS, 1, 6, true},
        {100000, SW_MAX_SAMPLES, 1, false},
        {1, 1, SW_MAX_EVENTS, false},
    };
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        CHECK_EQ(sw_leap_check(&edge[i]), SW_OK);
    struct sw_leap *l = calloc(1, sw_leap_size(&ok));
    CHECK_EQ(sw_leap_init(NULL, &ok), SW_EINVAL);
    CHECK_EQ(sw_leap_init(l, NULL), SW_EINVAL);
    CHECK_EQ(sw_leap_init(l, &bad[0]), SW_EINVAL);
    CHECK_EQ(sw_leap_init(l, &ok), SW_OK);
    free(l);

    /* the largest ring works at both ends of time */
    struct ring r;
    ring_open(&r, 100000, SW_MAX_SAMPLES, 1, false, false);
    CHECK_EQ(sw_window_add(&r.w, 0, 1, 0), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, 0, 1, MS(99999)), SW_OK);
    CHECK_EQ(wsum(&r, 0, 99999), 2);
    CHECK_EQ(wsum(&r, 0, 100000), 1);
    ring_close(&r);
}

static void test_saturation(void)
{
    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, INT64_MAX, MS(100)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, INT64_MAX, MS(100)), SW_OK);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 100), INT64_MAX);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, INT64_MAX, MS(600)), SW_OK);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 600), INT64_MAX);
    CHECK_EQ(sw_window_add_rt(&r.w, INT64_MAX, MS(600)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&r.w, INT64_MAX, MS(600)), SW_OK);
    int64_t m = 0, rt = 0, s = 0;
    CHECK_EQ(sw_window_rt(&r.w, MS(600), &m, &rt, &s), SW_OK);
    CHECK_EQ(rt, INT64_MAX);
    CHECK_EQ(m, SW_MIN_RT_INIT);
    /* the end of time */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_BLOCK, 1, INT64_MAX), SW_OK);
    int64_t tmax = INT64_MAX / 1000000;
    CHECK_EQ(r.leap->newest, tmax - tmax % 500);
    int64_t v = -1;
    CHECK_EQ(sw_window_read(&r.w, SW_READ_SUM, SW_EV_BLOCK, INT64_MAX, &v), SW_OK);
    CHECK_EQ(v, 1);
    CHECK_EQ(sw_window_read(&r.w, SW_READ_SUM, SW_EV_BLOCK, INT64_MIN + 1, &v), SW_OK);
    CHECK_EQ(v, 1); /* clamped to the end of time */
    int64_t out[2 * 8];
    CHECK_EQ(sw_window_buckets(&r.w, INT64_MAX, out), 2);
    CHECK_EQ(out[8 + SW_SLOT_COUNTS + SW_EV_BLOCK], 1);
    ring_close(&r);

    CHECK_EQ(sw_ms_of_ns(0), 0);
    CHECK_EQ(sw_ms_of_ns(-1), 0);
    CHECK_EQ(sw_ms_of_ns(INT64_MIN), 0);
    CHECK_EQ(sw_ms_of_ns(999999), 0);
    CHECK_EQ(sw_ms_of_ns(1000000), 1);
    CHECK_EQ(sw_ms_of_ns(INT64_MAX), INT64_MAX / 1000000);
    CHECK_EQ(sw_sat_add(INT64_MAX, 1), INT64_MAX);
    CHECK_EQ(sw_sat_add(INT64_MIN, -1), INT64_MIN);
    CHECK_EQ(sw_sat_sub(INT64_MIN, 1), INT64_MIN);
    CHECK_EQ(sw_sat_sub(INT64_MAX, -1), INT64_MAX);
    CHECK_EQ(sw_sat_sub(5, 7), -2);
    CHECK_EQ(sw_sat_mul(INT64_MAX, 2), INT64_MAX);
    CHECK_EQ(sw_sat_mul(INT64_MAX, -2), INT64_MIN);
    CHECK_EQ(sw_sat_mul(-3, 4), -12);

    /* SW_NOW reads the (coarse) clock: the count lands now */
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, false);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 2, SW_NOW), SW_OK);
    CHECK_EQ(sw_window_read(&r.w, SW_READ_SUM, SW_EV_PASS, SW_NOW, &v), SW_OK);
    CHECK(v == 2 || v == 0); /* 0 only if a whole second passed in between */
    ring_close(&r);
}

void test_leap(void)
{
    test_worked_example();
    test_slot_math();
    test_reset_in_place_and_refresh();
    test_previous();
    test_clamp();
    test_min_rt();
    test_user_events_and_window_errors();
    test_buckets();
    test_leap_check();
    test_saturation();
}

/* ---- the borrow ring (docs/design.md §4) ---- */

void test_borrow(void)
{
    struct sw_leap_cfg wc = {1000, 2, SW_EV_DEFAULT_COUNT, true}, fc;
    sw_borrow_cfg(&wc, &fc);
    CHECK_EQ(fc.interval_ms, 1000);
    CHECK_EQ(fc.sample_count, 2);
    CHECK_EQ(fc.n_events, 1);
    CHECK(!fc.has_rt);

    struct ring r;
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, true);
    /* waiting: future buckets with start strictly after t */
    CHECK_EQ(sw_borrow_waiting(r.fut, 0), 0);
    sw_borrow_add(r.fut, 1000, 2);
    sw_borrow_add(r.fut, 1250, 1); /* same bucket 1000 */
    CHECK_EQ(sw_borrow_waiting(r.fut, 999), 3);
    CHECK_EQ(sw_borrow_waiting(r.fut, 1000), 0);
    /* transfer into the restarted bucket 1000 */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 4, MS(600)), SW_OK);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 999), 4); /* not yet current */
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 1, MS(1100)), SW_OK);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 1100), 4); /* 3 granted ahead + 1 */
    CHECK_EQ(wsum(&r, SW_EV_PASS, 1100), 8);
    /* a read that restarts the bucket transfers too */
    sw_borrow_add(r.fut, 1500, 5);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 1500), 9);
    CHECK_EQ(wcur(&r, SW_EV_PASS, 1500), 5);
    /* a grant overwrites an old future slot of the same index */
    sw_borrow_add(r.fut, 2000, 1);
    CHECK_EQ(sw_leap_cslot(r.fut, 0)[SW_SLOT_START], 2000);
    CHECK_EQ(sw_leap_cslot(r.fut, 0)[SW_SLOT_COUNTS], 1);
    CHECK_EQ(sw_borrow_waiting(r.fut, 1500), 1);
    ring_close(&r);

    /* try-occupy, L = 10, 2 x 500 ms */
    ring_open(&r, 1000, 2, SW_EV_DEFAULT_COUNT, true, true);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 4, MS(100)), SW_OK);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 6, MS(600)), SW_OK);
    int64_t g = -1;
    /* t=900: w = 100 < 500; 10 + 0 + n - 4 <= 10 for n <= 4 */
    CHECK(!sw_borrow_try_occupy(r.leap, r.fut, 900, 5, 10.0, 500, &g));
    CHECK(sw_borrow_try_occupy(r.leap, r.fut, 900, 4, 10.0, 500, &g));
    CHECK_EQ(g, 1000);
    /* w must be strictly below the timeout */
    CHECK(!sw_borrow_try_occupy(r.leap, r.fut, 900, 1, 10.0, 100, &g));
    CHECK(sw_borrow_try_occupy(r.leap, r.fut, 900, 1, 10.0, 101, &g));
    /* t=600: w = 400 */
    CHECK(!sw_borrow_try_occupy(r.leap, r.fut, 600, 1, 10.0, 400, &g));
    sw_borrow_add(r.fut, g, 4);
    /* with 4 waiting: 10 + 4 + 1 - 4 > 10 */
    CHECK(!sw_borrow_try_occupy(r.leap, r.fut, 900, 1, 10.0, 500, &g));
    CHECK(sw_borrow_try_occupy(r.leap, r.fut, 900, 1, 11.0, 500, &g));
    /* waiting >= L refuses whatever else */
    sw_borrow_add(r.fut, 1000, 6);
    CHECK_EQ(sw_borrow_waiting(r.fut, 900), 10);
    CHECK(!sw_borrow_try_occupy(r.leap, r.fut, 900, 1, 10.0, 500, &g));
    /* the window moves on: bucket 1000 starts with the 10 granted */
    CHECK_EQ(wcur(&r, SW_EV_PASS, 1000), 10);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 1000), 16);
    ring_close(&r);

    /* sample_count 1: the oldest bucket is the current one */
    ring_open(&r, 1000, 1, SW_EV_DEFAULT_COUNT, true, true);
    CHECK_EQ(sw_window_add(&r.w, SW_EV_PASS, 10, MS(100)), SW_OK);
    CHECK(sw_borrow_try_occupy(r.leap, r.fut, 700, 10, 10.0, 500, &g));
    CHECK_EQ(g, 1000);
    CHECK(!sw_borrow_try_occupy(r.leap, r.fut, 400, 10, 10.0, 500, &g)); /* w = 600 */
    ring_close(&r);
}

/* ---- node ---- */

void test_node(void)
{
    struct sw_node_cfg nc = {1000, 2, true};
    size_t sz = sw_node_size(&nc);
    CHECK(sz > 0);
    struct sw_node_cfg nb = {1000, 2, false};
    CHECK(sw_node_size(&nb) > 0 && sw_node_size(&nb) < sz);
    struct sw_node_cfg bad = {1000, 3, true};
    CHECK(sw_node_size(&bad) == 0);
    CHECK(sw_node_size(NULL) == 0);
    struct sw_node *node = calloc(1, sz);
    CHECK_EQ(sw_node_init(NULL, &nc), SW_EINVAL);
    CHECK_EQ(sw_node_init(node, &bad), SW_EINVAL);
    CHECK_EQ(sw_node_init(node, &nc), SW_OK);
    CHECK(sw_node_fut(node) != NULL);
    CHECK_EQ(node->size, sz);
    CHECK_EQ(sw_node_min(node)->interval_ms, SW_MINUTE_INTERVAL_MS);
    CHECK_EQ(sw_node_min(node)->sample_count, SW_MINUTE_SAMPLES);
    sw_node_add(node, SW_EV_PASS, 3, 100);
    sw_node_add(node, SW_EV_PASS, 4, 900);
    sw_node_add(node, SW_EV_PASS, 5, 1200);
    sw_node_add_rt(node, 17, 1200);
    CHECK_EQ(sw_node_pass(node, 1200), 9);
    CHECK_EQ(sw_node_previous_second_pass(node, 1200), 7);
    CHECK_EQ(sw_node_previous_second_pass(node, 2000), 5);
    CHECK_EQ(sw_node_previous_second_pass(node, 3000), 0);
    CHECK_EQ(sw_leap_sum(sw_node_min(node), NULL, SW_EV_PASS, 3000), 12);
    CHECK_EQ(sw_leap_min_rt(sw_node_min(node), NULL, 3000), 17);
    CHECK_EQ(sw_node_waiting(node, 3000), 0);
    sw_borrow_add(sw_node_fut(node), 3500, 2);
    CHECK_EQ(sw_node_waiting(node, 3100), 2);
    node->in_flight = 3;
    sw_node_reset(node);
    CHECK_EQ(node->in_flight, 3);
    CHECK_EQ(sw_node_pass(node, 0), 0);
    CHECK_EQ(sw_node_waiting(node, 0), 0);
    free(node);

    node = calloc(1, sw_node_size(&nb));
    CHECK_EQ(sw_node_init(node, &nb), SW_OK);
    CHECK(sw_node_fut(node) == NULL);
    CHECK_EQ(sw_node_waiting(node, 100), 0);
    free(node);
}

/* ---- strerror and the clock ---- */

void test_misc(void)
{
    int codes[] = {SW_OK, SW_EINVAL, SW_ENOMEM, SW_ERANGE, SW_ENORT, SW_EEVENT, SW_ESTATE, SW_EOS, SW_EBUSY};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = sw_strerror(codes[i]);
        CHECK(s != NULL && s[0] != '\0' && strcmp(s, "unknown error") != 0);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(s, sw_strerror(codes[j])) != 0);
    }
    CHECK(strcmp(sw_strerror(SW_OK), "success") == 0);
    CHECK(strcmp(sw_strerror(-1), "unknown error") == 0);
    CHECK(strcmp(sw_strerror(9), "unknown error") == 0);
    CHECK(strcmp(sw_strerror(INT32_MAX), "unknown error") == 0);

    int64_t a = sw_time_ns(), b = sw_time_ns();
    CHECK(a > 0 && b >= a);
    int64_t c = sw_time_coarse_ns();
    CHECK(c > 0);
    CHECK(c <= sw_time_ns());
    int64_t res = sw_time_coarse_resolution_ns();
    CHECK(res >= 1 && res <= INT64_C(100000000));
    CHECK(sw_time_ns() - c <= res + INT64_C(50000000));
}

int main(void)
{
    test_misc();
    test_leap();
    test_borrow();
    test_totals();
    test_node();
    test_limiter();
    test_warmup();
    test_throttle();
    test_stress();
    test_shm();
    test_keyed();
    test_keyed_stripes();
    test_observe();
    test_adaptive();
    test_group();
    test_breaker();
    test_evleap();
    test_region_read();
    test_lease();
    printf("%ld passed, %ld failed\n", sw_t_passed, sw_t_failed);
    return sw_t_failed == 0 ? 0 : 1;
}
