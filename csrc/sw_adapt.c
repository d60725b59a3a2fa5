/* sw_adapt.c - the adaptive concurrency controller (sw_adapt.h, docs/adaptive.md). */
#include "sw_adapt.h"

#include <math.h>

_Static_assert(sizeof(struct sw_adapt_state) == 48, "the adaptive state is 48 bytes");

int sw_adapt_check(const struct sw_adapt_cfg *cfg, const char **param)
{
    const char *p = NULL;
    if (cfg->algo != SW_ADAPT_BBR && cfg->algo != SW_ADAPT_GRADIENT)
        p = "algorithm";
    else if (cfg->min_limit < 1 || cfg->min_limit > SW_ADAPT_MAX_LIMIT)
        p = "min_limit";
    else if (cfg->max_limit < 1 || cfg->max_limit > SW_ADAPT_MAX_LIMIT ||
             cfg->max_limit < cfg->min_limit)
        p = "max_limit";
    else if (cfg->initial_limit < cfg->min_limit || cfg->initial_limit > cfg->max_limit)
        p = "initial_limit";
    else if (cfg->cpu_threshold != SW_ADAPT_NO_CPU &&
             (cfg->cpu_threshold < 0 || cfg->cpu_threshold > 1000))
        p = "cpu_threshold";
    if (param != NULL)
        *param = p;
    return p == NULL ? SW_OK : SW_EINVAL;
}

