/* test_totals.c - the running totals and the min_rt deque of a ring (O(1) reads): far
 * jumps, jumps of sample_count - 1 / sample_count / sample_count + 1 buckets, late times,
 * reset, sample_count 1, the borrow ring, saturation beyond int64. Each case is checked
 * against the plain definition (design.md §2-4) and against a re-sum of the ring's own slots. */
#include "harness.h"
#include "ring_util.h"

#include "sw_limiter.h"

#include <stdlib.h>
#include <string.h>

static void add(struct ring *r, uint32_t ev, int64_t n, int64_t ms)
{
    CHECK_EQ(sw_window_add(&r->w, ev, n, MS(ms)), SW_OK);
}

/* The plain O(n) sum over the slots in (head - interval, head], saturated. */
static int64_t resum(const struct sw_leap *l, uint32_t ev)
{
    int64_t s = 0;
    for (uint32_t i = 0; i < l->sample_count; i++) {
        const int64_t *slot = sw_leap_cslot(l, i);
        if (slot[SW_SLOT_START] != SW_LEAP_EMPTY && slot[SW_SLOT_START] <= l->head &&
            slot[SW_SLOT_START] > l->head - l->interval_ms)
            s = sw_sat_add(s, slot[SW_SLOT_COUNTS + ev]);
    }
    return s;
}

static void check_resum(const struct sw_leap *l)
{
    for (uint32_t e = 0; e < l->n_events; e++)
        CHECK_EQ(sw_leap_held_sum(l, e), resum(l, e));
}

/* 5 x 100 ms, buckets 0..400 hold 1, 2, 4, 8, 16 passes; then a jump of k buckets from the
 * newest (400). Window after the jump: starts in (400 + 100k - 500, 400 + 100k]. */
static void test_jumps(void)
{
    static const int64_t ks[] = {1, 2, 3, 4, 5, 6, 7, 10, 1000, INT64_C(1) << 30};
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
        int64_t k = ks[j];
        struct ring r;
        ring_open(&r, 500, 5, SW_EV_DEFAULT_COUNT, true, false);
        for (int64_t b = 0; b < 5; b++) {
            add(&r, SW_EV_PASS, INT64_C(1) << b, b * 100 + 7);
            CHECK_EQ(sw_window_add_rt(&r.w, 50 - b, MS(b * 100)), SW_OK);
        }
        CHECK_EQ(wsum(&r, SW_EV_PASS, 499), 31);
        CHECK_EQ(wminrt(&r, 499), 46);
        int64_t now = 400 + k * 100;
        int64_t expect = 0, expect_rt = SW_MIN_RT_INIT;
        for (int64_t b = 0; b < 5; b++)
            if (b * 100 > now - 500) {
                expect += INT64_C(1) << b;
                expect_rt = 50 - b;
            }
        CHECK_EQ(wsum(&r, SW_EV_PASS, now), expect);
        CHECK_EQ(wsum(&r, SW_EV_PASS, now + 99), expect);
        CHECK_EQ(wminrt(&r, now), expect_rt);
        CHECK_EQ(r.leap->head, now);
        check_resum(r.leap);
        if (k >= 5) {
            /* past the whole ring: O(1), the four stale slots are not even touched */
            uint32_t fresh = sw_leap_index(r.leap, now);
            for (uint32_t i = 0; i < 5; i++)
                if (i != fresh)
                    CHECK_EQ(sw_leap_cslot(r.leap, i)[SW_SLOT_START], (int64_t)i * 100);
        }
        /* the ring goes on working from there */
        add(&r, SW_EV_PASS, 100, now);
        int64_t later = 100;
        for (int64_t b = 0; b < 5; b++)
            if (b * 100 > now - 400)
                later += INT64_C(1) << b;
        CHECK_EQ(wsum(&r, SW_EV_PASS, now + 100), later);
        check_resum(r.leap);
        CHECK_EQ(wsum(&r, SW_EV_PASS, now + 500), 0);
        CHECK_EQ(wminrt(&r, now + 500), SW_MIN_RT_INIT);
        ring_close(&r);
    }
}

/* Jumps of exactly sample_count - 1 / sample_count / sample_count + 1 buckets on rings of
 * every size up to 9 and on the largest ring, each bucket holding a distinct power of 2. */
