/* fuzz_common.c - what the modes of the fuzz harness share: the reference model of a ring
 * (written from docs/design.md §2-4, not from the core's code: buckets are a list of (start,
 * counters) created at the times the design says a bucket is (re)started), the checks of the
 * core's running totals against its own slots, clock moves, crafted values and the
 * configuration tables the modes pick from (one byte of the program each).
 */
#include "fuzz.h"

int g_op;
int g_trace;

/* ---- reference model of a ring ---- */

int64_t sat_add(int64_t a, int64_t b)
{
    __int128 r = (__int128)a + b;
    return r > INT64_MAX ? INT64_MAX : r < INT64_MIN ? INT64_MIN : (int64_t)r;
}

void m_init(struct mleap *m, int64_t interval, uint32_t sc, uint32_t nev, bool future)
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
void m_reset(struct mleap *m)
{
    m_init(m, m->interval, m->sc, m->nev, m->future);
}
int64_t m_start(const struct mleap *m, int64_t t)
{
    return t - t % m->w;
}
static int m_idx(const struct mleap *m, int64_t start)
{
    return (int)((start / m->w) % m->sc);
}
/* time behind the newest bucket reads/writes the newest bucket; negative is 0 */
int64_t m_clamp(struct mleap *m, int64_t t)
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
const struct mbucket *m_held(struct mleap *m, int64_t start)
{
    if (start < 0)
        return NULL;
    struct mbucket *b = m_find(m, start);
    if (b != NULL && m_find(m, start + m->interval) != NULL)
        return NULL;
    return b;
}
/* (re)start the bucket of a clamped t, taking the passes granted ahead for it */
struct mbucket *m_touch(struct mleap *m, int64_t t)
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
bool m_in_window(const struct mleap *m, int64_t start, int64_t t)
{
    return start <= t && start > t - m->interval;
}
int64_t m_sum_peek(struct mleap *m, uint32_t ev, int64_t t)
{
    int64_t s = 0;
    for (int i = 0; i < m->nb; i++)
        if (m_in_window(m, m->b[i].start, t))
            s = sat_add(s, m->b[i].c[ev]);
    return s;
}
int64_t m_sum(struct mleap *m, uint32_t ev, int64_t t)
{
    t = m_clamp(m, t);
    m_touch(m, t);
    return m_sum_peek(m, ev, t);
}
int64_t m_current(struct mleap *m, uint32_t ev, int64_t t)
{
    t = m_clamp(m, t);
    return m_touch(m, t)->c[ev];
}
int64_t m_previous(struct mleap *m, uint32_t ev, int64_t t)
{
    t = m_clamp(m, t);
    const struct mbucket *b = m_held(m, m_start(m, t) - m->w);
    return b != NULL ? b->c[ev] : 0;
}
int64_t m_min_rt(struct mleap *m, int64_t t)
{
    t = m_clamp(m, t);
    m_touch(m, t);
    int64_t v = SW_MIN_RT_INIT;
    for (int i = 0; i < m->nb; i++)
        if (m_in_window(m, m->b[i].start, t) && m->b[i].min_rt < v)
            v = m->b[i].min_rt;
    return v < 1 ? 1 : v;
}
void m_add(struct mleap *m, uint32_t ev, int64_t n, int64_t t)
{
    t = m_clamp(m, t);
    struct mbucket *b = m_touch(m, t);
    b->c[ev] = sat_add(b->c[ev], n);
}
void m_add_rt(struct mleap *m, int64_t rt, int64_t t)
{
    t = m_clamp(m, t);
    struct mbucket *b = m_touch(m, t);
    b->c[SW_EV_RT] = sat_add(b->c[SW_EV_RT], rt);
    if (rt < b->min_rt)
        b->min_rt = rt;
}
int64_t m_waiting(const struct mleap *m, int64_t t)
{
    int64_t s = 0;
    for (uint32_t i = 0; i < m->sc; i++)
        if (m->fstart[i] != M_EMPTY && m->fstart[i] > t)
            s = sat_add(s, m->fcount[i]);
    return s;
}
void m_grant(struct mleap *m, int64_t T, int64_t n)
{
    int64_t s = m_start(m, T);
    int i = m_idx(m, s);
    if (m->fstart[i] != s) {
        m->fstart[i] = s;
        m->fcount[i] = 0;
    }
    m->fcount[i] = sat_add(m->fcount[i], n);
}

int64_t ms_of(int64_t ns)
{
    return ns <= 0 ? 0 : ns / 1000000;
}

/* ---- the core's running totals against a brute-force re-sum of its own slots ---- */

/* Between any two calls: each running total equals the plain O(n) sum over the slots whose
 * start lies in (head - interval, head], the min_rt deque's front equals the plain minimum
 * over them, and no slot holds a start after head. */
void check_totals(const struct sw_leap *l)
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
void check_waiting(const struct sw_leap *fut, int64_t t)
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

int64_t move_time(struct rd *r, int64_t now, int64_t w_ms)
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

void craft_leap_word(struct sw_leap *l, unsigned word, int64_t v)
{
    switch (word) {
    case 0: l->head = v; break;
    case 1: l->newest = v; break;
    case 2: l->newest_idx = v; break;
    case 3: l->dq_first = (uint32_t)v; break;
    case 4: l->dq_len = (uint32_t)v; break;
    case 5: l->interval_ms = v; break;
    case 6: l->window_ms = v; break;
    case 7: l->sample_count = (uint32_t)v; break;
    case 8: l->n_events = (uint32_t)v; break;
    default: l->stride = (uint32_t)v; break;
    }
}

/* ---- configurations the modes pick from ---- */

const double k_count[] = {0, 1, 2, 3, 5, 10, 100, 0.25, 2.5, 1000, 20000, 7, 1e6, 0.5,
                                 50, 4};
const int64_t k_interval[] = {1000, 1000, 2000, 500, 3000, 200, 1000, 4000};
const uint32_t k_samples[] = {2, 1, 4, 5, 3, 2, 10, 8};
const double k_warm[] = {10, 0, 1, 3};
const double k_cf[] = {3, 1.5, 10, 2};
const int64_t k_queue[] = {500, 0, 100, 2000};

/* A limiter's settings from three configuration bytes (the limiter and group modes). */
void limiter_cfg_of(unsigned c0, unsigned c1, unsigned c2, struct sw_limiter_cfg *out)
{
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
    *out = c;
}

/* ---- crafted values (an untrusted region) ---- */

/* A value to write: the edges of every range the code checks. */
int64_t crafted_value(struct rd *r, int64_t window_ms, int64_t near)
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

void window_cfg_of(unsigned byte, const int64_t intervals[8], uint32_t fallback,
                   int64_t *interval_ms, uint32_t *sample_count)
{
    *interval_ms = intervals[byte & 7u];
    *sample_count = k_samples[(byte >> 3) & 7u];
    if (*interval_ms % (int64_t)*sample_count != 0)
        *sample_count = fallback;
}
