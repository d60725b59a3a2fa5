/* sw_leap.c - leap array and metric buckets (docs/design.md §2-3). */
#include "sw_leap.h"

#include "sw_proc.h"

#include "sw_time.h"

#include <string.h>

int sw_leap_check(const struct sw_leap_cfg *cfg)
{
    if (cfg == NULL || cfg->interval_ms <= 0 || cfg->interval_ms > SW_MAX_INTERVAL_MS ||
        cfg->sample_count == 0 || cfg->sample_count > SW_MAX_SAMPLES || cfg->n_events == 0 ||
        cfg->n_events > SW_MAX_EVENTS || cfg->interval_ms % (int64_t)cfg->sample_count != 0)
        return SW_EINVAL;
    if (cfg->has_rt && cfg->n_events != SW_EV_DEFAULT_COUNT)
        return SW_EINVAL;
    return SW_OK;
}

size_t sw_leap_size(const struct sw_leap_cfg *cfg)
{
    if (sw_leap_check(cfg) != SW_OK)
        return 0;
    size_t words = (size_t)cfg->sample_count * (2u + (size_t)cfg->n_events) +
                   2u * (size_t)cfg->n_events;
    size_t deque = cfg->has_rt ? sw_align8((size_t)cfg->sample_count * sizeof(uint32_t)) : 0u;
    return sizeof(struct sw_leap) + words * sizeof(int64_t) + deque;
}

int sw_leap_init(struct sw_leap *l, const struct sw_leap_cfg *cfg)
{
    if (l == NULL || sw_leap_check(cfg) != SW_OK)
        return SW_EINVAL;
    l->interval_ms = cfg->interval_ms;
    l->window_ms = cfg->interval_ms / (int64_t)cfg->sample_count;
    l->sample_count = cfg->sample_count;
    l->n_events = cfg->n_events;
    l->has_rt = cfg->has_rt ? 1u : 0u;
    l->stride = 2u + cfg->n_events;
    sw_leap_reset(l);
    return SW_OK;
}

/* ---- the min_rt deque: slot indices, oldest first, min_rt strictly increasing ---- */

static inline uint32_t *dq_mem(struct sw_leap *l)
{
    return (uint32_t *)(void *)(sw_leap_totals_(l) + 2u * l->n_events);
}
static inline const uint32_t *dq_cmem(const struct sw_leap *l)
{
    return (const uint32_t *)(const void *)(sw_leap_ctotals_(l) + 2u * l->n_events);
}
/* position of the k-th entry (k < sample_count) in the circular array */
static inline uint32_t dq_pos(const struct sw_leap *l, uint32_t k)
{
    uint32_t p = l->dq_first + k;
    return p >= l->sample_count ? p - l->sample_count : p;
}
static inline const int64_t *dq_front(const struct sw_leap *l)
{
    return sw_leap_cslot(l, dq_cmem(l)[l->dq_first]);
}
static inline const int64_t *dq_back(const struct sw_leap *l)
{
    return sw_leap_cslot(l, dq_cmem(l)[dq_pos(l, l->dq_len - 1u)]);
}
/* append slot i, first dropping the entries its min_rt dominates (they leave earlier) */
static void dq_push(struct sw_leap *l, uint32_t i)
{
    int64_t m = sw_leap_cslot(l, i)[SW_SLOT_MIN_RT];
    while (l->dq_len > 0 && dq_back(l)[SW_SLOT_MIN_RT] >= m)
        l->dq_len--;
    dq_mem(l)[dq_pos(l, l->dq_len)] = i;
    l->dq_len++;
}

/* Zero the running totals (atomic stores: see sw_leap_store_). */
static void zero_totals(struct sw_leap *l)
{
    uint64_t *w = sw_leap_totals_(l);
    for (size_t i = 0; i < 2u * (size_t)l->n_events; i++)
        sw_leap_store_u_(&w[i], 0u);
}

