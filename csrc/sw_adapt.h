/* sw_adapt.h - the adaptive concurrency controller: a limit learned from the window
 * (docs/adaptive.md, "The two algorithms").
 *
 * A concurrency limiter whose limit is not a setting but state: it follows the measured
 * completions and response times. Two algorithms:
 * - "bbr" (Sentinel's system rule, go-kratos/aegis BBR, with TCP BBR's probes): at each
 *   bucket boundary, bound = max over the window's completed buckets of completions per
 *   second x RTprop (a bucket that follows one without completions is partial and left
 *   out; no bucket left: initial_limit); RTprop = min over them of the bucket's mean RT,
 *   taken down by how far the window's fastest RT ran over 1.1 x the drained fastest RT
 *   (the last probe's). A probe (TCP BBR's ProbeRTT, BBRv2's pin at half the bound) drains
 *   the queue: the limit is pinned at bound / 2, completions of requests admitted before it
 *   are ignored, and after max(10, 2 x pin) samples their fastest RT is the drained one;
 *   probes run only while the limiter refuses: one window after the cold start, every 10 s
 *   (+0-15 %), when the window's fastest RT exceeds 1.5 x the drained one (or the last
 *   buckets' 4 x), and at once after a probe that found under half the fastest RT it
 *   re-measured. Gain cycle: one bucket in 8 at 1.25 x the bound, and every bucket after a
 *   probing bucket that raised the max by 10 %. Admit while in flight <= bound (limit =
 *   floor(bound x gain) + 1), only while the trigger holds (CPU use at or above
 *   cpu_threshold, then 1 s of cool-off after the last refusal; always when there is no
 *   threshold), and, without a threshold, only on evidence of queueing: the fastest RT of
 *   the last buckets (>= 2, >= 20 completions) above 1.25 x the drained one + 1 ms, held
 *   1 s. The FASTEST RT is the signal: a queue delays every call, the fastest too, while
 *   RTs that do not grow with the calls in flight leave it where it was, however they
 *   spread (bimodal, rare outliers). Without evidence the limit in force stays (at least
 *   the bound): x1.1 + 1 per drained RT (a bucket at most) while refusing, x0.75 a bucket
 *   while in flight stays under half of it.
 * - "gradient" (Netflix concurrency-limits' Gradient2 update, anchored as Envoy's adaptive
 *   concurrency filter anchors it): once per update window (>= one bucket, >= 2 baseline
 *   RTs, >= 10 samples, or two rounds of a limit under 5) g = clamp(tolerance x baseline /
 *   fastest RT, 0.5, 2), over the calls admitted in the window; g >= 1: L' = L g + sqrt(L g)
 *   when the window used at least half of L (else L stays); g < 1: L' = L g. The baseline is
 *   the fastest RT of a drained probe: the limit is pinned low (2; an eighth of the limit
 *   while the last window's queue was mild), completions of requests
 *   admitted before the pin are ignored, and after 20 samples the limit comes back. Probes
 *   run at cold start and every 30 s (+0-15 %), but only while the limiter refuses (demand
 *   above the limit): a healthy backend with fewer callers than its capacity is never
 *   probed, so never refused. A window is a new baseline without a probe when it ran at
 *   min_limit (drained), and when the update before it cut the limit by 40 % or more and
 *   its fastest RT is still within 3 % of the one before the cut (RT that does not fall
 *   with the calls in flight is a slower backend, not a queue); both put the next probe
 *   30 s off.
 *
 * The state is 48 bytes inside the node (struct sw_node), so it is shared with the node's
 * windows (shared= regions) and zero in a fresh node. It is input like the rest of a region:
 * every use first puts a damaged state right (sw_adapt_sanitize). Calls are unlocked: the
 * owner (a limiter) holds its lock. Time is a parameter (ms on the monotonic clock).
 */
#ifndef SW_ADAPT_H
#define SW_ADAPT_H

#include "sw_leap.h"

