/* test_adaptive.c - the adaptive concurrency controller (sw_adapt.h) in virtual time.
 *
 * A processor-sharing backend of capacity C (latency = work x max(1, in flight / C)) is
 * driven by closed-loop clients through a real limiter, with explicit times: the limit must
 * follow a capacity change, never refuse fewer callers than the capacity, climb back after
 * a drop and stay within [min_limit, max_limit].
 */
#include "limiter_util.h"

#include "sw_adapt.h"
#include "sw_group.h"

#include <pthread.h>

#define SIM_MAX_CLIENTS 512

struct sim {
    struct sw_limiter *lim;
    int n_clients;
    double base_ms;        /* the work of one call */
    double cap;            /* C: calls served at full speed at once */
    int64_t now_ms;
    int64_t ready[SIM_MAX_CLIENTS];   /* idle until (ms); -1 while in flight */
    double left[SIM_MAX_CLIENTS];     /* in flight: the work left (ms) */
    int64_t start[SIM_MAX_CLIENTS];
    int64_t done, refused;            /* since the last sim_reset_counts */
    double lim_sum, lat_sum;          /* sums of the limit (per ms) and of the latencies */
    int64_t lim_n;
    int64_t lim_lo, lim_hi;           /* the limit's extremes since the last reset */
    int slow_every;                   /* > 0: every slow_every-th admitted call takes slow_ms */
    double slow_ms;
    int64_t admitted;
};

static struct sw_limiter *adaptive_new(uint32_t algo, uint32_t lo, uint32_t hi, uint32_t init,
                                       int32_t cpu)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 1);
    c.interval_ms = 1000;
    c.sample_count = 10;
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return NULL;
    struct sw_adapt_cfg a = {algo, lo, hi, init, cpu, 0};
    const char *param = "x";
    CHECK_EQ(sw_rule_set_adapt(&lim->rule, &a, &param), SW_OK);
    CHECK(param == NULL);
    return lim;
}

static void set_phase_for_test(struct sw_adapt_state *s, unsigned phase)
{
    s->flags = (uint8_t)((s->flags & ~SW_ADAPT_PHASE) | phase);
}

static void sim_reset_counts(struct sim *s)
{
    s->done = s->refused = 0;
    s->lim_sum = s->lat_sum = 0;
    s->lim_n = 0;
    s->lim_lo = INT64_MAX;
    s->lim_hi = 0;
}

static void sim_init(struct sim *s, struct sw_limiter *lim, int clients, double base,
                     double cap)
{
    memset(s, 0, sizeof *s);
    s->lim = lim;
    s->n_clients = clients;
    s->base_ms = base;
    s->cap = cap;
    for (int i = 0; i < clients; i++)
        s->ready[i] = i % 20; /* staggered arrivals */
    sim_reset_counts(s);
}

/* A fresh adaptive limiter of algo (limits 1 to 1000, initial 20, no CPU) simulated with
 * these clients, work (ms) and capacity; false when it could not be made. Free s->lim. */
static bool sim_new(struct sim *s, uint32_t algo, int clients, double base, double cap)
{
    struct sw_limiter *lim = adaptive_new(algo, 1, 1000, 20, SW_ADAPT_NO_CPU);
    if (lim == NULL)
        return false;
    sim_init(s, lim, clients, base, cap);
    return true;
}

static int64_t cur_limit(struct sim *s)
{
    struct sw_view v;
    sw_limiter_view(s->lim, &v);
    return sw_adapt_limit_now(&v, MS(s->now_ms));
}