static double clampd(double x, double lo, double hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

static unsigned phase_of(const struct sw_adapt_state *s)
{
    return s->flags & SW_ADAPT_PHASE;
}

static void set_phase(struct sw_adapt_state *s, unsigned phase)
{
    s->flags = (uint8_t)((s->flags & ~SW_ADAPT_PHASE) | phase);
}

/* A whole limit in [min_limit, max_limit]. */
static float bounded(const struct sw_adapt_cfg *cfg, double x)
{
    if (!(x == x)) /* NaN */
        x = cfg->initial_limit;
    return (float)floor(clampd(x, cfg->min_limit, cfg->max_limit));
}

void sw_adapt_sanitize(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s)
{
    unsigned phase = phase_of(s);
    if (phase > SW_ADAPT_PROBING ||
        (phase == SW_ADAPT_PROBING && cfg->algo != SW_ADAPT_GRADIENT && cfg->algo != SW_ADAPT_BBR))
        s->flags = SW_ADAPT_FRESH;
    if (phase_of(s) == SW_ADAPT_FRESH)
        return;
    double l = (double)s->limit;
    if (!(l >= cfg->min_limit && l <= cfg->max_limit && l == floor(l)))
        s->limit = bounded(cfg, l);
    if (!(s->base_us >= 0.0f && isfinite(s->base_us)))
        s->base_us = 0.0f;
    if (s->rt_sum_us < 0)
        s->rt_sum_us = 0;
    if (s->cpu > 1000)
        s->cpu = 1000;
}

/* A deterministic jitter in [0, 0.15) from a time (splitmix64). */
static double jitter(int64_t t)
{
    uint64_t z = (uint64_t)t + UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    z ^= z >> 31;
    return 0.15 * (double)(z % 1000u) / 1000.0;
}

/* ---- bbr ---- */

static bool triggered(const struct sw_adapt_cfg *cfg, const struct sw_adapt_state *s, int64_t t)
{
    if (cfg->cpu_threshold == SW_ADAPT_NO_CPU || (int32_t)s->cpu >= cfg->cpu_threshold)
        return true;
    /* below the threshold: the cool-off after the last refusal (go-kratos: CPU jitters
     * around the threshold once limiting starts; a dip must not let a flood in) */
    return s->mark_ms != INT64_MIN && sw_sat_sub(t, s->mark_ms) < SW_ADAPT_COOL_OFF_MS;
}

/* What bbr reads from the window's completed buckets (the filling one is left out). */
struct bbr_read {
    int64_t max_done; /* the max of their completions (aegis); 0: none has completions */
    double min_rt;    /* the min of their mean RTs, ms (aegis) */
    double mean_rt;   /* their mean RT, ms: the unloaded reference before any probe */
    double min_min;   /* the min of their fastest RTs (bucket min RT), ms; -1: none */
    double last_min;  /* the fastest RT of the last buckets (at least SW_ADAPT_BBR_EVIDENCE,
                         and at least SW_ADAPT_MIN_SAMPLES completions), ms (-1: too few
                         completions): the evidence of queueing */
};

/* A bucket that follows one without completions is partial (traffic began in it): it counts
 * only for the evidence. */
static void bbr_window(const struct sw_leap *sec, int64_t cur, struct bbr_read *w)
{
    w->max_done = 0;
    w->min_rt = w->mean_rt = w->min_min = w->last_min = -1.0;
    double sum = 0.0, last_min = -1.0;
    int64_t last_n = 0, n = 0;
    /* the current bucket is still filling (aegis skips it) */
    uint32_t back = sec->sample_count > 1 ? sec->sample_count - 1 : 1;
    for (uint32_t k = 1; k <= back; k++) {
        const int64_t *slot = sw_leap_find(sec, cur - (int64_t)k * sec->window_ms);
        if (slot == NULL)
            continue;
        int64_t done = slot[SW_SLOT_COUNTS + SW_EV_SUCCESS];
        if (done <= 0)
            continue;
        double rt_sum = (double)slot[SW_SLOT_COUNTS + SW_EV_RT];
        double fastest = (double)slot[SW_SLOT_MIN_RT];
        if (fastest < 0.0)
            fastest = 0.0;
        if (k <= SW_ADAPT_BBR_EVIDENCE || last_n < (int64_t)SW_ADAPT_BBR_EVIDENCE_SAMPLES) {
            if (last_min < 0.0 || fastest < last_min)
                last_min = fastest;
            last_n += done;
        }
        if (k + 1 < sec->sample_count) {
            /* a partial bucket's count would pull the bound below the level in flight (a
             * cold start, or after an idle spell, would refuse callers the backend serves) */
            const int64_t *older = sw_leap_find(sec, cur - (int64_t)(k + 1) * sec->window_ms);
            if (older == NULL || older[SW_SLOT_COUNTS + SW_EV_SUCCESS] <= 0)
                continue;
        }
        double rt = rt_sum / (double)done;
        sum += rt_sum;
        n += done;
        if (done > w->max_done)
            w->max_done = done;
        if (w->min_rt < 0 || rt < w->min_rt)
            w->min_rt = rt;
        if (w->min_min < 0 || fastest < w->min_min)
            w->min_min = fastest;
    }
    if (n > 0)
        w->mean_rt = sum / (double)n;
    if (last_n >= (int64_t)SW_ADAPT_BBR_EVIDENCE_SAMPLES)
        w->last_min = last_min;
}

/* The end of a probe (enough samples, or given up): its fastest RT becomes the drained RT
 * (base_us). A probe that found it well below the estimate it re-measured (queued) calls for
 * another at once (its pin, half the new bound, is lower again); else the next is due in
 * SW_ADAPT_BBR_PROBE_EVERY_MS. The limit is computed again at the next decision. */
static void bbr_end_probe(struct sw_adapt_state *s, int64_t t)
{
    bool deeper = false;
    if (s->samples > 0 && s->rt_sum_us >= 0) {
        double fastest = (double)s->rt_sum_us;
        deeper = !(fastest >= SW_ADAPT_BBR_DEEPER * (double)s->base_us);
        s->base_us = (float)(fastest > 1.0 ? fastest : 1.0);
    }
    set_phase(s, SW_ADAPT_RUNNING);
    s->samples = 0;
    s->rt_sum_us = 0;
    s->probe_ms = deeper ? t
                         : sw_sat_add(t, (int64_t)((double)SW_ADAPT_BBR_PROBE_EVERY_MS *
                                                   (1.0 + jitter(t))));
    s->next_ms = t;
}

static void bbr_update(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s,
                       struct sw_leap *sec, int64_t t)
{
    int64_t cur = sw_leap_start_of(sec, t);
    bool refused = (s->flags & SW_ADAPT_REFUSED) != 0;
    bool busy = (s->flags & SW_ADAPT_BUSY) != 0;
    s->flags = (uint8_t)(s->flags & SW_ADAPT_PHASE);
    s->next_ms = cur + sec->window_ms;
    if (!triggered(cfg, s, t)) {
        s->mark_ms = INT64_MIN;
        if (phase_of(s) == SW_ADAPT_PROBING)
            set_phase(s, SW_ADAPT_RUNNING);
        s->limit = (float)cfg->max_limit;
        return;
    }
    if (phase_of(s) == SW_ADAPT_PROBING) {
        /* pinned until the probe has its samples (sw_adapt_sample), or gives up; an epoch
         * in the future is damage */
        if (s->probe_ms <= t &&
            (uint64_t)t - (uint64_t)s->probe_ms < (uint64_t)SW_ADAPT_PROBE_GIVE_UP_MS)
            return;
        bbr_end_probe(s, t);
        s->next_ms = cur + sec->window_ms;
    }
    struct bbr_read w;
    bbr_window(sec, cur, &w);
    int64_t max_done = w.max_done;
    double min_rt = w.min_rt;
    if (max_done == 0) { /* nothing completed in the window: the cold-start limit */
        s->limit = (float)cfg->initial_limit;
        return;
    }
    double probed = (double)s->base_us / 1000.0;
    /* The bound is the AVERAGE level in flight, which a healthy load's instantaneous level
     * exceeds half the time: it is enforced only on evidence of queueing. With a
     * cpu_threshold the evidence is the CPU trigger (Sentinel's, aegis'); without, the
     * fastest RT of the last buckets (at least SW_ADAPT_MIN_SAMPLES completions) ran
     * SW_ADAPT_BBR_QUEUE_RT x (+ 1 ms, the resolution) slower than the drained one (the last
     * probe's fastest, or the window's when lower or before any probe), and the evidence
     * holds for SW_ADAPT_COOL_OFF_MS (mark_ms: the last queued update). The FASTEST RT: a
     * queue (processor sharing or FIFO) delays every call, the fastest too, while RTs that
     * do not grow with the calls in flight leave it where it was however they spread (a
     * fast cache in front of a slow database, rare outliers of seconds); a mean, or a
     * probe's first completions (its fast calls), read such a spread as a queue. */
    double fastest = w.min_min >= 0.0 ? w.min_min : w.last_min;
    double drained = probed > 0.0 && (fastest < 0.0 || probed < fastest) ? probed : fastest;
    bool queued = cfg->cpu_threshold != SW_ADAPT_NO_CPU;
    if (!queued) {
        if (w.last_min >= 0.0 && drained >= 0.0 &&
            w.last_min > SW_ADAPT_BBR_QUEUE_RT * drained + SW_ADAPT_RT_SLACK_MS)
            s->mark_ms = t;
        queued = s->mark_ms != INT64_MIN && s->mark_ms <= t &&
                 sw_sat_sub(t, s->mark_ms) < SW_ADAPT_COOL_OFF_MS; /* a damaged mark: no UB */
    }
    /* RTprop: the window's min mean RT (aegis), with the queue taken out: divided by how far
     * the window's fastest RT ran above SW_ADAPT_BBR_TOLERANCE x the last probe's (a queue
     * delays every call alike). Taken queued, it makes the bound equal the level in flight
     * at any level above the capacity (Little's law), which the max/min selections then
     * ratchet up. A faster window counts at once. */
    double rt_prop = min_rt;
    if (probed > 0.0 && fastest > SW_ADAPT_BBR_TOLERANCE * probed)
        rt_prop *= SW_ADAPT_BBR_TOLERANCE * probed / fastest;
    /* a mean RT of 0 (calls faster than the 1 ms resolution) counts as 1 ms (aegis) */
    if (rt_prop < 1.0)
        rt_prop = 1.0;
    /* completions per second x RT (s) = completions per bucket x RT (ms) / bucket (ms) */
    double bound = (double)max_done * rt_prop / (double)sec->window_ms;
    /* re-measure RTprop (TCP BBR's ProbeRTT) while the limiter refuses (demand above the
     * limit: a backend with fewer callers than its capacity is never probed), when it is
     * due, or when the whole window ran well above it (queueing the bound does not see, or
     * a slower backend) */
    if (refused && (queued || probed <= 0.0) &&
        (t >= s->probe_ms ||
         (probed > 0.0 && (fastest > SW_ADAPT_BBR_QUEUED * probed ||
                           w.last_min > SW_ADAPT_BBR_SLOWER * probed)))) {
        /* the estimate the probe re-measures (kept if the probe gets no sample) */
        s->base_us = (float)((fastest > 1.0 ? fastest : 1.0) * 1000.0);
        set_phase(s, SW_ADAPT_PROBING);
        s->probe_ms = t; /* the epoch: completions of requests admitted before it are ignored */
        s->samples = 0;
        s->floors = 0;
        s->rt_sum_us = 0;
        /* BBRv2's ProbeRTT: half the bound in flight drains the queue */
        s->limit = bounded(cfg, floor(bound * SW_ADAPT_BBR_PROBE_GAIN));
        return;
    }
    /* TCP BBR's gain cycle, which the Sentinel/aegis rule lacks: one bucket in
     * SW_ADAPT_BBR_CYCLE admits 25 % more (below the capacity more completes at the same
     * RT: the max rises). No draining bucket: back at the bound the limiter admits nothing
     * until in flight is below it, which drains what the probing bucket queued (TCP BBR's
     * drain phase ends there too). While a probing bucket raised the max by
     * SW_ADAPT_BBR_GREW, the next probes too (TCP BBR's STARTUP: still growing). */
    int64_t phase = (cur / sec->window_ms) % SW_ADAPT_BBR_CYCLE;
    bool grew = s->floors != 0 && s->samples > 0 &&
                (double)max_done >= SW_ADAPT_BBR_GREW * (double)s->samples;
    double gain = phase == 0 || grew ? SW_ADAPT_BBR_UP : 1.0;
    s->floors = gain > 1.0;
    s->samples = max_done > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)max_done;
    double limit = floor(bound * gain) + 1.0;
    if (!queued) {
        /* no queueing: the limit in force stays, at least the bound; it grows while callers
         * are refused (demand above it) by SW_ADAPT_BBR_GROW a drained RT (a bucket at most:
         * evidence of a queue takes an RT to come back), and shrinks toward twice the peak
         * in flight while that stays under half of it (TCP BBR's cwnd_gain of 2) */
        double l = (double)s->limit;
        double per_rt = drained > (double)sec->window_ms ? (double)sec->window_ms / drained : 1.0;
        if (refused)
            l = floor(l * (1.0 + (SW_ADAPT_BBR_GROW - 1.0) * per_rt)) + 1.0;
        else if (!busy)
            l = floor(l * SW_ADAPT_BBR_SHRINK);
        if (l > limit)
            limit = l;
    }
    s->limit = bounded(cfg, limit);
}

