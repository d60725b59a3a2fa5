/* test_stress.c - N threads against one limiter / window (docs/design.md §7).
 *
 * Each worker logs what it was admitted; the main thread checks offline that
 *  1. phased reject: no window admitted more than its limit (exact: with demand above the
 *     limit every window admits exactly L), and every decision was counted once;
 *  2. SW_NOW reject on the real clock: every admission whose bucket is known exactly (the
 *     coarse clock read before and after the call fall in one bucket) fits the limit;
 *  3. throttle with times from a shared advancing counter: the admitted start times
 *     (now + wait) are at least one cost apart;
 *  4. N x M window adds (explicit times, times behind the newest bucket, SW_NOW) sum to
 *     exact totals;
 *  5. concurrency grade: requests observed in flight never exceed the limit, and every
 *     release / exit balances.
 * Sizes are kept small enough for ThreadSanitizer on 2 cores.
 */
#include "limiter_util.h"

#include "sw_time.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#define NTHREADS 4

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static void run_threads(void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * arg_size), 0);
    for (int i = 0; i < NTHREADS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
}

/* Zero the workers' arguments (an array), give each the shared state and its index, and
 * run them. */
#define RUN_WORKERS(fn, args, shared)                                                       \
    do {                                                                                    \
        memset(args, 0, sizeof args);                                                       \
        for (int i_ = 0; i_ < NTHREADS; i_++) {                                             \
            (args)[i_].sh = (shared);                                                       \
            (args)[i_].id = i_;                                                             \
        }                                                                                   \
        run_threads(fn, args, sizeof(args)[0]);                                             \
    } while (0)

/* A decision's verdict counted: a pass, a refusal, or anything else (an error code). */
static void count_verdict(int v, int64_t *pass, int64_t *block, int *errors)
{
    if (v == SW_PASS)
        (*pass)++;
    else if (v == SW_BLOCK)
        (*block)++;
    else
        (*errors)++;
}

/* ---- 1. phased reject, explicit times ---- */

#define PH_PHASES 40
#define PH_CALLS 150
#define PH_LIMIT 100

struct ph_shared {
    struct sw_limiter *lim;
    pthread_barrier_t barrier;
    unsigned flags_mask;
};
struct ph_arg {
    struct ph_shared *sh;
    int id;
    int64_t pass[PH_PHASES];
    int64_t block[PH_PHASES];
    int64_t calls, entries;
    int errors;
};

static void *ph_worker(void *p)
{
    struct ph_arg *a = p;
    uint64_t rng = UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(unsigned)(a->id + 1);
    for (int k = 0; k < PH_PHASES; k++) {
        pthread_barrier_wait(&a->sh->barrier);
        /* all times of phase k fall in bucket k: [k * 500, k * 500 + 500) ms */
        for (int i = 0; i < PH_CALLS; i++) {
            int64_t now = MS((int64_t)k * 500) + (int64_t)(xorshift(&rng) % 499999999u);
            unsigned flags = (unsigned)(xorshift(&rng) & a->sh->flags_mask);
            struct sw_decision d;
            int v = decide(a->sh->lim, 1, now, flags, &d);
            a->calls++;
            if (v == SW_PASS && (flags & SW_F_ENTRY))
                a->entries++;
            count_verdict(v, &a->pass[k], &a->block[k], &a->errors);
        }
    }
    return NULL;
}

