/* fuzz_core.c - libFuzzer harness for the slidewin C core, checked against a reference model.
 *
 * The input bytes are a program: the first byte picks the mode (a standalone window with an
 * optional borrow ring, or a whole limiter), the next bytes its configuration, the rest a
 * sequence of operations (adds, reads, grants, decides with any flags, counts, exits,
 * releases, stats) interleaved with clock moves that go forward, backward and jump.
 *
 * Every result is compared with a small reference model written from docs/design.md, not from the
 * core's code: buckets are kept as a list of (start, counters) created at the times the
 * design says a bucket is (re)started, and the controllers follow §4-§5 literally (exact
 * 128-bit arithmetic for pacing). Invariants checked besides: no lost count (while nothing
 * slid out, the window holds every add), no window above its limit, counts never negative,
 * waits within the queue / occupy timeout, in-flight never negative nor above a concurrency
 * limit, admitted pacing starts at least one cost apart.
 *
 * A third mode (first byte 14 mod 16) drives a keyed table (sw_keyed.c) with keys crowded on
 * a few homes: while it has room for every key, each decision equals a private limiter's for
 * that key (the limiter being the reference, itself checked above); always, every key held
 * is where a lookup finds it, len() and `evicted` add up, no key in flight is evicted; and
 * programs may write any bytes into entries and holdings (a region is untrusted): nothing
 * crashes or overflows, and a repair leaves a sound table.
 *
 * A fourth mode (first byte 12 mod 16) crafts a limiter's region file: a process uses it, then
 * pairs of fields of its header, state, rings and process slots are set to chosen values
 * (0, -1, INT64_MAX and a bucket start within a window of it, INT64_MIN, the largest ring
 * time and one past it, a dead or live token, any bytes), and a second process attaches
 * (every check of an attach, the repair) and decides, and an observer copies it (as
 * read_region does): a crafted region is refused or works, never a crash, and in-flight is
 * never below 0 nor admitted past a concurrency limit.
 *
 * A fifth mode (first byte 10 mod 16) drives a circuit breaker (sw_breaker.c) with try_pass /
 * pass_ticket, record (any RT, error, a timed-out call, the bare ticket, a stale or made-up
 * one), cancel, new settings (recovery and probe timeout too) and clock moves, against a
 * model of DESIGN §11 (as BreakerModel in tests/test_breaker.py): states, tickets
 * (generation << 2 | state), exactly one probe, a probe silent past its timeout failed, the
 * next probe moved by a new recovery time, the window of (total, errors, slow), retry_ns,
 * lifetime totals and the changes reported. Then
 * crafted words of the state (an untrusted region, a shared token's probe owner dead or
 * forged): validation refuses it, or after the repair it works, keeps validating, and lets
 * a second probe through only after the first's owner was found dead.
 *
 * A sixth mode (first byte 8 mod 16) decides groups (sw_group.c) of 1-4 private limiters
 * and keyed tables (reject, warm-up, throttle, concurrency, shadow) against copies of the
 * members decided alone: the group's verdict, wait and retry, each member's decision, and
 * all or nothing: admitted, each member's counts, in flight, throttle slot and payback are
 * its lone copy's; refused, a refuser's are its lone copy's (BLOCK) and an admitter's are
 * unchanged (a lone keyed refusal may take an entry that a plan does not: keys held are not
 * compared then).
 *
 * A seventh mode (first byte 6 mod 16) feeds an adaptive concurrency rule (sw_adapt.c; bbr
 * and gradient, random min <= initial <= max, a second view with other bounds on the same
 * state) decisions, exits with any RT (0, huge, INT64_MAX), CPU readings, clock jumps and
 * crafted adapt-state bytes: the limit in force stays in [min_limit, max_limit] (the learned
 * one too while only one rule's bounds were used and nothing was crafted), in flight is
 * counted exactly and never above the limit that admitted, and UBSan sees no UB.
 *
 * Every input has a deadline (libFuzzer's
 * -timeout; alarm() in the replay binary, FUZZ_DEADLINE_S, 10 s): a hang is a failure.
 *
 * Build with clang -fsanitize=fuzzer (make fuzz), or with any C compiler and -DSW_FUZZ_MAIN
 * as a replay binary (make fuzz-replay): `fuzz_replay [file|dir]...`, or with no argument a
 * fixed number of pseudo-random programs.
 */
#include "sw_breaker.h"
#include "sw_group.h"
#include "sw_keyed.h"
#include "sw_limiter.h"
#include "sw_proc.h"
#include "sw_shm.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                           \
    do {                                                                                    \
        fprintf(stderr, "fuzz_core: %s:%d (op %d): ", __FILE__, __LINE__, g_op);            \
        fprintf(stderr, __VA_ARGS__);                                                       \
        fputc('\n', stderr);                                                                \
        abort();                                                                            \
    } while (0)
#define EXPECT_EQ(got, exp, what)                                                           \
    do {                                                                                    \
        long long g_ = (long long)(got), e_ = (long long)(exp);                             \
        if (g_ != e_)                                                                       \
            FAIL("%s: got %lld, expected %lld", what, g_, e_);                              \
    } while (0)

static int g_op;
static int g_trace;

/* ---- input reader ---- */

struct rd {
    const uint8_t *p;
    size_t n, i;
};
static unsigned u8(struct rd *r)
{
    return r->i < r->n ? r->p[r->i++] : 0u;
}
static uint32_t u16(struct rd *r)
{
    uint32_t a = u8(r);
    return a | (uint32_t)u8(r) << 8;
}
static uint32_t u32(struct rd *r)
{
    uint32_t a = u16(r);
    return a | u16(r) << 16;
}

/* ---- reference model of a ring (DESIGN §2-4) ---- */

#define M_EMPTY INT64_MIN
#define M_MAXB 160
#define M_MAXSC 64

struct mbucket {
    int64_t start, min_rt;
    int64_t borrowed; /* PASS granted ahead and transferred when the bucket started */
    int64_t c[SW_MAX_EVENTS];
};
struct mleap {
    int64_t interval, w;
    uint32_t sc, nev;
    bool future;
    int64_t newest;
    struct mbucket b[M_MAXB]; /* created buckets, ascending start */
    int nb;
    int64_t fstart[M_MAXSC], fcount[M_MAXSC]; /* the latest grant per future slot */
};

static int64_t sat_add(int64_t a, int64_t b)
{
    __int128 r = (__int128)a + b;
    return r > INT64_MAX ? INT64_MAX : r < INT64_MIN ? INT64_MIN : (int64_t)r;
}

static void m_init(struct mleap *m, int64_t interval, uint32_t sc, uint32_t nev, bool future)
{
    memset(m, 0, sizeof *m);
    m->interval = interval;
    m->sc = sc;
    m->w = interval / sc;
    m->nev = nev;
    m->future = future;
    m->newest = M_EMPTY;
    for (int i = 0; i < M_MAXSC; i++)
        m->fstart[i] = M_EMPTY;
}
static void m_reset(struct mleap *m)
{
    m_init(m, m->interval, m->sc, m->nev, m->future);
}
static int64_t m_start(const struct mleap *m, int64_t t)
{
    return t - t % m->w;
}
static int m_idx(const struct mleap *m, int64_t start)
{
    return (int)((start / m->w) % m->sc);
}
/* time behind the newest bucket reads/writes the newest bucket; negative is 0 */
static int64_t m_clamp(struct mleap *m, int64_t t)
{
    if (t < 0)
        t = 0;
    int64_t s = m_start(m, t);
    if (m->newest != M_EMPTY && s <= m->newest)
        return s == m->newest ? t : m->newest;
    m->newest = s;
    return t;
}
static struct mbucket *m_find(struct mleap *m, int64_t start)
{
    for (int i = m->nb - 1; i >= 0; i--)
        if (m->b[i].start == start)
            return &m->b[i];
    return NULL;
}
/* whether the ring still holds bucket `start`: it was started, and (one slot only) the
 * bucket of the same slot one interval later was not */