/* ---- gradient ---- */

static uint32_t probe_pin(const struct sw_adapt_cfg *cfg)
{
    uint32_t pin = SW_ADAPT_PROBE_PIN < cfg->min_limit ? cfg->min_limit : SW_ADAPT_PROBE_PIN;
    return pin > cfg->max_limit ? cfg->max_limit : pin;
}

/* The update window: one bucket, and at least two baseline RTs. */
static int64_t period_ms(const struct sw_leap *sec, const struct sw_adapt_state *s)
{
    int64_t p = sec->window_ms;
    double two_rt = 2.0 * (double)s->base_us / 1000.0;
    if (two_rt > (double)p)
        p = two_rt > 3.6e6 ? 3600000 : (int64_t)ceil(two_rt);
    return p;
}

bool sw_adapt_too_far(const struct sw_adapt_cfg *cfg, const struct sw_adapt_state *s,
                      const struct sw_leap *sec, uint64_t ahead)
{
    if (cfg->algo != SW_ADAPT_GRADIENT)
        return true; /* bbr: at most one bucket ahead */
    if (phase_of(s) == SW_ADAPT_PROBING)
        return ahead > (uint64_t)SW_ADAPT_PROBE_GIVE_UP_MS;
    return ahead > (uint64_t)period_ms(sec, s);
}