#ifdef __cplusplus
extern "C" {
#endif

enum sw_adapt_algo { SW_ADAPT_NONE = 0, SW_ADAPT_BBR = 1, SW_ADAPT_GRADIENT = 2 };

#define SW_ADAPT_MAX_LIMIT 1000000u /* the largest max_limit */
#define SW_ADAPT_NO_CPU (-1)       /* cpu_threshold: none (the trigger always holds) */

/* The settings (per process, in the limiter's rule). */
struct sw_adapt_cfg {
    uint32_t algo;          /* enum sw_adapt_algo; NONE: a plain limiter */
    uint32_t min_limit;     /* 1 <= min_limit <= initial_limit <= max_limit <= MAX_LIMIT */
    uint32_t max_limit;
    uint32_t initial_limit;
    int32_t cpu_threshold;  /* bbr's trigger, permille in [0, 1000], or SW_ADAPT_NO_CPU */
    uint32_t pad_;
};

/* The learned state (in the node; 48 bytes, zero when fresh). */
enum { SW_ADAPT_FRESH = 0, SW_ADAPT_RUNNING = 1, SW_ADAPT_PROBING = 2 };
#define SW_ADAPT_BUSY 4u     /* flags: in flight reached half the limit in this window */
#define SW_ADAPT_REFUSED 8u  /* flags: a request was refused in this window */
#define SW_ADAPT_PHASE 3u    /* flags: the phase */
struct sw_adapt_state {
    int64_t next_ms;     /* when the limit is next computed (sw_adapt_due) */
    int64_t mark_ms;     /* gradient: start of the sample window, or of the probe (its
                            epoch): completions of calls admitted before it are ignored; bbr: the last refusal while triggered (cool-off; with
                            a cpu_threshold), the last queued update (without), or
                            INT64_MIN */
    int64_t probe_ms;    /* when a probe is next due; bbr while probing: its epoch */
    int64_t rt_sum_us;   /* the fastest RT of the window's (probe's) samples, us (bbr: the
                            probe's); valid when samples > 0 */
    float limit;         /* the limit in force (an integer value) */
    float base_us;       /* gradient: the baseline (drained fastest) RT, us (0: not
                            measured); while probing, the limit to restore. bbr: the last
                            probe's fastest RT, us (0: none yet); while probing, the
                            estimate it re-measures */
    uint32_t samples;    /* completions sampled in the window (probe); bbr while running:
                            the window's max completions at the last update */
    uint16_t cpu;        /* the latest CPU use, permille (bbr's trigger) */
    uint8_t flags;       /* phase | SW_ADAPT_BUSY | SW_ADAPT_REFUSED */
    uint8_t floors;      /* gradient: after an update that cut the limit by SW_ADAPT_CUT or
                            more, 1 + 16 x log2(its window's fastest RT / base_us), else 0;
                            bbr: 1 after a bucket at the probing gain */
};

/* the constants (gradient's, and bbr's SW_ADAPT_BBR_*) */
#define SW_ADAPT_TOLERANCE 1.25       /* RT up to 25 % above the baseline is not queueing */
#define SW_ADAPT_MIN_SAMPLES 10u      /* completions per update */
#define SW_ADAPT_PROBE_SAMPLES 20u    /* completions per probe (bbr: at least) */
#define SW_ADAPT_PROBE_PIN 2u         /* the probe's limit (at least min_limit) */
#define SW_ADAPT_PROBE_EVERY_MS 30000 /* between probes, plus 0-15 % */
#define SW_ADAPT_PROBE_GIVE_UP_MS 10000 /* a probe without enough samples ends after this */
#define SW_ADAPT_CUT 0.6              /* gradient: an update whose gradient is this or less
                                         cut the limit: the next window checks it sped up */
#define SW_ADAPT_SHIFT 0.97           /* gradient: after a cut, a fastest RT at least this x
                                         the one before is no queue: the new baseline */
#define SW_ADAPT_COOL_OFF_MS 1000     /* bbr: the trigger holds this long after a refusal
                                         (cpu_threshold), the evidence of queueing this long
                                         after the last queued bucket (without) */
#define SW_ADAPT_BBR_CYCLE 8          /* bbr: buckets in a gain cycle (TCP BBR's) */
#define SW_ADAPT_BBR_UP 1.25          /* bbr: the probing bucket's gain */
#define SW_ADAPT_BBR_TOLERANCE 1.1    /* bbr: RTprop at most this x the probe's mean RT */
#define SW_ADAPT_BBR_GREW 1.1         /* bbr: a probing bucket that raised the max this much
                                         is followed by another */
#define SW_ADAPT_BBR_PROBE_EVERY_MS 10000 /* bbr: RTprop re-measured after this (TCP BBR's
                                             10 s), plus 0-15 %, while refusing */
#define SW_ADAPT_BBR_PROBE_GAIN 0.5   /* bbr: a probe pins the limit to this x the bound */
#define SW_ADAPT_BBR_QUEUED 1.5       /* bbr: a window whose min mean RT is this x RTprop
                                         calls for a probe (while refusing) */
#define SW_ADAPT_BBR_SLOWER 4.0       /* bbr: the last buckets' fastest RT this x RTprop
                                         calls for a probe at once (a slower backend: a queue
                                         the limit allows rarely inflates it this much) */
#define SW_ADAPT_BBR_QUEUE_RT 1.25    /* bbr: the last buckets' mean RT above this x the
                                         drained RT is queueing: the bound is enforced */