void sw_leap_reset(struct sw_leap *l)
{
    sw_leap_store_(&l->newest, SW_LEAP_EMPTY);
    sw_leap_store_(&l->newest_idx, 0);
    sw_leap_store_(&l->head, SW_LEAP_EMPTY);
    l->dq_first = 0;
    l->dq_len = 0;
    for (uint32_t i = 0; i < l->sample_count; i++)
        sw_leap_slot_clear(l, sw_leap_slot(l, i), SW_LEAP_EMPTY);
    zero_totals(l);
    if (l->has_rt)
        memset(dq_mem(l), 0, (size_t)l->sample_count * sizeof(uint32_t));
}

int64_t sw_leap_held_min_rt(const struct sw_leap *l)
{
    return l->has_rt && l->dq_len > 0 ? dq_front(l)[SW_SLOT_MIN_RT] : SW_MIN_RT_INIT;
}

int64_t sw_leap_clamp_slow(struct sw_leap *l, int64_t t)
{
    if (t < 0)
        t = 0;
    int64_t start = sw_leap_start_of(l, t);
    if (l->newest != SW_LEAP_EMPTY) {
        if (start == l->newest)
            return t;
        if (start < l->newest)
            return l->newest;
    }
    sw_leap_store_(&l->newest, start);
    sw_leap_store_(&l->newest_idx, sw_leap_index(l, start));
    return t;
}

/* The window moves from (head - interval, head] to (start - interval, start]: take the
 * buckets that slide out off the totals and the deque. O(1) when every bucket held slides
 * out (the stale slots are not touched: their starts say they no longer count), else one
 * slot per elapsed bucket. */
static void leap_slide(struct sw_leap *l, int64_t start)
{
    if (l->head == SW_LEAP_EMPTY || start - l->head >= l->interval_ms) {
        zero_totals(l);
        l->dq_first = 0;
        l->dq_len = 0;
        return;
    }
    /* the head's bucket stays in the window (it is newer than every bucket that slides
     * out): from now on the totals hold it */
    const int64_t *hs = sw_leap_head_slot_(l);
    if (hs != NULL)
        for (uint32_t e = 0; e < l->n_events; e++)
            sw_leap_total_add_(l, e, hs[SW_SLOT_COUNTS + e]);
    /* bucket s slides out when s + interval starts; both share a slot. Counted in steps
     * (fewer than sample_count: start - head < interval): `s += window_ms` could overflow
     * next to INT64_MAX and never end */
    uint32_t i = sw_leap_index(l, l->head);
    int64_t steps = (start - l->head) / l->window_ms;
    for (int64_t k = 1; k <= steps; k++) {
        int64_t s = l->head + k * l->window_ms; /* <= start: no overflow */
        i = i + 1u == l->sample_count ? 0u : i + 1u;
        const int64_t *slot = sw_leap_cslot(l, i);
        if (slot[SW_SLOT_START] == s - l->interval_ms)
            for (uint32_t e = 0; e < l->n_events; e++)
                sw_leap_total_sub_(l, e, slot[SW_SLOT_COUNTS + e]);
    }
    while (l->dq_len > 0 && dq_front(l)[SW_SLOT_START] <= start - l->interval_ms) {
        l->dq_first = dq_pos(l, 1u);
        l->dq_len--;
    }
}

int64_t *sw_leap_refresh_slow(struct sw_leap *l, const struct sw_leap *future, int64_t t)
{
    int64_t start;
    uint32_t i;
    if (sw_leap_in_newest(l, t)) { /* no division */
        start = l->newest;
        i = (uint32_t)l->newest_idx;
    } else {
        start = sw_leap_start_of(l, t);
        i = sw_leap_index(l, start);
    }
    if (l->head != SW_LEAP_EMPTY && start <= l->head) /* held (t behind it: not clamped) */
        return sw_leap_slot(l, sw_leap_index(l, l->head));
    leap_slide(l, start);
    int64_t *slot = sw_leap_slot(l, i);
    sw_leap_slot_clear(l, slot, start);
    if (sw_test_in_critical != NULL)
        sw_test_in_critical(); /* tests: a process killed here leaves a slot ahead of head */
    sw_leap_store_(&l->head, start);
    if (future != NULL) {
        const int64_t *fs = sw_leap_find(future, start);
        if (fs != NULL)
            slot[SW_SLOT_COUNTS + SW_EV_PASS] = fs[SW_SLOT_COUNTS]; /* the head's: no total */
    }
    if (l->has_rt)
        dq_push(l, i);
    return slot;
}