static void stress_phased(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_REJECT, PH_LIMIT);
    if (lim == NULL)
        return;
    struct ph_shared sh = {.lim = lim, .flags_mask = SW_F_TRY | SW_F_ENTRY};
    pthread_barrier_init(&sh.barrier, NULL, NTHREADS);
    static struct ph_arg args[NTHREADS];
    RUN_WORKERS(ph_worker, args, &sh);
    pthread_barrier_destroy(&sh.barrier);

    int64_t pass[PH_PHASES] = {0}, total_pass = 0, total_block = 0, calls = 0, entries = 0;
    int errors = 0;
    for (int i = 0; i < NTHREADS; i++) {
        for (int k = 0; k < PH_PHASES; k++) {
            pass[k] += args[i].pass[k];
            total_pass += args[i].pass[k];
            total_block += args[i].block[k];
        }
        calls += args[i].calls;
        entries += args[i].entries;
        errors += args[i].errors;
    }
    CHECK_EQ(errors, 0);
    CHECK_EQ(calls, (int64_t)NTHREADS * PH_CALLS * PH_PHASES);
    int bad = 0;
    for (int k = 0; k < PH_PHASES; k++) {
        int64_t window = pass[k] + (k > 0 ? pass[k - 1] : 0);
        /* demand (600 a bucket) is above L: each window admits exactly L */
        if (window != PH_LIMIT && bad++ < 5)
            printf("  phased window ending in bucket %d admitted %lld\n", k, (long long)window);
    }
    CHECK_EQ(bad, 0);
    /* every decision counted exactly once (the minute window holds all 20 s) */
    struct sw_node *node = sw_limiter_node(lim);
    sw_lstate_settle(&lim->st); /* the counts on the lock's line, into the rings */
    int64_t t_end = (int64_t)PH_PHASES * 500 - 1;
    CHECK_EQ(sw_leap_sum(sw_node_min(node), NULL, SW_EV_PASS, t_end), total_pass);
    CHECK_EQ(sw_leap_sum(sw_node_min(node), NULL, SW_EV_BLOCK, t_end), total_block);
    CHECK_EQ(sw_limiter_in_flight(lim), entries); /* the passes that held an entry */
    free(lim);
}

/* ---- 2. reject on the real clock (SW_NOW) ---- */

#define RC_LOG 4096
#define RC_WINDOW_MS 100 /* 2 x 100 ms buckets */
#define RC_LIMIT 10

struct rc_arg {
    struct sw_limiter *lim;
    int64_t deadline_ns;
    int64_t lo[RC_LOG], hi[RC_LOG]; /* coarse ms before / after each admission */
    int n;
    int64_t calls, blocks;
    int overflow;
};

static void *rc_worker(void *p)
{
    struct rc_arg *a = p;
    while (sw_time_ns() < a->deadline_ns) {
        int64_t before = sw_time_coarse_ns();
        struct sw_decision d;
        int v = decide(a->lim, 1, SW_NOW, 0, &d);
        int64_t after = sw_time_coarse_ns();
        a->calls++;
        if (v == SW_PASS) {
            if (a->n < RC_LOG) {
                a->lo[a->n] = sw_ms_of_ns(before);
                a->hi[a->n] = sw_ms_of_ns(after);
                a->n++;
            } else {
                a->overflow = 1;
            }
        } else {
            a->blocks++;
        }
    }
    return NULL;
}