/* Run for `ms` milliseconds of virtual time, in 1 ms steps. */
static void sim_run(struct sim *s, int64_t ms)
{
    for (int64_t end = s->now_ms + ms; s->now_ms < end; s->now_ms++) {
        int n = 0;
        for (int i = 0; i < s->n_clients; i++)
            n += s->ready[i] < 0;
        double rate = n > s->cap ? s->cap / n : 1.0;
        for (int i = 0; i < s->n_clients; i++) {
            if (s->ready[i] >= 0)
                continue;
            s->left[i] -= rate;
            if (s->left[i] <= 1e-9) {
                int64_t rt = s->now_ms + 1 - s->start[i];
                struct sw_view v;
                sw_limiter_view(s->lim, &v);
                CHECK_EQ(sw_exit_rt(&v, 1, MS(rt), SW_OUT_SUCCESS, MS(s->now_ms + 1)), SW_OK);
                s->ready[i] = s->now_ms + 1;
                s->done++;
                s->lat_sum += (double)rt;
            }
        }
        for (int i = 0; i < s->n_clients; i++) {
            if (s->ready[i] < 0 || s->ready[i] > s->now_ms)
                continue;
            struct sw_decision d;
            sw_limiter_decide(s->lim, 1, MS(s->now_ms), 0, &d);
            if (d.verdict == SW_PASS) {
                s->ready[i] = -1;
                s->admitted++;
                s->left[i] = s->slow_every > 0 && s->admitted % s->slow_every == 0 ? s->slow_ms
                                                                                  : s->base_ms;
                s->start[i] = s->now_ms;
            } else {
                s->refused++;
                s->ready[i] = s->now_ms + (int64_t)s->base_ms; /* retry after one call's time */
            }
        }
        int64_t l = cur_limit(s);
        s->lim_sum += (double)l;
        s->lim_n++;
        if (l < s->lim_lo)
            s->lim_lo = l;
        if (l > s->lim_hi)
            s->lim_hi = l;
    }
}

static void report(const char *what, struct sim *s, int64_t ms)
{
    if (getenv("SW_ADAPT_VERBOSE") != NULL)
        printf("  %-28s C=%-4.0f limit mean %.1f [%lld, %lld]  thr %.2f of C  lat %.2f base  "
               "refused %lld\n", what, s->cap, s->lim_sum / (double)s->lim_n,
               (long long)s->lim_lo, (long long)s->lim_hi,
               (double)s->done * s->base_ms / ((double)ms * s->cap),
               s->done ? s->lat_sum / (double)s->done / s->base_ms : 0.0,
               (long long)s->refused);
}

/* A fresh count over the next ms of the simulation, reported as "<algorithm> <what>". */
static void measure(struct sim *s, uint32_t algo, const char *what, int64_t ms)
{
    char name[64];
    snprintf(name, sizeof name, "%s %s", algo == SW_ADAPT_BBR ? "bbr" : "gradient", what);
    sim_reset_counts(s);
    sim_run(s, ms);
    report(name, s, ms);
}

/* Capacity C = 80 -> 25 -> 80 with 240 clients, 60 s a phase: over the last 20 s of each, the
 * mean limit within the algorithm's bounds (the tests below say which), throughput at least
 * 90 % of the capacity, latency at most 1.5x the work. */
static void follows_capacity(uint32_t algo)
{
    static struct sim s;
    if (!sim_new(&s, algo, 240, 20, 80))
        return;
    const double caps[3] = {80, 25, 80};
    const char *names[3] = {"cold start", "halved+", "back up"};
    for (int ph = 0; ph < 3; ph++) {
        s.cap = caps[ph];
        sim_run(&s, 40000);
        measure(&s, algo, names[ph], 20000);
        double mean = s.lim_sum / (double)s.lim_n;
        double c = caps[ph];
        if (algo == SW_ADAPT_GRADIENT) {
            CHECK(mean >= c);
            CHECK(mean <= c * 1.25 + sqrt(c * 1.25) + 1);
        } else {
            CHECK(mean >= 0.8 * c);
            CHECK(mean <= 1.5 * c);
        }
        CHECK((double)s.done * 20.0 / (20000.0 * c) >= 0.9);
        CHECK(s.lat_sum / (double)s.done <= 1.5 * 20.0);
    }
    free(s.lim);
}

/* gradient: C = 80 -> 25 -> 80 with 240 clients; over the last 20 s of each 60 s phase the
 * limit sits between C and C*1.25 + sqrt(C*1.25) (+1), throughput at least 90 % of the
 * capacity, latency at most 1.5x the work. */
static void test_gradient_follows_capacity(void)
{
    follows_capacity(SW_ADAPT_GRADIENT);
}

/* bbr under overload: C = 80 -> 25 -> 80 with 240 clients. Sentinel's/aegis' product alone
 * holds any level above the capacity (Little's law) and its max/min selections ratchet it up
 * (it reached several times C, the latency with it); with the probed RTprop the mean limit
 * over the last 20 s of each phase stays between 0.8 C and 1.5 C, throughput at least 90 %
 * of the capacity, latency at most 1.5x the work. */
static void test_bbr_follows_capacity(void)
{
    follows_capacity(SW_ADAPT_BBR);
}

