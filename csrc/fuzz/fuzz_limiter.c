/* fuzz_limiter.c - mode 2 (an odd first byte): a whole limiter (sw_limiter.c).
 *
 * The configuration picks the behavior, count, interval, samples, warm-up, cold factor and
 * queue; the operations (decides with any flags, counts, exits, releases, stats) are
 * interleaved with clock moves. Every result is compared with a reference model of the limiter
 * built on the ring model of fuzz_common.c, whose controllers follow docs/design.md §4-§5
 * literally (exact 128-bit arithmetic for pacing), not the core's code. Invariants checked
 * besides: no window above its limit, counts never negative, waits within the queue / occupy
 * timeout, in-flight never negative nor above a concurrency limit, admitted pacing starts at
 * least one cost apart.
 */
#include "fuzz.h"

struct mlim {
    struct sw_limiter_cfg cfg;
    double limit, min_rate;
    struct mleap sec, min;
    int64_t in_flight;
    /* warm-up tokens (docs/design.md §5) */
    int64_t warning, max_token, cold_pass, stored, last_filled;
    int64_t paid_until;  /* an oversize pass into an empty window is paid back (rule c) */
    double slope;
    bool ramp;
    /* pacing, exact */
    __int128 last;
    bool has_last;
    __int128 last_start; /* invariant: admitted starts at least one cost apart */
    bool has_start;
    bool user_pass;      /* PASS added by hand: the window limit invariant is off */
    int64_t totals[SW_EV_DEFAULT_COUNT]; /* lifetime totals (decisions, exits, counts) */
};

static double m_window_limit(double count, int64_t interval_ms)
{
    return interval_ms == 1000 ? count : count * ((double)interval_ms / 1000.0);
}

static void ml_init(struct mlim *ml, const struct sw_limiter_cfg *c)
{
    memset(ml, 0, sizeof *ml);
    ml->cfg = *c;
    ml->limit = m_window_limit(c->count, c->interval_ms);
    double per_window = 1000.0 / (double)c->interval_ms;
    ml->min_rate = c->count < per_window ? c->count : per_window;
    bool borrow = c->grade == SW_GRADE_QPS && c->behavior == SW_REJECT;
    m_init(&ml->sec, c->interval_ms, c->sample_count, SW_EV_DEFAULT_COUNT, borrow);
    m_init(&ml->min, SW_MINUTE_INTERVAL_MS, SW_MINUTE_SAMPLES, SW_EV_DEFAULT_COUNT, false);
    double q = c->count, W = c->warm_up_s, cf = c->cold_factor;
    ml->warning = (int64_t)floor(floor(W * q) / (cf - 1.0));
    ml->max_token = ml->warning + (int64_t)floor(2.0 * W * q / (1.0 + cf));
    ml->ramp = ml->max_token > ml->warning && q > 0; /* rule (b) */
    ml->slope = ml->ramp ? (cf - 1.0) / q / (double)(ml->max_token - ml->warning) : 0;
    ml->cold_pass = (int64_t)floor(floor(q) / cf);
    ml->stored = ml->max_token; /* rule (a): cold */
    ml->last_filled = M_EMPTY;
    ml->paid_until = M_EMPTY;
}

static double ml_warm_rate(struct mlim *ml, int64_t t)
{
    int64_t prev = m_previous(&ml->min, SW_EV_PASS, t);
    int64_t sec = t - t % 1000;
    if (ml->last_filled == M_EMPTY || sec > ml->last_filled) {
        int64_t elapsed = ml->last_filled == M_EMPTY ? 0 : sec - ml->last_filled;
        int64_t v = ml->stored;
        bool busy = ml->paid_until != M_EMPTY && ml->paid_until > sec - 1000;
        if (v < ml->warning || (v > ml->warning && prev < ml->cold_pass && !busy)) {
            double nv = (double)v + (double)elapsed * ml->cfg.count / 1000.0;
            v = nv >= (double)ml->max_token ? ml->max_token : (int64_t)nv;
        }
        if (v > ml->max_token)
            v = ml->max_token;
        v -= prev;
        ml->stored = v < 0 ? 0 : v;
        ml->last_filled = sec;
    }
    double rate = ml->cfg.count;
    if (ml->ramp && ml->stored >= ml->warning)
        rate = nextafter(1.0 / ((double)(ml->stored - ml->warning) * ml->slope +
                                1.0 / ml->cfg.count),
                         INFINITY);
    return rate < ml->min_rate ? ml->min_rate : rate; /* rule (c) */
}