static void test_jump_edges(void)
{
    static const uint32_t scs[] = {1, 2, 3, 4, 7, 9, 60, SW_MAX_SAMPLES};
    for (size_t j = 0; j < sizeof scs / sizeof scs[0]; j++) {
        uint32_t sc = scs[j];
        int64_t w = sc == SW_MAX_SAMPLES ? 1 : 10, iv = w * (int64_t)sc;
        for (int64_t d = -1; d <= 1; d++) {
            int64_t k = (int64_t)sc + d;
            if (k < 1)
                continue;
            struct ring r;
            ring_open(&r, iv, sc, SW_EV_DEFAULT_COUNT, true, false);
            uint32_t filled = sc < 40 ? sc : 40; /* the newest 40 buckets hold data */
            int64_t first = (int64_t)(sc - filled) * w;
            for (uint32_t b = 0; b < filled; b++)
                add(&r, SW_EV_BLOCK, INT64_C(1) << (b % 40), first + (int64_t)b * w);
            int64_t head = first + (int64_t)(filled - 1) * w, now = head + k * w;
            int64_t expect = 0;
            for (uint32_t b = 0; b < filled; b++)
                if (first + (int64_t)b * w > now - iv)
                    expect += INT64_C(1) << (b % 40);
            CHECK_EQ(wsum(&r, SW_EV_BLOCK, now), expect);
            CHECK_EQ(expect, k == (int64_t)sc - 1 ? INT64_C(1) << ((filled - 1) % 40) : 0);
            check_resum(r.leap);
            ring_close(&r);
        }
    }
}

/* Times behind the newest bucket are clamped into it and counted once. */
static void test_late_times(void)
{
    struct ring r;
    ring_open(&r, 400, 4, SW_EV_DEFAULT_COUNT, true, false);
    add(&r, SW_EV_PASS, 1, 350);
    add(&r, SW_EV_PASS, 2, 120);  /* late: into bucket 300 */
    add(&r, SW_EV_PASS, 4, 0);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 50), 7); /* a late read sees the newest window */
    CHECK_EQ(sw_leap_cslot(r.leap, 3)[SW_SLOT_COUNTS + SW_EV_PASS], 7);
    CHECK_EQ(sw_leap_cslot(r.leap, 1)[SW_SLOT_START], SW_LEAP_EMPTY);
    add(&r, SW_EV_PASS, 8, 500);
    add(&r, SW_EV_PASS, 16, 499); /* late again: into 500 */
    CHECK_EQ(wsum(&r, SW_EV_PASS, 699), 31);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 700), 24); /* bucket 300 slid out once, not twice */
    check_resum(r.leap);
    /* a clamp that moves `newest` ahead without starting a bucket (a previous() read) */
    int64_t v = -1;
    CHECK_EQ(sw_window_read(&r.w, SW_READ_PREVIOUS, SW_EV_PASS, MS(900), &v), SW_OK);
    CHECK_EQ(v, 0);
    CHECK_EQ(r.leap->newest, 900);
    CHECK_EQ(r.leap->head, 700); /* the read at 700 started bucket 700 */
    check_resum(r.leap);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 100), 0); /* clamped to 900: window (500, 900] */
    CHECK_EQ(r.leap->head, 900);
    check_resum(r.leap);
    ring_close(&r);
}

/* reset() forgets the totals, the deque and the newest time; earlier times work again. */
static void test_reset(void)
{
    struct ring r;
    ring_open(&r, 1000, 10, SW_EV_DEFAULT_COUNT, true, true);
    add(&r, SW_EV_PASS, 5, 5000);
    CHECK_EQ(sw_window_add_rt(&r.w, 3, MS(5000)), SW_OK);
    sw_borrow_add(r.fut, 5100, 2);
    sw_window_reset(&r.w);
    CHECK_EQ(r.leap->head, SW_LEAP_EMPTY);
    CHECK_EQ(r.fut->head, SW_LEAP_EMPTY);
    CHECK_EQ(r.leap->dq_len, 0);
    CHECK_EQ(sw_leap_held_sum(r.leap, SW_EV_PASS), 0);
    CHECK_EQ(sw_leap_held_sum(r.leap, SW_EV_RT), 0);
    CHECK_EQ(sw_leap_held_min_rt(r.leap), SW_MIN_RT_INIT);
    CHECK_EQ(sw_borrow_waiting(r.fut, 0), 0);
    add(&r, SW_EV_PASS, 1, 10);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 10), 1);
    CHECK_EQ(wminrt(&r, 10), SW_MIN_RT_INIT);
    check_resum(r.leap);
    ring_close(&r);
}

/* sample_count 1: every new bucket restarts the one slot. */
static void test_one_sample(void)
{
    struct ring r;
    ring_open(&r, 1000, 1, SW_EV_DEFAULT_COUNT, true, true);
    add(&r, SW_EV_PASS, 3, 100);
    CHECK_EQ(sw_window_add_rt(&r.w, 9, MS(100)), SW_OK);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 999), 3);
    CHECK_EQ(wminrt(&r, 999), 9);
    /* previous() reads without restarting: bucket 0 still in its slot */
    int64_t v = -1;
    CHECK_EQ(sw_window_read(&r.w, SW_READ_PREVIOUS, SW_EV_PASS, MS(1100), &v), SW_OK);
    CHECK_EQ(v, 3);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 1100), 0);
    CHECK_EQ(wminrt(&r, 1100), SW_MIN_RT_INIT);
    CHECK_EQ(sw_window_read(&r.w, SW_READ_PREVIOUS, SW_EV_PASS, MS(1100), &v), SW_OK);
    CHECK_EQ(v, 0);
    sw_borrow_add(r.fut, 2000, 4);
    CHECK_EQ(sw_borrow_waiting(r.fut, 1100), 4);
    add(&r, SW_EV_PASS, 1, 2000);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 2000), 5);
    CHECK_EQ(sw_borrow_waiting(r.fut, 2000), 0);
    add(&r, SW_EV_PASS, 1, 3000);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 3000), 1);
    check_resum(r.leap);
    ring_close(&r);
}