/* bbr's probe, by hand: refusing with a probe due, the limit drops to half the bound;
 * completions of calls admitted before the probe are not samples; after two rounds of the
 * pin (10 samples at least) their fastest RT is the drained RT and the bound comes back from
 * it. A
 * probe whose epoch lies in the future (a damaged region) ends at the next update. */
static void test_bbr_probe(void)
{
    struct sw_limiter *lim = adaptive_new(SW_ADAPT_BBR, 1, 1000, 20, SW_ADAPT_NO_CPU);
    if (lim == NULL)
        return;
    struct sw_view v;
    sw_limiter_view(lim, &v);
    struct sw_adapt_state *s = &sw_limiter_node(lim)->adapt;
    CHECK_EQ(sw_adapt_limit_now(&v, MS(900)), 20); /* fresh: a probe is due at 1900 */
    /* a window of 200 completions a bucket with a mean RT of 40 ms: bound 80 */
    for (int64_t b = 1000; b < 2000; b += 100)
        for (int i = 0; i < 200; i++)
            CHECK_EQ(sw_exit_rt(&v, 1, MS(40), SW_OUT_SUCCESS, MS(b + 50)), SW_OK);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2100)), 81);
    CHECK_EQ(s->flags & SW_ADAPT_PHASE, SW_ADAPT_RUNNING);
    struct sw_decision d;
    int passed = 0;
    for (int i = 0; i < 90; i++) {
        sw_decide(&v, 1, MS(2150), 0, &d);
        passed += d.verdict == SW_PASS;
    }
    CHECK_EQ(passed, 81); /* 9 refused: demand above the limit */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2200)), 40); /* the probe: half the bound */
    CHECK_EQ(s->flags & SW_ADAPT_PHASE, SW_ADAPT_PROBING);
    /* the 81 admitted before it end after 60 ms: not samples */
    for (int i = 0; i < 81; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(60), SW_OUT_SUCCESS, MS(2210)), SW_OK);
    CHECK_EQ(s->samples, 0u);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2300)), 40); /* still pinned */
    /* 79 calls admitted in the probe, 20 ms each: samples, not yet enough (80) */
    for (int i = 0; i < 79; i++) {
        sw_decide(&v, 1, MS(2300), 0, &d);
        CHECK_EQ(d.verdict, i < 40 ? SW_PASS : SW_BLOCK);
    }
    for (int i = 0; i < 40; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(2320)), SW_OK);
    for (int i = 0; i < 39; i++) {
        sw_decide(&v, 1, MS(2320), 0, &d);
        CHECK_EQ(d.verdict, SW_PASS);
    }
    for (int i = 0; i < 39; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(2340)), SW_OK);
    CHECK_EQ(s->flags & SW_ADAPT_PHASE, SW_ADAPT_PROBING);
    sw_decide(&v, 1, MS(2340), 0, &d);
    CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(2360)), SW_OK);
    CHECK_EQ(s->flags & SW_ADAPT_PHASE, SW_ADAPT_RUNNING);
    CHECK(s->base_us > 19999.0f && s->base_us < 20001.0f);
    /* the bound: 200 a bucket x 40 ms x (1.1 x 20 ms / 40 ms: the window's fastest RT over
     * the probe's) / 100 ms = 44; the drained RT fell by half (the window's was queued), so
     * the next probe starts at once, refused as the limiter was: half of 44 */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2360)), 22);
    CHECK_EQ(s->flags & SW_ADAPT_PHASE, SW_ADAPT_PROBING);
    /* a probe without enough samples (10 of 2 x 22) gives up after
     * SW_ADAPT_PROBE_GIVE_UP_MS */
    for (int i = 0; i < 10; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(2400)), SW_OK);
    for (int64_t b = 2400; b < 12400; b += 100) /* calls admitted before it: no samples */
        for (int i = 0; i < 200; i++)
            CHECK_EQ(sw_exit_rt(&v, 1, MS(b + 50 - 2300), SW_OUT_SUCCESS, MS(b + 50)), SW_OK);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(12300)), 22);
    int64_t l = sw_adapt_limit_now(&v, MS(12400));
    CHECK_EQ(s->flags & SW_ADAPT_PHASE, SW_ADAPT_RUNNING);
    /* the window's calls ran 9-10 s (admitted long before): queued; its mean RT taken down
     * by how far its fastest RT (a bucket records at most 5 s) ran over 1.1 x the probe's
     * 20 ms: 200 x ~9.2 s x 22 ms / 5 s / 100 ms ~ 81 (x 1.25 in a probing bucket) */
    CHECK((l >= 80 && l <= 83) || (l >= 100 && l <= 104));
    /* its 20 ms is not below half the 40 ms it re-measured: the next probe 10 s on */
    CHECK(s->probe_ms >= 12400 + 10000);

    /* a damaged probe: the epoch in the future */
    set_phase_for_test(s, SW_ADAPT_PROBING);
    s->probe_ms = INT64_MAX;
    s->next_ms = 0;
    l = sw_adapt_limit_now(&v, MS(12500));
    CHECK_EQ(s->flags & SW_ADAPT_PHASE, SW_ADAPT_RUNNING);
    CHECK(l >= 1 && l <= 1000);
    free(lim);
}