static void stress_real_clock(int64_t run_ms)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_REJECT, RC_LIMIT * 1000.0 / 200.0);
    c.interval_ms = 2 * RC_WINDOW_MS;
    c.sample_count = 2;
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    CHECK(lim->rule.limit == RC_LIMIT);
    static struct rc_arg args[NTHREADS];
    memset(args, 0, sizeof args);
    int64_t t0 = sw_time_ns();
    /* the workers' bucket evidence is the coarse clock (the limiter's own clock here): the
     * base must come from it too, or a fine t0 just past a bucket edge, with the coarse clock
     * still before it, would fold the previous bucket's admissions into bucket 0 */
    int64_t t0_coarse = sw_time_coarse_ns();
    for (int i = 0; i < NTHREADS; i++) {
        args[i].lim = lim;
        args[i].deadline_ns = t0 + MS(run_ms);
    }
    run_threads(rc_worker, args, sizeof args[0]);

    /* bucket index relative to the first bucket of the run */
    int64_t base = sw_ms_of_ns(t0_coarse);
    base -= base % RC_WINDOW_MS;
    int64_t nb = run_ms / RC_WINDOW_MS + 4;
    int64_t *definite = calloc((size_t)nb, sizeof(int64_t));
    int64_t ambiguous = 0, total = 0, calls = 0;
    int overflow = 0;
    for (int i = 0; i < NTHREADS; i++) {
        overflow |= args[i].overflow;
        calls += args[i].calls;
        for (int j = 0; j < args[i].n; j++) {
            int64_t blo = (args[i].lo[j] - base) / RC_WINDOW_MS;
            int64_t bhi = (args[i].hi[j] - base) / RC_WINDOW_MS;
            total++;
            if (blo < 0 || bhi >= nb) {
                CHECK(blo >= 0 && bhi < nb);
            } else if (blo != bhi) {
                ambiguous++;
            } else {
                definite[blo]++;
            }
        }
    }
    CHECK_EQ(overflow, 0);
    /* 1. the admissions whose bucket is certain fit every window */
    int bad = 0;
    for (int64_t k = 1; k < nb; k++)
        if (definite[k] + definite[k - 1] > RC_LIMIT && bad++ < 5)
            printf("  real clock: window at bucket %lld admitted %lld\n", (long long)k,
                   (long long)(definite[k] + definite[k - 1]));
    CHECK_EQ(bad, 0);
    /* 2. the others (a clock tick during the call) fit too: place each, in time order, in
     * the earliest bucket of its range that keeps both windows it joins within L (putting
     * one earlier never hurts a later window); every window must then still fit */
    int64_t *cnt = calloc((size_t)nb + 1, sizeof(int64_t));
    memcpy(cnt, definite, sizeof(int64_t) * (size_t)nb);
    for (int64_t k = 0; k < nb; k++) {
        for (int i = 0; i < NTHREADS; i++) {
            for (int j = 0; j < args[i].n; j++) {
                int64_t blo = (args[i].lo[j] - base) / RC_WINDOW_MS;
                int64_t bhi = (args[i].hi[j] - base) / RC_WINDOW_MS;
                if (blo != k || blo == bhi || bhi >= nb)
                    continue;
                int64_t at = bhi;
                for (int64_t b = blo; b <= bhi; b++)
                    if ((b == 0 || cnt[b - 1] + cnt[b] < RC_LIMIT) && cnt[b] + cnt[b + 1] < RC_LIMIT) {
                        at = b;
                        break;
                    }
                cnt[at]++;
            }
        }
    }
    bad = 0;
    for (int64_t k = 1; k < nb; k++)
        if (cnt[k] + cnt[k - 1] > RC_LIMIT && bad++ < 5)
            printf("  real clock: window at bucket %lld admitted %lld (ambiguous placed)\n",
                   (long long)k, (long long)(cnt[k] + cnt[k - 1]));
    CHECK_EQ(bad, 0);
    free(cnt);
    if (getenv("SW_STRESS_VERBOSE"))
        printf("  real clock: %lld admissions, %lld with an ambiguous bucket, %lld calls\n",
               (long long)total, (long long)ambiguous, (long long)calls);
    /* the run saw contention: far more calls than admissions */
    CHECK(calls > 4 * total);
    /* every decision counted once: pass + block over the minute window */
    int64_t blocks = 0;
    for (int i = 0; i < NTHREADS; i++)
        blocks += args[i].blocks;
    int64_t t_end = sw_ms_of_ns(sw_time_coarse_ns());
    struct sw_node *node = sw_limiter_node(lim);
    sw_lstate_settle(&lim->st);
    CHECK_EQ(sw_leap_sum(sw_node_min(node), NULL, SW_EV_PASS, t_end), total);
    CHECK_EQ(sw_leap_sum(sw_node_min(node), NULL, SW_EV_BLOCK, t_end), blocks);
    free(definite);
    free(lim);
}

/* ---- 3. throttle, times from a shared advancing counter ---- */

#define TH_CALLS 6000
#define TH_COST_NS 100000 /* 10000 QPS */

struct th_shared {
    struct sw_limiter *lim;
    atomic_llong clock_ns;
};
struct th_arg {
    struct th_shared *sh;
    int id;
    int64_t start[TH_CALLS]; /* now + wait of each admission */
    int n;
    int bad_wait;
};