static const struct mbucket *m_held(struct mleap *m, int64_t start)
{
    if (start < 0)
        return NULL;
    struct mbucket *b = m_find(m, start);
    if (b != NULL && m_find(m, start + m->interval) != NULL)
        return NULL;
    return b;
}
/* (re)start the bucket of a clamped t, taking the passes granted ahead for it */
static struct mbucket *m_touch(struct mleap *m, int64_t t)
{
    int64_t s = m_start(m, t);
    struct mbucket *b = m_find(m, s);
    if (b != NULL)
        return b;
    int keep = 0;
    for (int i = 0; i < m->nb; i++) /* prune buckets nothing can read any more */
        if (m->b[i].start > s - m->interval - m->w)
            m->b[keep++] = m->b[i];
    m->nb = keep;
    if (m->nb == M_MAXB)
        FAIL("model: too many buckets");
    b = &m->b[m->nb++];
    memset(b, 0, sizeof *b);
    b->start = s;
    b->min_rt = SW_MIN_RT_INIT;
    if (m->future && m->fstart[m_idx(m, s)] == s)
        b->c[SW_EV_PASS] = b->borrowed = m->fcount[m_idx(m, s)];
    return b;
}
static bool m_in_window(const struct mleap *m, int64_t start, int64_t t)
{
    return start <= t && start > t - m->interval;
}
static int64_t m_sum_peek(struct mleap *m, uint32_t ev, int64_t t)
{
    int64_t s = 0;
    for (int i = 0; i < m->nb; i++)
        if (m_in_window(m, m->b[i].start, t))
            s = sat_add(s, m->b[i].c[ev]);
    return s;
}
static int64_t m_sum(struct mleap *m, uint32_t ev, int64_t t)
{
    t = m_clamp(m, t);
    m_touch(m, t);
    return m_sum_peek(m, ev, t);
}
static int64_t m_current(struct mleap *m, uint32_t ev, int64_t t)
{
    t = m_clamp(m, t);
    return m_touch(m, t)->c[ev];
}
static int64_t m_previous(struct mleap *m, uint32_t ev, int64_t t)
{
    t = m_clamp(m, t);
    const struct mbucket *b = m_held(m, m_start(m, t) - m->w);
    return b != NULL ? b->c[ev] : 0;
}
static int64_t m_min_rt(struct mleap *m, int64_t t)
{
    t = m_clamp(m, t);
    m_touch(m, t);
    int64_t v = SW_MIN_RT_INIT;
    for (int i = 0; i < m->nb; i++)
        if (m_in_window(m, m->b[i].start, t) && m->b[i].min_rt < v)
            v = m->b[i].min_rt;
    return v < 1 ? 1 : v;
}
static void m_add(struct mleap *m, uint32_t ev, int64_t n, int64_t t)
{
    t = m_clamp(m, t);
    struct mbucket *b = m_touch(m, t);
    b->c[ev] = sat_add(b->c[ev], n);
}
static void m_add_rt(struct mleap *m, int64_t rt, int64_t t)
{
    t = m_clamp(m, t);
    struct mbucket *b = m_touch(m, t);
    b->c[SW_EV_RT] = sat_add(b->c[SW_EV_RT], rt);
    if (rt < b->min_rt)
        b->min_rt = rt;
}
static int64_t m_waiting(const struct mleap *m, int64_t t)
{
    int64_t s = 0;
    for (uint32_t i = 0; i < m->sc; i++)
        if (m->fstart[i] != M_EMPTY && m->fstart[i] > t)
            s = sat_add(s, m->fcount[i]);
    return s;
}
static void m_grant(struct mleap *m, int64_t T, int64_t n)
{
    int64_t s = m_start(m, T);
    int i = m_idx(m, s);
    if (m->fstart[i] != s) {
        m->fstart[i] = s;
        m->fcount[i] = 0;
    }
    m->fcount[i] = sat_add(m->fcount[i], n);
}

static int64_t ms_of(int64_t ns)
{
    return ns <= 0 ? 0 : ns / 1000000;
}

/* ---- the core's running totals against a brute-force re-sum of its own slots ---- */

/* Between any two calls: each running total equals the plain O(n) sum over the slots whose
 * start lies in (head - interval, head], the min_rt deque's front equals the plain minimum
 * over them, and no slot holds a start after head. */
static void check_totals(const struct sw_leap *l)
{
    int64_t head = l->head;
    int64_t mn = SW_MIN_RT_INIT;
    int64_t sum[SW_MAX_EVENTS] = {0};
    for (uint32_t i = 0; i < l->sample_count; i++) {
        const int64_t *slot = sw_leap_cslot(l, i);
        int64_t s = slot[SW_SLOT_START];
        if (s == SW_LEAP_EMPTY)
            continue;
        if (head == SW_LEAP_EMPTY || s > head)
            FAIL("slot %u holds start %lld after head %lld", i, (long long)s, (long long)head);
        if (s <= head - l->interval_ms)
            continue;
        for (uint32_t e = 0; e < l->n_events; e++)
            sum[e] = sat_add(sum[e], slot[SW_SLOT_COUNTS + e]);
        if (slot[SW_SLOT_MIN_RT] < mn)
            mn = slot[SW_SLOT_MIN_RT];
    }
    for (uint32_t e = 0; e < l->n_events; e++)
        EXPECT_EQ(sw_leap_held_sum(l, e), sum[e], "running total == re-sum of the slots");
    if (l->has_rt)
        EXPECT_EQ(sw_leap_held_min_rt(l), mn, "deque min_rt == min over the slots");
    if (head != SW_LEAP_EMPTY && l->newest < head)
        FAIL("head %lld after newest %lld", (long long)head, (long long)l->newest);
}

/* sw_borrow_waiting (which visits only the slots after t) against every slot. */
static void check_waiting(const struct sw_leap *fut, int64_t t)
{
    int64_t s = 0;
    for (uint32_t i = 0; i < fut->sample_count; i++) {
        const int64_t *slot = sw_leap_cslot(fut, i);
        if (slot[SW_SLOT_START] != SW_LEAP_EMPTY && slot[SW_SLOT_START] > t)
            s = sat_add(s, slot[SW_SLOT_COUNTS]);
    }
    EXPECT_EQ(sw_borrow_waiting(fut, t), s, "waiting == re-sum of the future slots");
}

/* ---- clock moves ---- */

/* the first ns of the next bucket of w_ms after now (0 for negative times) */
static int64_t m_ms_align(int64_t now, int64_t w_ms)
{
    int64_t q = w_ms * 1000000;
    return now < 0 ? 0 : (now / q + 1) * q;
}

#define T_MAX (INT64_MAX / 2) /* keeps every model value (ms * 1e6 + costs) in range */

static int64_t move_time(struct rd *r, int64_t now, int64_t w_ms)
{
    unsigned k = u8(r);
    int64_t v = (int64_t)u16(r);
    switch (k & 15u) {
    case 0: case 1: case 2: now += v * 1000; break;               /* up to 65 ms */
    case 3: case 4: now += v * 1000000 / 16; break;               /* up to 4 s */
    case 5: now += v * 1000000; break;                            /* up to 65 s */
    case 6: now -= v * 1000; break;                               /* back a little */
    case 7: now -= v * 100000; break;                             /* back up to 6.5 s */
    case 8: now = m_ms_align(now, w_ms) - (int64_t)(k >> 4); break; /* just before a bucket */
    case 9: now = m_ms_align(now, w_ms) + (int64_t)(k >> 4); break; /* just after */
    case 10: now = -v; break;                                     /* negative */
    case 11: now = 0; break;
    case 12: now += (int64_t)u32(r) * 1000000000; break;          /* far forward */
    case 13: now = T_MAX - v * 1000000; break;                    /* near the end */
    default: break;                                               /* same instant */
    }
    if (now > T_MAX)
        now = T_MAX;
    if (now < -T_MAX)
        now = -T_MAX;
    return now;
}

/* ---- mode 1: a standalone window ---- */

/* Account an add that landed in the model's newest bucket (for the no-lost-count check). */
static void note_add(int64_t *added, int64_t *first, int64_t *last_add, const struct mleap *m,
                     uint32_t ev, int64_t n)
{
    int64_t b = m->newest;
    if (*first == M_EMPTY || b - *last_add >= m->interval) {
        memset(added, 0, sizeof(int64_t) * SW_MAX_EVENTS); /* every earlier add slid out */
        *first = b;
    }
    *last_add = b;
    added[ev] += n;
}

static const int64_t k_w[] = {1, 7, 100, 250, 500, 1000, 3, 60};
static const uint32_t k_sc[] = {1, 2, 3, 4, 5, 8, 10, 2};