/* A new sample window from t: no cut remembered (gradient_update sets it after a cut). */
static void new_window(struct sw_adapt_state *s, const struct sw_leap *sec, int64_t t)
{
    s->mark_ms = t;
    s->floors = 0;
    s->samples = 0;
    s->rt_sum_us = 0;
    s->flags = (uint8_t)(s->flags & SW_ADAPT_PHASE);
    s->next_ms = t + period_ms(sec, s);
}

static void start_probe(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s, int64_t t,
                        double pin)
{
    s->base_us = s->limit; /* the limit to restore */
    s->limit = bounded(cfg, pin > (double)probe_pin(cfg) ? pin : (double)probe_pin(cfg));
    set_phase(s, SW_ADAPT_PROBING);
    s->flags = (uint8_t)(s->flags & SW_ADAPT_PHASE);
    s->mark_ms = t; /* the epoch: completions of requests admitted before it are ignored */
    s->samples = 0;
    s->rt_sum_us = 0;
    s->floors = 0;
    s->next_ms = t + SW_ADAPT_PROBE_GIVE_UP_MS;
}

static void end_probe(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s,
                      const struct sw_leap *sec, int64_t t)
{
    float restore = s->base_us;
    /* the baseline: the probe's fastest RT */
    s->base_us = s->samples > 0 ? (float)(s->rt_sum_us > 1 ? (double)s->rt_sum_us : 1.0) : 0.0f;
    s->limit = bounded(cfg, (double)restore);
    set_phase(s, SW_ADAPT_RUNNING);
    s->probe_ms = t + (int64_t)((double)SW_ADAPT_PROBE_EVERY_MS * (1.0 + jitter(t)));
    new_window(s, sec, t);
}