/* The min_rt deque: the window's minimum as buckets slide out. */
static void test_min_rt_deque(void)
{
    struct ring r;
    ring_open(&r, 400, 4, SW_EV_DEFAULT_COUNT, true, false);
    static const int64_t rts[] = {10, 20, 5, 30};
    for (int64_t b = 0; b < 4; b++)
        CHECK_EQ(sw_window_add_rt(&r.w, rts[b], MS(b * 100)), SW_OK);
    CHECK_EQ(wminrt(&r, 399), 5);
    CHECK_EQ(wminrt(&r, 400), 5);  /* bucket 0 (10) out */
    CHECK_EQ(wminrt(&r, 500), 5);  /* window (100, 500]: 5 still in */
    CHECK_EQ(wminrt(&r, 600), 30); /* 5 out */
    CHECK_EQ(wminrt(&r, 700), SW_MIN_RT_INIT);
    /* the front (the minimum) leaves exactly as its slot restarts */
    CHECK_EQ(sw_window_add_rt(&r.w, 7, MS(800)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&r.w, 8, MS(850)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&r.w, 9, MS(1000)), SW_OK);
    CHECK_EQ(wminrt(&r, 1199), 7);
    CHECK_EQ(wminrt(&r, 1200), 9);
    CHECK_EQ(r.leap->dq_len, 2); /* 1000 (9) and the new 1200 */
    sw_window_reset(&r.w);
    /* lowering the newest bucket's min drops what it dominates */
    CHECK_EQ(sw_window_add_rt(&r.w, 40, MS(900)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&r.w, 35, MS(1000)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&r.w, 50, MS(1100)), SW_OK);
    CHECK_EQ(wminrt(&r, 1100), 35);
    CHECK_EQ(sw_window_add_rt(&r.w, 36, MS(1150)), SW_OK); /* lowers bucket 1100 only */
    CHECK_EQ(wminrt(&r, 1150), 35);
    CHECK_EQ(sw_window_add_rt(&r.w, 2, MS(1199)), SW_OK);
    CHECK_EQ(wminrt(&r, 1199), 2);
    CHECK_EQ(r.leap->dq_len, 1);
    CHECK_EQ(wminrt(&r, 1499), 2);
    CHECK_EQ(wminrt(&r, 1500), SW_MIN_RT_INIT);
    /* a large ring: min_rt decreasing over 1000 buckets, then sliding out one by one */
    struct ring big;
    ring_open(&big, 1000, 1000, SW_EV_DEFAULT_COUNT, true, false);
    for (int64_t b = 0; b < 1000; b++)
        CHECK_EQ(sw_window_add_rt(&big.w, 2000 - b, MS(b)), SW_OK);
    CHECK_EQ(big.leap->dq_len, 1);
    CHECK_EQ(wminrt(&big, 999), 1001);
    for (int64_t b = 1000; b < 1500; b++)
        CHECK_EQ(sw_window_add_rt(&big.w, b, MS(b)), SW_OK);
    CHECK_EQ(wminrt(&big, 1499), 1000); /* 1000..1499 increasing: all kept */
    CHECK_EQ(big.leap->dq_len, 500);
    CHECK_EQ(wminrt(&big, 2000), 1001);
    CHECK_EQ(wminrt(&big, 2400), 1401);
    ring_close(&big);
    ring_close(&r);
}

/* The borrow ring: granted passes join the totals when their bucket starts; waiting(t)
 * visits only the future slots after t, whatever the distance of the grant. */
