/* sw_warmup.h - the warm-up token bucket (Guava SmoothWarmingUp / Sentinel
 * WarmUpController, docs/design.md §5). Flat state, unlocked: the limiter holds its lock. */
#ifndef SW_WARMUP_H
#define SW_WARMUP_H

#include "sw_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The settings (per process: processes sharing one state may differ). */
struct sw_warmup {
    double q;               /* threshold, per second */
    double cold_factor;     /* > 1 */
    double slope;
    int64_t warning;        /* warning token */
    int64_t max_token;
    int64_t cold_pass;      /* floor(q) // cold_factor: below it, tokens refill above warning */
    uint32_t ramp;          /* 0 when max <= warning: no ramp, the rate is q (slidewin rule b) */
    uint32_t pad_;
};

/* The state (flat, may be shared by processes). */
struct sw_warm_state {
    int64_t stored;         /* tokens, integers as in Sentinel; SW_WARM_FRESH: cold (max) */
    int64_t last_filled_ms; /* last whole second synced, or INT64_MIN before the first sync */
    int64_t paid_until_ms;  /* an oversize request admitted into an empty window is paid
                               back: nothing passes before this time (INT64_MIN: no debt) */
};
#define SW_WARM_FRESH INT64_MIN

/** Check warm-up parameters. @return SW_OK or SW_EINVAL (q < 0, warm_up_s < 0,
 * cold_factor <= 1, or not finite) */
int sw_warmup_check(double q, double warm_up_s, double cold_factor);
/** Derive the settings. @param w caller-owned @return SW_OK or SW_EINVAL */
int sw_warmup_init(struct sw_warmup *w, double q, double warm_up_s, double cold_factor);
/** A fresh state: cold (its first sync stores the settings' max token). */
void sw_warm_state_init(struct sw_warm_state *s);
/** Sync tokens at t (ms) once per whole second, given last second's passes.
 * @param busy the limiter was paying back an oversize request during the last second: it
 *        was used at its admitted rate, so tokens above the warning level are not refilled
 *        (as after a second of passes at or above q / cold_factor) */
void sw_warmup_sync(const struct sw_warmup *w, struct sw_warm_state *s, int64_t t,
                    int64_t previous_pass, bool busy);
/** The admitted rate per second for the stored tokens (nudged up one ulp); q when below
 * the warning token or without a ramp. Rule (c) is applied by the caller. */
double sw_warmup_rate(const struct sw_warmup *w, const struct sw_warm_state *s);

#ifdef __cplusplus
}
#endif
#endif /* SW_WARMUP_H */