#define SW_ADAPT_BBR_EVIDENCE 2       /* bbr: the last buckets (at least; and at least
                                         SW_ADAPT_MIN_SAMPLES completions) whose fastest RT
                                         is the evidence */
#define SW_ADAPT_BBR_EVIDENCE_SAMPLES 20u /* bbr: the completions (at least) whose fastest RT
                                         is the evidence: the min of fewer is noisy */
#define SW_ADAPT_RT_SLACK_MS 1.0      /* bbr: the evidence's margin for the buckets' whole-ms
                                         min RT */
#define SW_ADAPT_BBR_GROW 1.1        /* bbr without queueing: the limit grows by this a
                                         bucket while callers are refused */
#define SW_ADAPT_BBR_SHRINK 0.75      /* bbr without queueing: the limit shrinks by this a
                                         bucket while in flight stays under half of it */
#define SW_ADAPT_BBR_DEEPER 0.5       /* bbr: a probe that found the fastest RT below this x the
                                         estimate calls for another at once */

/** Check settings. @param param set to the offending parameter's name on SW_EINVAL
 * ("algorithm", "min_limit", "max_limit", "initial_limit", "cpu_threshold")
 * @return SW_OK or SW_EINVAL */
int sw_adapt_check(const struct sw_adapt_cfg *cfg, const char **param);

/** Put a state read from shared memory right (a limit outside the bounds or not finite, an
 * unknown phase, negative sums): never a crash or a limit outside [min_limit, max_limit]. */
void sw_adapt_sanitize(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s);

/** Whether a state whose update is `ahead` ms away (more than one bucket) is damaged: no
 * update schedules that far (bbr: one bucket; gradient: a probe's give-up time, or a
 * window of one bucket and two baseline RTs). */
bool sw_adapt_too_far(const struct sw_adapt_cfg *cfg, const struct sw_adapt_state *s,
                      const struct sw_leap *sec, uint64_t ahead);

/** Whether the limit must be computed again before a decision at t (ms): fresh, due, or
 * damaged (a limit not finite or outside [1, SW_ADAPT_MAX_LIMIT], an update further ahead
 * than any update schedules). The update repairs a damaged state (sw_adapt_sanitize). */
static inline bool sw_adapt_due(const struct sw_adapt_cfg *cfg, const struct sw_adapt_state *s,
                                const struct sw_leap *sec, int64_t t)
{
    float l = s->limit;
    if ((s->flags & SW_ADAPT_PHASE) == SW_ADAPT_FRESH || t >= s->next_ms ||
        !(l >= 1.0f && l <= (float)SW_ADAPT_MAX_LIMIT))
        return true;
    uint64_t ahead = (uint64_t)s->next_ms - (uint64_t)t; /* > 0, exact */
    return ahead > (uint64_t)sec->window_ms && sw_adapt_too_far(cfg, s, sec, ahead);
}

/** The limit in force for a rule with these settings (after sw_adapt_update when due): at
 * most this many in flight. The state may have been learned under other bounds (another
 * process on a shared region, or before update()): each decision clamps it to its own. */
static inline double sw_adapt_cap(const struct sw_adapt_cfg *cfg, const struct sw_adapt_state *s)
{
    double l = (double)s->limit;
    if (!(l >= (double)cfg->min_limit)) /* NaN too (sw_adapt_due repairs it first) */
        l = (double)cfg->min_limit;
    if (l > (double)cfg->max_limit)
        l = (double)cfg->max_limit;
    return l;
}

/** Compute the limit at t (ms, clamped on the window `sec`), lock held: a fresh state starts
 * at initial_limit; bbr reads the window's completed buckets; gradient updates from its
 * samples, starts or ends a probe. */
void sw_adapt_update(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s,
                     struct sw_leap *sec, int64_t t);

/** After an admission: `in_flight` requests are in flight now (the admitted included). */
static inline void sw_adapt_admitted(struct sw_adapt_state *s, int64_t in_flight)
{
    if ((double)in_flight * 2.0 >= (double)s->limit)
        s->flags = (uint8_t)(s->flags | SW_ADAPT_BUSY);
}

/** After a refusal at t (ms). */
void sw_adapt_refused(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s, int64_t t);

/** A completion at t (ms) after rt_ns: gradient's sample (ignored while probing when the
 * request was admitted before the probe began); may end a probe. `sec`: the window. */
void sw_adapt_sample(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s,
                     const struct sw_leap *sec, int64_t rt_ns, int64_t t);

/** Record the CPU use (permille, clamped to [0, 1000]) that bbr's trigger compares. */
void sw_adapt_set_cpu(struct sw_adapt_state *s, int64_t permille);

#ifdef __cplusplus
}
#endif
#endif /* SW_ADAPT_H */
