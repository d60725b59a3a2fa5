/* test_evleap.c - the eventually consistent leap array: the same sums as the locked ring in
 * deterministic runs, no add lost by threads within a bucket, the race at a bucket's reset
 * (bounded: the adds in flight land in the old or the new bucket), saturation, and a ring
 * of garbage that never crashes. */
#include "harness.h"

#include "sw_evleap.h"
#include "sw_shm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sw_evleap *ev_new(const struct sw_leap_cfg *c)
{
    struct sw_evleap *l = calloc(1, sw_evleap_size(c));
    CHECK(l != NULL);
    CHECK_EQ(sw_evleap_init(l, c), SW_OK);
    return l;
}

static int64_t ev_sum(struct sw_evleap *l, uint32_t ev, int64_t t_ms)
{
    int64_t v = -1;
    CHECK_EQ(sw_evleap_read(l, SW_READ_SUM, ev, MS(t_ms), &v), SW_OK);
    return v;
}

/* DESIGN §2's worked example. */
static void test_ev_worked_example(void)
{
    struct sw_leap_cfg c = {1000, 2, SW_EV_DEFAULT_COUNT, true};
    struct sw_evleap *l = ev_new(&c);
    CHECK(l->n_stripes >= 1u && (l->n_stripes & (l->n_stripes - 1u)) == 0u);
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 3, MS(100)), SW_OK);
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 4, MS(600)), SW_OK);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 600), 7);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 999), 7);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 1000), 4);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 1499), 4);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 1500), 0);
    CHECK_EQ(sw_evleap_add(l, 99, 1, MS(1500)), SW_EEVENT);
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, -1, MS(1500)), SW_EINVAL);
    CHECK_EQ(sw_evleap_add_rt(l, -1, MS(1500)), SW_EINVAL);
    free(l);
}

/* Random adds, reads and resets on both rings (stripes picked at random: a read sums them
 * all) give the same answers, the clamp of a time behind the newest bucket included. */
static void test_ev_same_as_strong(void)
{
    const struct sw_leap_cfg cfgs[] = {{1000, 2, SW_EV_DEFAULT_COUNT, true},
                                       {1000, 1, SW_EV_DEFAULT_COUNT, true},
                                       {60000, 60, SW_EV_DEFAULT_COUNT, true},
                                       {90, 3, 2, false}};
    unsigned seed = 12345u;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const struct sw_leap_cfg *c = &cfgs[ci];
        struct sw_leap *s = calloc(1, sw_leap_size(c));
        CHECK_EQ(sw_leap_init(s, c), SW_OK);
        struct sw_evleap *e = ev_new(c);
        int64_t *bs = calloc((size_t)c->sample_count * (2u + c->n_events), sizeof(int64_t));
        int64_t *be = calloc((size_t)c->sample_count * (2u + c->n_events), sizeof(int64_t));
        int64_t t = 0;
        long mismatches = 0;
        for (int i = 0; i < 20000; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = seed >> 8;
            static const int64_t steps[] = {0, 1, 7, 45, 300, 1100, -50, -2000, 61000};
            t += steps[r % 9u];
            if (t < 0)
                t = 0;
            uint32_t ev = (r >> 4) % c->n_events;
            sw_evleap_test_stripe = (int)((r >> 9) % 64u);
            unsigned op = (r >> 16) % 100u;
            if (op < 50) {
                int64_t n = (int64_t)((r >> 3) % 5u);
                sw_leap_add(s, NULL, ev, n, t);
                sw_evleap_add(e, ev, n, MS(t));
            } else if (op < 60 && c->has_rt) {
                int64_t rt = (int64_t)((r >> 2) % 7000u);
                sw_leap_add_rt(s, NULL, rt, t);
                sw_evleap_add_rt(e, rt, MS(t));
            } else if (op < 99) {
                int64_t v = 0;
                sw_evleap_read(e, SW_READ_SUM, ev, MS(t), &v);
                mismatches += v != sw_leap_sum(s, NULL, ev, t);
                sw_evleap_read(e, SW_READ_CURRENT, ev, MS(t), &v);
                mismatches += v != sw_leap_current(s, NULL, ev, t);
                sw_evleap_read(e, SW_READ_PREVIOUS, ev, MS(t), &v);
                mismatches += v != sw_leap_previous(s, ev, t);
                if (c->has_rt) {
                    int64_t m = 0;
                    sw_evleap_rt(e, MS(t), &m, NULL, NULL);
                    mismatches += m != sw_leap_min_rt(s, NULL, t);
                }
                uint32_t ns = sw_leap_buckets(s, NULL, t, bs);
                uint32_t ne = sw_evleap_buckets(e, MS(t), be);
                mismatches += ns != ne ||
                              memcmp(bs, be, (size_t)ns * (2u + c->n_events) * 8u) != 0;
            } else {
                sw_leap_reset(s);
                sw_evleap_reset(e);
            }
        }
        CHECK_EQ(mismatches, 0);
        sw_evleap_test_stripe = SW_EV_STRIPE_CPU;
        free(bs);
        free(be);
        free(s);
        free(e);
    }
}