/* The completions an update needs: SW_ADAPT_MIN_SAMPLES, or two rounds of a lower limit (a
 * limit of 1 would otherwise wait for 10 serial calls before it may grow). */
static uint32_t window_samples(const struct sw_adapt_state *s)
{
    double two_rounds = 2.0 * (double)s->limit;
    return two_rounds < (double)SW_ADAPT_MIN_SAMPLES ? (uint32_t)(two_rounds < 1.0 ? 1.0 : two_rounds)
                                                      : SW_ADAPT_MIN_SAMPLES;
}

static void gradient_update(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s,
                            struct sw_leap *sec, int64_t t)
{
    if (phase_of(s) == SW_ADAPT_PROBING) { /* not enough samples for long: end it here */
        end_probe(cfg, s, sec, t);
        return;
    }
    if (s->samples < window_samples(s)) { /* too few to judge: look again next bucket */
        s->next_ms = sw_leap_start_of(sec, t) + sec->window_ms;
        return;
    }
    /* the window's fastest RT: a queue delays every call, the fastest too, while RTs that do
     * not grow with the calls in flight leave it where it was however they spread (a fast
     * cache in front of a slow database, rare outliers of seconds), where a mean reads the
     * spread as a queue */
    double fastest = s->rt_sum_us > 1 ? (double)s->rt_sum_us : 1.0;
    /* the fastest RT before the last update, when it cut the limit (floors: log2 of its
     * ratio to the baseline, in 1/16ths, + 1) */
    double before_cut = s->floors > 0 && s->base_us > 0.0f
                            ? (double)s->base_us * exp2((double)(s->floors - 1) / 16.0)
                            : 0.0;
    bool refused = (s->flags & SW_ADAPT_REFUSED) != 0;
    bool busy = (s->flags & SW_ADAPT_BUSY) != 0;
    double base = (double)s->base_us;
    bool measured = false; /* a drained RT measured here: the next probe can wait */
    if (base <= 0.0) {
        /* the first window (cold start, at most initial_limit in flight) is the baseline
         * until a probe measures it */
        base = fastest;
    } else if (fastest * 2.0 < base) {
        /* clearly faster than the baseline: the backend got faster */
        base = fastest;
    } else if (s->limit <= (float)cfg->min_limit) {
        /* at most min_limit in flight (calls admitted in the window only): drained, as a
         * probe's; never parked at the floor by a stale baseline */
        base = fastest;
        measured = true;
    } else if (before_cut > 0.0 && fastest >= SW_ADAPT_SHIFT * before_cut) {
        /* the last update cut the limit by SW_ADAPT_CUT or more and the fastest call is no
         * faster: its RT does not grow with the calls in flight, so it is no queue but a
         * slower backend (a dependency 10x slower): the new baseline */
        base = fastest;
        measured = true;
    }
    s->base_us = (float)base;
    float before = s->limit;
    double l = (double)before;
    double ratio = SW_ADAPT_TOLERANCE * base / fastest;
    double g = clampd(ratio, 0.5, 2.0);
    if (g >= 1.0) {
        if (busy) /* an app-limited window says nothing about a larger limit */
            l = l * g + sqrt(l * g);
    } else {
        l = l * g;
    }
    s->limit = bounded(cfg, l);
    if (measured)
        s->probe_ms = sw_sat_add(t, (int64_t)((double)SW_ADAPT_PROBE_EVERY_MS * (1.0 + jitter(t))));
    if (refused && t >= s->probe_ms) {
        /* the pin: 2, or an eighth of the limit while the queue is mild (the limit is then
         * well under 8x the capacity): drained alike, and its samples come 4x sooner */
        start_probe(cfg, s, t, ratio >= 0.8 ? floor((double)before / 8.0) : 0.0);
    } else {
        new_window(s, sec, t);
        if (ratio <= SW_ADAPT_CUT && s->limit < before) { /* a cut: remember the fastest RT */
            double octaves = 16.0 * log2(fastest / base);
            s->floors = (uint8_t)(octaves < 0.0 ? 1.0 : (octaves > 254.0 ? 255.0 : octaves + 1.0));
        }
    }
}

