/* sw_limiter.c - admission decisions: one critical section per decision (DESIGN.md §5-6). */
#include "sw_limiter.h"

#include "sw_time.h"

#include <math.h>

void sw_limiter_cfg_default(struct sw_limiter_cfg *cfg)
{
    cfg->grade = SW_GRADE_QPS;
    cfg->behavior = SW_REJECT;
    cfg->count = 0;
    cfg->warm_up_s = 10;
    cfg->cold_factor = 3;
    cfg->max_queueing_ms = 500;
    cfg->occupy_timeout_ms = 500;
    cfg->interval_ms = 1000;
    cfg->sample_count = 2;
}

static struct sw_node_cfg node_cfg_of(const struct sw_limiter_cfg *cfg)
{
    struct sw_node_cfg nc;
    nc.interval_ms = cfg->interval_ms;
    nc.sample_count = cfg->sample_count;
    nc.borrowable = cfg->grade == SW_GRADE_QPS && cfg->behavior == SW_REJECT;
    return nc;
}

static double window_limit(double count, int64_t interval_ms)
{
    return interval_ms == 1000 ? count : count * ((double)interval_ms / 1000.0);
}

int sw_limiter_check(const struct sw_limiter_cfg *cfg)
{
    if (cfg == NULL || (cfg->grade != SW_GRADE_QPS && cfg->grade != SW_GRADE_CONCURRENCY) ||
        cfg->behavior < SW_REJECT || cfg->behavior > SW_WARM_UP_THROTTLE)
        return SW_EINVAL;
    if (cfg->grade == SW_GRADE_CONCURRENCY && cfg->behavior != SW_REJECT)
        return SW_EINVAL;
    if (!isfinite(cfg->count) || cfg->count < 0 || cfg->count > 9.0e15)
        return SW_EINVAL;
    if (sw_warmup_check(cfg->count, cfg->warm_up_s, cfg->cold_factor) != SW_OK)
        return SW_EINVAL;
    if (cfg->max_queueing_ms < 0 || cfg->occupy_timeout_ms < 0)
        return SW_EINVAL;
    if (cfg->grade == SW_GRADE_QPS &&
        (cfg->behavior == SW_REJECT || cfg->behavior == SW_WARM_UP)) {
        double l = window_limit(cfg->count, cfg->interval_ms);
        if (l > 0 && l < 1)
            return SW_EINVAL;
    }
    struct sw_node_cfg nc = node_cfg_of(cfg);
    if (sw_node_size(&nc) == 0)
        return SW_EINVAL;
    return SW_OK;
}

static size_t align8(size_t x)
{
    return (x + 7u) & ~(size_t)7u;
}

size_t sw_limiter_size(const struct sw_limiter_cfg *cfg)
{
    if (sw_limiter_check(cfg) != SW_OK)
        return 0;
    struct sw_node_cfg nc = node_cfg_of(cfg);
    return align8(sizeof(struct sw_limiter)) + sw_node_size(&nc);
}

int sw_limiter_init(struct sw_limiter *lim, const struct sw_limiter_cfg *cfg)
{
    size_t total = sw_limiter_size(cfg);
    if (lim == NULL || total == 0)
        return SW_EINVAL;
    if (total > UINT32_MAX)
        return SW_ERANGE;
    sw_lock_init(&lim->lock);
    lim->grade = (uint32_t)cfg->grade;
    lim->behavior = (uint32_t)cfg->behavior;
    lim->off_node = (uint32_t)align8(sizeof(struct sw_limiter));
    lim->size = (uint32_t)total;
    lim->pad_ = 0;
    lim->count = cfg->count;
    lim->limit = window_limit(cfg->count, cfg->interval_ms);
    double per_window = 1000.0 / (double)cfg->interval_ms;
    lim->min_rate = cfg->count < per_window ? cfg->count : per_window;
    lim->max_queue_ns = sw_sat_mul(cfg->max_queueing_ms, INT64_C(1000000));
    lim->occupy_timeout_ms = cfg->occupy_timeout_ms;
    int rc = sw_warmup_init(&lim->warm, cfg->count, cfg->warm_up_s, cfg->cold_factor);
    if (rc != SW_OK)
        return rc;
    sw_throttle_init(&lim->thr);
    struct sw_node_cfg nc = node_cfg_of(cfg);
    return sw_node_init(sw_limiter_node(lim), &nc);
}