static void run_window(struct rd *r)
{
    unsigned c0 = u8(r), c1 = u8(r);
    uint32_t sc = k_sc[c0 & 7u];
    int64_t w = k_w[(c0 >> 3) & 7u];
    bool has_rt = (c1 & 1u) != 0;
    uint32_t nev = has_rt ? SW_EV_DEFAULT_COUNT : 1u + ((c1 >> 1) & 7u);
    bool borrow = (c1 & 0x10u) != 0;
    struct sw_leap_cfg cfg = {w * (int64_t)sc, sc, nev, has_rt}, fcfg;
    if (sw_leap_check(&cfg) != SW_OK)
        FAIL("window cfg refused");
    sw_borrow_cfg(&cfg, &fcfg);
    struct sw_leap *leap = malloc(sw_leap_size(&cfg));
    struct sw_leap *fut = borrow ? malloc(sw_leap_size(&fcfg)) : NULL;
    if (leap == NULL || (borrow && fut == NULL))
        abort();
    EXPECT_EQ(sw_leap_init(leap, &cfg), SW_OK, "leap init");
    if (fut != NULL)
        EXPECT_EQ(sw_leap_init(fut, &fcfg), SW_OK, "future init");
    sw_lock lock;
    sw_lock_init(&lock);
    struct sw_window win = {&lock, leap, fut, SW_LOCK_PRIVATE, NULL, NULL, NULL, NULL, NULL};
    struct mleap *m = malloc(sizeof *m);
    if (m == NULL)
        abort();
    m_init(m, cfg.interval_ms, sc, nev, borrow);

    /* no lost count: the adds since `first`, the bucket of the first add after the window
     * was last empty; while start(t) - first < interval nothing of them slid out */
    int64_t added[SW_MAX_EVENTS] = {0}, first = M_EMPTY, last_add = M_EMPTY;
    int64_t now = (int64_t)u32(r) * 1000;
    int64_t *out = malloc(sizeof(int64_t) * sc * (2u + nev));
    if (out == NULL)
        abort();
    for (g_op = 0; r->i < r->n && g_op < 4000; g_op++) {
        unsigned op = u8(r);
        uint32_t ev = u8(r) % (nev + 1u); /* nev: an unknown event */
        int64_t n = (int64_t)(u8(r) & 0x3fu);
        switch (op % 10u) {
        case 0: case 1: case 2: {
            int rc = sw_window_add(&win, ev, n, now);
            if (ev >= nev) {
                EXPECT_EQ(rc, SW_EEVENT, "add unknown event");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "add");
            m_add(m, ev, n, ms_of(now));
            note_add(added, &first, &last_add, m, ev, n);
            break;
        }
        case 3: case 4: {
            int which = (int)(op >> 4) % 3;
            int64_t v = -1;
            int rc = sw_window_read(&win, which, ev, now, &v);
            if (ev >= nev) {
                EXPECT_EQ(rc, SW_EEVENT, "read unknown event");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "read");
            int64_t e = which == SW_READ_SUM       ? m_sum(m, ev, ms_of(now))
                        : which == SW_READ_CURRENT ? m_current(m, ev, ms_of(now))
                                                   : m_previous(m, ev, ms_of(now));
            if (v < 0)
                FAIL("negative count %lld", (long long)v);
            EXPECT_EQ(v, e, which == 0 ? "sum" : which == 1 ? "current" : "previous");
            /* (granted passes join PASS when their bucket starts: not adds) */
            if (which == SW_READ_SUM && first != M_EMPTY && !(borrow && ev == SW_EV_PASS) &&
                m_start(m, m_clamp(m, ms_of(now))) - first < m->interval)
                EXPECT_EQ(v, added[ev], "no lost count: sum == adds");
            break;
        }
        case 5: {
            int64_t rt = (int64_t)u8(r) * ((op & 0x80u) ? 40 : 1);
            int rc = sw_window_add_rt(&win, rt, now);
            if (!has_rt) {
                EXPECT_EQ(rc, SW_ENORT, "add_rt without RT");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "add_rt");
            m_add_rt(m, rt, ms_of(now));
            note_add(added, &first, &last_add, m, SW_EV_RT, rt);
            break;
        }
        case 6: {
            int64_t mn = -1, rs = -1, su = -1;
            int rc = sw_window_rt(&win, now, &mn, &rs, &su);
            if (!has_rt) {
                EXPECT_EQ(rc, SW_ENORT, "rt without RT");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "rt");
            EXPECT_EQ(mn, m_min_rt(m, ms_of(now)), "min_rt");
            EXPECT_EQ(rs, m_sum(m, SW_EV_RT, ms_of(now)), "rt sum");
            EXPECT_EQ(su, m_sum(m, SW_EV_SUCCESS, ms_of(now)), "success");
            break;
        }
        case 7: {
            uint32_t k = sw_window_buckets(&win, now, out);
            int64_t t = m_clamp(m, ms_of(now));
            m_touch(m, t);
            int64_t cur = m_start(m, t);
            uint32_t j = 0;
            for (int64_t q = (int64_t)sc - 1; q >= 0; q--) {
                int64_t s = cur - q * w;
                if (s < 0)
                    continue;
                const int64_t *o = out + (size_t)j * (2u + nev);
                const struct mbucket *b = m_held(m, s);
                EXPECT_EQ(o[SW_SLOT_START], s, "bucket start");
                EXPECT_EQ(o[SW_SLOT_MIN_RT], b ? b->min_rt : SW_MIN_RT_INIT, "bucket min_rt");
                for (uint32_t e = 0; e < nev; e++)
                    EXPECT_EQ(o[SW_SLOT_COUNTS + e], b ? b->c[e] : 0, "bucket count");
                j++;
            }
            EXPECT_EQ(k, j, "bucket count returned");
            break;
        }
        case 8:
            if (fut != NULL && (op & 0x10u)) {
                /* grant ahead for the next bucket, as try-occupy does */
                sw_lock_acquire(&lock);
                int64_t t = sw_leap_clamp(leap, ms_of(now));
                int64_t T = t + (w - t % w);
                sw_borrow_add(fut, T, n);
                int64_t wt = sw_borrow_waiting(fut, t);
                sw_lock_release(&lock);
                int64_t mt = m_clamp(m, ms_of(now));
                EXPECT_EQ(t, mt, "clamp");
                m_grant(m, T, n);
                EXPECT_EQ(wt, m_waiting(m, mt), "waiting");
            } else if ((op & 0x70u) == 0x70u) {
                sw_window_reset(&win);
                m_reset(m);
                memset(added, 0, sizeof added);
                first = last_add = M_EMPTY;
            }
            break;
        default:
            now = move_time(r, now, w);
            break;
        }
        check_totals(leap);
        if (fut != NULL) {
            int64_t t = leap->newest == SW_LEAP_EMPTY ? 0 : leap->newest;
            check_waiting(fut, t);
            check_waiting(fut, t + w - 1);
            check_waiting(fut, t - (int64_t)(op & 7u) * w);
            check_waiting(fut, ms_of(now));
        }
    }
    free(out);
    free(m);
    free(leap);
    free(fut);
}

/* ---- mode 2: a limiter ---- */

static const double k_count[] = {0, 1, 2, 3, 5, 10, 100, 0.25, 2.5, 1000, 20000, 7, 1e6, 0.5,
                                 50, 4};
static const int64_t k_interval[] = {1000, 1000, 2000, 500, 3000, 200, 1000, 4000};
static const uint32_t k_samples[] = {2, 1, 4, 5, 3, 2, 10, 8};
static const double k_warm[] = {10, 0, 1, 3};
static const double k_cf[] = {3, 1.5, 10, 2};
static const int64_t k_queue[] = {500, 0, 100, 2000};