void sw_adapt_update(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s,
                     struct sw_leap *sec, int64_t t)
{
    sw_adapt_sanitize(cfg, s);
    if (phase_of(s) == SW_ADAPT_FRESH) {
        s->limit = (float)cfg->initial_limit;
        s->base_us = 0.0f;
        s->floors = 0;
        s->flags = SW_ADAPT_RUNNING;
        /* gradient: probe as soon as the limiter refuses; bbr: once the window is full */
        s->probe_ms = cfg->algo == SW_ADAPT_BBR ? sw_sat_add(t, sec->interval_ms) : t;
        s->mark_ms = cfg->algo == SW_ADAPT_BBR ? INT64_MIN : t;
        s->samples = 0;
        s->rt_sum_us = 0;
        if (cfg->algo == SW_ADAPT_BBR)
            bbr_update(cfg, s, sec, t);
        else
            s->next_ms = t + period_ms(sec, s);
        return;
    }
    if (cfg->algo == SW_ADAPT_BBR)
        bbr_update(cfg, s, sec, t);
    else
        gradient_update(cfg, s, sec, t);
}

void sw_adapt_refused(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s, int64_t t)
{
    s->flags = (uint8_t)(s->flags | SW_ADAPT_REFUSED);
    if (cfg->algo == SW_ADAPT_BBR && cfg->cpu_threshold != SW_ADAPT_NO_CPU)
        s->mark_ms = t;
}

void sw_adapt_sample(const struct sw_adapt_cfg *cfg, struct sw_adapt_state *s,
                     const struct sw_leap *sec, int64_t rt_ns, int64_t t)
{
    if (cfg->algo == SW_ADAPT_BBR) { /* bbr samples only while probing */
        if (phase_of(s) != SW_ADAPT_PROBING || rt_ns < 0 || rt_ns > INT64_MAX - 999999)
            return;
        sw_adapt_sanitize(cfg, s);
        int64_t started_ms = t - (rt_ns + 999999) / 1000000;
        if (phase_of(s) != SW_ADAPT_PROBING || started_ms < s->probe_ms)
            return; /* admitted before the probe began: queued behind the old limit */
        if (s->samples < UINT32_MAX) {
            if (s->samples == 0 || rt_ns / 1000 < s->rt_sum_us)
                s->rt_sum_us = rt_ns / 1000; /* the probe's fastest */
            s->samples++;
        }
        /* at least two of the pin's rounds: the first completions of a round are its
         * shortest calls */
        double need = 2.0 * (double)s->limit;
        if (need < (double)SW_ADAPT_MIN_SAMPLES)
            need = (double)SW_ADAPT_MIN_SAMPLES;
        if ((double)s->samples >= need)
            bbr_end_probe(s, t);
        return;
    }
    if (cfg->algo != SW_ADAPT_GRADIENT)
        return;
    sw_adapt_sanitize(cfg, s);
    unsigned phase = phase_of(s);
    if (phase == SW_ADAPT_FRESH || rt_ns < 0)
        return;
    int64_t rt_us = rt_ns / 1000;
    /* admitted before the probe (the window) began: queued behind the old limit, not a
     * drained RT (not one at the limit the window judges) */
    int64_t started_ms = t - (rt_ns / 1000000 + (rt_ns % 1000000 != 0)); /* no overflow */
    if (started_ms < s->mark_ms)
        return;
    if (s->samples < UINT32_MAX) {
        if (s->samples == 0 || rt_us < s->rt_sum_us)
            s->rt_sum_us = rt_us; /* the fastest */
        s->samples++;
    }
    if (phase == SW_ADAPT_PROBING && s->samples >= SW_ADAPT_PROBE_SAMPLES)
        end_probe(cfg, s, sec, t);
}

void sw_adapt_set_cpu(struct sw_adapt_state *s, int64_t permille)
{
    s->cpu = (uint16_t)(permille < 0 ? 0 : (permille > 1000 ? 1000 : permille));
}