static int64_t ns_until_m(int64_t at_ms, int64_t now)
{
    __int128 d = (__int128)at_ms * 1000000 - (now < 0 ? 0 : now);
    return d < 0 ? 0 : (int64_t)d;
}

static void node_add_m(struct mlim *ml, uint32_t ev, int64_t n, int64_t t)
{
    m_add(&ml->sec, ev, n, t);
    m_add(&ml->min, ev, n, t);
    ml->totals[ev] = sat_add(ml->totals[ev], n);
}

/* The model's decision. */
static void ml_decide_enforcing(struct mlim *ml, int64_t n, int64_t now, unsigned flags,
                                struct sw_decision *d);

/* Shadow mode: the enforcing twin's decision and counts (a shadow decision is final: its
 * refusal counts BLOCK whatever SW_F_NO_BLOCK says), then an admission without a wait. */
static void ml_decide(struct mlim *ml, int64_t n, int64_t now, unsigned flags,
                      struct sw_decision *d)
{
    bool shadow = (flags & SW_F_SHADOW) != 0 || ml->cfg.shadow;
    if (shadow)
        flags &= ~SW_F_NO_BLOCK;
    ml_decide_enforcing(ml, n, now, flags, d);
    d->shadowed = 0;
    if (shadow) {
        d->shadowed = d->verdict != SW_PASS;
        d->verdict = SW_PASS;
        d->wait_ns = 0;
        d->retry_ns = -1;
    }
}

static void ml_decide_enforcing(struct mlim *ml, int64_t n, int64_t now, unsigned flags,
                                struct sw_decision *d)
{
    const struct sw_limiter_cfg *c = &ml->cfg;
    d->verdict = SW_BLOCK;
    d->occupied = 0;
    d->wait_ns = 0;
    d->retry_ns = -1;
    int64_t t = m_clamp(&ml->sec, ms_of(now));
    int64_t grant = 0;
    if (c->grade == SW_GRADE_CONCURRENCY) {
        if ((double)n > c->count)
            d->verdict = SW_NEVER;
        else if ((double)ml->in_flight + (double)n <= c->count)
            d->verdict = SW_PASS;
    } else if (c->count <= 0) {
        d->verdict = SW_NEVER;
    } else if (c->behavior == SW_REJECT) {
        struct mleap *s = &ml->sec;
        int64_t pass = m_sum(s, SW_EV_PASS, t);
        if ((double)n > ml->limit) {
            d->verdict = SW_NEVER;
        } else if ((double)pass + (double)n <= ml->limit) {
            d->verdict = SW_PASS;
        } else {
            bool granted = false;
            if ((flags & SW_F_PRIORITIZED) && !(flags & SW_F_TRY)) {
                /* docs/design.md §4 try-occupy */
                int64_t waiting = m_waiting(s, t);
                int64_t wait_ms = s->w - t % s->w;
                if ((double)waiting < ml->limit && wait_ms < c->occupy_timeout_ms) {
                    const struct mbucket *old =
                        m_held(s, m_start(s, t) - (int64_t)(s->sc - 1) * s->w);
                    int64_t oldest = old ? old->c[SW_EV_PASS] : 0;
                    if ((double)pass + (double)waiting + (double)n - (double)oldest <=
                        ml->limit) {
                        granted = true;
                        grant = t + wait_ms;
                    }
                }
            }
            if (granted) {
                d->verdict = SW_PASS;
                d->occupied = 1;
            } else if (flags & SW_F_RETRY) {
                /* the bucket whose sliding out makes room: oldest first */
                int64_t cur = m_start(s, t), gone = 0;
                for (int64_t k = (int64_t)s->sc - 1; k >= 0; k--) {
                    int64_t st = cur - k * s->w;
                    const struct mbucket *b = m_held(s, st);
                    if (b != NULL && m_in_window(s, st, t))
                        gone += b->c[SW_EV_PASS];
                    if ((double)(pass - gone) + (double)n <= ml->limit) {
                        int64_t at = st + s->interval - t;
                        d->retry_ns = ns_until_m(t + (at < 0 ? 0 : at), now);
                        break;
                    }
                }
            }
        }
    } else if (c->behavior == SW_WARM_UP) {
        double rate = ml_warm_rate(ml, t);
        double allowed = m_window_limit(rate, c->interval_ms);
        int64_t pass = m_sum(&ml->sec, SW_EV_PASS, t); /* a read: refreshes, as the core */
        if ((double)n > ml->limit) {
            d->verdict = SW_NEVER;
        } else if (ml->paid_until != M_EMPTY && t < ml->paid_until) {
            if (flags & SW_F_RETRY)
                d->retry_ns = ns_until_m(ml->paid_until, now);
        } else if ((double)pass + (double)n <= allowed) {
            d->verdict = SW_PASS;
        } else if (pass == 0) { /* (c): one per window, paid back over n / rate seconds */
            d->verdict = SW_PASS;
            double ms = ceil((double)n * 1000.0 / rate);
            ml->paid_until = ms < 9.0e18 ? t + (int64_t)ms : INT64_MAX;
        }
    } else {
        double rate = c->behavior == SW_THROTTLE ? c->count : ml_warm_rate(ml, t);
        double cf = floor(1e9 * (double)n / rate + 0.5);
        __int128 cost = cf < 9.2e18 ? (__int128)cf : (__int128)INT64_MAX;
        __int128 qmax = (__int128)c->max_queueing_ms * 1000000;
        if (!ml->has_last || ml->last + cost <= now) {
            ml->last = now;
            ml->has_last = true;
            d->verdict = SW_PASS;
        } else {
            __int128 wait = ml->last + cost - now;
            if (flags & SW_F_TRY) {
                d->retry_ns = wait > INT64_MAX ? INT64_MAX : (int64_t)wait;
            } else if (wait > qmax) {
                __int128 rr = wait - qmax;
                d->retry_ns = rr > INT64_MAX ? INT64_MAX : (int64_t)rr;
            } else {
                ml->last += cost;
                d->wait_ns = (int64_t)wait;
                d->verdict = SW_PASS;
            }
        }
        if (d->verdict == SW_PASS) {
            __int128 start = (__int128)now + d->wait_ns;
            if (ml->has_start && start < ml->last_start + cost)
                FAIL("pacing: start %lld less than one cost (%lld) after %lld",
                     (long long)start, (long long)cost, (long long)ml->last_start);
            ml->last_start = start;
            ml->has_start = true;
        }
    }
    if (d->verdict == SW_PASS) {
        if (d->occupied) {
            node_add_m(ml, SW_EV_OCCUPIED_PASS, n, t);
            m_grant(&ml->sec, grant, n);
            ml->totals[SW_EV_PASS] = sat_add(ml->totals[SW_EV_PASS], n);
            d->wait_ns = ns_until_m(grant, now);
        } else {
            node_add_m(ml, SW_EV_PASS, n, t);
        }
        if (c->grade == SW_GRADE_CONCURRENCY || (flags & SW_F_ENTRY))
            ml->in_flight = sat_add(ml->in_flight, n);
    } else if (!(flags & SW_F_NO_BLOCK)) {
        node_add_m(ml, SW_EV_BLOCK, n, t);
    }
}