/* bbr's pressure gate, by hand (no cpu_threshold; a drained RT of 20 ms already probed):
 * without queueing the bound is not enforced (the limit grows 1.1x + 1 while refusing);
 * two buckets at 40 ms are queueing: the bound at once, and it holds for 1 s after the last
 * queued update even when the RT is back to 20 ms. */
static void bbr_fill(struct sw_view *v, int64_t from, int64_t to, int64_t rt_ms)
{
    for (int64_t b = from; b < to; b += 100)
        for (int i = 0; i < 100; i++)
            CHECK_EQ(sw_exit_rt(v, 1, MS(rt_ms), SW_OUT_SUCCESS, MS(b + 50)), SW_OK);
}

static int bbr_demand(struct sw_view *v, int64_t t, int n)
{
    struct sw_decision d;
    int passed = 0;
    for (int i = 0; i < n; i++) {
        sw_decide(v, 1, MS(t), 0, &d);
        passed += d.verdict == SW_PASS;
    }
    for (int i = 0; i < passed; i++) /* given back at once, not counted */
        CHECK_EQ(sw_exit(v, 1, 0, SW_OUT_NONE, MS(t)), SW_OK);
    return passed;
}

static void test_bbr_pressure(void)
{
    struct sw_limiter *lim = adaptive_new(SW_ADAPT_BBR, 1, 1000, 20, SW_ADAPT_NO_CPU);
    if (lim == NULL)
        return;
    struct sw_view v;
    sw_limiter_view(lim, &v);
    struct sw_adapt_state *s = &sw_limiter_node(lim)->adapt;
    CHECK_EQ(sw_adapt_limit_now(&v, MS(900)), 20);
    s->base_us = 20000.0f;          /* a probe measured 20 ms */
    s->probe_ms = INT64_MAX / 2;    /* and the next is far */
    bbr_fill(&v, 1000, 2000, 20);   /* 100 a bucket at 20 ms: bound 20 */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2000)), 21);
    CHECK_EQ(bbr_demand(&v, 2050, 30), 21); /* refused, no queue: grows */
    bbr_fill(&v, 2000, 2100, 20);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2100)), 24); /* 21 x 1.1 + 1 */
    CHECK_EQ(bbr_demand(&v, 2150, 30), 24);
    bbr_fill(&v, 2100, 2300, 40); /* buckets at 2x the drained RT: a queue */
    /* one bucket is no evidence: the fastest RT of the last two is still 20 ms */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2200)), 27); /* 24 x 1.1 + 1 */
    /* two: their fastest RT, 40 ms, is over 1.25 x 20 ms + 1: the bound at once,
     * 100 x 20 ms / 100 ms + 1 */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2300)), 21);
    CHECK_EQ(s->mark_ms, 2300);
    /* back to 20 ms, refusing all along: the bound holds 1 s */
    for (int64_t t = 2350; t < 3250; t += 100) {
        bbr_fill(&v, t - 50, t + 50, 20);
        CHECK_EQ(bbr_demand(&v, t, 30), t == 2350 ? 21 : (int)sw_adapt_limit_now(&v, MS(t)));
        int64_t l = sw_adapt_limit_now(&v, MS(t + 50));
        CHECK(l == 21 || l == 26); /* 26: a probing bucket (x 1.25) */
    }
    CHECK_EQ(s->mark_ms, 2300); /* the buckets 2100 and 2200 (40 ms) were the last */
    bbr_fill(&v, 3200, 3300, 20);
    CHECK_EQ(bbr_demand(&v, 3250, 30), 26); /* 3200 is a probing bucket (x 1.25) */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(3300)), 29); /* the evidence is 1 s old: grows */
    bbr_fill(&v, 3300, 3400, 20);
    CHECK_EQ(bbr_demand(&v, 3350, 30), 29);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(3400)), 32);
    free(lim);
}