const int64_t *sw_leap_find(const struct sw_leap *l, int64_t start)
{
    if (start < 0)
        return NULL;
    const int64_t *slot = sw_leap_cslot(l, sw_leap_index(l, start));
    return slot[SW_SLOT_START] == start ? slot : NULL;
}

void sw_leap_add(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t n,
                 int64_t t)
{
    sw_leap_add_at(l, future, ev, n, sw_leap_clamp(l, t));
}

void sw_leap_add_rt(struct sw_leap *l, const struct sw_leap *future, int64_t rt_ms, int64_t t)
{
    t = sw_leap_clamp(l, t);
    int64_t *slot = sw_leap_refresh(l, future, t);
    slot[SW_SLOT_COUNTS + SW_EV_RT] = sw_sat_add(slot[SW_SLOT_COUNTS + SW_EV_RT], rt_ms);
    if (rt_ms < slot[SW_SLOT_MIN_RT]) {
        slot[SW_SLOT_MIN_RT] = rt_ms;
        if (l->has_rt) {
            /* the head's slot is the deque's back: take it out, push it again (checked, so
             * that a ring repaired or read from a region can never pop an empty deque) */
            uint32_t i = (uint32_t)((slot - l->slots) / (ptrdiff_t)l->stride);
            if (l->dq_len > 0 && dq_cmem(l)[dq_pos(l, l->dq_len - 1u)] == i)
                l->dq_len--;
            dq_push(l, i);
        }
    }
}

int64_t sw_leap_sum(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t t)
{
    return sw_leap_sum_at(l, future, ev, sw_leap_clamp(l, t));
}

int64_t sw_leap_sum_at(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t t)
{
    (void)sw_leap_refresh(l, future, t);
    return sw_leap_held_sum(l, ev);
}

int64_t sw_leap_current(struct sw_leap *l, const struct sw_leap *future, uint32_t ev,
                        int64_t t)
{
    t = sw_leap_clamp(l, t);
    return sw_leap_refresh(l, future, t)[SW_SLOT_COUNTS + ev];
}

int64_t sw_leap_previous(struct sw_leap *l, uint32_t ev, int64_t t)
{
    t = sw_leap_clamp(l, t);
    const int64_t *slot = sw_leap_find(l, sw_leap_start_of(l, t) - l->window_ms);
    return slot != NULL ? slot[SW_SLOT_COUNTS + ev] : 0;
}

int64_t sw_leap_min_rt(struct sw_leap *l, const struct sw_leap *future, int64_t t)
{
    t = sw_leap_clamp(l, t);
    (void)sw_leap_refresh(l, future, t);
    int64_t m = sw_leap_held_min_rt(l);
    return m < 1 ? 1 : m;
}

uint32_t sw_leap_buckets(struct sw_leap *l, const struct sw_leap *future, int64_t t,
                         int64_t *out)
{
    t = sw_leap_clamp(l, t);
    (void)sw_leap_refresh(l, future, t);
    int64_t cur = sw_leap_start_of(l, t);
    uint32_t written = 0;
    for (int64_t k = (int64_t)l->sample_count - 1; k >= 0; k--) {
        int64_t start = cur - k * l->window_ms;
        if (start < 0)
            continue;
        int64_t *dst = out + (size_t)written * l->stride;
        const int64_t *slot = sw_leap_find(l, start);
        if (slot != NULL)
            memcpy(dst, slot, (size_t)l->stride * sizeof(int64_t));
        else
            sw_leap_slot_clear(l, dst, start);
        written++;
    }
    return written;
}

