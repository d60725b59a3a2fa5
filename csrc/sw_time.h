/* sw_time.h - the only place the slidewin core reads a clock.
 *
 * Both clocks are CLOCK_MONOTONIC (the clock behind Python's time.monotonic_ns() on Linux):
 * - sw_time_ns():        full resolution (vDSO, about 20-25 ns a read here), used for
 *                        pacing (throttle) and response times;
 * - sw_time_coarse_ns(): CLOCK_MONOTONIC_COARSE, the same clock at tick resolution (4 ms
 *                        here, see sw_time_coarse_resolution_ns()), about 3-5 ns a read,
 *                        used for window math on buckets of hundreds of milliseconds.
 * The coarse clock lags the fine one by less than one tick; the windows clamp times behind
 * their newest bucket, so mixing the two never loses a count.
 */
#ifndef SW_TIME_H
#define SW_TIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Read CLOCK_MONOTONIC. @return nanoseconds (>= 0) */
int64_t sw_time_ns(void);
/** Read CLOCK_MONOTONIC_COARSE (falls back to CLOCK_MONOTONIC where absent).
 * @return nanoseconds (>= 0) */
int64_t sw_time_coarse_ns(void);
/** Resolution of the coarse clock. @return nanoseconds between its ticks */
int64_t sw_time_coarse_resolution_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* SW_TIME_H */