static void *th_worker(void *p)
{
    struct th_arg *a = p;
    for (int i = 0; i < TH_CALLS; i++) {
        int64_t now = (int64_t)atomic_fetch_add(&a->sh->clock_ns, 30000); /* 33k/s demand */
        unsigned flags = (a->id == 0 && (i & 1)) ? SW_F_TRY : 0u;
        struct sw_decision d;
        if (decide(a->sh->lim, 1, now, flags, &d) == SW_PASS) {
            if (d.wait_ns < 0 || d.wait_ns > MS(20) || ((flags & SW_F_TRY) && d.wait_ns))
                a->bad_wait++;
            a->start[a->n++] = now + d.wait_ns;
        }
    }
    return NULL;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static void stress_throttle(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 1e9 / TH_COST_NS);
    c.max_queueing_ms = 20;
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    static struct th_shared sh;
    sh.lim = lim;
    atomic_init(&sh.clock_ns, (long long)MS(1000));
    static struct th_arg args[NTHREADS];
    RUN_WORKERS(th_worker, args, &sh);
    int64_t *all = malloc(sizeof(int64_t) * NTHREADS * TH_CALLS);
    int n = 0, bad_wait = 0;
    for (int i = 0; i < NTHREADS; i++) {
        memcpy(all + n, args[i].start, sizeof(int64_t) * (size_t)args[i].n);
        n += args[i].n;
        bad_wait += args[i].bad_wait;
    }
    qsort(all, (size_t)n, sizeof(int64_t), cmp_i64);
    int bad = 0;
    for (int i = 1; i < n; i++)
        if (all[i] - all[i - 1] < TH_COST_NS && bad++ < 5)
            printf("  throttle: admissions %d and %d start %lld ns apart\n", i - 1, i,
                   (long long)(all[i] - all[i - 1]));
    CHECK_EQ(bad, 0);
    CHECK_EQ(bad_wait, 0);
    /* demand 4 x 6000 over 0.72 s at 10000/s: the pacer is the bottleneck */
    CHECK(n > 6000 && n < NTHREADS * TH_CALLS);
    free(all);
    free(lim);
}

/* ---- 4. N x M adds: exact totals ---- */

#define AD_CALLS 40000

struct ad_shared {
    struct sw_window w;        /* a user window: 4 events, 60 x 1000 ms */
    struct sw_limiter *lim;
    atomic_llong clock_ns;
};
struct ad_arg {
    struct ad_shared *sh;
    int id;
    int64_t sent[4];
    int64_t success;
    int errors;
};

static void *ad_worker(void *p)
{
    struct ad_arg *a = p;
    uint64_t rng = UINT64_C(0xda942042e4dd58b5) * (uint64_t)(unsigned)(a->id + 7);
    struct sw_window lw;
    sw_limiter_window(a->sh->lim, &lw);
    for (int i = 0; i < AD_CALLS; i++) {
        uint64_t r = xorshift(&rng);
        uint32_t ev = (uint32_t)(r % 4);
        int64_t n = (int64_t)((r >> 8) % 3) + 1;
        /* times advance, and one call in 8 is 2 s behind (clamped, never lost) */
        int64_t now = (int64_t)atomic_fetch_add(&a->sh->clock_ns, 100000);
        if (((r >> 16) & 7) == 0)
            now -= MS(2000);
        if (sw_window_add(&a->sh->w, ev, n, now) != SW_OK)
            a->errors++;
        a->sent[ev] += n;
        /* the limiter's own window and counters, from the same threads */
        if ((i & 3) == 0) {
            if (sw_window_add(&lw, SW_EV_EXCEPTION, 1, now) != SW_OK)
                a->errors++;
            if (sw_limiter_exit(a->sh->lim, 0, 1, SW_OUT_SUCCESS, now) != SW_OK)
                a->errors++;
            a->success++;
        }
        if ((i & 255) == 0) {
            int64_t v;
            if (sw_window_read(&a->sh->w, (int)(r % 3), ev, now, &v) != SW_OK || v < 0)
                a->errors++;
        }
    }
    return NULL;
}