/* ---- locked view ---- */

static inline int64_t window_ms_now(int64_t now_ns)
{
    return sw_ms_of_ns(now_ns == SW_NOW ? sw_time_coarse_ns() : now_ns);
}

/* Take a window's lock; rebuild what a process that died holding it may have left. */
static void window_lock(const struct sw_window *w)
{
    if (sw_lock_acquire_as(w->lock, w->token ? sw_token_resolve(w->token) : SW_LOCK_PRIVATE)) {
        if (w->repair != NULL) {
            w->repair(w->repair_ctx);
        } else {
            sw_leap_repair(w->leap);
            if (w->future != NULL)
                sw_leap_repair(w->future);
        }
    }
    if (w->enter != NULL)
        w->enter(w->hot_ctx);
}

static void window_unlock(const struct sw_window *w)
{
    if (w->leave != NULL)
        w->leave(w->hot_ctx);
    sw_lock_release(w->lock);
}

int sw_window_check_repair(const struct sw_window *w)
{
    int got = sw_lock_acquire_or_give_up(w->lock, w->token ? sw_token_resolve(w->token)
                                                           : SW_LOCK_PRIVATE);
    if (got == SW_LOCK_GAVE_UP)
        return SW_EBUSY;
    if (got == SW_LOCK_TOOK_OVER && w->repair != NULL)
        w->repair(w->repair_ctx);
    if (w->enter != NULL)
        w->enter(w->hot_ctx);
    sw_leap_repair(w->leap);
    if (w->future != NULL)
        sw_leap_repair(w->future);
    window_unlock(w);
    return SW_OK;
}

int sw_window_add(const struct sw_window *w, uint32_t ev, int64_t n, int64_t now_ns)
{
    if (ev >= w->leap->n_events)
        return SW_EEVENT;
    if (n < 0)
        return SW_EINVAL;
    window_lock(w);
    sw_leap_add(w->leap, w->future, ev, n, window_ms_now(now_ns));
    window_unlock(w);
    return SW_OK;
}

int sw_window_add_rt(const struct sw_window *w, int64_t rt_ms, int64_t now_ns)
{
    if (!w->leap->has_rt)
        return SW_ENORT;
    if (rt_ms < 0)
        return SW_EINVAL;
    window_lock(w);
    sw_leap_add_rt(w->leap, w->future, rt_ms, window_ms_now(now_ns));
    window_unlock(w);
    return SW_OK;
}

int sw_window_read(const struct sw_window *w, int which, uint32_t ev, int64_t now_ns,
                   int64_t *out)
{
    if (ev >= w->leap->n_events)
        return SW_EEVENT;
    window_lock(w);
    int64_t t = window_ms_now(now_ns);
    switch (which) {
    case SW_READ_CURRENT: *out = sw_leap_current(w->leap, w->future, ev, t); break;
    case SW_READ_PREVIOUS: *out = sw_leap_previous(w->leap, ev, t); break;
    default: *out = sw_leap_sum(w->leap, w->future, ev, t); break;
    }
    window_unlock(w);
    return SW_OK;
}

int sw_window_rt(const struct sw_window *w, int64_t now_ns, int64_t *min_rt, int64_t *rt_sum,
                 int64_t *success)
{
    if (!w->leap->has_rt)
        return SW_ENORT;
    window_lock(w);
    int64_t t = window_ms_now(now_ns);
    int64_t m = sw_leap_min_rt(w->leap, w->future, t);
    if (min_rt != NULL)
        *min_rt = m;
    /* min_rt clamped and refreshed already: the sums see the same window */
    if (rt_sum != NULL)
        *rt_sum = sw_leap_sum(w->leap, w->future, SW_EV_RT, t);
    if (success != NULL)
        *success = sw_leap_sum(w->leap, w->future, SW_EV_SUCCESS, t);
    window_unlock(w);
    return SW_OK;
}