struct mlim {
    struct sw_limiter_cfg cfg;
    double limit, min_rate;
    struct mleap sec, min;
    int64_t in_flight;
    /* warm-up tokens (DESIGN §5) */
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
                /* DESIGN §4 try-occupy */
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

static void run_limiter(struct rd *r)
{
    unsigned c0 = u8(r), c1 = u8(r), c2 = u8(r);
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = (c0 & 0xe0u) == 0xe0u ? SW_GRADE_CONCURRENCY : SW_GRADE_QPS;
    c.behavior = c.grade == SW_GRADE_CONCURRENCY ? SW_REJECT : (int)(c0 & 3u);
    c.count = k_count[(c0 >> 2) & 15u];
    c.interval_ms = k_interval[c1 & 7u];
    c.sample_count = k_samples[(c1 >> 3) & 7u];
    c.warm_up_s = k_warm[(c1 >> 6) & 3u];
    c.cold_factor = k_cf[c2 & 3u];
    c.max_queueing_ms = k_queue[(c2 >> 2) & 3u];
    c.occupy_timeout_ms = (int64_t)((c2 >> 4) & 15u) * 50;
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
            /* (a time behind the newest bucket adds its lag to the wait: DESIGN §4 computes
             * the wait from now_ns, the grant from the clamped time) */
            if (d.occupied && d.wait_ns >= c.occupy_timeout_ms * 1000000 &&
                ms_of(now) >= ml->sec.newest)
                FAIL("occupy wait %lld not below the timeout", (long long)d.wait_ns);
            if (d.verdict != SW_PASS && d.retry_ns < -1)
                FAIL("retry %lld", (long long)d.retry_ns);
            if (c.grade == SW_GRADE_CONCURRENCY && (double)sw_limiter_in_flight(lim) > c.count)
                FAIL("in flight above the concurrency limit");
            /* Regular passes per window never exceed L. Passes borrowed for a bucket are
             * not included: DESIGN §5 (as Sentinel's DefaultController) checks regular
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

/* ---- mode 3: a keyed table ---- */

#define K_KEYS 24

static struct sw_kentry *k_entry(struct sw_kstate *st, uint32_t i)
{
    return (struct sw_kentry *)(void *)((char *)st + st->off_entries + (size_t)i * st->entry_size);
}

static int k_find(struct sw_kstate *st, uint64_t fp)
{
    for (uint32_t i = 0; i < st->cap; i++)
        if (k_entry(st, i)->fp == fp)
            return (int)i;
    return -1;
}

/* Every key held is reachable from its home and held once; n_live counts them. */
static void k_check_sound(struct sw_kstate *st)
{
    uint32_t plen = st->cap < SW_KEYED_PROBE ? st->cap : SW_KEYED_PROBE, live = 0;
    for (uint32_t i = 0; i < st->cap; i++) {
        uint64_t fp = k_entry(st, i)->fp;
        if (fp == 0)
            continue;
        live++;
        uint32_t p = (uint32_t)(((unsigned __int128)fp * st->cap) >> 64), d = 0;
        for (; d < plen && p != i; d++) {
            const struct sw_kentry *e = k_entry(st, p);
            if (e->fp == fp)
                FAIL("key held twice (entries %u, %u)", p, i);
            if (e->fp == 0 && !(e->flags & SW_KE_TOMB))
                FAIL("key at %u behind an empty entry %u", i, p);
            if (++p == st->cap)
                p = 0;
        }
        if (d == plen)
            FAIL("key at %u beyond its probe window", i);
    }
    EXPECT_EQ(st->n_live, live, "n_live");
    if (live > st->max_keys)
        FAIL("%u keys held, max %u", live, st->max_keys);
}

static void run_keyed(struct rd *r)
{
    static const int modes[4][2] = {{SW_GRADE_QPS, SW_REJECT},
                                    {SW_GRADE_CONCURRENCY, SW_REJECT},
                                    {SW_GRADE_QPS, SW_THROTTLE},
                                    {SW_GRADE_QPS, SW_REJECT}};
    unsigned c0 = u8(r), c1 = u8(r), c2 = u8(r);
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = modes[c0 & 3u][0];
    c.behavior = modes[c0 & 3u][1];
    c.count = k_count[(c0 >> 2) & 15u];
    c.interval_ms = k_interval[c1 & 7u];
    c.sample_count = k_samples[(c1 >> 3) & 7u];
    c.max_queueing_ms = k_queue[(c1 >> 6) & 3u];
    if (c.interval_ms % (int64_t)c.sample_count != 0)
        c.sample_count = 2;
    uint32_t max_keys = 1u + (c2 & 15u) + ((c2 & 0x80u) ? 16u : 0u);
    uint32_t n_keys = 1u + (u8(r) % K_KEYS), homes = 1u + (u8(r) & 3u);
    struct sw_krule rule;
    if (sw_krule_init(&rule, &c) != SW_OK)
        return;
    size_t size = sw_keyed_size(c.interval_ms, c.sample_count, max_keys, false);
    if (size == 0)
        return;
    struct sw_kstate *st = calloc(1, size);
    struct sw_limiter *lim[K_KEYS] = {0};
    if (st == NULL)
        abort();
    EXPECT_EQ(sw_keyed_init(st, c.interval_ms, c.sample_count, max_keys, false), SW_OK, "init");
    struct sw_kview v = {st, &rule, SW_LOCK_PRIVATE, NULL, 0, -1, NULL};
    /* keys crowded on `homes` homes just before the table's end (runs wrap around) */
    uint64_t fps[K_KEYS];
    for (uint32_t j = 0; j < n_keys; j++) {
        uint32_t h = (st->cap - 2u + (u8(r) % homes)) % st->cap;
        fps[j] = (uint64_t)((((unsigned __int128)h << 64) + st->cap - 1u) / st->cap) + 1u + j;
    }
    bool model = n_keys <= max_keys; /* room for every key: private limiters decide alike */
    if (model)
        for (uint32_t j = 0; j < n_keys; j++) {
            lim[j] = malloc(sw_limiter_size(&c));
            if (lim[j] == NULL)
                abort();
            EXPECT_EQ(sw_limiter_init(lim[j], &c), SW_OK, "limiter init");
        }
    int64_t now = (int64_t)u32(r) * 1000, w_ms = c.interval_ms / (int64_t)c.sample_count;
    long inserted = 0;
    bool trusted = true; /* no byte written from outside */
    for (g_op = 0; r->i < r->n && g_op < 3000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        uint32_t j = a % n_keys;
        switch (op % 8u) {
        case 0: case 1: case 2: {
            int64_t n = (int64_t)(a >> 6) + 1;
            unsigned flags = u8(r) & (SW_F_TRY | SW_F_RETRY | SW_F_ENTRY | SW_F_NO_BLOCK);
            bool was = k_find(st, fps[j]) >= 0;
            int64_t before = was ? k_entry(st, (uint32_t)k_find(st, fps[j]))->in_flight : 0;
            uint32_t len0 = st->n_live;
            struct sw_decision d, e;
            EXPECT_EQ(sw_keyed_decide(&v, fps[j], n, now, flags, &d), SW_OK, "keyed decide");
            int at = k_find(st, fps[j]);
            inserted += !was && at >= 0;
            if (!was && at >= 0 && st->n_live == len0 && len0 == max_keys && model)
                FAIL("evicted with room for every key");
            if (model) {
                EXPECT_EQ(sw_limiter_decide(lim[j], n, now, flags, &e), SW_OK, "decide");
                EXPECT_EQ(d.verdict, e.verdict, "keyed verdict");
                EXPECT_EQ(d.wait_ns, e.wait_ns, "keyed wait");
                EXPECT_EQ(d.retry_ns, e.retry_ns, "keyed retry");
            }
            if (trusted && at >= 0 && d.verdict == SW_PASS &&
                (c.grade == SW_GRADE_CONCURRENCY || (flags & SW_F_ENTRY)))
                EXPECT_EQ(k_entry(st, (uint32_t)at)->in_flight, sw_sat_add(before, n),
                          "in flight taken");
            break;
        }
        case 3: {
            int64_t n = (int64_t)(a >> 6);
            int out = (int)(u8(r) % 3u);
            if (model && k_find(st, fps[j]) < 0)
                break; /* an exit follows an entry (a private limiter would see its time) */
            EXPECT_EQ(sw_keyed_exit(&v, fps[j], n, 5, out, now), SW_OK, "keyed exit");
            if (model)
                sw_limiter_exit(lim[j], n, 5, out, now);
            break;
        }
        case 4: {
            int64_t have = sw_keyed_in_flight(&v, fps[j]);
            if (model)
                EXPECT_EQ(have, sw_limiter_in_flight(lim[j]), "keyed in flight");
            if (have > 0) {
                EXPECT_EQ(sw_keyed_release(&v, fps[j], 1), SW_OK, "keyed release");
                if (model)
                    EXPECT_EQ(sw_limiter_release(lim[j], 1), SW_OK, "release");
            }
            break;
        }
        case 5:
            now = move_time(r, now, w_ms);
            break;
        case 6: {
            /* untrusted bytes: any field of any entry (the model is off from here) */
            struct sw_kentry *e = k_entry(st, u16(r) % st->cap);
            uint64_t x = (uint64_t)u32(r) << 32 | u32(r);
            switch (a % 7u) {
            case 0: e->fp = (a & 0x80u) ? fps[j] : x; break;
            case 1: e->flags = (uint32_t)x; break;
            case 2: e->in_flight = (int64_t)x; break;
            case 3: e->a = (int64_t)x; break;
            case 4: e->counts[x % c.sample_count] = (int64_t)(x * 0x9e3779b97f4a7c15u); break;
            case 5: e->last_use = (uint32_t)x; break;
            default: st->sweep = x; st->tick = x >> 7; break;
            }
            if ((a % 7u) < 5u)
                model = trusted = false;
            break;
        }
        default: {
            sw_keyed_lock(&v);
            sw_keyed_repair(&v);
            sw_keyed_unlock(&v);
            k_check_sound(st);
            uint32_t len = sw_keyed_len(&v);
            sw_keyed_lock(&v);
            sw_keyed_repair(&v);
            sw_keyed_unlock(&v);
            EXPECT_EQ(sw_keyed_len(&v), len, "a second repair keeps every key");
            break;
        }
        }
        if (trusted) {
            k_check_sound(st);
            EXPECT_EQ(st->evicted, inserted - (long)st->n_live, "evicted");
        }
    }
    for (uint32_t j = 0; j < n_keys; j++)
        free(lim[j]);
    free(st);
}


/* ---- mode 4: a crafted region ---- */

static int fz_init_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_init(state, lay->interval_ms, lay->sample_count);
}
static int fz_check_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_validate(state, (size_t)lay->state_size, lay->interval_ms,
                              lay->sample_count);
}
static sw_lock *fz_state_lock(void *state)
{
    return &((struct sw_lstate *)state)->lock;
}

/* A value to write: the edges of every range the code checks. */
static int64_t crafted_value(struct rd *r, int64_t window_ms, int64_t near)
{
    unsigned k = u8(r);
    int64_t small = (int64_t)(k >> 4);
    switch (k & 15u) {
    case 0: return 0;
    case 1: return -1 - small;
    case 2: return INT64_MAX - small;
    case 3: return INT64_MAX - INT64_MAX % window_ms; /* a bucket start next to INT64_MAX */
    case 4: return INT64_MIN + small;
    case 5: return SW_LEAP_T_MAX - SW_LEAP_T_MAX % window_ms;
    case 6: return SW_LEAP_T_MAX - SW_LEAP_T_MAX % window_ms + window_ms;
    case 7: return near + small * window_ms; /* a time close to the region's own */
    case 8: return near - small * window_ms;
    case 9: return (int64_t)u32(r);
    case 10: return small;
    case 11: return (int64_t)UINT32_MAX + small;
    case 12: return -(int64_t)u32(r) * 1000;
    default: return (int64_t)((uint64_t)u32(r) << 32 | u32(r));
    }
}

/* Where the fields are, taken from the region as made (crafted fields never move them). */
struct fz_map {
    struct sw_node *node;
    struct sw_leap *rings[3];
    int64_t window_ms[3];
    uint32_t sample_count[3], n_events[3];
    size_t state_words;
};

static void fz_map_of(struct sw_shm *s, struct fz_map *m)
{
    m->node = sw_lstate_node(s->state);
    m->rings[0] = sw_node_sec(m->node);
    m->rings[1] = sw_node_fut(m->node);
    m->rings[2] = sw_node_min(m->node);
    for (int i = 0; i < 3; i++) {
        m->window_ms[i] = m->rings[i]->window_ms;
        m->sample_count[i] = m->rings[i]->sample_count;
        m->n_events[i] = m->rings[i]->n_events;
    }
    m->state_words = (size_t)s->hdr->state_size / 8u;
}