static void stress_adds(void)
{
    struct sw_leap_cfg lc = {60000, 60, 4, false};
    static sw_lock lock;
    sw_lock_init(&lock);
    struct sw_leap *leap = calloc(1, sw_leap_size(&lc));
    CHECK_EQ(sw_leap_init(leap, &lc), SW_OK);
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_REJECT, 100);
    c.interval_ms = 60000;
    c.sample_count = 60;
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    static struct ad_shared sh;
    sh.w.lock = &lock;
    sh.w.leap = leap;
    sh.w.future = NULL;
    sh.w.token = SW_LOCK_PRIVATE;
    sh.w.repair = NULL;
    sh.w.repair_ctx = NULL;
    sh.lim = lim;
    atomic_init(&sh.clock_ns, (long long)MS(5000));
    static struct ad_arg args[NTHREADS];
    RUN_WORKERS(ad_worker, args, &sh);
    /* the run spans 4 x 40000 x 0.1 ms = 16 s: all inside the 60 s window */
    int64_t end_ms = sw_ms_of_ns((int64_t)atomic_load(&sh.clock_ns));
    int64_t success = 0;
    int errors = 0;
    for (uint32_t ev = 0; ev < 4; ev++) {
        int64_t sent = 0, got = -1;
        for (int i = 0; i < NTHREADS; i++)
            sent += args[i].sent[ev];
        CHECK_EQ(sw_window_read(&sh.w, SW_READ_SUM, ev, MS(end_ms), &got), SW_OK);
        CHECK_EQ(got, sent);
    }
    for (int i = 0; i < NTHREADS; i++) {
        success += args[i].success;
        errors += args[i].errors;
    }
    CHECK_EQ(errors, 0);
    struct sw_stats st;
    sw_limiter_stats(lim, MS(end_ms), &st);
    CHECK_EQ(st.exception, success);
    CHECK_EQ(st.success, 0); /* exits of n = 0 */
    CHECK_EQ(st.min_rt, 1);
    CHECK_EQ(sw_leap_sum(sw_node_min(sw_limiter_node(lim)), NULL, SW_EV_RT, end_ms), success);
    free(leap);
    free(lim);
}

/* ---- 5. concurrency grade ---- */

#define CC_LIMIT 3
#define CC_CALLS 20000

struct cc_shared {
    struct sw_limiter *lim;
    atomic_int observed;
};
struct cc_arg {
    struct cc_shared *sh;
    int id;
    int passes, over, release_errors, max_seen;
};

static void *cc_worker(void *p)
{
    struct cc_arg *a = p;
    uint64_t rng = UINT64_C(0x2545f4914f6cdd1d) * (uint64_t)(unsigned)(a->id + 3);
    for (int i = 0; i < CC_CALLS; i++) {
        int64_t n = (xorshift(&rng) % 4) == 0 ? 2 : 1;
        struct sw_decision d;
        if (decide(a->sh->lim, n, SW_NOW, 0, &d) != SW_PASS)
            continue;
        a->passes++;
        int v = atomic_fetch_add(&a->sh->observed, (int)n) + (int)n;
        if (v > CC_LIMIT)
            a->over++;
        if (v > a->max_seen)
            a->max_seen = v;
        if (sw_limiter_in_flight(a->sh->lim) > CC_LIMIT)
            a->over++;
        atomic_fetch_sub(&a->sh->observed, (int)n);
        int rc = (i & 1) ? sw_limiter_release(a->sh->lim, n)
                         : sw_limiter_exit(a->sh->lim, n, 1, SW_OUT_SUCCESS, SW_NOW);
        if (rc != SW_OK)
            a->release_errors++;
    }
    return NULL;
}

static void stress_concurrency(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_CONCURRENCY, SW_REJECT, CC_LIMIT);
    if (lim == NULL)
        return;
    static struct cc_shared sh;
    sh.lim = lim;
    atomic_init(&sh.observed, 0);
    static struct cc_arg args[NTHREADS];
    RUN_WORKERS(cc_worker, args, &sh);
    int passes = 0, over = 0, rel = 0, max_seen = 0;
    for (int i = 0; i < NTHREADS; i++) {
        passes += args[i].passes;
        over += args[i].over;
        rel += args[i].release_errors;
        if (args[i].max_seen > max_seen)
            max_seen = args[i].max_seen;
    }
    CHECK_EQ(over, 0);
    CHECK_EQ(rel, 0);
    CHECK(passes > 0);
    CHECK(max_seen <= CC_LIMIT);
    CHECK_EQ(sw_limiter_in_flight(lim), 0);
    free(lim);
}

/* ---- 6. refusals without the lock while the window rolls ---- */

#define RR_PHASES 24
#define RR_LIMIT 50

struct rr_shared {
    struct sw_limiter *lim;
    _Atomic int64_t now_ms;
    _Atomic int stop;
};
struct rr_arg {
    struct rr_shared *sh;
    int id;
    int64_t calls, pass, block;
    int errors, bad_windows;
};

/* Thread 0 rolls the window: each phase moves the time one bucket on (while the others keep
 * deciding at the time they read), decides there until refused, then reads the window, which
 * must hold exactly RR_LIMIT passes (demand is above it). The others decide without pause at
 * the shared time: a full window refuses them without the lock, at every bucket boundary. */