/* Threads adding into one bucket (a fixed time: no reset) lose no count, on their CPUs'
 * stripes and all on one stripe (every add a contended compare-and-swap). */
struct ev_worker {
    struct sw_evleap *l;
    int64_t t_ms;
    long adds;
};
static void *ev_adder(void *arg)
{
    struct ev_worker *w = arg;
    for (long i = 0; i < w->adds; i++)
        sw_evleap_add(w->l, SW_EV_PASS, 1, MS(w->t_ms));
    return NULL;
}
static void test_ev_threads_lose_nothing(void)
{
    struct sw_leap_cfg c = {1000, 2, SW_EV_DEFAULT_COUNT, true};
    for (int one_stripe = 0; one_stripe <= 1; one_stripe++) {
        struct sw_evleap *l = ev_new(&c);
        sw_evleap_test_stripe = one_stripe ? 0 : SW_EV_STRIPE_CPU;
        enum { N = 4 };
        pthread_t th[N];
        struct ev_worker w[N];
        for (int i = 0; i < N; i++) {
            w[i] = (struct ev_worker){l, 5200, 20000};
            CHECK_EQ(pthread_create(&th[i], NULL, ev_adder, &w[i]), 0);
        }
        for (int i = 0; i < N; i++)
            pthread_join(th[i], NULL);
        CHECK_EQ(ev_sum(l, SW_EV_PASS, 5200), N * 20000L);
        int64_t cur = 0;
        sw_evleap_read(l, SW_READ_CURRENT, SW_EV_PASS, MS(5499), &cur);
        CHECK_EQ(cur, N * 20000L);
        sw_evleap_test_stripe = SW_EV_STRIPE_CPU;
        free(l);
    }
}

/* The race at a reset, made deterministic with the hook between an add's read of its
 * slot's start and the write of its cell: another caller moves the slot a whole interval
 * on. The add in flight lands in the new bucket (its cell was reset first) or stays in the
 * old one (the resetter had not reached its cell): never elsewhere, never a torn cell. */
static struct sw_evleap *race_ring;
static int race_mode; /* 1: another caller adds (moves the slot and resets every cell);
                         2: the slot's start moves but its resetter stops before the cells */
