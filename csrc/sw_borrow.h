/* sw_borrow.h - the borrow ("future") ring of a borrowable window (docs/design.md §4).
 *
 * A future ring is a `struct sw_leap` of the same shape as its window with one event (the
 * passes granted ahead of time). A future bucket is valid only while its start is strictly
 * after now. Calls are unlocked: the owner of the window holds its lock.
 */
#ifndef SW_BORROW_H
#define SW_BORROW_H

#include "sw_leap.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Configuration of the future ring that goes with a window configuration.
 * @param window the window's configuration
 * @param out the future ring's configuration */
void sw_borrow_cfg(const struct sw_leap_cfg *window, struct sw_leap_cfg *out);

/** Grant n passes ahead for time T (ms >= 0): the future bucket of T gets PASS += n. */
void sw_borrow_add(struct sw_leap *future, int64_t T, int64_t n);

/** Passes granted ahead and not yet current at t: PASS over future buckets with start > t.
 * Visits only the slots of the starts in (t, latest grant]: O(1) when grants go at most
 * one bucket ahead of t (every caller in the core), never more than sample_count slots. */
int64_t sw_borrow_waiting(const struct sw_leap *future, int64_t t);

/** Try to occupy the next bucket for a prioritized request (docs/design.md §4).
 * @param win the window (lock held); @param future its borrow ring
 * @param t clamped time in ms; @param n the request size; @param limit the window's limit L
 * @param occupy_timeout_ms the longest wait allowed
 * @param grant_ms receives the start of the bucket the grant is for (valid when true)
 * @return true when granted (the caller then counts OCCUPIED_PASS and the future PASS) */
bool sw_borrow_try_occupy(struct sw_leap *win, const struct sw_leap *future, int64_t t,
                          int64_t n, double limit, int64_t occupy_timeout_ms,
                          int64_t *grant_ms);

#ifdef __cplusplus
}
#endif
#endif /* SW_BORROW_H */
