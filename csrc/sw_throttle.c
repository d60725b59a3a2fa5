/* sw_throttle.c - nanosecond pacing with a maximum queueing time (docs/design.md §5). */
#include "sw_throttle.h"

#include <math.h>

void sw_throttle_init(struct sw_throttle *th)
{
    th->last_ns = 0;
    th->has_last = 0;
    th->saturated = 0;
}

int64_t sw_throttle_cost(double rate, int64_t n)
{
    if (!(rate > 0))
        return INT64_MAX;
    double c = floor(1e9 * (double)n / rate + 0.5);
    if (!(c < 9.2e18))
        return INT64_MAX;
    /* at least 1 ns: a cost of 0 (a rate above 2e9 a second) would admit without end at
     * one instant; the clock paces one request a nanosecond at most */
    return c < 1.0 ? 1 : (int64_t)c;
}

bool sw_throttle_reserve(struct sw_throttle *th, int64_t cost_ns, int64_t now_ns,
                         int64_t max_queue_ns, bool try_only, int64_t *wait_ns,
                         int64_t *retry_ns)
{
    *wait_ns = 0;
    *retry_ns = -1;
    /* compare through differences: `last + cost` saturates near INT64_MAX, which would
     * shrink the wait there to INT64_MAX - now (admitting requests far too early) */
    if (!th->has_last || sw_sat_sub(now_ns, th->last_ns) >= cost_ns) {
        /* idle long enough: go now; last only moves forward (last + cost <= now) */
        th->last_ns = now_ns;
        th->has_last = 1;
        th->saturated = 0;
        return true;
    }
    if (th->saturated) {
        /* the queue reaches INT64_MAX: a slot behind it is not representable. Admitting
         * here would hand every caller the same saturated slot (unlimited admits). */
        return false;
    }
    int64_t wait = sw_sat_add(sw_sat_sub(th->last_ns, now_ns), cost_ns);
    if (try_only) {
        *retry_ns = wait;
        return false;
    }
    if (wait > max_queue_ns) {
        *retry_ns = sw_sat_sub(wait, max_queue_ns);
        return false;
    }
    if (__builtin_add_overflow(th->last_ns, cost_ns, &th->last_ns)) {
        th->last_ns = INT64_MAX;
        th->saturated = 1;
    }
    *wait_ns = wait;
    return true;
}
