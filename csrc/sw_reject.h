/* sw_reject.h - the reject controller (Sentinel DefaultController, docs/design.md §5):
 * pass iff current + n <= L. Unlocked helpers: the limiter holds its lock. */
#ifndef SW_REJECT_H
#define SW_REJECT_H

#include "sw_leap.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Whether n more fit under the limit. @param current the count now @param limit L */
static inline bool sw_reject_fits(int64_t current, int64_t n, double limit)
{
    return (double)current + (double)n <= limit;
}

/** Milliseconds from t until enough passes slide out of the window for n more to fit.
 * @param win the window (already refreshed at the clamped t)
 * @param t clamped time, ms
 * @param n request size @param limit L
 * @return ms after t (>= 0), or -1 when no amount of sliding makes room (n > L) */
int64_t sw_reject_retry_ms(const struct sw_leap *win, int64_t t, int64_t n, double limit);

#ifdef __cplusplus
}
#endif
#endif /* SW_REJECT_H */