/* Write a crafted value into one field of the region (chosen by the next bytes). */
static void craft_field(struct rd *r, struct sw_shm *s, const struct fz_map *m, int64_t near)
{
    struct sw_shm_header *h = s->hdr;
    struct sw_lstate *st = s->state;
    struct sw_node *node = m->node;
    unsigned f = u8(r), g = u8(r);
    unsigned ri = g % 3u;
    struct sw_leap *l = m->rings[ri];
    uint32_t sc = m->sample_count[ri], nev = m->n_events[ri];
    int64_t *slot = l->slots + (size_t)(g % sc) * (2u + nev);
    int64_t v = crafted_value(r, m->window_ms[ri], near);
    uint64_t dead = ((uint64_t)4194301u << 32) | 7u; /* a pid above the kernel's maximum */
    switch (f % 24u) {
    case 0: l->head = v; break;
    case 1: l->newest = v; break;
    case 2: l->newest_idx = v; break;
    case 3: l->dq_first = (uint32_t)v; break;
    case 4: l->dq_len = (uint32_t)v; break;
    case 5: slot[SW_SLOT_START] = v; break;
    case 6: slot[SW_SLOT_COUNTS + (g >> 4) % nev] = v; break;
    case 7: slot[SW_SLOT_MIN_RT] = v; break;
    case 8: l->slots[(size_t)sc * (2u + nev) + (g >> 2) % (2u * nev)] = v; break;
    case 9: /* a ring's layout words */
        switch (g % 5u) {
        case 0: l->interval_ms = v; break;
        case 1: l->window_ms = v; break;
        case 2: l->sample_count = (uint32_t)v; break;
        case 3: l->n_events = (uint32_t)v; break;
        default: l->stride = (uint32_t)v; break;
        }
        break;
    case 10: node->in_flight = v; break;
    case 11: node->totals[g % SW_EV_DEFAULT_COUNT] = v; break;
    case 12: st->hot[g % SW_HOT_WORDS] = v; break;
    case 13:
        switch (g % 6u) {
        case 0: st->warm.stored = v; break;
        case 1: st->warm.last_filled_ms = v; break;
        case 2: st->warm.paid_until_ms = v; break;
        case 3: st->thr.last_ns = v; break;
        case 4: st->thr.has_last = (uint32_t)v; break;
        default: st->thr.saturated = (uint32_t)v; break;
        }
        break;
    case 14: st->off_node = (uint32_t)v; break;
    case 15: st->size = (uint32_t)v; break;
    case 16: s->slots[g % s->n_slots].in_flight = v; break;
    case 17: /* a slot's owner: free, dead, or this (live) process */
        atomic_store(&s->slots[g % s->n_slots].token,
                     (g & 3u) == 0 ? 0u : (g & 3u) == 1 ? dead : sw_proc_token());
        break;
    case 18: /* a lock left by a dead owner (a live one is another matter: a wait) */
        atomic_store(&st->lock.word, (g & 1u) ? dead : 0u);
        break;
    case 19: atomic_store(&st->hot_seq, (uint64_t)v); break;
    case 20: /* the header's words */
        switch (g % 8u) {
        case 0: h->interval_ms = v; break;
        case 1: h->sample_count = (uint32_t)v; break;
        case 2: h->n_slots = (uint32_t)v; break;
        case 3: h->off_state = (uint64_t)v; break;
        case 4: h->state_size = (uint64_t)v; break;
        case 5: h->total_size = (uint64_t)v; break;
        case 6: h->kind = (uint32_t)v; break;
        default: h->off_slots = (uint64_t)v; break;
        }
        break;
    case 21: /* another boot's region */
        snprintf(h->boot_id, sizeof h->boot_id, "%08x-0000-0000-0000-000000000000", g);
        break;
    case 22: atomic_store(&h->next_reap_ms, v); break;
    default: { /* any aligned word of the state */
        size_t w = ((size_t)g << 8 | u8(r)) % m->state_words;
        /* not the lock word: one naming a live process (or none) is waited for, which is
         * the lock's business (its timeouts), not a region check's */
        if (w != offsetof(struct sw_lstate, lock) / 8u)
            ((int64_t *)(void *)st)[w] = v;
        break;
    }
    }
}

/* An observer's copy (read_region): read without the lock, validated, repaired, read. */
static int mem_read(void *ctx, size_t off, size_t len, void *dst)
{
    memcpy(dst, (const char *)ctx + off, len);
    return 0;
}

static void observe_copy(struct sw_shm *s, const struct sw_shm_layout *lay, int64_t now)
{
    struct sw_shm_header hcopy;
    struct sw_shm_error err;
    memcpy(&hcopy, s->hdr, sizeof hcopy);
    if (sw_shm_check_header(&hcopy, s->size, "fuzz", &err) != SW_OK)
        return;
    size_t need = sw_lstate_size(hcopy.interval_ms, hcopy.sample_count);
    if (need == 0 || need != hcopy.state_size)
        return;
    struct sw_lstate *copy = malloc(need);
    if (copy == NULL)
        abort();
    bool hot_ok;
    if (sw_lstate_copy(copy, need, mem_read, (char *)s->base + hcopy.off_state, 2, &hot_ok) ==
            0 &&
        sw_lstate_validate(copy, need, hcopy.interval_ms, hcopy.sample_count) == SW_OK) {
        struct sw_node *node = sw_lstate_node(copy);
        sw_node_repair(node);
        sw_lstate_settle_copy(copy, hot_ok);
        struct sw_stats stats;
        struct sw_totals tot;
        sw_node_stats(node, now, &stats);
        sw_node_totals(node, &tot);
        if (stats.in_flight < 0)
            FAIL("observer: in flight %lld", (long long)stats.in_flight);
    }
    free(copy);
    (void)lay;
}

static void run_region(struct rd *r)
{
    static char path[64];
    if (path[0] == '\0')
        snprintf(path, sizeof path, "/tmp/sw-fuzz-region-%ld", (long)getpid());
    unlink(path);
    unsigned c0 = u8(r), c1 = u8(r);
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = (c0 & 1u) ? SW_GRADE_CONCURRENCY : SW_GRADE_QPS;
    c.behavior = c.grade == SW_GRADE_CONCURRENCY ? SW_REJECT : (int)((c0 >> 1) & 3u);
    c.count = k_count[(c0 >> 3) & 15u];
    c.interval_ms = k_interval[c1 & 7u];
    c.sample_count = k_samples[(c1 >> 3) & 7u];
    if (c.interval_ms % (int64_t)c.sample_count != 0)
        c.sample_count = 2;
    struct sw_rule rule;
    if (sw_limiter_check(&c) != SW_OK || sw_rule_init(&rule, &c) != SW_OK)
        return;
    struct sw_shm_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.kind = SW_KIND_LIMITER;
    lay.interval_ms = c.interval_ms;
    lay.sample_count = c.sample_count;
    lay.n_slots = 8; /* few slots: crafted ones are hit often */
    lay.state_size = sw_lstate_size(c.interval_ms, c.sample_count);
    lay.init_state = fz_init_state;
    lay.check_state = fz_check_state;
    lay.state_lock = fz_state_lock;
    struct sw_shm a, b;
    struct sw_shm_error err;
    if (sw_shm_open(&a, path, &lay, &err) != SW_OK)
        FAIL("cannot create %s: %s", path, err.msg);
    struct sw_view va = {a.state, &rule, SW_LOCK_PROCESS, a.slots, a.n_slots, -1, NULL};
    va.my_slot = sw_shm_claim_slot(&a, sw_proc_token());
    struct fz_map map;
    fz_map_of(&a, &map);
    /* a process uses it */
    int64_t now = (int64_t)u32(r) * 1000000 + 1;
    struct sw_decision d;
    for (unsigned k = u8(r) % 16u; k > 0; k--) {
        now += (int64_t)u8(r) * 3000000;
        (void)sw_decide(&va, 1 + (int64_t)(u8(r) & 3u), now, SW_F_TRY | SW_F_ENTRY, &d);
    }
    /* pairs of fields crafted, then a second process attaches, decides, an observer reads */
    for (g_op = 0; r->i < r->n && g_op < 8; g_op++) {
        int64_t near = sw_ms_of_ns(now);
        craft_field(r, &a, &map, near);
        craft_field(r, &a, &map, near);
        observe_copy(&a, &lay, now);
        int rc = sw_shm_open(&b, path, &lay, &err);
        if (rc != SW_OK) {
            if (rc != SW_EINVAL && rc != SW_EOS)
                FAIL("attach: %d %s", rc, err.msg);
            break; /* refused: the region stays as crafted */
        }
        struct sw_view vb = {b.state, &rule, SW_LOCK_PROCESS, b.slots, b.n_slots, -1, NULL};
        vb.my_slot = sw_shm_claim_slot(&b, sw_proc_token());
        sw_lstate_check_repair(&vb);
        int64_t held = sw_in_flight(&vb);
        if (held < 0)
            FAIL("in flight %lld after the repair", (long long)held);
        int64_t passed = 0;
        for (unsigned k = 0; k < 4u; k++) {
            now += (int64_t)u8(r) * 1000000;
            EXPECT_EQ(sw_decide(&vb, 1, now, SW_F_TRY | SW_F_ENTRY, &d), SW_OK, "decide");
            passed += d.verdict == SW_PASS;
        }
        if (c.grade == SW_GRADE_CONCURRENCY && !rule.shadow) {
            double room = c.count - (double)held;
            if ((double)passed > (room < 0 ? 0 : room))
                FAIL("%lld admitted with %lld in flight, limit %g", (long long)passed,
                     (long long)held, c.count);
        }
        if (sw_in_flight(&vb) < 0)
            FAIL("in flight below 0");
        (void)sw_exit(&vb, 1, 1, SW_OUT_SUCCESS, now);
        (void)sw_lstate_reap(&vb);
        struct sw_stats stats;
        sw_stats_read(&vb, now, &stats);
        if (stats.in_flight < 0)
            FAIL("stats: in flight below 0");
        sw_shm_close(&b);
    }
    sw_shm_close(&a);
    unlink(path);
}


/* ---- mode 5: a circuit breaker (sw_breaker.c, DESIGN §11) ---- */

/* The reference: the states and tickets as BreakerModel (tests/test_breaker.py) has them,
 * a generation counted with every change, the window of (total, errors, slow) as the ring
 * model above, and the lifetime totals. */
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
    case 12:
        switch (g % 6u) {
        case 0: l->head = v; break;
        case 1: l->newest = v; break;
        case 2: l->newest_idx = v; break;
        case 3: l->dq_first = (uint32_t)v; break;
        case 4: l->dq_len = (uint32_t)v; break;
        default: l->interval_ms = v; break;
        }
        break;
    case 13:
        switch (g % 4u) {
        case 0: l->window_ms = v; break;
        case 1: l->sample_count = (uint32_t)v; break;
        case 2: l->n_events = (uint32_t)v; break;
        default: l->stride = (uint32_t)v; break;
        }
        break;
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

