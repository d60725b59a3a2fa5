/* fuzz_breaker.c - mode 5 (first byte 10 mod 16): a circuit breaker (sw_breaker.c).
 *
 * Drives a circuit breaker (sw_breaker.c) with try_pass / pass_ticket, record (any RT, error,
 * a timed-out call, the bare ticket, a stale or made-up one), cancel, new settings (recovery
 * and probe timeout too) and clock moves, against a model of docs/design.md §15 (as
 * BreakerModel in tests/test_breaker.py): states, tickets (generation << 2 | state), exactly
 * one probe, a probe silent past its timeout failed, the next probe moved by a new recovery
 * time, the window of (total, errors, slow), retry_ns, lifetime totals and the changes
 * reported. Then crafted words of the state (an untrusted region, a shared token's probe owner
 * dead or forged): validation refuses it, or after the repair it works, keeps validating, and
 * lets a second probe through only after the first's owner was found dead.
 */
#include "fuzz.h"

/* The reference: the states and tickets as BreakerModel (tests/test_breaker.py) has them,
 * a generation counted with every change, the window of (total, errors, slow) as the ring
 * model of fuzz_common.c, and the lifetime totals. */
struct mbrk {
    struct sw_brule rule;
    uint64_t gen;
    uint32_t state;
    int64_t next_ns, opened_ns, probe_ns;
    bool probe_bare;
    int64_t totals[SW_BRK_T_WORDS], transitions[3];
    struct sw_brk_changes chg; /* the changes the call made */
    struct mleap win;
};