/* How fast the gradient follows: within 5 s of a step the limit is within the band above. */
static void test_gradient_follows_within_5s(void)
{
    static struct sim s;
    if (!sim_new(&s, SW_ADAPT_GRADIENT, 240, 20, 80))
        return;
    sim_run(&s, 20000);
    s.cap = 40;
    sim_run(&s, 5000);
    int64_t l = cur_limit(&s);
    CHECK(l >= 40 && l <= 40 * 1.25 + sqrt(50) + 1);
    s.cap = 80;
    sim_run(&s, 5000);
    l = cur_limit(&s);
    CHECK(l >= 80 && l <= 80 * 1.25 + sqrt(100) + 1);
    free(s.lim);
}

/* Fewer callers than the capacity: nothing is refused, ever (both algorithms); more callers
 * than initial_limit but fewer than the capacity: refused only while the limit climbs from
 * initial_limit (the first seconds), never after. */
static void test_never_starves(void)
{
    for (uint32_t algo = SW_ADAPT_BBR; algo <= SW_ADAPT_GRADIENT; algo++) {
        static struct sim s;
        if (!sim_new(&s, algo, 10, 20, 80))
            return;
        measure(&s, algo, "10 callers, C=80", 60000);
        CHECK_EQ(s.refused, 0);
        CHECK(s.done > 0);
        free(s.lim);

        if (!sim_new(&s, algo, 60, 20, 80))
            return;
        sim_run(&s, 10000);
        measure(&s, algo, "60 callers, C=80", 50000);
        CHECK_EQ(s.refused, 0);
        free(s.lim);
    }
}

/* Response times that do not grow with the calls in flight are no queue, however they
 * spread: a backend with no capacity limit (C far above the callers) whose calls take 1 ms,
 * and every other one 200 ms (a cache in front of a database), or 20 ms and one in 100 5 s
 * (rare outliers). Once warmed up (10 s) neither algorithm refuses more than 1 %. */
static void test_spread_is_no_queue(void)
{
    static const struct { double fast, slow; int every; int clients; } w[] = {
        {1, 200, 2, 200}, {20, 5000, 100, 200}};
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
        for (uint32_t algo = SW_ADAPT_BBR; algo <= SW_ADAPT_GRADIENT; algo++) {
            static struct sim s;
            if (!sim_new(&s, algo, w[k].clients, w[k].fast, 1e9))
                return;
            s.slow_every = w[k].every;
            s.slow_ms = w[k].slow;
            sim_run(&s, 10000);
            measure(&s, algo, "spread, no capacity", 20000);
            CHECK(s.done > 1000);
            CHECK(s.refused * 100 <= s.done + s.refused);
            free(s.lim);
        }
    }
}

/* A dependency 10x slower at the same capacity (C = 40, 20 ms -> 200 ms a call): within 5 s
 * gradient's limit serves the capacity again (at least 90 % of 40 calls per 200 ms over
 * the next 5 s) and never sits at min_limit meanwhile. (bbr: tests/test_adaptive.py, on
 * open-loop arrivals; these 240 closed-loop clients of one fixed work move in lockstep,
 * and its max completions a bucket reads their bursts.) */
static void test_follows_a_slower_backend(void)
{
    for (uint32_t algo = SW_ADAPT_GRADIENT; algo <= SW_ADAPT_GRADIENT; algo++) {
        static struct sim s;
        if (!sim_new(&s, algo, 240, 20, 40))
            return;
        sim_run(&s, 10000);
        s.base_ms = 200;
        measure(&s, algo, "10x slower (0-5 s)", 5000);
        CHECK(s.lim_lo > 1);
        measure(&s, algo, "10x slower (5-10 s)", 5000);
        CHECK(s.lim_lo > 1);
        CHECK((double)s.done >= 0.9 * 40.0 / 200.0 * 5000.0);
        free(s.lim);
    }
}