void sw_limiter_window(struct sw_limiter *lim, struct sw_window *out)
{
    struct sw_node *node = sw_limiter_node(lim);
    out->lock = &lim->lock;
    out->leap = sw_node_sec(node);
    out->future = sw_node_fut(node);
}

static inline bool is_throttle(const struct sw_limiter *lim)
{
    return lim->behavior == SW_THROTTLE || lim->behavior == SW_WARM_UP_THROTTLE;
}

/* ns from now_ns until ms time `at_ms`, never negative */
static int64_t ns_until(int64_t at_ms, int64_t now_ns)
{
    int64_t d = sw_sat_sub(sw_sat_mul(at_ms, INT64_C(1000000)), now_ns < 0 ? 0 : now_ns);
    return d < 0 ? 0 : d;
}

/* The warm-up admitted rate with slidewin's rule (c): never below min(q, 1 per window). */
static double warm_rate(struct sw_limiter *lim, struct sw_node *node, int64_t t)
{
    sw_warmup_sync(&lim->warm, t, sw_node_previous_second_pass(node, t));
    double r = sw_warmup_rate(&lim->warm);
    return r < lim->min_rate ? lim->min_rate : r;
}

int sw_limiter_decide(struct sw_limiter *lim, int64_t n, int64_t now_ns, unsigned flags,
                      struct sw_decision *out)
{
    if (n < 1)
        return SW_EINVAL;
    out->verdict = SW_BLOCK;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1;
    out->now_ns = now_ns;
    struct sw_node *node = sw_limiter_node(lim);
    sw_lock_acquire(&lim->lock);
    if (now_ns == SW_NOW)
        now_ns = is_throttle(lim) ? sw_time_ns() : sw_time_coarse_ns();
    out->now_ns = now_ns;
    int64_t t = sw_leap_clamp(sw_node_sec(node), sw_ms_of_ns(now_ns));
    int64_t grant_ms = 0;

    if (lim->grade == SW_GRADE_CONCURRENCY) {
        if ((double)n > lim->count)
            out->verdict = SW_NEVER;
        else if (sw_reject_fits(node->in_flight, n, lim->count))
            out->verdict = SW_PASS;
    } else if (lim->count <= 0) {
        out->verdict = SW_NEVER;
    } else {
        switch (lim->behavior) {
        case SW_REJECT: {
            int64_t pass = sw_node_pass_at(node, t);
            if ((double)n > lim->limit) {
                out->verdict = SW_NEVER;
            } else if (sw_reject_fits(pass, n, lim->limit)) {
                out->verdict = SW_PASS;
            } else if ((flags & SW_F_PRIORITIZED) && !(flags & SW_F_TRY) &&
                       sw_borrow_try_occupy(sw_node_sec(node), sw_node_fut(node), t, n,
                                            lim->limit, lim->occupy_timeout_ms, &grant_ms)) {
                out->verdict = SW_PASS;
                out->occupied = 1;
            } else if (flags & SW_F_RETRY) {
                int64_t ms = sw_reject_retry_ms(sw_node_sec(node), t, n, lim->limit);
                out->retry_ns = ms < 0 ? -1 : ns_until(t + ms, now_ns);
            }
            break;
        }
        case SW_WARM_UP: {
            double rate = warm_rate(lim, node, t);
            double allowed = window_limit(rate, sw_node_sec(node)->interval_ms);
            int64_t pass = sw_node_pass_at(node, t);
            /* rule (c): while cold, still one request per window, whatever its size n <= L
             * (else a cold limiter fed only requests above its cold allowance never warms) */
            if ((double)n > lim->limit)
                out->verdict = SW_NEVER;
            else if (sw_reject_fits(pass, n, allowed) || pass == 0)
                out->verdict = SW_PASS;
            break;
        }
        default: { /* SW_THROTTLE, SW_WARM_UP_THROTTLE */
            double rate = lim->behavior == SW_THROTTLE ? lim->count : warm_rate(lim, node, t);
            int64_t cost = sw_throttle_cost(rate, n);
            if (sw_throttle_reserve(&lim->thr, cost, now_ns, lim->max_queue_ns,
                                    (flags & SW_F_TRY) != 0, &out->wait_ns, &out->retry_ns))
                out->verdict = SW_PASS;
            break;
        }
        }
    }