static uint64_t mb_word(const struct mbrk *m)
{
    return m->gen << 2 | m->state;
}
static void mb_move(struct mbrk *m, uint32_t to, double value)
{
    if (m->chg.n < 2) {
        m->chg.c[m->chg.n].from = m->state;
        m->chg.c[m->chg.n].to = to;
        m->chg.c[m->chg.n].value = value;
        m->chg.n++;
    }
    m->gen++;
    m->state = to;
    m->transitions[to]++;
}
/* HALF_OPEN: a probe silent past the probe timeout failed, opened at its deadline */
static void mb_expire(struct mbrk *m, int64_t now)
{
    if (m->state != SW_BRK_HALF_OPEN)
        return;
    if (m->probe_ns > now)
        m->probe_ns = now;
    if (m->rule.probe_timeout_ns == INT64_MAX)
        return;
    int64_t deadline = sat_add(m->probe_ns, m->rule.probe_timeout_ns);
    if (now < deadline)
        return;
    m->opened_ns = deadline;
    m->next_ns = sat_add(deadline, m->rule.recovery_ns);
    m->totals[SW_BRK_T_PROBE_TIMEOUTS]++;
    mb_move(m, SW_BRK_OPEN, 1.0);
}
/* OPEN: the next probe, never further than the recovery time after it opened (or now) */
static int64_t mb_next(const struct mbrk *m, int64_t now)
{
    int64_t cap = sat_add(m->opened_ns < now ? m->opened_ns : now, m->rule.recovery_ns);
    return m->next_ns < cap ? m->next_ns : cap;
}
static void mb_open(struct mbrk *m, int64_t now, double value)
{
    m->opened_ns = now;
    m->next_ns = sat_add(now, m->rule.recovery_ns);
    mb_move(m, SW_BRK_OPEN, value);
}
static int mb_try_pass(struct mbrk *m, int64_t now, bool bare, uint64_t *ticket)
{
    m->chg.n = 0;
    mb_expire(m, now);
    if (m->state == SW_BRK_CLOSED) {
        *ticket = mb_word(m);
        return 1;
    }
    if (m->state == SW_BRK_OPEN)
        m->next_ns = mb_next(m, now); /* never further than a trip */
    if (m->state == SW_BRK_OPEN && now >= m->next_ns) {
        m->probe_bare = bare;
        m->probe_ns = now;
        mb_move(m, SW_BRK_HALF_OPEN, NAN);
        m->totals[SW_BRK_T_PROBES]++;
        *ticket = mb_word(m);
        return 1;
    }
    m->totals[SW_BRK_T_REFUSED]++;
    return 0;
}
static void mb_record(struct mbrk *m, double rt, bool error, bool timed_out, uint64_t ticket,
                      int64_t now)
{
    m->chg.n = 0;
    /* a timed-out call: an error, and slow for the slow grade */
    bool slow = m->rule.slow_rt_ms >= 0 && (timed_out || rt > (double)m->rule.slow_rt_ms);
    error = error || timed_out;
    int64_t t = ms_of(now);
    m_add(&m->win, SW_BRK_EV_TOTAL, 1, t);
    m_add(&m->win, SW_BRK_EV_ERRORS, error, t);
    m_add(&m->win, SW_BRK_EV_SLOW, slow, t);
    m->totals[SW_BRK_T_TOTAL]++;
    m->totals[SW_BRK_T_ERRORS] += error;
    m->totals[SW_BRK_T_SLOW] += slow;
    m->totals[SW_BRK_T_TIMED_OUT] += timed_out;
    mb_expire(m, now); /* a timed-out probe's outcome decides nothing */
    if (!(ticket == mb_word(m) ||
          (ticket == SW_BRK_ANY && (m->state != SW_BRK_HALF_OPEN || m->probe_bare))))
        return; /* a call of another period, or a bare record while an entry probes */
    if (m->state == SW_BRK_HALF_OPEN) {
        if (error || slow) {
            mb_open(m, now, 1.0);
        } else {
            m_reset(&m->win);
            mb_move(m, SW_BRK_CLOSED, NAN);
        }
    } else if (m->state == SW_BRK_CLOSED) {
        int64_t total = m_sum(&m->win, SW_BRK_EV_TOTAL, t);
        if (total <= 0 || total < m->rule.min_requests)
            return;
        int64_t errors = m_sum(&m->win, SW_BRK_EV_ERRORS, t);
        int64_t slows = m_sum(&m->win, SW_BRK_EV_SLOW, t);
        double value = m->rule.grade == SW_BRK_ERROR_COUNT ? (double)errors
                       : m->rule.grade == SW_BRK_ERROR_RATIO ? (double)errors / (double)total
                                                           : (double)slows / (double)total;
        if (value > m->rule.threshold ||
            (m->rule.grade == SW_BRK_SLOW_RATIO && value == 1.0 && m->rule.threshold == 1.0))
            mb_open(m, now, value);
    }
}
static int mb_cancel(struct mbrk *m, uint64_t ticket, int64_t now)
{
    m->chg.n = 0;
    mb_expire(m, now); /* a timed-out probe failed: its cancel decides nothing */
    if (m->state == SW_BRK_HALF_OPEN &&
        ((ticket == SW_BRK_ANY && m->probe_bare) || ticket == mb_word(m))) {
        mb_move(m, SW_BRK_OPEN, NAN); /* next unchanged (#1638) */
        m->totals[SW_BRK_T_CANCELLED]++;
        return 1;
    }
    return 0;
}
static int64_t mb_retry(const struct mbrk *m, int64_t now)
{
    if (m->state == SW_BRK_CLOSED)
        return -1;
    int64_t next;
    if (m->state == SW_BRK_HALF_OPEN) {
        /* what the next try_pass meets: the probe out, or timed out and reopened */
        struct mbrk x = *m;
        x.chg.n = 0;
        mb_expire(&x, now);
        if (x.state == SW_BRK_HALF_OPEN)
            return m->rule.recovery_ns;
        next = x.next_ns;
    } else {
        next = mb_next(m, now);
    }
    __int128 d = (__int128)next - now;
    if (d > m->rule.recovery_ns)
        d = m->rule.recovery_ns;
    return d > 0 ? (int64_t)d : 0;
}

static void expect_changes(const struct sw_brk_changes *got, const struct sw_brk_changes *exp)
{
    EXPECT_EQ(got->n, exp->n, "changes reported");
    for (uint32_t i = 0; i < exp->n && i < 2; i++) {
        EXPECT_EQ(got->c[i].from, exp->c[i].from, "change from");
        EXPECT_EQ(got->c[i].to, exp->c[i].to, "change to");
        double g = got->c[i].value, e = exp->c[i].value;
        if (!(g == e || (isnan(g) && isnan(e))))
            FAIL("change value %.17g, expected %.17g", g, e);
    }
}

/* A crafted word of a breaker's state (an untrusted region): a header word, the ring's
 * layout or slots, a total, the probe's owner, the state word. */