/* After a drop the limit climbs back: capacity 80 -> 5 for 30 s -> 80; within 10 s the
 * limit is at least the capacity again (both algorithms: bbr grows by one a bucket). */
static void test_climbs_back(void)
{
    for (uint32_t algo = SW_ADAPT_BBR; algo <= SW_ADAPT_GRADIENT; algo++) {
        static struct sim s;
        if (!sim_new(&s, algo, 240, 20, 80))
            return;
        sim_run(&s, 20000);
        s.cap = 5;
        sim_run(&s, 30000);
        s.cap = 80;
        measure(&s, algo, "back from 5", 10000);
        CHECK(cur_limit(&s) >= 80);
        free(s.lim);
    }
}

/* The limit never leaves [min_limit, max_limit], whatever the load. */
static void test_bounds(void)
{
    for (uint32_t algo = SW_ADAPT_BBR; algo <= SW_ADAPT_GRADIENT; algo++) {
        struct sw_limiter *lim = adaptive_new(algo, 5, 30, 10, SW_ADAPT_NO_CPU);
        if (lim == NULL)
            return;
        static struct sim s;
        sim_init(&s, lim, 240, 20, 80);
        sim_run(&s, 20000);
        CHECK(s.lim_lo >= 5 && s.lim_hi <= 30);
        CHECK_EQ(s.lim_hi, 30); /* capacity 80: up to the ceiling */
        s.cap = 1;
        sim_reset_counts(&s);
        sim_run(&s, 20000);
        CHECK(s.lim_lo >= 5 && s.lim_hi <= 30);
        free(lim);
    }
    /* bad settings name their parameter */
    struct sw_adapt_cfg bad[] = {
        {0, 1, 10, 5, -1, 0}, {3, 1, 10, 5, -1, 0}, {1, 0, 10, 5, -1, 0},
        {1, 6, 10, 5, -1, 0}, {1, 1, 4, 5, -1, 0}, {1, 1, 2000000, 5, -1, 0},
        {1, 1, 10, 5, 1001, 0}, {1, 1, 10, 5, -2, 0},
    };
    const char *want[] = {"algorithm", "algorithm", "min_limit", "initial_limit", "initial_limit",
                          "max_limit", "cpu_threshold", "cpu_threshold"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *param = NULL;
        CHECK_EQ(sw_adapt_check(&bad[i], &param), SW_EINVAL);
        CHECK(param != NULL && strcmp(param, want[i]) == 0);
    }
}

/* bbr's bound, by hand: a window whose completed buckets hold 30 completions of mean RT 20 ms
 * and 50 of mean 40 ms: max 50 per 100 ms bucket x min mean 20 ms / 100 ms = 10, limit 11.
 * Cold start (no completed bucket, or only the partial first one): initial_limit. */
static void test_bbr_bound(void)
{
    struct sw_limiter *lim = adaptive_new(SW_ADAPT_BBR, 1, 1000, 20, SW_ADAPT_NO_CPU);
    if (lim == NULL)
        return;
    struct sw_view v;
    sw_limiter_view(lim, &v);
    /* the first bucket with completions is partial (left out) */
    for (int i = 0; i < 10; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(910)), SW_OK);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(1000)), 20);
    for (int i = 0; i < 30; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(1010)), SW_OK);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(40), SW_OUT_SUCCESS, MS(1150)), SW_OK);
    /* 30 x 20 / 100 = 6, + 1 = 7, but not enforced: no queueing (20 ms, the window's min),
     * so the limit in force (20) stays, shrunk by a quarter (nothing was in flight) */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(1150)), 15);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(1200)), 11); /* 40 ms > 1.25 x 20 ms: enforced */
    /* admitted while in flight <= 10: 11 in flight, the 12th refused */
    struct sw_decision d;
    for (int i = 0; i < 11; i++) {
        sw_decide(&v, 1, MS(1210), 0, &d);
        CHECK_EQ(d.verdict, SW_PASS);
    }
    sw_decide(&v, 1, MS(1210), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    /* the window slides past them: cold again */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2300)), 20);
    free(lim);

    /* the CPU trigger: below the threshold no limit (max_limit), above it the bound, and
     * for 1 s after a refusal the bound still holds (cool-off) */
    lim = adaptive_new(SW_ADAPT_BBR, 1, 1000, 20, 800);
    if (lim == NULL)
        return;
    sw_limiter_view(lim, &v);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(910)), SW_OK);
    for (int i = 0; i < 30; i++)
        CHECK_EQ(sw_exit_rt(&v, 1, MS(20), SW_OUT_SUCCESS, MS(1010)), SW_OK);
    sw_view_set_cpu(&v, 500);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(1100)), 1000);
    sw_view_set_cpu(&v, 900);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(1200)), 7); /* 30 x 20 / 100 = 6, + 1 */
    for (int i = 0; i < 7; i++)
        sw_decide(&v, 1, MS(1210), 0, &d);
    sw_decide(&v, 1, MS(1220), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    sw_view_set_cpu(&v, 100);
    CHECK_EQ(sw_adapt_limit_now(&v, MS(1300)), 7);    /* cool-off */
    CHECK_EQ(sw_adapt_limit_now(&v, MS(2300)), 1000); /* over */
    free(lim);
}