static void race_hook(void)
{
    struct sw_evleap *l = race_ring;
    int mode = race_mode;
    race_mode = 0;
    sw_evleap_test_after_start = NULL; /* once */
    if (mode == 1) {
        CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 10, MS(1100)), SW_OK);
    } else if (mode == 2) {
        /* slot 0 moves from bucket 0 to 1000 (a resetter preempted, or killed, right after) */
        __atomic_store_n(&l->words[0], INT64_C(1000), __ATOMIC_RELEASE);
        __atomic_store_n(&l->newest, INT64_C(2) << SW_EV_NEWEST_IDX_BITS, __ATOMIC_RELEASE);
    }
}
static void test_ev_reset_race_bounded(void)
{
    struct sw_leap_cfg c = {1000, 2, SW_EV_DEFAULT_COUNT, true};
    sw_evleap_test_stripe = 0;
    /* mode 1: the add in flight (1 for bucket 0) lands in the new bucket 1000 */
    struct sw_evleap *l = ev_new(&c);
    race_ring = l;
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 5, MS(100)), SW_OK);
    race_mode = 1;
    sw_evleap_test_after_start = race_hook;
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 1, MS(200)), SW_OK);
    int64_t cur = -1;
    sw_evleap_read(l, SW_READ_CURRENT, SW_EV_PASS, MS(1100), &cur);
    CHECK_EQ(cur, 11);                     /* 10 + the one in flight */
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 1100), 11); /* the old bucket 0 left the window */
    free(l);

    /* mode 2: the add in flight stays in the old bucket (its cell not reset yet), which no
     * read counts; the next add for the new bucket resets the cell itself */
    l = ev_new(&c);
    race_ring = l;
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 5, MS(100)), SW_OK);
    race_mode = 2;
    sw_evleap_test_after_start = race_hook;
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 1, MS(200)), SW_OK);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 1100), 0);
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 3, MS(1100)), SW_OK);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 1100), 3);
    sw_evleap_read(l, SW_READ_CURRENT, SW_EV_PASS, MS(1100), &cur);
    CHECK_EQ(cur, 3);
    free(l);
    sw_evleap_test_after_start = NULL;
    sw_evleap_test_stripe = SW_EV_STRIPE_CPU;
}

/* A cell saturates at SW_EV_COUNT_MAX; a sum over stripes saturates at INT64_MAX. */
static void test_ev_saturation(void)
{
    struct sw_leap_cfg c = {1000, 2, SW_EV_DEFAULT_COUNT, true};
    struct sw_evleap *l = ev_new(&c);
    sw_evleap_test_stripe = 0;
    sw_evleap_add(l, SW_EV_PASS, INT64_MAX, MS(10));
    sw_evleap_add(l, SW_EV_PASS, 5, MS(10));
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 10), SW_EV_COUNT_MAX);
    sw_evleap_add_rt(l, INT64_MAX, MS(10));
    int64_t m = 0, rt = 0, ok = 0;
    CHECK_EQ(sw_evleap_rt(l, MS(10), &m, &rt, &ok), SW_OK);
    CHECK_EQ(m, SW_MIN_RT_INIT);
    CHECK_EQ(rt, SW_EV_COUNT_MAX);
    sw_evleap_add_rt(l, 0, MS(10));
    CHECK_EQ(sw_evleap_rt(l, MS(10), &m, NULL, NULL), SW_OK);
    CHECK_EQ(m, 1); /* clamped to 1 like the strong ring */
    sw_evleap_test_stripe = SW_EV_STRIPE_CPU;
    free(l);
}

/* A ring full of garbage (a crafted region): every operation stays in bounds and
 * returns; an add at a sane time then counts again once its slot is reset. */