static void craft_breaker(struct rd *r, struct sw_bstate *st, size_t size, bool process,
                          int64_t near_ms)
{
    struct sw_leap *l = sw_bstate_leap(st);
    unsigned f = u8(r), g = u8(r);
    int64_t v = crafted_value(r, l->window_ms > 0 ? l->window_ms : 1, near_ms);
    uint64_t dead = ((uint64_t)4194301u << 32) | 7u; /* a pid above the kernel's maximum */
    uint32_t sc = l->sample_count, nev = SW_BRK_N_EVENTS;
    switch (f % 16u) {
    case 0: st->magic = (uint32_t)v; break;
    case 1: st->size = (uint32_t)v; break;
    case 2: st->off_leap = (uint32_t)v; break;
    case 3: atomic_store(&st->word, (uint64_t)v); break;
    case 4: atomic_store(&st->word, (atomic_load(&st->word) & ~UINT64_C(3)) | (g & 3u)); break;
    case 5: st->next_ns = v; break;
    case 6: /* the probe's owner: none, a dead process, this one, damage (no pid) */
        atomic_store(&st->probe_owner, (g & 3u) == 0 ? 0u : (g & 3u) == 1 ? dead
                                       : (g & 3u) == 2 ? sw_proc_token() : (uint64_t)v);
        break;
    case 7: atomic_store(&st->reap_ns, v); break;
    case 8: st->totals[g % SW_BRK_T_WORDS] = v; break;
    case 9: st->transitions[g % 3u] = v; break;
    case 10: st->probe_bare = (uint64_t)v; break;
    case 11: /* a lock left by a dead process (a live one is a wait: the lock's business) */
        if (process)
            atomic_store(&st->lock.word, (g & 1u) ? dead : 0u);
        break;
    case 12: craft_leap_word(l, g % 6u, v); break;      /* its indices, interval_ms */
    case 13: craft_leap_word(l, 6u + g % 4u, v); break; /* the rest of its layout */
    case 14: { /* a slot's word, or a derived total */
        size_t words = (size_t)sc * (2u + nev) + 2u * nev;
        l->slots[((size_t)g << 8 | u8(r)) % words] = v;
        break;
    }
    default: { /* any aligned word of the state but the lock */
        size_t w = ((size_t)g << 8 | u8(r)) % (size / 8u);
        if (w != offsetof(struct sw_bstate, lock) / 8u)
            ((int64_t *)(void *)st)[w] = v;
        break;
    }
    }
}

static const double k_brk_ratio[] = {0, 0.25, 0.5, 1.0, 0.1, 0.75, 0.3, 1.0};
static const int64_t k_brk_interval[] = {1000, 50, 100, 200, 500, 3000, 7, 1};
static const double k_brk_recovery[] = {0, 0.01, 0.1, 1, 10, 1e9, 0.001, 0.05};
static const double k_brk_probe_timeout[] = {60, INFINITY, 0.01, 0.5};