/* A damaged state (a region is input): the limit stays within its bounds. */
static void test_damaged_state(void)
{
    struct sw_limiter *lim = adaptive_new(SW_ADAPT_GRADIENT, 2, 50, 10, SW_ADAPT_NO_CPU);
    if (lim == NULL)
        return;
    struct sw_view v;
    sw_limiter_view(lim, &v);
    struct sw_decision d;
    sw_decide(&v, 1, MS(1000), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    struct sw_adapt_state *s = &sw_limiter_node(lim)->adapt;
    const float bad[] = {NAN, INFINITY, -5.0f, 1e30f, 0.5f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s->limit = bad[i];
        s->base_us = bad[i];
        s->flags = (uint8_t)(i == 0 ? 0xff : 0x01);
        s->next_ms = INT64_MIN;
        s->rt_sum_us = -1;
        int64_t l = sw_adapt_limit_now(&v, MS(2000 + 1000 * (int64_t)i));
        CHECK(l >= 2 && l <= 50);
        CHECK(s->limit >= 2.0f && s->limit <= 50.0f);
    }
    CHECK_EQ(sw_adapt_limit_of(&lim->rule.adapt, sw_limiter_node(lim)) >= 2, 1);
    free(lim);
}

/* One decision of n at t (ms), lone or as the only member of a group (sw_group_decide). */
static int decide_as(struct sw_view *v, int group, int64_t t_ms)
{
    struct sw_decision d;
    if (group) {
        struct sw_gmember m;
        memset(&m, 0, sizeof m);
        m.kind = SW_GM_LIMITER;
        m.v = v;
        m.n = 1;
        sw_gmember_order_private(&m);
        sw_group_decide(&m, 1, MS(t_ms), SW_F_ENTRY, &d);
    } else {
        sw_decide(v, 1, MS(t_ms), 0, &d);
    }
    return d.verdict == SW_PASS;
}

/* A damaged state that is never due (next_ms far ahead) is repaired by the next decision,
 * lone or in a group: bounds [2, 10] hold, and a limit of 0 or NaN does not refuse forever. */
static void test_damaged_state_decisions(void)
{
    const float bad[] = {1e30f, INFINITY, NAN, 0.0f, -3.0f};
    for (uint32_t algo = SW_ADAPT_BBR; algo <= SW_ADAPT_GRADIENT; algo++)
        for (int group = 0; group <= 1; group++)
            for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
                struct sw_limiter *lim = adaptive_new(algo, 2, 10, 5, SW_ADAPT_NO_CPU);
                if (lim == NULL)
                    return;
                struct sw_view v;
                sw_limiter_view(lim, &v);
                CHECK_EQ(decide_as(&v, 0, 1000), 1); /* fresh -> running */
                sw_exit(&v, 1, 0, SW_OUT_NONE, MS(1000));
                struct sw_adapt_state *s = &sw_limiter_node(lim)->adapt;
                s->limit = bad[b];
                s->next_ms = INT64_MAX; /* never due */
                int passed = 0;
                for (int i = 0; i < 100; i++)
                    passed += decide_as(&v, group, 1500 + i);
                CHECK(passed >= 2 && passed <= 10);
                CHECK(s->limit >= 2.0f && s->limit <= 10.0f);
                CHECK(s->next_ms <= 1600 + 3600000);
                int64_t l = sw_adapt_limit_now(&v, MS(1600));
                CHECK(l >= 2 && l <= 10);
                free(lim);
            }
}