void run_limiter(struct rd *r)
{
    unsigned c0 = u8(r), c1 = u8(r), c2 = u8(r);
    struct sw_limiter_cfg c;
    limiter_cfg_of(c0, c1, c2, &c);
    if (c.interval_ms % (int64_t)c.sample_count != 0)
        c.sample_count = 2;
    if (sw_limiter_check(&c) != SW_OK) {
        EXPECT_EQ(sw_limiter_size(&c), 0, "size of a refused cfg");
        return;
    }
    struct sw_limiter *lim = malloc(sw_limiter_size(&c));
    struct mlim *ml = malloc(sizeof *ml);
    if (lim == NULL || ml == NULL)
        abort();
    EXPECT_EQ(sw_limiter_init(lim, &c), SW_OK, "limiter init");
    ml_init(ml, &c);
    struct sw_window win;
    sw_limiter_window(lim, &win);
    int64_t now = (int64_t)u32(r) * 1000;
    int64_t w_ms = c.interval_ms / (int64_t)c.sample_count;
    bool is_thr = c.behavior == SW_THROTTLE || c.behavior == SW_WARM_UP_THROTTLE;

    for (g_op = 0; r->i < r->n && g_op < 4000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        switch (op % 12u) {
        case 0: case 1: case 2: case 3: {
            int64_t n = (a & 0xc0u) == 0xc0u ? (int64_t)(a & 0x3fu) * 37 : (int64_t)(a & 3u) + 1;
            if ((a & 0xf0u) == 0x40u)
                n = 0; /* EINVAL */
            unsigned flags = u8(r) & 0x3fu; /* SW_F_SHADOW included */
            struct sw_decision d, e;
            int rc = sw_limiter_decide(lim, n, now, flags, &d);
            if (n < 1) {
                EXPECT_EQ(rc, SW_EINVAL, "decide n < 1");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "decide");
            ml_decide(ml, n, now, flags, &e);
            if (g_trace)
                fprintf(stderr, "op %d decide n=%lld now=%lld (t=%lld newest=%lld) flags=%u -> v=%d occ=%d wait=%lld window=%lld waiting=%lld\n",
                        g_op, (long long)n, (long long)now, (long long)ms_of(now), (long long)ml->sec.newest,
                        flags, d.verdict, d.occupied, (long long)d.wait_ns,
                        (long long)m_sum_peek(&ml->sec, SW_EV_PASS, ml->sec.newest + ml->sec.w - 1),
                        (long long)m_waiting(&ml->sec, ml->sec.newest));
            EXPECT_EQ(d.verdict, e.verdict, "verdict");
            EXPECT_EQ(d.occupied, e.occupied, "occupied");
            EXPECT_EQ(d.wait_ns, e.wait_ns, "wait_ns");
            EXPECT_EQ(d.retry_ns, e.retry_ns, "retry_ns");
            EXPECT_EQ(d.shadowed, e.shadowed, "shadowed");
            /* invariants on the core's own answers */
            if (d.wait_ns < 0)
                FAIL("negative wait");
            if (is_thr && d.wait_ns > c.max_queueing_ms * 1000000)
                FAIL("wait %lld beyond the queue", (long long)d.wait_ns);
            if ((flags & SW_F_TRY) && d.wait_ns != 0)
                FAIL("try admitted with a wait");
            /* (a time behind the newest bucket adds its lag to the wait: docs/design.md §4
             * computes the wait from now_ns, the grant from the clamped time) */
            if (d.occupied && d.wait_ns >= c.occupy_timeout_ms * 1000000 &&
                ms_of(now) >= ml->sec.newest)
                FAIL("occupy wait %lld not below the timeout", (long long)d.wait_ns);
            if (d.verdict != SW_PASS && d.retry_ns < -1)
                FAIL("retry %lld", (long long)d.retry_ns);
            if (c.grade == SW_GRADE_CONCURRENCY && (double)sw_limiter_in_flight(lim) > c.count)
                FAIL("in flight above the concurrency limit");
            /* Regular passes per window never exceed L. Passes borrowed for a bucket are
             * not included: docs/design.md §5 (as Sentinel's DefaultController) checks regular
             * requests against the window without the waiting count, so after a grant the
             * current bucket may still fill up to L and the next window then holds up to
             * L + borrowed (reported as a design issue, not changed here). */
            if (c.grade == SW_GRADE_QPS && !is_thr && !ml->user_pass) {
                struct mleap *s = &ml->sec;
                int64_t p = m_sum_peek(s, SW_EV_PASS, s->newest + (s->w - 1));
                for (int i = 0; i < s->nb; i++)
                    if (m_in_window(s, s->b[i].start, s->newest + (s->w - 1)))
                        p -= s->b[i].borrowed;
                if ((double)p > ml->limit)
                    FAIL("window admitted %lld above its limit %g", (long long)p, ml->limit);
            }
            break;
        }
        case 4: {
            uint32_t ev = a % 7u;
            int64_t n = (int64_t)(u8(r) & 0x1fu) - ((a & 0x80u) ? 1 : 0);
            int rc = sw_limiter_count(lim, ev, n, now);
            if (ev >= SW_EV_DEFAULT_COUNT) {
                EXPECT_EQ(rc, SW_EEVENT, "count unknown event");
            } else if (n < 0) {
                EXPECT_EQ(rc, SW_EINVAL, "count n < 0");
            } else {
                EXPECT_EQ(rc, SW_OK, "count");
                node_add_m(ml, ev, n, ms_of(now));
                if (ev == SW_EV_PASS && n > 0)
                    ml->user_pass = true;
            }
            break;
        }
        case 5: {
            int64_t n = (int64_t)(a & 7u) - ((a & 0x80u) && (a & 0x40u) ? 1 : 0);
            int64_t rt = (int64_t)u8(r) - ((a & 0x80u) && !(a & 0x40u) ? 256 : 0);
            int outcome = (int)((a >> 3) % 3u);
            int rc = sw_limiter_exit(lim, n, rt, outcome, now);
            if (n < 0 || rt < 0) {
                EXPECT_EQ(rc, SW_EINVAL, "exit bad args");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "exit");
            if (outcome != SW_OUT_NONE) {
                int64_t t = ms_of(now);
                if (outcome == SW_OUT_SUCCESS) {
                    node_add_m(ml, SW_EV_SUCCESS, n, t);
                    m_add_rt(&ml->sec, rt, t);
                    m_add_rt(&ml->min, rt, t);
                    ml->totals[SW_EV_RT] = sat_add(ml->totals[SW_EV_RT], rt);
                } else {
                    node_add_m(ml, SW_EV_EXCEPTION, n, t);
                }
            }
            ml->in_flight = ml->in_flight > n ? ml->in_flight - n : 0;
            break;
        }
        case 6: {
            int64_t n = (int64_t)(a & 7u);
            int rc = sw_limiter_release(lim, n);
            if (n < 1)
                EXPECT_EQ(rc, SW_EINVAL, "release 0");
            else if (ml->in_flight < n)
                EXPECT_EQ(rc, SW_ESTATE, "release beyond in flight");
            else {
                EXPECT_EQ(rc, SW_OK, "release");
                ml->in_flight -= n;
            }
            break;
        }
        case 7: {
            struct sw_stats st;
            sw_limiter_stats(lim, now, &st);
            struct mleap *s = &ml->sec;
            int64_t t = m_clamp(s, ms_of(now));
            EXPECT_EQ(st.min_rt, m_min_rt(s, t), "stats min_rt");
            EXPECT_EQ(st.pass, m_sum(s, SW_EV_PASS, t), "stats pass");
            EXPECT_EQ(st.block, m_sum(s, SW_EV_BLOCK, t), "stats block");
            EXPECT_EQ(st.success, m_sum(s, SW_EV_SUCCESS, t), "stats success");
            EXPECT_EQ(st.exception, m_sum(s, SW_EV_EXCEPTION, t), "stats exception");
            EXPECT_EQ(st.rt_sum, m_sum(s, SW_EV_RT, t), "stats rt");
            EXPECT_EQ(st.occupied_pass, m_sum(s, SW_EV_OCCUPIED_PASS, t), "stats occupied");
            EXPECT_EQ(st.in_flight, ml->in_flight, "stats in flight");
            EXPECT_EQ(st.waiting, s->future ? m_waiting(s, t) : 0, "stats waiting");
            if (st.in_flight < 0 || st.pass < 0 || st.block < 0 || st.waiting < 0)
                FAIL("negative statistic");
            break;
        }
        case 8: {
            /* the Metric view of the limiter's window */
            uint32_t ev = a % SW_EV_DEFAULT_COUNT;
            int64_t v = -1;
            if (a & 0x80u) {
                int64_t n = (int64_t)(u8(r) & 7u);
                EXPECT_EQ(sw_window_add(&win, ev, n, now), SW_OK, "window add");
                m_add(&ml->sec, ev, n, ms_of(now));
                if (ev == SW_EV_PASS && n > 0)
                    ml->user_pass = true;
            } else {
                int which = (int)((a >> 4) % 3u);
                EXPECT_EQ(sw_window_read(&win, which, ev, now, &v), SW_OK, "window read");
                int64_t t = ms_of(now);
                int64_t e = which == SW_READ_SUM       ? m_sum(&ml->sec, ev, t)
                            : which == SW_READ_CURRENT ? m_current(&ml->sec, ev, t)
                                                       : m_previous(&ml->sec, ev, t);
                EXPECT_EQ(v, e, "window read value");
            }
            break;
        }
        default:
            now = move_time(r, now, w_ms);
            break;
        }
        if (ml->in_flight < 0 || sw_limiter_in_flight(lim) != ml->in_flight)
            FAIL("in flight %lld, model %lld", (long long)sw_limiter_in_flight(lim),
                 (long long)ml->in_flight);
        struct sw_node *node = sw_limiter_node(lim);
        struct sw_totals tot;
        sw_limiter_totals(lim, &tot);
        EXPECT_EQ(tot.pass, ml->totals[SW_EV_PASS], "total pass");
        EXPECT_EQ(tot.block, ml->totals[SW_EV_BLOCK], "total block");
        EXPECT_EQ(tot.exception, ml->totals[SW_EV_EXCEPTION], "total exception");
        EXPECT_EQ(tot.success, ml->totals[SW_EV_SUCCESS], "total success");
        EXPECT_EQ(tot.occupied_pass, ml->totals[SW_EV_OCCUPIED_PASS], "total occupied");
        EXPECT_EQ(tot.rt, ml->totals[SW_EV_RT], "total rt");
        check_totals(sw_node_sec(node));
        check_totals(sw_node_min(node));
        if (sw_node_fut(node) != NULL) {
            int64_t t = sw_node_sec(node)->newest;
            check_waiting(sw_node_fut(node), t == SW_LEAP_EMPTY ? 0 : t);
            check_waiting(sw_node_fut(node), ms_of(now));
        }
    }
    free(ml);
    free(lim);
}
