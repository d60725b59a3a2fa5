/* sw_warmup.h - the warm-up token bucket (Guava SmoothWarmingUp / Sentinel
 * WarmUpController, DESIGN.md §5). Flat state, unlocked: the limiter holds its lock. */
#ifndef SW_WARMUP_H
#define SW_WARMUP_H

#include "sw_common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sw_warmup {
    double q;               /* threshold, per second */
    double cold_factor;     /* > 1 */
    double slope;
    int64_t warning;        /* warning token */
    int64_t max_token;
    int64_t cold_pass;      /* floor(q) // cold_factor: below it, tokens refill above warning */
    int64_t stored;         /* tokens, integers as in Sentinel; a fresh bucket is cold (max) */
    int64_t last_filled_ms; /* last whole second synced, or INT64_MIN before the first sync */
    uint32_t ramp;          /* 0 when max <= warning: no ramp, the rate is q (slidewin rule b) */
    uint32_t pad_;
};

/** Check warm-up parameters. @return SW_OK or SW_EINVAL (q < 0, warm_up_s < 0,
 * cold_factor <= 1, or not finite) */
int sw_warmup_check(double q, double warm_up_s, double cold_factor);
/** Initialise cold. @param w caller-owned state @return SW_OK or SW_EINVAL */
int sw_warmup_init(struct sw_warmup *w, double q, double warm_up_s, double cold_factor);
/** Sync tokens at t (ms) once per whole second, given last second's passes. */
void sw_warmup_sync(struct sw_warmup *w, int64_t t, int64_t previous_pass);
/** The admitted rate per second for the stored tokens (nudged up one ulp); q when below
 * the warning token or without a ramp. Rule (c) is applied by the caller. */
double sw_warmup_rate(const struct sw_warmup *w);

#ifdef __cplusplus
}
#endif
#endif /* SW_WARMUP_H */