static void run_breaker(struct rd *r)
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
    c.interval_ms = k_brk_interval[c2 & 7u];
    c.sample_count = k_samples[(c2 >> 3) & 7u];
    c.probe_timeout_s = k_brk_probe_timeout[(c2 >> 6) & 3u];
    if (c.interval_ms % (int64_t)c.sample_count != 0)
        c.sample_count = 1;
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

/* ---- mode 6: all or nothing over 1-4 limiters and keyed tables (sw_group.c, §13) ---- */

/* A member: a private limiter or a keyed table (one key of it per decision), with two
 * scratch copies of its state (flat, pointer-free): before the group, and decided alone. */
struct gmem {
    int keyed;
    size_t sz;
    void *real, *pre, *ind;
    struct sw_rule rule;
    struct sw_krule krule;
};
static const uint64_t k_gfp[] = {0x1111111111111111ull, 0x2222222222222222ull,
                                 0x3333333333333333ull};

/* What a member's state shows: its window and lifetime counts, in flight (per key), the
 * throttle's slot and a warm-up's payback (a plan's token sync is not compared: it changes
 * no count and no later decision). */
struct gsnap {
    struct sw_stats s;
    struct sw_totals t;
    int64_t thr_last, paid_until, keys, key_in_flight[3];
    uint32_t thr_has;
};
static void g_views(struct gmem *g, void *st, struct sw_view *v, struct sw_kview *kv)
{
    memset(v, 0, sizeof *v);
    memset(kv, 0, sizeof *kv);
    if (g->keyed) {
        kv->st = st;
        kv->rule = &g->krule;
        kv->token = SW_LOCK_PRIVATE;
        kv->my_slot = -1;
    } else {
        v->st = &((struct sw_limiter *)st)->st;
        v->rule = &g->rule;
        v->token = SW_LOCK_PRIVATE;
        v->my_slot = -1;
    }
}
static void g_snap(struct gmem *g, void *st, int64_t now, struct gsnap *o)
{
    struct sw_view v;
    struct sw_kview kv;
    g_views(g, st, &v, &kv);
    memset(o, 0, sizeof *o);
    if (g->keyed) {
        int64_t evicted;
        sw_keyed_stats(&kv, now, &o->s, &evicted, &o->keys);
        sw_keyed_totals(&kv, &o->t);
        for (int k = 0; k < 3; k++)
            o->key_in_flight[k] = sw_keyed_in_flight(&kv, k_gfp[k]);
    } else {
        struct sw_lstate *ls = v.st;
        sw_stats_read(&v, now, &o->s);
        sw_node_totals(sw_lstate_node(ls), &o->t);
        o->thr_last = ls->thr.last_ns;
        o->thr_has = ls->thr.has_last;
        o->paid_until = ls->warm.paid_until_ms;
    }
}
static void g_expect_same(const struct gsnap *g, const struct gsnap *e, unsigned i,
                          const char *what)
{
    const int64_t gw[] = {g->s.pass, g->s.block, g->s.success, g->s.exception, g->s.rt_sum,
                          g->s.min_rt, g->s.in_flight, g->s.waiting, g->s.occupied_pass,
                          g->t.pass, g->t.block, g->t.exception, g->t.success,
                          g->t.occupied_pass, g->thr_last, g->thr_has, g->paid_until, g->keys,
                          g->key_in_flight[0], g->key_in_flight[1], g->key_in_flight[2]};
    const int64_t ew[] = {e->s.pass, e->s.block, e->s.success, e->s.exception, e->s.rt_sum,
                          e->s.min_rt, e->s.in_flight, e->s.waiting, e->s.occupied_pass,
                          e->t.pass, e->t.block, e->t.exception, e->t.success,
                          e->t.occupied_pass, e->thr_last, e->thr_has, e->paid_until, e->keys,
                          e->key_in_flight[0], e->key_in_flight[1], e->key_in_flight[2]};
    static const char *const names[] = {
        "pass", "block", "success", "exception", "rt_sum", "min_rt", "in_flight", "waiting",
        "occupied_pass", "total pass", "total block", "total exception", "total success",
        "total occupied", "throttle slot", "throttle has_last", "warm-up payback", "keys",
        "key 0 in flight", "key 1 in flight", "key 2 in flight"};
    for (size_t k = 0; k < sizeof gw / sizeof gw[0]; k++)
        if (gw[k] != ew[k])
            FAIL("member %u %s: %s %lld, expected %lld", i, what, names[k], (long long)gw[k],
                 (long long)ew[k]);
}

#define G_MAX 4u