void run_breaker(struct rd *r)
{
    unsigned c0 = u8(r), c1 = u8(r), c2 = u8(r);
    struct sw_breaker_cfg c;
    sw_breaker_cfg_default(&c);
    c.grade = (int)(c0 % 3u);
    c.threshold = c.grade == SW_BRK_ERROR_COUNT ? (double)((c0 >> 2) & 7u)
                                                : k_brk_ratio[(c0 >> 2) & 7u];
    c.slow_rt_ms = (int64_t)((c0 >> 5) & 7u) * 10;
    c.min_requests = (int64_t)(c1 & 7u);
    c.recovery_s = k_brk_recovery[(c1 >> 3) & 7u];
    window_cfg_of(c2, k_brk_interval, 1, &c.interval_ms, &c.sample_count);
    c.probe_timeout_s = k_brk_probe_timeout[(c2 >> 6) & 3u];
    bool process = (c1 & 0x40u) != 0; /* a shared state's token: the probe has an owner */
    if (sw_breaker_check_ex(&c, NULL) != SW_OK) {
        EXPECT_EQ(sw_breaker_size(&c), 0, "size of a refused breaker cfg");
        return;
    }
    size_t size = sw_breaker_size(&c), ssize = sw_bstate_size(c.interval_ms, c.sample_count);
    struct sw_breaker *br = malloc(size);
    struct sw_bstate *copy = malloc(ssize);
    struct mbrk *m = malloc(sizeof *m);
    if (br == NULL || copy == NULL || m == NULL)
        abort();
    EXPECT_EQ(sw_breaker_init(br, &c), SW_OK, "breaker init");
    struct sw_bview v;
    sw_breaker_view(br, &v);
    uint64_t seq = 0;
    v.seq = &seq;
    if (process)
        v.token = SW_LOCK_PROCESS;
    memset(m, 0, sizeof *m);
    m->rule = br->rule;
    m_init(&m->win, c.interval_ms, c.sample_count, SW_BRK_N_EVENTS, false);
    int64_t w_ms = c.interval_ms / (int64_t)c.sample_count;
    int64_t now = (int64_t)u32(r) * 1000;
    uint64_t tickets[8] = {0};
    unsigned nt = 0;
    bool crafted = false;
    struct sw_brk_changes chg;

    for (g_op = 0; r->i < r->n && g_op < 4000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        uint64_t before = atomic_load(&br->st.word);
        switch (op % 11u) {
        case 0: case 1: case 2: { /* try_pass (bare) or pass_ticket (an entry) */
            bool bare = (a & 1u) != 0;
            uint64_t tk = 0, etk = 0;
            int got = bare ? sw_breaker_try_pass(&v, now, &tk, &chg)
                           : sw_breaker_pass_ticket(&v, now, &tk, &chg);
            if (got != 0 && got != 1)
                FAIL("try_pass returned %d", got);
            if (!crafted) {
                EXPECT_EQ(got, mb_try_pass(m, now, bare, &etk), "try_pass");
                if (got)
                    EXPECT_EQ(tk, etk, "ticket");
                expect_changes(&chg, &m->chg);
            } else if (got && (before & 3u) == SW_BRK_HALF_OPEN) {
                /* a second probe only after the first's owner was found dead (a cancel), or
                 * the first timed out (a failure: 1.0) */
                if (chg.n != 2 || chg.c[0].to != SW_BRK_OPEN ||
                    chg.c[1].to != SW_BRK_HALF_OPEN || (!process && chg.c[0].value != 1.0))
                    FAIL("a second probe while one is out (%u changes)", chg.n);
            } else if (got && (before & 3u) == SW_BRK_OPEN &&
                       (chg.n != 1 || chg.c[0].to != SW_BRK_HALF_OPEN)) {
                FAIL("a probe without the change to half-open");
            }
            if (got)
                tickets[nt++ % 8u] = tk;
            break;
        }
        case 3: case 4: case 5: { /* record */
            double rt;
            switch (a & 7u) {
            case 0: rt = 0; break;
            case 1: rt = (double)u8(r); break;
            case 2: rt = (double)u8(r) / 7.0; break;
            case 3: rt = (double)c.slow_rt_ms + ((a & 8u) ? 1e-9 : 0); break;
            case 4: rt = (a & 8u) ? 1e300 : 9.2e18; break;
            case 5: rt = (a & 8u) ? -1.0 : ((a & 16u) ? NAN : INFINITY); break;
            default: rt = (double)(c.slow_rt_ms + 1); break;
            }
            bool error = (a & 0x20u) != 0;
            bool timed_out = ((op / 11u) & 1u) != 0; /* ran past call_timeout_s */
            uint64_t tk = (a & 0xc0u) == 0 ? SW_BRK_ANY
                          : (a & 0xc0u) == 0x40u ? (uint64_t)u32(r)
                                                 : tickets[u8(r) % 8u];
            int rc = timed_out ? sw_breaker_record_timeout(&v, rt, tk, now, &chg)
                               : sw_breaker_record(&v, rt, error, tk, now, &chg);
            if (!(rt >= 0) || !isfinite(rt)) {
                EXPECT_EQ(rc, SW_EINVAL, "record of a bad rt");
                EXPECT_EQ(chg.n, 0, "no change on a bad rt");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "record");
            if (!crafted) {
                mb_record(m, rt, error, timed_out, tk, now);
                expect_changes(&chg, &m->chg);
            }
            break;
        }
        case 6: { /* cancel */
            uint64_t tk = (a & 3u) == 0 ? SW_BRK_ANY : tickets[(a >> 2) % 8u];
            int got = sw_breaker_cancel(&v, tk, now, &chg);
            if (got != 0 && got != 1)
                FAIL("cancel returned %d", got);
            if (!crafted) {
                EXPECT_EQ(got, mb_cancel(m, tk, now), "cancel");
                expect_changes(&chg, &m->chg);
            }
            break;
        }
        case 7: { /* what can be read: retry, stats, totals */
            int64_t retry = -2;
            struct sw_brk_stats s;
            struct sw_brk_totals t;
            EXPECT_EQ(sw_breaker_retry_ns(&v, now, &retry), SW_OK, "retry_ns");
            EXPECT_EQ(sw_breaker_stats(&v, now, &s), SW_OK, "stats");
            EXPECT_EQ(sw_breaker_totals(&v, &t), SW_OK, "totals");
            if (retry < -1 || retry > br->rule.recovery_ns || s.retry_ns != retry)
                FAIL("retry %lld (stats %lld), recovery %lld", (long long)retry,
                     (long long)s.retry_ns, (long long)br->rule.recovery_ns);
            if (s.state < 0 || s.state > 2)
                FAIL("state %d", s.state);
            if (!crafted) {
                int64_t tm = ms_of(now);
                EXPECT_EQ(retry, mb_retry(m, now), "retry_ns");
                EXPECT_EQ(s.state, m->state, "state");
                EXPECT_EQ(s.total, m_sum(&m->win, SW_BRK_EV_TOTAL, tm), "window total");
                EXPECT_EQ(s.errors, m_sum(&m->win, SW_BRK_EV_ERRORS, tm), "window errors");
                EXPECT_EQ(s.slow, m_sum(&m->win, SW_BRK_EV_SLOW, tm), "window slow");
                for (int k = 0; k < SW_BRK_T_WORDS; k++)
                    EXPECT_EQ(t.t[k], m->totals[k], "lifetime total");
                for (int k = 0; k < 3; k++)
                    EXPECT_EQ(t.transitions[k], m->transitions[k], "transitions");
                EXPECT_EQ(seq, m->transitions[0] + m->transitions[1] + m->transitions[2],
                          "the view's change count");
            }
            /* an observer's copy (read_region: no lock, validated, repaired, read) */
            memcpy(copy, &br->st, ssize);
            if (sw_bstate_validate(copy, ssize, c.interval_ms, c.sample_count) == SW_OK) {
                struct sw_leap *l = sw_bstate_leap(copy);
                sw_leap_repair(l);
                int64_t tm = sw_leap_clamp(l, sw_ms_of_ns(now));
                for (uint32_t e = 0; e < SW_BRK_N_EVENTS; e++)
                    (void)sw_leap_sum_at(l, NULL, e, tm);
            } else if (!crafted) {
                FAIL("a sound state refused");
            }
            break;
        }
        case 8: /* new settings (update()), or a crafted word of the state, then an attach */
            if ((op & 0x30u) == 0x20u) {
                struct sw_breaker_cfg nc = c;
                struct sw_brule nr;
                nc.grade = (int)(a % 3u);
                nc.threshold = nc.grade == SW_BRK_ERROR_COUNT ? (double)((a >> 2) & 7u)
                                                              : k_brk_ratio[(a >> 2) & 7u];
                nc.recovery_s = k_brk_recovery[(a >> 5) & 7u];
                unsigned b = u8(r);
                nc.min_requests = (int64_t)(b & 7u);
                nc.probe_timeout_s = k_brk_probe_timeout[(b >> 3) & 3u];
                EXPECT_EQ(sw_brule_init(&nr, &nc), SW_OK, "new settings");
                EXPECT_EQ(sw_bview_set_rule(&v, &br->rule, &nr), SW_OK, "set_rule");
                /* a new recovery time moves the next probe of an open breaker at once */
                if (nr.recovery_ns != m->rule.recovery_ns && m->state == SW_BRK_OPEN)
                    m->next_ns = sat_add(m->opened_ns, nr.recovery_ns);
                m->rule = nr;
                break;
            }
            if ((op & 0x30u) != 0x30u) {
                now = move_time(r, now, w_ms);
                break;
            }
            craft_breaker(r, &br->st, ssize, process, ms_of(now));
            crafted = true;
            if (sw_bstate_validate(&br->st, ssize, c.interval_ms, c.sample_count) != SW_OK)
                goto done; /* refused: nothing uses it */
            EXPECT_EQ(sw_bstate_check_repair(&v), SW_OK, "repair");
            break;
        default:
            now = move_time(r, now, w_ms);
            break;
        }
        if (g_trace)
            fprintf(stderr, "breaker op %d (%u) now=%lld: state %llu -> %llu\n", g_op, op % 11u,
                    (long long)now, (unsigned long long)(before & 3u),
                    (unsigned long long)(atomic_load(&br->st.word) & 3u));
        if ((atomic_load(&br->st.word) & 3u) == 3u)
            FAIL("state word %llx", (unsigned long long)atomic_load(&br->st.word));
        if (crafted &&
            sw_bstate_validate(&br->st, ssize, c.interval_ms, c.sample_count) != SW_OK)
            FAIL("a repaired state no longer validates");
    }
done:
    free(br);
    free(copy);
    free(m);
}