    if (out->verdict == SW_PASS) {
        if (out->occupied) {
            sw_node_add_at(node, SW_EV_OCCUPIED_PASS, n, t);
            sw_borrow_add(sw_node_fut(node), grant_ms, n);
            out->wait_ns = ns_until(grant_ms, now_ns);
        } else {
            sw_node_add_at(node, SW_EV_PASS, n, t);
        }
        if (lim->grade == SW_GRADE_CONCURRENCY || (flags & SW_F_ENTRY))
            node->in_flight = sw_sat_add(node->in_flight, n);
    } else if (!(flags & SW_F_NO_BLOCK)) {
        sw_node_add_at(node, SW_EV_BLOCK, n, t);
    }
    sw_lock_release(&lim->lock);
    return SW_OK;
}

int sw_limiter_count(struct sw_limiter *lim, uint32_t ev, int64_t n, int64_t now_ns)
{
    if (ev >= SW_EV_DEFAULT_COUNT)
        return SW_EEVENT;
    if (n < 0)
        return SW_EINVAL;
    sw_lock_acquire(&lim->lock);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    sw_node_add(sw_limiter_node(lim), ev, n, sw_ms_of_ns(now_ns));
    sw_lock_release(&lim->lock);
    return SW_OK;
}

int sw_limiter_exit(struct sw_limiter *lim, int64_t n, int64_t rt_ms, int outcome,
                    int64_t now_ns)
{
    if (n < 0 || rt_ms < 0)
        return SW_EINVAL;
    struct sw_node *node = sw_limiter_node(lim);
    sw_lock_acquire(&lim->lock);
    if (outcome != SW_OUT_NONE) {
        if (now_ns == SW_NOW)
            now_ns = sw_time_coarse_ns();
        int64_t t = sw_ms_of_ns(now_ns);
        if (outcome == SW_OUT_SUCCESS) {
            sw_node_add(node, SW_EV_SUCCESS, n, t);
            sw_node_add_rt(node, rt_ms, t);
        } else {
            sw_node_add(node, SW_EV_EXCEPTION, n, t);
        }
    }
    node->in_flight = node->in_flight > n ? node->in_flight - n : 0;
    sw_lock_release(&lim->lock);
    return SW_OK;
}

int sw_limiter_release(struct sw_limiter *lim, int64_t n)
{
    int rc = SW_OK;
    if (n < 1)
        return SW_EINVAL;
    struct sw_node *node = sw_limiter_node(lim);
    sw_lock_acquire(&lim->lock);
    if (node->in_flight < n)
        rc = SW_ESTATE;
    else
        node->in_flight -= n;
    sw_lock_release(&lim->lock);
    return rc;
}

int64_t sw_limiter_in_flight(struct sw_limiter *lim)
{
    sw_lock_acquire(&lim->lock);
    int64_t v = sw_limiter_node(lim)->in_flight;
    sw_lock_release(&lim->lock);
    return v;
}

void sw_limiter_stats(struct sw_limiter *lim, int64_t now_ns, struct sw_stats *out)
{
    struct sw_node *node = sw_limiter_node(lim);
    struct sw_leap *sec = sw_node_sec(node);
    struct sw_leap *fut = sw_node_fut(node);
    sw_lock_acquire(&lim->lock);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    int64_t t = sw_leap_clamp(sec, sw_ms_of_ns(now_ns));
    out->min_rt = sw_leap_min_rt(sec, fut, t);
    out->pass = sw_leap_sum(sec, fut, SW_EV_PASS, t);
    out->block = sw_leap_sum(sec, fut, SW_EV_BLOCK, t);
    out->success = sw_leap_sum(sec, fut, SW_EV_SUCCESS, t);
    out->exception = sw_leap_sum(sec, fut, SW_EV_EXCEPTION, t);
    out->rt_sum = sw_leap_sum(sec, fut, SW_EV_RT, t);
    out->occupied_pass = sw_leap_sum(sec, fut, SW_EV_OCCUPIED_PASS, t);
    out->in_flight = node->in_flight;
    out->waiting = fut != NULL ? sw_borrow_waiting(fut, t) : 0;
    sw_lock_release(&lim->lock);
}
