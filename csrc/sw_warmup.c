/* sw_warmup.c - warm-up tokens (docs/design.md §5). */
#include "sw_warmup.h"

#include <math.h>

int sw_warmup_check(double q, double warm_up_s, double cold_factor)
{
    if (!isfinite(q) || !isfinite(warm_up_s) || !isfinite(cold_factor) || q < 0 ||
        warm_up_s < 0 || !(cold_factor > 1.0))
        return SW_EINVAL;
    if (q * warm_up_s * 2.0 > 9.0e18)
        return SW_EINVAL;
    /* the token counts must fit int64 (a cold factor near 1 makes warning huge): converting
     * an out-of-range double to int64 in sw_warmup_init would be undefined behaviour */
    double warning = floor(floor(warm_up_s * q) / (cold_factor - 1.0));
    if (!(warning + floor(2.0 * warm_up_s * q / (1.0 + cold_factor)) <= 9.0e18))
        return SW_EINVAL;
    return SW_OK;
}

int sw_warmup_init(struct sw_warmup *w, double q, double warm_up_s, double cold_factor)
{
    if (w == NULL || sw_warmup_check(q, warm_up_s, cold_factor) != SW_OK)
        return SW_EINVAL;
    w->q = q;
    w->cold_factor = cold_factor;
    /* warning = floor(W*q) // (cf-1); max = warning + floor(2*W*q/(1+cf)) */
    w->warning = (int64_t)floor(floor(warm_up_s * q) / (cold_factor - 1.0));
    w->max_token = w->warning + (int64_t)floor(2.0 * warm_up_s * q / (1.0 + cold_factor));
    w->ramp = (w->max_token > w->warning && q > 0) ? 1u : 0u;
    w->slope = w->ramp ? (cold_factor - 1.0) / q / (double)(w->max_token - w->warning) : 0.0;
    w->cold_pass = (int64_t)floor(floor(q) / cold_factor);
    w->pad_ = 0;
    return SW_OK;
}

void sw_warm_state_init(struct sw_warm_state *s)
{
    s->stored = SW_WARM_FRESH;
    s->last_filled_ms = INT64_MIN;
    s->paid_until_ms = INT64_MIN;
}

void sw_warmup_sync(const struct sw_warmup *w, struct sw_warm_state *s, int64_t t,
                    int64_t previous_pass, bool busy)
{
    int64_t now = t - t % 1000;
    if (s->stored == SW_WARM_FRESH || s->stored < 0)
        s->stored = w->max_token; /* fresh (or repaired): cold */
    if (s->last_filled_ms != INT64_MIN && now <= s->last_filled_ms)
        return;
    /* saturating: a region's stored time is input (a crafted one may be far in the past) */
    int64_t elapsed = s->last_filled_ms == INT64_MIN ? 0 : sw_sat_sub(now, s->last_filled_ms);
    int64_t old = s->stored, v = old;
    bool refill = old < w->warning ||
                  (old > w->warning && previous_pass < w->cold_pass && !busy);
    if (refill) {
        double nv = (double)old + (double)elapsed * w->q / 1000.0;
        v = nv >= (double)w->max_token ? w->max_token : (int64_t)nv;
    }
    if (v > w->max_token)
        v = w->max_token;
    v = sw_sat_sub(v, previous_pass < 0 ? 0 : previous_pass);
    s->stored = v < 0 ? 0 : v;
    s->last_filled_ms = now;
}

double sw_warmup_rate(const struct sw_warmup *w, const struct sw_warm_state *s)
{
    int64_t stored = s->stored == SW_WARM_FRESH ? w->max_token : s->stored;
    if (w->ramp && stored >= w->warning) {
        double above = (double)(stored - w->warning);
        return nextafter(1.0 / (above * w->slope + 1.0 / w->q), INFINITY);
    }
    return w->q;
}