static void test_borrow_totals(void)
{
    struct ring r;
    ring_open(&r, 1000, 4, SW_EV_DEFAULT_COUNT, true, true);
    add(&r, SW_EV_PASS, 2, 100);
    sw_borrow_add(r.fut, 250, 3);
    CHECK_EQ(sw_borrow_waiting(r.fut, 100), 3);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 249), 2);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 250), 5); /* bucket 250 started with the 3 */
    check_resum(r.leap);
    CHECK_EQ(sw_borrow_waiting(r.fut, 250), 0);
    /* a grant further ahead than the ring: found by the full visit */
    sw_borrow_add(r.fut, 250 + 3000, 7);
    CHECK_EQ(sw_borrow_waiting(r.fut, 250), 7);
    CHECK_EQ(sw_borrow_waiting(r.fut, 3249), 7);
    CHECK_EQ(sw_borrow_waiting(r.fut, 3250), 0);
    /* grants for the next bucket, the window jumps exactly onto it and then past it */
    sw_borrow_add(r.fut, 500, 1);
    CHECK_EQ(sw_borrow_waiting(r.fut, 250), 8);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 500), 6);
    /* the bucket of 3250 starts after a far jump: the 7 granted are counted there */
    CHECK_EQ(wsum(&r, SW_EV_PASS, 3250), 7);
    CHECK_EQ(sw_leap_held_sum(r.leap, SW_EV_PASS), 7);
    check_resum(r.leap);
    /* a grant whose bucket is jumped over never counts */
    sw_borrow_add(r.fut, 3500, 9);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 3750), 7);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 9000), 0);
    check_resum(r.leap);
    ring_close(&r);
}

/* Saturation: the totals are exact beyond int64, reads saturate; sliding a saturated
 * bucket out gives back the exact rest. */
static void test_saturation_exact(void)
{
    struct ring r;
    ring_open(&r, 400, 4, SW_EV_DEFAULT_COUNT, true, false);
    add(&r, SW_EV_PASS, INT64_MAX, 0);
    add(&r, SW_EV_PASS, INT64_MAX, 0); /* the slot saturates: counted once */
    add(&r, SW_EV_PASS, INT64_MAX, 100);
    add(&r, SW_EV_PASS, INT64_MAX - 1, 200);
    add(&r, SW_EV_PASS, 5, 300);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 300), INT64_MAX);
    check_resum(r.leap);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 500), INT64_MAX); /* 200 and 300 left */
    CHECK_EQ(wsum(&r, SW_EV_PASS, 600), 5);
    check_resum(r.leap);
    CHECK_EQ(wsum(&r, SW_EV_PASS, 700), 0);
    /* the largest possible total: every slot of the largest ring at INT64_MAX */
    struct ring big;
    ring_open(&big, SW_MAX_SAMPLES, SW_MAX_SAMPLES, SW_EV_DEFAULT_COUNT, true, false);
    for (int64_t b = 0; b < SW_MAX_SAMPLES; b++)
        add(&big, SW_EV_BLOCK, INT64_MAX, b);
    CHECK_EQ(wsum(&big, SW_EV_BLOCK, SW_MAX_SAMPLES - 1), INT64_MAX);
    add(&big, SW_EV_BLOCK, 3, 2 * SW_MAX_SAMPLES - 2); /* all but the newest slid out */
    CHECK_EQ(wsum(&big, SW_EV_BLOCK, 2 * SW_MAX_SAMPLES - 2), INT64_MAX);
    check_resum(big.leap);
    CHECK_EQ(wsum(&big, SW_EV_BLOCK, 2 * SW_MAX_SAMPLES - 1), 3); /* and then the newest */
    check_resum(big.leap);
    ring_close(&big);
    ring_close(&r);
}

/* The node and limiter paths keep the totals of both of their windows. */
static void test_node_totals(void)
{
    struct sw_node_cfg nc = {1000, 10, true};
    struct sw_node *node = malloc(sw_node_size(&nc));
    CHECK(node != NULL);
    CHECK_EQ(sw_node_init(node, &nc), SW_OK);
    for (int64_t t = 0; t < 200000; t += 37) {
        sw_node_add(node, SW_EV_PASS, 1, t);
        if (t % 5 == 0)
            sw_node_add_rt(node, t % 97, t);
        check_resum(sw_node_sec(node));
        if (t % 999 == 0)
            check_resum(sw_node_min(node));
    }
    /* the limiter's window at t: starts in (198900, 199900], times 199000 .. t */
    int64_t t = 199999 - 199999 % 37, expect = 0;
    for (int64_t u = 0; u <= t; u += 37)
        expect += u >= 199000;
    CHECK_EQ(expect, 27);
    CHECK_EQ(sw_node_pass(node, t), expect);
    CHECK_EQ(sw_leap_sum(sw_node_min(node), NULL, SW_EV_PASS, t), resum(sw_node_min(node), 0));
    sw_node_reset(node);
    CHECK_EQ(sw_leap_held_sum(sw_node_sec(node), SW_EV_PASS), 0);
    CHECK_EQ(sw_leap_held_sum(sw_node_min(node), SW_EV_PASS), 0);
    free(node);
}

void test_totals(void)
{
    test_jumps();
    test_jump_edges();
    test_late_times();
    test_reset();
    test_one_sample();
    test_min_rt_deque();
    test_borrow_totals();
    test_saturation_exact();
    test_node_totals();
}
