/* sw_reject.c - when a refused request could pass (BlockedError.retry_after). */
#include "sw_reject.h"

int64_t sw_reject_retry_ms(const struct sw_leap *win, int64_t t, int64_t n, double limit)
{
    if ((double)n > limit)
        return -1;
    int64_t cur = sw_leap_start_of(win, t);
    int64_t total = sw_leap_held_sum(win, SW_EV_PASS); /* the window was refreshed at t */
    /* buckets slide out oldest first; after bucket `start` leaves (at start + interval),
     * the passes still in the window are total - (passes of it and all older ones) */
    int64_t gone = 0;
    for (int64_t k = (int64_t)win->sample_count - 1; k >= 0; k--) {
        int64_t start = cur - k * win->window_ms;
        const int64_t *slot = sw_leap_find(win, start);
        if (slot != NULL)
            gone = sw_sat_add(gone, slot[SW_SLOT_COUNTS + SW_EV_PASS]);
        if (sw_reject_fits(total - gone, n, limit)) {
            int64_t at = start + win->interval_ms - t;
            return at < 0 ? 0 : at;
        }
    }
    return -1;
}
