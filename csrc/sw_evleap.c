/* sw_evleap.c - the eventually consistent leap array (see sw_evleap.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getcpu */
#endif
#include "sw_evleap.h"

#include "sw_proc.h"
#include "sw_time.h"


int sw_evleap_test_stripe = SW_EV_STRIPE_CPU;
void (*sw_evleap_test_after_start)(void) = NULL;

#define TAG_MASK ((UINT64_C(1) << SW_EV_TAG_BITS) - 1u)
#define COUNT_MASK ((uint64_t)SW_EV_COUNT_MAX)

static inline int64_t ld(const int64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline bool cas(int64_t *p, int64_t *expected, int64_t desired)
{
    return __atomic_compare_exchange_n(p, expected, desired, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

static inline uint64_t starts_words(uint32_t sample_count)
{
    return ((uint64_t)sample_count + 7u) & ~UINT64_C(7);
}

static uint64_t stripe_words_for(const struct sw_leap_cfg *cfg)
{
    uint64_t row = (uint64_t)cfg->n_events + (cfg->has_rt ? 1u : 0u);
    uint64_t used = (uint64_t)cfg->sample_count * row;
    /* rounded up to a cache line, then one line more: two stripes never share a line,
     * however the ring is aligned */
    return ((used + 7u) & ~UINT64_C(7)) + 8u;
}

/* Stripes: SW_EV_MAX_STRIPES, fewer when they would pass SW_EV_STRIPES_BYTES. A function of
 * the configuration alone (not of the CPUs a process sees: a container may be shown fewer),
 * so every process sharing a region computes the same size (checked on attach). */
uint32_t sw_evleap_stripes(const struct sw_leap_cfg *cfg)
{
    if (sw_leap_check(cfg) != SW_OK)
        return 0;
    uint64_t bytes = stripe_words_for(cfg) * sizeof(int64_t);
    uint32_t n = SW_EV_MAX_STRIPES;
    while (n > 1u && (uint64_t)n * bytes > SW_EV_STRIPES_BYTES)
        n >>= 1;
    return n;
}

size_t sw_evleap_size(const struct sw_leap_cfg *cfg)
{
    uint32_t n = sw_evleap_stripes(cfg);
    if (n == 0)
        return 0;
    return sizeof(struct sw_evleap) +
           (size_t)(starts_words(cfg->sample_count) + (uint64_t)n * stripe_words_for(cfg)) *
               sizeof(int64_t);
}

static inline int64_t *starts_of(struct sw_evleap *l)
{
    return l->words;
}
static inline int64_t *cell(struct sw_evleap *l, uint32_t stripe, uint32_t slot, uint32_t col)
{
    return l->words + starts_words(l->sample_count) + (uint64_t)stripe * l->stripe_words +
           (uint64_t)slot * l->row + col;
}

static inline int64_t pack(uint64_t tag, int64_t count)
{
    return (int64_t)((tag << SW_EV_COUNT_BITS) | ((uint64_t)count & COUNT_MASK));
}
static inline uint64_t tag_of_cell(int64_t w)
{
    return ((uint64_t)w >> SW_EV_COUNT_BITS) & TAG_MASK;
}
static inline int64_t count_of_cell(int64_t w)
{
    return (int64_t)((uint64_t)w & COUNT_MASK);
}
static inline uint64_t tag_of_start(const struct sw_evleap *l, int64_t start)
{
    return (uint64_t)(start / l->window_ms) & TAG_MASK;
}
static inline uint32_t index_of(const struct sw_evleap *l, int64_t start)
{
    return (uint32_t)((start / l->window_ms) % (int64_t)l->sample_count);
}
/* the value a cell of column col starts a bucket with */
static inline int64_t cell_init(const struct sw_evleap *l, uint32_t col)
{
    return col < l->n_events ? 0 : SW_MIN_RT_INIT;
}

void sw_evleap_reset(struct sw_evleap *l)
{
    __atomic_store_n(&l->newest, SW_LEAP_EMPTY, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < l->sample_count; i++)
        __atomic_store_n(&starts_of(l)[i], SW_LEAP_EMPTY, __ATOMIC_RELEASE);
    for (uint32_t k = 0; k < l->n_stripes; k++)
        for (uint32_t i = 0; i < l->sample_count; i++)
            for (uint32_t c = 0; c < l->row; c++)
                __atomic_store_n(cell(l, k, i, c), pack(0, cell_init(l, c)), __ATOMIC_RELEASE);
}

int sw_evleap_init(struct sw_evleap *l, const struct sw_leap_cfg *cfg)
{
    uint32_t n = sw_evleap_stripes(cfg);
    if (l == NULL || n == 0)
        return SW_EINVAL;
    l->interval_ms = cfg->interval_ms;
    l->window_ms = cfg->interval_ms / (int64_t)cfg->sample_count;
    l->sample_count = cfg->sample_count;
    l->n_events = cfg->n_events;
    l->has_rt = cfg->has_rt ? 1u : 0u;
    l->n_stripes = n;
    l->row = cfg->n_events + (cfg->has_rt ? 1u : 0u);
    l->pad_ = 0;
    l->stripe_words = stripe_words_for(cfg);
    sw_evleap_reset(l);
    return SW_OK;
}

bool sw_evleap_layout_ok(const struct sw_evleap *l, const struct sw_leap_cfg *cfg)
{
    return sw_leap_check(cfg) == SW_OK && l->interval_ms == cfg->interval_ms &&
           l->window_ms == cfg->interval_ms / (int64_t)cfg->sample_count &&
           l->sample_count == cfg->sample_count && l->n_events == cfg->n_events &&
           l->has_rt == (cfg->has_rt ? 1u : 0u) && l->n_stripes == sw_evleap_stripes(cfg) &&
           l->row == cfg->n_events + (cfg->has_rt ? 1u : 0u) &&
           l->stripe_words == stripe_words_for(cfg);
}

/* A bucket start as read from the ring: a multiple of window_ms in [0, SW_LEAP_T_MAX]
 * (anything else is EMPTY or damage, and is treated as no bucket). */
static inline bool start_ok(const struct sw_evleap *l, int64_t s)
{
    return s >= 0 && s <= SW_LEAP_T_MAX && s % l->window_ms == 0;
}

/* The newest bucket seen, one word: its bucket number q (start / window_ms) above
 * NEWEST_IDX_BITS bits of its slot index (sample_count <= SW_MAX_SAMPLES < 2^17; q < 2^44
 * for every start <= SW_LEAP_T_MAX), so that the usual add needs no division. Negative:
 * none yet. */
#define NEWEST_IDX_BITS SW_EV_NEWEST_IDX_BITS
#define NEWEST_IDX_MASK ((INT64_C(1) << NEWEST_IDX_BITS) - 1)

/* A bucket: its start, bucket number and slot. */
struct ev_at {
    int64_t start;
    int64_t q;
    uint32_t idx;
};

/* Decode a newest word; false when it names no valid bucket (none yet, or damage). */
static inline bool newest_decode(const struct sw_evleap *l, int64_t w, struct ev_at *at)
{
    if (w < 0)
        return false;
    at->q = w >> NEWEST_IDX_BITS;
    at->idx = (uint32_t)(w & NEWEST_IDX_MASK);
    return at->idx < l->sample_count &&
           !__builtin_mul_overflow(at->q, l->window_ms, &at->start) &&
           at->start <= SW_LEAP_T_MAX;
}

/* Clamp (DESIGN §2): the bucket of t, or the newest bucket seen when t lies behind it; a
 * newer bucket becomes the newest. */
static struct ev_at ev_clamp(struct sw_evleap *l, int64_t now_ns)
{
    int64_t t = sw_ms_of_ns(now_ns == SW_NOW ? sw_time_coarse_ns() : now_ns);
    int64_t w = ld(&l->newest);
    struct ev_at at;
    if (newest_decode(l, w, &at) && t - at.start < l->window_ms) /* t >= 0, start >= 0 */
        return at; /* t in the newest bucket, or behind it: no division */
    struct ev_at mine;
    mine.q = t / l->window_ms;
    mine.start = mine.q * l->window_ms;
    mine.idx = (uint32_t)(mine.q % (int64_t)l->sample_count);
    for (;;) {
        if (newest_decode(l, w, &at) && at.q >= mine.q)
            return at;
        if (cas(&l->newest, &w, (mine.q << NEWEST_IDX_BITS) | (int64_t)mine.idx))
            return mine;
    }
}

/* The stripe this thread adds to: its process's pid (consecutive pids, as a server's
 * workers have, get different stripes), spread by a per-thread number; chosen again in a
 * child after fork. */
static _Thread_local uint64_t tls_fork_gen = UINT64_MAX;
static _Thread_local uint32_t tls_seed;
static uint32_t thread_seq;

static inline uint32_t my_stripe(const struct sw_evleap *l)
{
    int forced = sw_evleap_test_stripe;
    if (forced >= 0)
        return (uint32_t)forced & (l->n_stripes - 1u);
    uint64_t gen = sw_proc_fork_generation();
    if (tls_fork_gen != gen) {
        uint32_t k = __atomic_fetch_add(&thread_seq, 1u, __ATOMIC_RELAXED);
        tls_seed = (uint32_t)(sw_proc_token() >> 32) + k * UINT32_C(0x9E3779B9);
        tls_fork_gen = gen;
    }
    return tls_seed & (l->n_stripes - 1u);
}

/* Reset the cells of slot i for bucket b: each cell holding another tag starts afresh, by a
 * compare-and-swap (so an add for b already made is never overwritten). Stops when the slot
 * moved on to a newer bucket (its own resetter takes over). */
static void ev_sweep(struct sw_evleap *l, uint32_t i, int64_t b)
{
    uint64_t tag = tag_of_start(l, b);
    for (uint32_t k = 0; k < l->n_stripes; k++)
        for (uint32_t c = 0; c < l->row; c++) {
            int64_t *p = cell(l, k, i, c);
            int64_t w = ld(p);
            for (;;) {
                if (tag_of_cell(w) == tag)
                    break;
                if (ld(&starts_of(l)[i]) != b)
                    return;
                if (cas(p, &w, pack(tag, cell_init(l, c))))
                    break;
            }
        }
}

/* The start of the bucket that slot of b holds once b has begun: b itself (the slot moved
 * to b here or by another caller), or a newer start when the slot already moved past b
 * (this caller's time lags a whole interval: its count goes to the newer bucket). */
static int64_t ev_slot(struct sw_evleap *l, int64_t b, uint32_t i)
{
    int64_t *sp = &starts_of(l)[i];
    int64_t s = ld(sp);
    if (s == b)
        return b; /* the usual case: no division */
    for (;;) {
        if (start_ok(l, s) && index_of(l, s) == i && s >= b)
            return s;
        if (cas(sp, &s, b)) {
            ev_sweep(l, i, b);
            return b;
        }
    }
}

/* Apply an update to column col of slot i in this caller's stripe, for the bucket of b. */
enum { UPD_ADD, UPD_MIN };
static void ev_update(struct sw_evleap *l, const struct ev_at *at, uint32_t col, int op,
                      int64_t v)
{
    int64_t b = at->start;
    uint32_t i = at->idx;
    int64_t *p = cell(l, my_stripe(l), i, col);
    int64_t s = ev_slot(l, b, i);
    if (sw_evleap_test_after_start != NULL)
        sw_evleap_test_after_start(); /* tests: another caller moves the slot on here */
    int64_t w = ld(p);
    for (;;) {
        uint64_t tag = s == b ? (uint64_t)at->q & TAG_MASK : tag_of_start(l, s);
        int64_t nw;
        if (tag_of_cell(w) == tag) {
            int64_t c = count_of_cell(w);
            if (op == UPD_ADD)
                nw = pack(tag, v >= SW_EV_COUNT_MAX - c ? SW_EV_COUNT_MAX : c + v);
            else if (v < c)
                nw = pack(tag, v);
            else
                return; /* not a new minimum: nothing to write */
        } else {
            /* the cell still holds an older bucket (its reset is under way, or its
             * resetter died): start it for s, unless the slot moved on meanwhile */
            int64_t now_s = ld(&starts_of(l)[i]);
            if (now_s != s) {
                s = ev_slot(l, b, i);
                w = ld(p);
                continue;
            }
            int64_t init = cell_init(l, col);
            if (op == UPD_ADD)
                nw = pack(tag, v >= SW_EV_COUNT_MAX ? SW_EV_COUNT_MAX : v);
            else
                nw = pack(tag, v < init ? v : init);
        }
        if (cas(p, &w, nw))
            return;
        /* the cell changed: an add from a caller sharing the stripe, or a reset */
    }
}

int sw_evleap_add(struct sw_evleap *l, uint32_t ev, int64_t n, int64_t now_ns)
{
    if (ev >= l->n_events)
        return SW_EEVENT;
    if (n < 0)
        return SW_EINVAL;
    struct ev_at at = ev_clamp(l, now_ns);
    ev_update(l, &at, ev, UPD_ADD, n);
    return SW_OK;
}

int sw_evleap_add_rt(struct sw_evleap *l, int64_t rt_ms, int64_t now_ns)
{
    if (!l->has_rt)
        return SW_ENORT;
    if (rt_ms < 0)
        return SW_EINVAL;
    struct ev_at at = ev_clamp(l, now_ns);
    ev_update(l, &at, SW_EV_RT, UPD_ADD, rt_ms);
    ev_update(l, &at, l->n_events, UPD_MIN, rt_ms);
    return SW_OK;
}

/* A read at b starts the bucket of b in its slot, as the locked ring's reads do (so, with
 * sample_count 1, the previous bucket is gone once the current one was read). */
static int64_t ev_read_at(struct sw_evleap *l, int64_t now_ns)
{
    struct ev_at at = ev_clamp(l, now_ns);
    (void)ev_slot(l, at.start, at.idx);
    return at.start;
}

/* Whether slot i holds exactly bucket `start`. */
static inline bool holds(struct sw_evleap *l, uint32_t i, int64_t start)
{
    return ld(&starts_of(l)[i]) == start;
}

/* Sum of column col of slot i over the stripes, for bucket `start` (saturated). */
static int64_t slot_sum(struct sw_evleap *l, uint32_t i, int64_t start, uint32_t col)
{
    uint64_t tag = tag_of_start(l, start);
    int64_t sum = 0;
    for (uint32_t k = 0; k < l->n_stripes; k++) {
        int64_t w = ld(cell(l, k, i, col));
        if (tag_of_cell(w) == tag)
            sum = sw_sat_add(sum, count_of_cell(w));
    }
    return sum;
}

/* Min of the min_rt column of slot i over the stripes, for bucket `start`. */
static int64_t slot_min(struct sw_evleap *l, uint32_t i, int64_t start)
{
    uint64_t tag = tag_of_start(l, start);
    int64_t m = SW_MIN_RT_INIT;
    for (uint32_t k = 0; k < l->n_stripes; k++) {
        int64_t w = ld(cell(l, k, i, l->n_events));
        if (tag_of_cell(w) == tag && count_of_cell(w) < m)
            m = count_of_cell(w);
    }
    return m;
}

/* Sum of column col over the window at b: the buckets with start in (b - interval, b]. */
static int64_t window_sum(struct sw_evleap *l, int64_t b, uint32_t col)
{
    int64_t sum = 0;
    for (uint32_t k = 0; k < l->sample_count; k++) {
        int64_t start = b - (int64_t)k * l->window_ms;
        if (start < 0)
            break;
        uint32_t i = index_of(l, start);
        if (holds(l, i, start))
            sum = sw_sat_add(sum, slot_sum(l, i, start, col));
    }
    return sum;
}

int sw_evleap_read(struct sw_evleap *l, int which, uint32_t ev, int64_t now_ns, int64_t *out)
{
    if (ev >= l->n_events)
        return SW_EEVENT;
    int64_t b = which == SW_READ_PREVIOUS ? ev_clamp(l, now_ns).start : ev_read_at(l, now_ns);
    int64_t start = b;
    switch (which) {
    case SW_READ_CURRENT: break;
    case SW_READ_PREVIOUS: start = b - l->window_ms; break;
    default: *out = window_sum(l, b, ev); return SW_OK;
    }
    uint32_t i;
    *out = start >= 0 && holds(l, (i = index_of(l, start)), start) ? slot_sum(l, i, start, ev)
                                                                     : 0;
    return SW_OK;
}

int sw_evleap_rt(struct sw_evleap *l, int64_t now_ns, int64_t *min_rt, int64_t *rt_sum,
                 int64_t *success)
{
    if (!l->has_rt)
        return SW_ENORT;
    int64_t b = ev_read_at(l, now_ns);
    if (min_rt != NULL) {
        int64_t m = SW_MIN_RT_INIT;
        for (uint32_t k = 0; k < l->sample_count; k++) {
            int64_t start = b - (int64_t)k * l->window_ms;
            if (start < 0)
                break;
            uint32_t i = index_of(l, start);
            if (holds(l, i, start)) {
                int64_t v = slot_min(l, i, start);
                if (v < m)
                    m = v;
            }
        }
        *min_rt = m < 1 ? 1 : m;
    }
    if (rt_sum != NULL)
        *rt_sum = window_sum(l, b, SW_EV_RT);
    if (success != NULL)
        *success = window_sum(l, b, SW_EV_SUCCESS);
    return SW_OK;
}

uint32_t sw_evleap_buckets(struct sw_evleap *l, int64_t now_ns, int64_t *out)
{
    int64_t b = ev_read_at(l, now_ns);
    uint32_t stride = SW_SLOT_COUNTS + l->n_events;
    uint32_t written = 0;
    for (int64_t k = (int64_t)l->sample_count - 1; k >= 0; k--) {
        int64_t start = b - k * l->window_ms;
        if (start < 0)
            continue;
        int64_t *dst = out + (size_t)written * stride;
        uint32_t i = index_of(l, start);
        bool held = holds(l, i, start);
        dst[SW_SLOT_START] = start;
        dst[SW_SLOT_MIN_RT] = held && l->has_rt ? slot_min(l, i, start) : SW_MIN_RT_INIT;
        for (uint32_t e = 0; e < l->n_events; e++)
            dst[SW_SLOT_COUNTS + e] = held ? slot_sum(l, i, start, e) : 0;
        written++;
    }
    return written;
}
