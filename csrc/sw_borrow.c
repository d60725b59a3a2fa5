/* sw_borrow.c - passes granted ahead of time (docs/design.md §4). */
#include "sw_borrow.h"

void sw_borrow_cfg(const struct sw_leap_cfg *window, struct sw_leap_cfg *out)
{
    out->interval_ms = window->interval_ms;
    out->sample_count = window->sample_count;
    out->n_events = 1;
    out->has_rt = false;
}

void sw_borrow_add(struct sw_leap *future, int64_t T, int64_t n)
{
    int64_t start = sw_leap_start_of(future, T);
    int64_t *slot = sw_leap_slot(future, sw_leap_index(future, start));
    if (slot[SW_SLOT_START] != start)
        sw_leap_slot_clear(future, slot, start);
    slot[SW_SLOT_COUNTS] = sw_sat_add(slot[SW_SLOT_COUNTS], n);
    if (future->head == SW_LEAP_EMPTY || start > future->head)
        future->head = start;
}

int64_t sw_borrow_waiting(const struct sw_leap *future, int64_t t)
{
    /* Every slot holds a start <= head (the latest grant). The starts in (t, head] are at
     * most sample_count slots: visit those (one when grants go to the next bucket, as the
     * core's callers do); when they span the ring, that is every slot. */
    int64_t head = future->head;
    if (head == SW_LEAP_EMPTY || head <= t)
        return 0;
    int64_t span = t < 0 ? INT64_MAX : (head - sw_leap_start_of(future, t)) / future->window_ms;
    uint32_t k = span >= (int64_t)future->sample_count ? future->sample_count : (uint32_t)span;
    uint32_t i = sw_leap_index(future, head);
    int64_t sum = 0;
    for (uint32_t j = 0; j < k; j++) {
        const int64_t *slot = sw_leap_cslot(future, i);
        if (slot[SW_SLOT_START] != SW_LEAP_EMPTY && slot[SW_SLOT_START] > t)
            sum = sw_sat_add(sum, slot[SW_SLOT_COUNTS]);
        i = i == 0 ? future->sample_count - 1u : i - 1u;
    }
    return sum;
}

bool sw_borrow_try_occupy(struct sw_leap *win, const struct sw_leap *future, int64_t t,
                          int64_t n, double limit, int64_t occupy_timeout_ms,
                          int64_t *grant_ms)
{
    int64_t waiting = sw_borrow_waiting(future, t);
    if ((double)waiting >= limit)
        return false;
    int64_t w = win->window_ms - t % win->window_ms;
    if (w >= occupy_timeout_ms)
        return false;
    int64_t current = sw_leap_sum(win, future, SW_EV_PASS, t);
    int64_t oldest_start =
        sw_leap_start_of(win, t) - (int64_t)(win->sample_count - 1u) * win->window_ms;
    const int64_t *oldest = sw_leap_find(win, oldest_start);
    int64_t oldest_pass = oldest != NULL ? oldest[SW_SLOT_COUNTS + SW_EV_PASS] : 0;
    double need = (double)current + (double)waiting + (double)n - (double)oldest_pass;
    if (need > limit)
        return false;
    *grant_ms = t + w;
    return true;
}