static void *rr_worker(void *p)
{
    struct rr_arg *a = p;
    struct rr_shared *sh = a->sh;
    if (a->id == 0) {
        for (int k = 1; k <= RR_PHASES; k++) {
            int64_t t = (int64_t)k * 500 + 250;
            atomic_store(&sh->now_ms, t);
            for (;;) {
                int v = decide(sh->lim, 1, MS(t), 0, NULL);
                a->calls++;
                count_verdict(v, &a->pass, &a->block, &a->errors);
                if (v != SW_PASS)
                    break;
            }
            for (int i = 0; i < 2000; i++) { /* let the others refuse a while */
                a->calls++;
                count_verdict(decide(sh->lim, 1, MS(t), 0, NULL), &a->pass, &a->block, &a->errors);
            }
            struct sw_stats st;
            sw_limiter_stats(sh->lim, MS(t), &st);
            if (st.pass != RR_LIMIT && a->bad_windows++ < 5)
                printf("  window at %lld ms holds %lld passes\n", (long long)t,
                       (long long)st.pass);
        }
        atomic_store(&sh->stop, 1);
        return NULL;
    }
    while (!atomic_load(&sh->stop)) {
        int64_t t = atomic_load(&sh->now_ms);
        int v = decide(sh->lim, 1, MS(t) + (int64_t)a->calls % 1000, 0, NULL);
        a->calls++;
        count_verdict(v, &a->pass, &a->block, &a->errors);
    }
    return NULL;
}

static void stress_refuse_while_rolling(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_REJECT, RR_LIMIT);
    if (lim == NULL)
        return;
    struct rr_shared sh = {.lim = lim, .now_ms = 250};
    static struct rr_arg args[NTHREADS];
    RUN_WORKERS(rr_worker, args, &sh);
    int64_t calls = 0, pass = 0, block = 0;
    for (int i = 0; i < NTHREADS; i++) {
        CHECK_EQ(args[i].errors, 0);
        CHECK_EQ(args[i].bad_windows, 0);
        calls += args[i].calls;
        pass += args[i].pass;
        block += args[i].block;
    }
    CHECK_EQ(pass + block, calls);
    struct sw_totals tot;
    sw_limiter_totals(lim, &tot); /* every decision counted once: none lost, none twice */
    CHECK_EQ(tot.pass, pass);
    CHECK_EQ(tot.block, block);
    CHECK(pass <= (int64_t)RR_LIMIT * (RR_PHASES + 1));
    free(lim);
}

/* A full window refuses while another thread holds the lock (the refusal takes no lock),
 * and counts the refusal. */
#define RL_UNDECIDED (-2) /* neither a verdict nor decide()'s error */

struct rl_arg {
    struct sw_limiter *lim;
    _Atomic int verdict; /* RL_UNDECIDED until the worker has decided */
};

static void *rl_worker(void *p)
{
    struct rl_arg *a = p;
    atomic_store(&a->verdict, decide(a->lim, 1, MS(700), 0, NULL));
    return NULL;
}

static void full_window_refuses_while_the_lock_is_held(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_REJECT, 10);
    if (lim == NULL)
        return;
    for (int i = 0; i < 10; i++)
        CHECK_EQ(decide(lim, 1, MS(600), 0, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(650), 0, NULL), SW_BLOCK); /* full: the head is at 500 ms */
    static struct rl_arg a;
    a.lim = lim;
    atomic_store(&a.verdict, RL_UNDECIDED);
    sw_lock_acquire(&lim->st.lock);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, rl_worker, &a), 0);
    int64_t deadline = sw_time_ns() + INT64_C(5000000000);
    while (atomic_load(&a.verdict) == RL_UNDECIDED && sw_time_ns() < deadline)
        sched_yield();
    int under_lock = atomic_load(&a.verdict);
    sw_lock_release(&lim->st.lock);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK(under_lock != RL_UNDECIDED); /* decided while the lock was held */
    CHECK_EQ(atomic_load(&a.verdict), SW_BLOCK);
    /* counted, and the locked path still sees the refusal in the window's counts */
    check_counted(lim, MS(700), 10, 2);
    free(lim);
}

void test_stress(void)
{
    stress_phased();
    stress_real_clock(1200);
    stress_throttle();
    stress_adds();
    stress_concurrency();
    stress_refuse_while_rolling();
    full_window_refuses_while_the_lock_is_held();
}
