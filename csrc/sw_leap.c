/* sw_leap.c - leap array and metric buckets (DESIGN.md §2-3). */
#include "sw_leap.h"

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
    return sizeof(struct sw_leap) +
           (size_t)cfg->sample_count * (2u + (size_t)cfg->n_events) * sizeof(int64_t);
}

static void slot_clear(struct sw_leap *l, int64_t *slot, int64_t start)
{
    slot[SW_SLOT_START] = start;
    slot[SW_SLOT_MIN_RT] = SW_MIN_RT_INIT;
    memset(slot + SW_SLOT_COUNTS, 0, (size_t)l->n_events * sizeof(int64_t));
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

void sw_leap_reset(struct sw_leap *l)
{
    l->newest = SW_LEAP_EMPTY;
    l->newest_idx = 0;
    for (uint32_t i = 0; i < l->sample_count; i++)
        slot_clear(l, sw_leap_slot(l, i), SW_LEAP_EMPTY);
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
    l->newest = start;
    l->newest_idx = (start / l->window_ms) % (int64_t)l->sample_count;
    return t;
}

static inline uint32_t slot_index(const struct sw_leap *l, int64_t start)
{
    return (uint32_t)((start / l->window_ms) % (int64_t)l->sample_count);
}

int64_t *sw_leap_refresh_slow(struct sw_leap *l, const struct sw_leap *future, int64_t t)
{
    int64_t start;
    int64_t *slot;
    if (l->newest != SW_LEAP_EMPTY && t >= l->newest && t - l->newest < l->window_ms) {
        /* fast path: the newest bucket, no division */
        start = l->newest;
        slot = sw_leap_slot(l, (uint32_t)l->newest_idx);
    } else {
        start = sw_leap_start_of(l, t);
        slot = sw_leap_slot(l, slot_index(l, start));
    }
    if (slot[SW_SLOT_START] != start) {
        slot_clear(l, slot, start);
        if (future != NULL) {
            const int64_t *fs = sw_leap_find(future, start);
            if (fs != NULL)
                slot[SW_SLOT_COUNTS + SW_EV_PASS] = fs[SW_SLOT_COUNTS];
        }
    }
    return slot;
}

const int64_t *sw_leap_find(const struct sw_leap *l, int64_t start)
{
    if (start < 0)
        return NULL;
    const int64_t *slot = sw_leap_cslot(l, slot_index(l, start));
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
    if (rt_ms < slot[SW_SLOT_MIN_RT])
        slot[SW_SLOT_MIN_RT] = rt_ms;
}

int64_t sw_leap_sum(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t t)
{
    return sw_leap_sum_at(l, future, ev, sw_leap_clamp(l, t));
}

int64_t sw_leap_sum_at(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t t)
{
    (void)sw_leap_refresh(l, future, t);
    int64_t sum = 0;
    for (uint32_t i = 0; i < l->sample_count; i++) {
        const int64_t *slot = sw_leap_cslot(l, i);
        if (sw_leap_valid(l, slot, t))
            sum = sw_sat_add(sum, slot[SW_SLOT_COUNTS + ev]);
    }
    return sum;
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
    int64_t m = SW_MIN_RT_INIT;
    for (uint32_t i = 0; i < l->sample_count; i++) {
        const int64_t *slot = sw_leap_cslot(l, i);
        if (sw_leap_valid(l, slot, t) && slot[SW_SLOT_MIN_RT] < m)
            m = slot[SW_SLOT_MIN_RT];
    }
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
        if (slot != NULL) {
            memcpy(dst, slot, (size_t)l->stride * sizeof(int64_t));
        } else {
            dst[SW_SLOT_START] = start;
            dst[SW_SLOT_MIN_RT] = SW_MIN_RT_INIT;
            memset(dst + SW_SLOT_COUNTS, 0, (size_t)l->n_events * sizeof(int64_t));
        }
        written++;
    }
    return written;
}

/* ---- locked view ---- */

static inline int64_t window_ms_now(int64_t now_ns)
{
    return sw_ms_of_ns(now_ns == SW_NOW ? sw_time_coarse_ns() : now_ns);
}

int sw_window_add(const struct sw_window *w, uint32_t ev, int64_t n, int64_t now_ns)
{
    if (ev >= w->leap->n_events)
        return SW_EEVENT;
    if (n < 0)
        return SW_EINVAL;
    sw_lock_acquire(w->lock);
    sw_leap_add(w->leap, w->future, ev, n, window_ms_now(now_ns));
    sw_lock_release(w->lock);
    return SW_OK;
}

int sw_window_add_rt(const struct sw_window *w, int64_t rt_ms, int64_t now_ns)
{
    if (!w->leap->has_rt)
        return SW_ENORT;
    if (rt_ms < 0)
        return SW_EINVAL;
    sw_lock_acquire(w->lock);
    sw_leap_add_rt(w->leap, w->future, rt_ms, window_ms_now(now_ns));
    sw_lock_release(w->lock);
    return SW_OK;
}

int sw_window_read(const struct sw_window *w, int which, uint32_t ev, int64_t now_ns,
                   int64_t *out)
{
    if (ev >= w->leap->n_events)
        return SW_EEVENT;
    sw_lock_acquire(w->lock);
    int64_t t = window_ms_now(now_ns);
    switch (which) {
    case SW_READ_CURRENT: *out = sw_leap_current(w->leap, w->future, ev, t); break;
    case SW_READ_PREVIOUS: *out = sw_leap_previous(w->leap, ev, t); break;
    default: *out = sw_leap_sum(w->leap, w->future, ev, t); break;
    }
    sw_lock_release(w->lock);
    return SW_OK;
}

int sw_window_rt(const struct sw_window *w, int64_t now_ns, int64_t *min_rt, int64_t *rt_sum,
                 int64_t *success)
{
    if (!w->leap->has_rt)
        return SW_ENORT;
    sw_lock_acquire(w->lock);
    int64_t t = window_ms_now(now_ns);
    int64_t m = sw_leap_min_rt(w->leap, w->future, t);
    if (min_rt != NULL)
        *min_rt = m;
    /* min_rt clamped and refreshed already: the sums see the same window */
    if (rt_sum != NULL)
        *rt_sum = sw_leap_sum(w->leap, w->future, SW_EV_RT, t);
    if (success != NULL)
        *success = sw_leap_sum(w->leap, w->future, SW_EV_SUCCESS, t);
    sw_lock_release(w->lock);
    return SW_OK;
}

uint32_t sw_window_buckets(const struct sw_window *w, int64_t now_ns, int64_t *out)
{
    sw_lock_acquire(w->lock);
    uint32_t n = sw_leap_buckets(w->leap, w->future, window_ms_now(now_ns), out);
    sw_lock_release(w->lock);
    return n;
}

void sw_window_reset(const struct sw_window *w)
{
    sw_lock_acquire(w->lock);
    sw_leap_reset(w->leap);
    if (w->future != NULL)
        sw_leap_reset(w->future);
    sw_lock_release(w->lock);
}