static void run_group(struct rd *r)
{
    unsigned count = 1u + u8(r) % G_MAX;
    struct gmem gs[G_MAX];
    struct sw_view v[G_MAX];
    struct sw_kview kv[G_MAX];
    int64_t w_ms = 1000;
    memset(gs, 0, sizeof gs);
    for (unsigned i = 0; i < count; i++) {
        struct gmem *g = &gs[i];
        unsigned c0 = u8(r), c1 = u8(r), c2 = u8(r), kb = u8(r);
        struct sw_limiter_cfg c;
        sw_limiter_cfg_default(&c);
        c.grade = (c0 & 0xe0u) == 0xe0u ? SW_GRADE_CONCURRENCY : SW_GRADE_QPS;
        c.behavior = c.grade == SW_GRADE_CONCURRENCY ? SW_REJECT : (int)(c0 & 3u);
        c.count = k_count[(c0 >> 2) & 15u];
        c.interval_ms = k_interval[c1 & 7u];
        c.sample_count = k_samples[(c1 >> 3) & 7u];
        c.warm_up_s = k_warm[(c1 >> 6) & 3u];
        c.cold_factor = k_cf[c2 & 3u];
        c.max_queueing_ms = k_queue[(c2 >> 2) & 3u];
        c.occupy_timeout_ms = (int64_t)((c2 >> 4) & 15u) * 50;
        c.shadow = (kb & 0x0eu) == 0x0eu; /* a shadow member now and then */
        g->keyed = (kb & 1u) != 0;
        if (c.interval_ms % (int64_t)c.sample_count != 0)
            c.sample_count = 2;
        if (g->keyed && (c.behavior == SW_WARM_UP || c.behavior == SW_WARM_UP_THROTTLE))
            c.behavior = SW_THROTTLE; /* a keyed table has no warm-up */
        if (sw_limiter_check(&c) != SW_OK)
            c.behavior = SW_REJECT; /* e.g. warm-up with a cold factor the count refuses */
        if (sw_limiter_check(&c) != SW_OK)
            c.count = 5; /* e.g. a fractional concurrency */
        if (sw_limiter_check(&c) != SW_OK)
            FAIL("member cfg refused");
        uint32_t max_keys = 1u + ((kb >> 4) & 1u); /* full tables: keys wait or evict */
        if (g->keyed) {
            EXPECT_EQ(sw_krule_init(&g->krule, &c), SW_OK, "keyed rule");
            g->sz = sw_keyed_size(c.interval_ms, c.sample_count, max_keys, false);
        } else {
            g->sz = sw_limiter_size(&c);
        }
        g->real = calloc(1, g->sz);
        g->pre = malloc(g->sz);
        g->ind = malloc(g->sz);
        if (g->sz == 0 || g->real == NULL || g->pre == NULL || g->ind == NULL)
            abort();
        if (g->keyed) {
            EXPECT_EQ(sw_keyed_init(g->real, c.interval_ms, c.sample_count, max_keys, false),
                      SW_OK, "keyed init");
        } else {
            EXPECT_EQ(sw_limiter_init(g->real, &c), SW_OK, "member init");
            g->rule = ((struct sw_limiter *)g->real)->rule;
        }
        g_views(g, g->real, &v[i], &kv[i]);
        if (i == 0)
            w_ms = c.interval_ms / (int64_t)c.sample_count;
    }
    int64_t now = (int64_t)u32(r) * 1000;
    static const unsigned k_gflags[] = {0, SW_F_TRY, SW_F_NO_BLOCK, SW_F_ENTRY, SW_F_RETRY,
                                        SW_F_PRIORITIZED, SW_F_TRY | SW_F_RETRY,
                                        SW_F_ENTRY | SW_F_NO_BLOCK};

    for (g_op = 0; r->i < r->n && g_op < 2000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        switch (op % 8u) {
        case 0: case 1: case 2: case 3: { /* a group decision */
            struct sw_gmember gm[G_MAX];
            struct sw_decision e[G_MAX], out;
            struct gsnap before[G_MAX], after[G_MAX], exp[G_MAX];
            unsigned idx[G_MAX];
            unsigned k = 1u + a % count; /* members taken: k of them, rotated */
            unsigned rot = (a >> 2) % count;
            unsigned flags = k_gflags[(a >> 5) & 7u] | (op & 0x10u ? SW_F_RETRY : 0u);
            memset(gm, 0, sizeof gm);
            int expect = SW_PASS;
            bool loose[G_MAX]; /* a shadow's would-be refusal with NO_BLOCK: not compared */
            for (unsigned j = 0; j < k; j++) {
                unsigned i = (j + rot) % count;
                struct gmem *g = &gs[i];
                unsigned b = u8(r);
                idx[j] = i;
                gm[j].n = (b & 0xc0u) == 0xc0u ? (int64_t)(b & 0x3fu) * 37 + 1
                                               : (int64_t)(b & 3u) + 1;
                /* the reference: a copy of the member deciding alone */
                memcpy(g->pre, g->real, g->sz);
                memcpy(g->ind, g->real, g->sz);
                struct sw_view iv;
                struct sw_kview ikv;
                g_views(g, g->ind, &iv, &ikv);
                if (g->keyed) {
                    gm[j].kind = SW_GM_KEYED;
                    gm[j].kv = &kv[i];
                    gm[j].fp = k_gfp[(b >> 2) % 3u];
                    EXPECT_EQ(sw_keyed_decide(&ikv, gm[j].fp, gm[j].n, now,
                                              flags & ~SW_F_PRIORITIZED, &e[j]),
                              SW_OK, "key alone");
                } else {
                    gm[j].kind = SW_GM_LIMITER;
                    gm[j].v = &v[i];
                    EXPECT_EQ(sw_decide(&iv, gm[j].n, now, flags, &e[j]), SW_OK, "alone");
                }
                sw_gmember_order_private(&gm[j]);
                if (e[j].verdict == SW_NEVER)
                    expect = SW_NEVER;
                else if (e[j].verdict != SW_PASS && expect == SW_PASS)
                    expect = SW_BLOCK;
                loose[j] = e[j].shadowed && (flags & SW_F_NO_BLOCK);
                g_snap(g, g->pre, now, &before[j]);
                g_snap(g, g->ind, now, &exp[j]);
            }
            if (op & 0x20u) { /* the binding's checked group: sorted by the lock order */
                for (unsigned x = 1; x < k; x++)
                    for (unsigned y = x; y > 0 && (gm[y - 1].order[0] > gm[y].order[0] ||
                                                   (gm[y - 1].order[0] == gm[y].order[0] &&
                                                    gm[y - 1].order[1] > gm[y].order[1]));
                         y--) {
#define G_SWAP(T, arr) do { T t_ = arr[y]; arr[y] = arr[y - 1]; arr[y - 1] = t_; } while (0)
                        G_SWAP(struct sw_gmember, gm);
                        G_SWAP(struct sw_decision, e);
                        G_SWAP(struct gsnap, before);
                        G_SWAP(struct gsnap, exp);
                        G_SWAP(unsigned, idx);
                        G_SWAP(bool, loose);
#undef G_SWAP
                    }
                EXPECT_EQ(sw_group_decide_ordered(gm, k, now, flags, &out), SW_OK, "ordered");
            } else {
                EXPECT_EQ(sw_group_decide(gm, k, now, flags, &out), SW_OK, "group decide");
            }
            EXPECT_EQ(out.verdict, expect, "group verdict");
            int64_t wait = 0, retry = -1;
            bool known = true;
            for (unsigned j = 0; j < k; j++) {
                unsigned i = idx[j];
                g_snap(&gs[i], gs[i].real, now, &after[j]);
                EXPECT_EQ(gm[j].refused, e[j].verdict != SW_PASS, "member refused");
                EXPECT_EQ(gm[j].d->verdict, e[j].verdict, "member verdict");
                EXPECT_EQ(gm[j].d->shadowed, e[j].shadowed, "member shadowed");
                /* alone, a refused new key takes an entry (evicting one not in flight); a
                 * group's plan takes it only when admitted: the counts agree, the keys
                 * held may not */
                if (gs[i].keyed && (e[j].verdict != SW_PASS || e[j].shadowed))
                    exp[j].keys = after[j].keys;
                if (expect == SW_PASS) {
                    EXPECT_EQ(gm[j].d->wait_ns, e[j].wait_ns, "member wait");
                    EXPECT_EQ(gm[j].d->occupied, e[j].occupied, "member occupied");
                    if (e[j].wait_ns > wait)
                        wait = e[j].wait_ns;
                    if (!loose[j])
                        g_expect_same(&after[j], &exp[j], i, "admitted with the group");
                } else if (gm[j].refused) {
                    EXPECT_EQ(gm[j].d->retry_ns, e[j].retry_ns, "member retry");
                    if (e[j].retry_ns < 0)
                        known = false;
                    else if (e[j].retry_ns > retry)
                        retry = e[j].retry_ns;
                    g_expect_same(&after[j], &exp[j], i, "refused");
                } else if (e[j].shadowed) { /* a shadow's would-be refusal counts BLOCK */
                    if (!loose[j])
                        g_expect_same(&after[j], &exp[j], i, "shadow, the group refused");
                } else {
                    g_expect_same(&after[j], &before[j], i, "admitted, the group refused");
                }
            }
            if (expect == SW_PASS)
                EXPECT_EQ(out.wait_ns, wait, "group wait");
            else
                EXPECT_EQ(out.retry_ns, known && expect != SW_NEVER ? retry : -1,
                          "group retry");
            break;
        }
        case 4: { /* a member alone */
            unsigned i = a % count;
            struct sw_decision d;
            int64_t n = 1 + (int64_t)(u8(r) & 3u);
            if (gs[i].keyed)
                (void)sw_keyed_decide(&kv[i], k_gfp[(a >> 2) % 3u], n, now, (a >> 4) & 0xdu,
                                      &d);
            else
                (void)sw_decide(&v[i], n, now, (a >> 2) & 0x1fu, &d);
            break;
        }
        case 5: { /* an exit */
            unsigned i = a % count;
            int64_t n = 1 + (int64_t)((a >> 2) & 3u), rt = (int64_t)u8(r);
            int outcome = (int)((a >> 4) % 3u);
            if (gs[i].keyed)
                (void)sw_keyed_exit(&kv[i], k_gfp[(a >> 6) % 3u], n, rt, outcome, now);
            else
                (void)sw_exit(&v[i], n, rt, outcome, now);
            break;
        }
        case 6: { /* refused whole, nothing done: n < 1, one state twice */
            struct sw_gmember gm[2];
            struct sw_decision out;
            struct gsnap b0, a0;
            unsigned i = a % count;
            memset(gm, 0, sizeof gm);
            for (int j = 0; j < 2; j++) {
                gm[j].kind = gs[i].keyed ? SW_GM_KEYED : SW_GM_LIMITER;
                gm[j].v = &v[i];
                gm[j].kv = &kv[i];
                gm[j].fp = k_gfp[j];
                gm[j].n = 1;
                sw_gmember_order_private(&gm[j]);
            }
            gm[1].n = (a & 0x80u) ? 1 : 0;
            g_snap(&gs[i], gs[i].real, now, &b0);
            EXPECT_EQ(sw_group_decide(gm, 2, now, 0, &out), SW_EINVAL, "a bad group");
            g_snap(&gs[i], gs[i].real, now, &a0);
            g_expect_same(&a0, &b0, i, "a bad group");
            break;
        }
        default:
            now = move_time(r, now, w_ms);
            break;
        }
    }
    for (unsigned i = 0; i < count; i++) {
        free(gs[i].real);
        free(gs[i].pre);
        free(gs[i].ind);
    }
}

/* ---- mode 7: an adaptive concurrency limit (sw_adapt.c on a limiter rule) ---- */

static uint32_t a_bound(struct rd *r)
{
    static const uint32_t k[] = {1, 2, 3, 5, 10, 20, 100, SW_ADAPT_MAX_LIMIT};
    unsigned b = u8(r);
    return (b & 0x80u) ? 1u + (uint32_t)u16(r) : k[b & 7u];
}

/* An adaptive rule with random bounds min <= initial <= max; false when refused. */
static bool a_rule(struct rd *r, struct sw_rule *rule, const struct sw_limiter_cfg *c,
                   struct sw_adapt_cfg *ac)
{
    uint32_t x[3] = {a_bound(r), a_bound(r), a_bound(r)};
    for (int i = 0; i < 2; i++) /* sort */
        for (int j = 0; j < 2 - i; j++)
            if (x[j] > x[j + 1]) {
                uint32_t t = x[j];
                x[j] = x[j + 1];
                x[j + 1] = t;
            }
    unsigned b = u8(r);
    memset(ac, 0, sizeof *ac);
    ac->algo = (b & 1u) ? SW_ADAPT_GRADIENT : SW_ADAPT_BBR;
    ac->min_limit = x[0];
    ac->initial_limit = x[1];
    ac->max_limit = x[2];
    ac->cpu_threshold = (b & 6u) == 0 ? (int32_t)(u16(r) % 1001u) : SW_ADAPT_NO_CPU;
    if (sw_rule_init(rule, c) != SW_OK)
        FAIL("adaptive base rule refused");
    const char *param = NULL;
    if (sw_rule_set_adapt(rule, ac, &param) != SW_OK)
        FAIL("adaptive rule refused: %s", param != NULL ? param : "?");
    return true;
}