uint32_t sw_window_buckets(const struct sw_window *w, int64_t now_ns, int64_t *out)
{
    window_lock(w);
    uint32_t n = sw_leap_buckets(w->leap, w->future, window_ms_now(now_ns), out);
    window_unlock(w);
    return n;
}

void sw_window_reset(const struct sw_window *w)
{
    window_lock(w);
    sw_leap_reset(w->leap);
    if (w->future != NULL)
        sw_leap_reset(w->future);
    window_unlock(w);
}

bool sw_leap_indices_ok(const struct sw_leap *l)
{
    if (l->sample_count == 0 || l->window_ms <= 0)
        return false;
    /* times are bucket starts in [0, SW_LEAP_T_MAX]: the arithmetic on them (a bucket
     * ahead, a window back) then never overflows */
    if (l->newest != SW_LEAP_EMPTY &&
        (l->newest < 0 || l->newest > SW_LEAP_T_MAX || l->newest % l->window_ms != 0 ||
         l->newest_idx < 0 || l->newest_idx >= (int64_t)l->sample_count))
        return false;
    if (l->head != SW_LEAP_EMPTY &&
        (l->head < 0 || l->head > SW_LEAP_T_MAX || l->head % l->window_ms != 0))
        return false;
    if (l->dq_first >= l->sample_count || l->dq_len > l->sample_count)
        return false;
    if (l->has_rt) {
        const uint32_t *dq = dq_cmem(l);
        for (uint32_t k = 0; k < l->dq_len; k++)
            if (dq[dq_pos(l, k)] >= l->sample_count)
                return false;
    }
    return true;
}

void sw_leap_repair(struct sw_leap *l)
{
    if (!sw_leap_indices_ok(l)) {
        /* indices the core would use as subscripts are off: start the ring afresh */
        sw_leap_reset(l);
        return;
    }
    /* no slot may hold a start after head (a process killed between clearing a slot for a
     * new bucket and moving head, or inside a reset): such slots are cleared, else the
     * refresh's fast path would count into a bucket the totals and the deque never saw */
    for (uint32_t i = 0; i < l->sample_count; i++) {
        int64_t *slot = sw_leap_slot(l, i);
        int64_t st = slot[SW_SLOT_START];
        if (st != SW_LEAP_EMPTY && (l->head == SW_LEAP_EMPTY || st > l->head || st < 0))
            sw_leap_slot_clear(l, slot, SW_LEAP_EMPTY);
        /* no operation stores a count below 0: one read from a region would let a limiter
         * admit that many more than its limit */
        for (uint32_t e = 0; e < l->n_events; e++)
            if (slot[SW_SLOT_COUNTS + e] < 0)
                slot[SW_SLOT_COUNTS + e] = 0;
    }
    if (l->head != SW_LEAP_EMPTY && (l->newest == SW_LEAP_EMPTY || l->newest < l->head))
        sw_leap_store_(&l->newest, l->head); /* head is never ahead of the newest seen */
    if (l->newest != SW_LEAP_EMPTY)
        sw_leap_store_(&l->newest_idx, sw_leap_index(l, l->newest));
    /* rebuild the totals (the head's slot excepted) and the deque from the slots of
     * (head - interval, head] */
    zero_totals(l);
    l->dq_first = 0;
    l->dq_len = 0;
    if (l->head == SW_LEAP_EMPTY)
        return;
    /* the sample_count bucket starts of the window, oldest first (a counted loop: no
     * step can overflow, whatever the head) */
    for (int64_t k = (int64_t)l->sample_count - 1; k >= 0; k--) {
        int64_t s = l->head - k * l->window_ms;
        if (s < 0)
            continue;
        uint32_t i = sw_leap_index(l, s);
        const int64_t *slot = sw_leap_cslot(l, i);
        if (slot[SW_SLOT_START] != s)
            continue;
        if (s != l->head)
            for (uint32_t e = 0; e < l->n_events; e++)
                sw_leap_total_add_(l, e, slot[SW_SLOT_COUNTS + e]);
        if (l->has_rt)
            dq_push(l, i);
    }
}
