/* sw_throttle.h - the leaky bucket that paces (Sentinel ThrottlingController, docs/design.md §5).
 * Nanosecond pacing; a reservation returns the wait instead of sleeping. Flat state,
 * unlocked: the limiter holds its lock. */
#ifndef SW_THROTTLE_H
#define SW_THROTTLE_H

#include "sw_common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sw_throttle {
    int64_t last_ns;   /* time of the latest admitted request (never moves backwards) */
    uint32_t has_last; /* 0 for a fresh throttle: its first request passes at once */
    uint32_t saturated; /* last_ns hit INT64_MAX: the queue ends there, nothing fits behind */
};

/** Initialise a fresh throttle. */
void sw_throttle_init(struct sw_throttle *th);
/** Cost of n requests at `rate` per second: round(1e9 * n / rate) ns, half up, at least 1,
 * saturated.
 * @return ns, or INT64_MAX when rate <= 0 */
int64_t sw_throttle_cost(double rate, int64_t n);
/** Reserve a slot (docs/design.md §5).
 * @param cost_ns the request's cost
 * @param now_ns the time of the decision
 * @param max_queue_ns the longest wait admitted (a wait equal to it passes)
 * @param try_only admit only when the wait is 0 (a refusal moves nothing)
 * @param wait_ns receives the wait of an admitted request
 * @param retry_ns receives, on refusal, the ns after which the same request would be admitted
 * @return true when admitted. At the end of the int64 clock (a caller-supplied now_ns near
 * INT64_MAX) the schedule cannot extend past INT64_MAX: the request whose slot reaches it is
 * admitted with its full wait, the ones queued behind it are refused (retry_ns -1) instead of
 * all sharing one saturated slot. */
bool sw_throttle_reserve(struct sw_throttle *th, int64_t cost_ns, int64_t now_ns,
                         int64_t max_queue_ns, bool try_only, int64_t *wait_ns,
                         int64_t *retry_ns);

#ifdef __cplusplus
}
#endif
#endif /* SW_THROTTLE_H */