static void test_ev_garbage_never_crashes(void)
{
    struct sw_leap_cfg c = {1000, 4, SW_EV_DEFAULT_COUNT, true};
    size_t size = sw_evleap_size(&c);
    struct sw_evleap *l = ev_new(&c);
    size_t words = (size - sizeof *l) / sizeof(int64_t);
    static const int64_t nasty[] = {INT64_MIN, INT64_MAX, -1, 0, 250, SW_LEAP_T_MAX,
                                    SW_LEAP_T_MAX + 250, INT64_MIN + 1, 1000, 999};
    unsigned seed = 7u;
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < words; i++) {
            seed = seed * 1103515245u + 12345u;
            l->words[i] = (seed >> 20) % 3u == 0u ? nasty[(seed >> 8) % 10u]
                                                  : (int64_t)((uint64_t)seed << 33 ^ seed);
        }
        l->newest = nasty[(unsigned)round % 10u];
        int64_t v;
        int64_t t = (int64_t)(seed % 100000u);
        sw_evleap_add(l, (uint32_t)(seed % 6u), 3, MS(t));
        sw_evleap_add_rt(l, 20, MS(t));
        sw_evleap_read(l, SW_READ_SUM, 0, MS(t), &v);
        sw_evleap_read(l, SW_READ_PREVIOUS, 0, MS(t), &v);
        sw_evleap_rt(l, MS(t), &v, &v, &v);
        int64_t out[4 * 8];
        CHECK(sw_evleap_buckets(l, MS(t), out) <= 4u);
        sw_evleap_add(l, 0, 1, SW_NOW);
    }
    sw_evleap_reset(l);
    CHECK_EQ(sw_evleap_add(l, SW_EV_PASS, 2, MS(77)), SW_OK);
    CHECK_EQ(ev_sum(l, SW_EV_PASS, 77), 2);
    free(l);
}

/* An eventual ring in a region: the mode is a layout field, compared on attach (the region
 * keeps the mode it was created with), and two mappings count into one ring. */
static int ev_init_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_evleap_init(state, lay->arg);
}
static int ev_check_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_evleap_layout_ok(state, lay->arg) ? SW_OK : SW_EINVAL;
}
static int strong_init_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_leap_init(state, lay->arg);
}
static int strong_check_state(void *state, const struct sw_shm_layout *lay)
{
    (void)state;
    (void)lay;
    return SW_OK;
}
static void test_ev_region_keeps_its_mode(void)
{
    static struct sw_leap_cfg c = {1000, 2, SW_EV_DEFAULT_COUNT, true};
    char path[128];
    snprintf(path, sizeof path, "/tmp/sw-test-%ld-evleap", (long)getpid());
    unlink(path);
    struct sw_shm_layout ev, st;
    memset(&ev, 0, sizeof ev);
    ev.kind = SW_KIND_METRIC;
    ev.interval_ms = c.interval_ms;
    ev.sample_count = c.sample_count;
    ev.consistency = SW_CONSISTENCY_EVENTUAL;
    ev.state_size = sw_evleap_size(&c);
    ev.init_state = ev_init_state;
    ev.check_state = ev_check_state;
    ev.arg = &c;
    st = ev;
    st.consistency = SW_CONSISTENCY_STRONG;
    st.state_size = sw_leap_size(&c);
    st.init_state = strong_init_state;
    st.check_state = strong_check_state;
    struct sw_shm a, b, x;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&a, path, &ev, &err), SW_OK);
    CHECK_EQ(a.hdr->consistency, SW_CONSISTENCY_EVENTUAL);
    CHECK_EQ(sw_shm_open(&b, path, &ev, &err), SW_OK);
    CHECK_EQ(sw_shm_open(&x, path, &st, &err), SW_EINVAL);
    CHECK(err.field != NULL && strcmp(err.field, "consistency") == 0);
    CHECK(strstr(err.msg, "consistency='eventual'") != NULL &&
          strstr(err.msg, "consistency='strong'") != NULL &&
          strstr(err.msg, "slidewin.unlink()") != NULL);
    sw_evleap_add(a.state, SW_EV_PASS, 2, MS(100));
    sw_evleap_add(b.state, SW_EV_PASS, 3, MS(100));
    CHECK_EQ(ev_sum(b.state, SW_EV_PASS, 100), 5);
    sw_shm_close(&a);
    sw_shm_close(&b);
    unlink(path);
}

void test_evleap(void)
{
    test_ev_region_keeps_its_mode();
    test_ev_worked_example();
    test_ev_same_as_strong();
    test_ev_threads_lose_nothing();
    test_ev_reset_race_bounded();
    test_ev_saturation();
    test_ev_garbage_never_crashes();
}