static void craft_adapt(struct rd *r, struct sw_adapt_state *s, int64_t near_ms)
{
    unsigned f = u8(r);
    int64_t v = crafted_value(r, 1000, near_ms);
    static const float kf[] = {0.0f, -1.0f, 1.0f, 0.5f, 1e6f, 1000001.0f, 3.4e38f, 1e-40f,
                               2.5f, 7.0f, 16777217.0f, -3.4e38f};
    float fv;
    switch ((f >> 4) % 4u) {
    case 0: fv = kf[v & 7]; break;
    case 1: fv = kf[8u + (unsigned)(v & 3)]; break;
    case 2: fv = (f & 1u) ? NAN : ((f & 2u) ? INFINITY : -INFINITY); break;
    default: {
        uint32_t bits = (uint32_t)v;
        memcpy(&fv, &bits, sizeof fv);
        break;
    }
    }
    switch (f % 11u) {
    case 0: s->next_ms = v; break;
    case 1: s->mark_ms = v; break;
    case 2: s->probe_ms = v; break;
    case 3: s->rt_sum_us = v; break;
    case 4: s->limit = fv; break;
    case 5: s->base_us = fv; break;
    case 6: s->samples = (uint32_t)v; break;
    case 7: s->cpu = (uint16_t)v; break;
    case 8: s->flags = (uint8_t)v; break;
    case 9: s->floors = (uint8_t)v; break;
    default: /* any bytes */
        for (size_t k = 0; k < sizeof *s; k++)
            if (u8(r) & 1u)
                ((uint8_t *)s)[k] = (uint8_t)u8(r);
        break;
    }
}

static void run_adapt(struct rd *r)
{
    unsigned c1 = u8(r);
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = SW_GRADE_CONCURRENCY;
    c.behavior = SW_REJECT;
    c.count = 1;
    c.interval_ms = k_interval[c1 & 7u];
    c.sample_count = k_samples[(c1 >> 3) & 7u];
    if (c.interval_ms % (int64_t)c.sample_count != 0)
        c.sample_count = 2;
    struct sw_rule rules[2];
    struct sw_adapt_cfg ac[2];
    a_rule(r, &rules[0], &c, &ac[0]);
    a_rule(r, &rules[1], &c, &ac[1]); /* another process's bounds on the same state */
    size_t size = sw_limiter_size(&c);
    struct sw_limiter *lim = malloc(size);
    if (lim == NULL)
        abort();
    EXPECT_EQ(sw_limiter_init(lim, &c), SW_OK, "limiter init");
    lim->rule = rules[0];
    struct sw_view v[2];
    sw_limiter_view(lim, &v[0]);
    v[1] = v[0];
    v[1].rule = &rules[1];
    struct sw_node *node = sw_limiter_node(lim);
    int64_t w_ms = c.interval_ms / (int64_t)c.sample_count;
    int64_t now = (int64_t)u32(r) * 1000;
    int64_t held = 0;    /* in flight, by the decisions and exits made */
    bool foreign = false; /* the state was crafted or learned under the other bounds */

    for (g_op = 0; r->i < r->n && g_op < 4000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        unsigned w = (op & 0x80u) != 0; /* the view deciding */
        const struct sw_adapt_cfg *cf = &ac[w];
        if (w)
            foreign = true;
        switch (op % 10u) {
        case 0: case 1: case 2: case 3: { /* decide */
            int64_t n = (a & 0xc0u) == 0xc0u ? (int64_t)cf->max_limit + (a & 3u)
                                              : (int64_t)(a & 3u) + 1;
            unsigned flags = (a >> 2) & (SW_F_TRY | SW_F_NO_BLOCK | SW_F_ENTRY | SW_F_RETRY);
            struct sw_decision d;
            EXPECT_EQ(sw_decide(&v[w], n, now, flags, &d), SW_OK, "decide");
            double cap = sw_adapt_cap(cf, &node->adapt);
            if (cap < cf->min_limit || cap > cf->max_limit)
                FAIL("cap %g outside [%u, %u]", cap, cf->min_limit, cf->max_limit);
            if ((double)n > (double)cf->max_limit && d.verdict != SW_NEVER)
                FAIL("%lld above max_limit %u: verdict %d", (long long)n, cf->max_limit,
                     d.verdict);
            if (d.verdict == SW_PASS) {
                held += n;
                if ((double)held > cap)
                    FAIL("%lld in flight, the limit in force %g", (long long)held, cap);
            }
            if (!foreign && (node->adapt.flags & SW_ADAPT_PHASE) != SW_ADAPT_FRESH) {
                float l = node->adapt.limit;
                if (!(l >= (float)cf->min_limit && l <= (float)cf->max_limit))
                    FAIL("learned limit %g outside [%u, %u]", (double)l, cf->min_limit,
                         cf->max_limit);
            }
            break;
        }
        case 4: case 5: case 6: { /* an exit with any RT */
            int64_t n = 1 + (int64_t)(a & 3u);
            int64_t rt;
            switch ((a >> 2) & 7u) {
            case 0: rt = 0; break;
            case 1: rt = (int64_t)u8(r) * 1000000; break;
            case 2: rt = (int64_t)u16(r) * 1000; break;
            case 3: rt = INT64_MAX - (int64_t)u8(r); break;
            case 4: rt = (int64_t)u32(r) * 1000000; break;
            case 5: rt = -1 - (int64_t)u8(r); break;
            default: rt = (int64_t)u16(r) * 100000; break;
            }
            int outcome = (int)((a >> 5) % 3u);
            int rc = sw_exit_rt(&v[w], n, rt, outcome, now);
            if (rt < 0) {
                EXPECT_EQ(rc, SW_EINVAL, "exit of a negative RT");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "exit");
            held = held > n ? held - n : 0;
            break;
        }
        case 7: { /* the CPU use, any permille */
            static const int64_t k_cpu[] = {0, 500, 800, 1000, 1001, -1, INT64_MAX, INT64_MIN};
            sw_view_set_cpu(&v[w], (a & 8u) ? (int64_t)u16(r) : k_cpu[a & 7u]);
            break;
        }
        case 8: /* crafted adapt-state bytes (a region is input), or a read */
            if (a & 1u) {
                craft_adapt(r, &node->adapt, ms_of(now));
                foreign = true;
            } else {
                int64_t l = sw_adapt_limit_now(&v[w], (a & 2u) ? SW_NOW : now);
                if (l < cf->min_limit || l > cf->max_limit)
                    FAIL("limit_now %lld outside [%u, %u]", (long long)l, cf->min_limit,
                         cf->max_limit);
                l = sw_adapt_limit_of(cf, node);
                if (l < cf->min_limit || l > cf->max_limit)
                    FAIL("limit_of %lld outside [%u, %u]", (long long)l, cf->min_limit,
                         cf->max_limit);
            }
            break;
        default:
            now = move_time(r, now, w_ms);
            break;
        }
        if (g_trace)
            fprintf(stderr, "adapt op %d (%u) now=%lld: in flight %lld, limit %g, phase %u\n",
                    g_op, op % 10u, (long long)now, (long long)held, (double)node->adapt.limit,
                    node->adapt.flags & SW_ADAPT_PHASE);
        EXPECT_EQ(sw_in_flight(&v[0]), held, "in flight");
    }
    free(lim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rd r = {data, size, 0};
    g_trace = getenv("FUZZ_TRACE") != NULL;
    if (size < 1)
        return 0;
    unsigned mode = u8(&r);
    if (mode % 16u == 14u)
        run_keyed(&r);
    else if (mode % 16u == 10u)
        run_breaker(&r);
    else if (mode % 16u == 8u)
        run_group(&r);
    else if (mode % 16u == 6u)
        run_adapt(&r);
    else if (mode % 16u == 12u)
        run_region(&r);
    else if (mode & 1u)
        run_limiter(&r);
    else
        run_window(&r);
    return 0;
}

#ifdef SW_FUZZ_MAIN
#include <dirent.h>
#include <sys/stat.h>

/* The per-input deadline: a hang (a loop over crafted data that never ends) is a failure. */
static const char *g_input = "";
static unsigned g_deadline_s = 10;

static void on_deadline(int sig)
{
    static const char msg[] = "fuzz_core: an input ran past its deadline (a hang): ";
    (void)sig;
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, g_input, strlen(g_input)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(3);
    abort();
}

static void run_one(const char *name, const uint8_t *buf, size_t n)
{
    g_input = name;
    alarm(g_deadline_s);
    LLVMFuzzerTestOneInput(buf, n);
    alarm(0);
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = malloc(1 << 20);
    if (buf == NULL)
        abort();
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    run_one(path, buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, errors = 0;
    const char *dl = getenv("FUZZ_DEADLINE_S");
    if (dl != NULL && atoi(dl) > 0)
        g_deadline_s = (unsigned)atoi(dl);
    signal(SIGALRM, on_deadline);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_replay: no such file %s\n", argv[i]);
            errors++;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            while (d != NULL && (e = readdir(d)) != NULL) {
                if (e->d_name[0] == '.')
                    continue;
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
                errors += run_file(p);
                files++;
            }
            if (d != NULL)
                closedir(d);
        } else {
            errors += run_file(argv[i]);
            files++;
        }
    }
    /* plus pseudo-random programs, so the replay binary explores without clang */
    const char *env = getenv("FUZZ_RANDOM");
    long nrand = env != NULL ? strtol(env, NULL, 10) : 3000;
    uint64_t s = 0x853c49e6748fea9bull;
    uint8_t buf[2048];
    for (long k = 0; k < nrand; k++) {
        size_t len = 16 + (size_t)(k % 2000);
        for (size_t j = 0; j < len; j++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[j] = (uint8_t)(s >> 24);
        }
        char name[64];
        snprintf(name, sizeof name, "(pseudo-random program %ld)", k);
        if (getenv("FUZZ_SAVE") != NULL && k == strtol(getenv("FUZZ_SAVE"), NULL, 10)) {
            FILE *f = fopen("fuzz_input.bin", "wb"); /* FUZZ_SAVE=k: that program, to a file */
            if (f != NULL) {
                fwrite(buf, 1, len, f);
                fclose(f);
            }
        }
        run_one(name, buf, len);
    }
    printf("fuzz replay: %d files, %ld random programs, %d unreadable\n", files, nrand, errors);
    return errors != 0;
}
#endif