/* A learned limit outside the deciding rule's bounds (written by a process with other
 * settings on a shared region, or before update(max_limit=)) is clamped by every decision
 * (fast path, slow path, group plan), not only at the next update. */
static void test_decisions_clamp_to_the_rule(void)
{
    for (uint32_t algo = SW_ADAPT_BBR; algo <= SW_ADAPT_GRADIENT; algo++)
        for (int group = 0; group <= 1; group++)
            for (int low = 0; low <= 1; low++) {
                struct sw_limiter *lim = adaptive_new(algo, 1, 1000, 100, SW_ADAPT_NO_CPU);
                if (lim == NULL)
                    return;
                struct sw_view v;
                sw_limiter_view(lim, &v);
                CHECK_EQ(decide_as(&v, 0, 1000), 1);
                sw_exit(&v, 1, 0, SW_OUT_NONE, MS(1000));
                struct sw_adapt_state *s = &sw_limiter_node(lim)->adapt;
                s->limit = low ? 1.0f : 100.0f; /* learned under the other bounds */
                s->next_ms = 1900;              /* not due before then */
                /* this process's settings: [1, 10] (low: [20, 30]) */
                struct sw_adapt_cfg a = {algo, low ? 20u : 1u, low ? 30u : 10u,
                                         low ? 20u : 10u, SW_ADAPT_NO_CPU, 0};
                const char *param;
                CHECK_EQ(sw_rule_set_adapt(&lim->rule, &a, &param), SW_OK);
                int passed = 0;
                for (int i = 0; i < 50; i++)
                    passed += decide_as(&v, group, 1001 + i % 5); /* head bucket: fast path */
                CHECK_EQ(passed, (low ? 20 : 10));
                CHECK_EQ(sw_adapt_limit_now(&v, MS(1010)), (low ? 20 : 10));
                free(lim);
            }
}

/* Threads deciding and completing on one adaptive limiter (run under tsan): nothing lost,
 * nothing held at the end, the limit within its bounds. */
struct athread {
    struct sw_limiter *lim;
    _Atomic int64_t *clock_ms;
    int64_t passed, refused, over;
};

static void *adaptive_worker(void *arg)
{
    struct athread *a = arg;
    struct sw_view v;
    sw_limiter_view(a->lim, &v);
    for (int i = 0; i < 20000; i++) {
        int64_t now = atomic_fetch_add(a->clock_ms, 1) / 4; /* 4 decisions a virtual ms */
        struct sw_decision d;
        sw_decide(&v, 1, MS(now), 0, &d);
        if (d.verdict != SW_PASS) {
            a->refused++;
            continue;
        }
        a->passed++;
        int64_t l = sw_adapt_limit_now(&v, SW_NOW);
        if (l < 3 || l > 40)
            a->over++;
        sw_exit_rt(&v, 1, MS(5 + i % 7), SW_OUT_SUCCESS, MS(now + 5));
    }
    return NULL;
}

static void test_threads(void)
{
    for (uint32_t algo = SW_ADAPT_BBR; algo <= SW_ADAPT_GRADIENT; algo++) {
        struct sw_limiter *lim = adaptive_new(algo, 3, 40, 5, SW_ADAPT_NO_CPU);
        if (lim == NULL)
            return;
        _Atomic int64_t clock_ms = 4000;
        struct athread a[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            a[i] = (struct athread){lim, &clock_ms, 0, 0, 0};
            CHECK_EQ(pthread_create(&th[i], NULL, adaptive_worker, &a[i]), 0);
        }
        int64_t passed = 0, over = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            passed += a[i].passed;
            over += a[i].over;
        }
        struct sw_totals t;
        sw_limiter_totals(lim, &t);
        CHECK_EQ(t.pass, passed);
        CHECK_EQ(t.success, passed);
        CHECK_EQ(sw_limiter_in_flight(lim), 0);
        CHECK_EQ(over, 0);
        free(lim);
    }
}

void test_adaptive(void)
{
    test_threads();
    test_bbr_bound();
    test_damaged_state();
    test_damaged_state_decisions();
    test_decisions_clamp_to_the_rule();
    test_bounds();
    test_never_starves();
    test_climbs_back();
    test_spread_is_no_queue();
    test_follows_a_slower_backend();
    test_gradient_follows_capacity();
    test_gradient_follows_within_5s();
    test_bbr_probe();
    test_bbr_pressure();
    test_bbr_follows_capacity();
}
