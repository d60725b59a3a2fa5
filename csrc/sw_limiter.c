/* sw_limiter.c - admission decisions: one critical section per decision (docs/design.md §5, §7). */
#include "sw_limiter.h"

#include "sw_proc.h"
#include "sw_time.h"

#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>

_Static_assert(offsetof(struct sw_lstate, lock) == 64,
               "a limiter state's lock starts its second 64-byte line");
_Static_assert(sizeof(struct sw_lstate) == 128 && SW_NODE_LINE_OFFSET == 0,
               "the lock's line ends the state's header; the node starts a line");

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
    cfg->shadow = 0;
}

/* Every state is borrowable (it has the future ring), whatever the behavior: the layout
 * depends on the window only, so processes with other settings can share it. */
static struct sw_node_cfg node_cfg_of(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc;
    nc.interval_ms = interval_ms;
    nc.sample_count = sample_count;
    nc.borrowable = true;
    return nc;
}

/* L = count * interval_ms / 1000: the one formula, used by the check and the decisions */
static double window_limit(double count, int64_t interval_ms)
{
    return interval_ms == 1000 ? count : count * ((double)interval_ms / 1000.0);
}

#define SW_MAX_QPS 9.0e15
#define SW_MAX_CONCURRENCY 9007199254740992.0 /* 2**53 */
/* a reject or warm-up window's limit stays below 2**53: a count plus a request then compares
 * with it exactly in doubles (sw_reject_fits), never admitting one more */
#define SW_MAX_WINDOW_LIMIT 9007199254740992.0


int sw_limiter_check_ex(const struct sw_limiter_cfg *cfg, struct sw_cfg_error *err)
{
    if (cfg == NULL)
        return sw_cfg_fail(err, "cfg", "no configuration");
    if (cfg->grade != SW_GRADE_QPS && cfg->grade != SW_GRADE_CONCURRENCY)
        return sw_cfg_fail(err, "qps", "pass exactly one of qps or concurrency");
    if (cfg->behavior < SW_REJECT || cfg->behavior > SW_WARM_UP_THROTTLE)
        return sw_cfg_fail(err, "behavior", "behavior must be one of 'reject', 'warm_up', "
                           "'throttle', 'warm_up_throttle'");
    if (cfg->grade == SW_GRADE_CONCURRENCY && cfg->behavior != SW_REJECT)
        return sw_cfg_fail(err, "behavior", "a concurrency limiter only rejects "
                           "(behavior='reject'); the other behaviors need qps");
    if (cfg->grade == SW_GRADE_QPS) {
        if (!isfinite(cfg->count) || cfg->count < 0 || cfg->count > SW_MAX_QPS)
            return sw_cfg_fail(err, "qps", "qps must be a finite number in [0, 9e15], got %.17g",
                               cfg->count);
    } else if (!(cfg->count >= 0 && cfg->count <= SW_MAX_CONCURRENCY)) {
        return sw_cfg_fail(err, "concurrency",
                           "concurrency must be an int in [0, 2**53], got %.17g",
                           cfg->count);
    }
    if (!isfinite(cfg->warm_up_s) || cfg->warm_up_s < 0)
        return sw_cfg_fail(err, "warm_up_s", "warm_up_s must be a finite number >= 0, got %.17g",
                           cfg->warm_up_s);
    if (!(cfg->cold_factor > 1.0 && cfg->cold_factor <= 1.0e9))
        return sw_cfg_fail(err, "cold_factor", "cold_factor must be a number > 1 and at most 1e9, "
                           "got %.17g", cfg->cold_factor);
    if (cfg->max_queueing_ms < 0)
        return sw_cfg_fail(err, "max_queueing_ms", "max_queueing_ms must be >= 0, got %lld",
                           (long long)cfg->max_queueing_ms);
    if (cfg->occupy_timeout_ms < 0)
        return sw_cfg_fail(err, "occupy_timeout_ms", "occupy_timeout_ms must be >= 0, got %lld",
                           (long long)cfg->occupy_timeout_ms);
    if (sw_cfg_check_window(err, cfg->interval_ms, cfg->sample_count) != SW_OK)
        return SW_EINVAL;
    /* validated whatever the behavior (parameters of a behavior not chosen are validated,
     * then ignored) */
    if (sw_warmup_check(cfg->count, cfg->warm_up_s, cfg->cold_factor) != SW_OK)
        return sw_cfg_fail(err, "warm_up_s",
                           "qps=%.17g, warm_up_s=%.17g and cold_factor=%.17g give "
                           "warm-up token counts beyond 9e18 (about qps * warm_up_s / (cold_factor "
                           "- 1)); use a smaller warm_up_s or a larger cold_factor", cfg->count,
                           cfg->warm_up_s, cfg->cold_factor);
    if (cfg->grade == SW_GRADE_QPS &&
        (cfg->behavior == SW_REJECT || cfg->behavior == SW_WARM_UP)) {
        double l = window_limit(cfg->count, cfg->interval_ms);
        if (!(l < SW_MAX_WINDOW_LIMIT))
            return sw_cfg_fail(err, "qps",
                               "qps=%.17g with interval_ms=%lld allows %.17g requests per "
                               "window, which a window cannot count exactly: the limit "
                               "qps * interval_ms / 1000 must be below 2**53 "
                               "(9007199254740992); use a smaller qps or interval_ms",
                               cfg->count, (long long)cfg->interval_ms, l);
        if (l > 0 && l < 1) {
            double need = ceil(1000.0 / cfg->count);
            if (need <= (double)SW_MAX_INTERVAL_MS)
                return sw_cfg_fail(err, "qps",
                                   "qps=%.17g with interval_ms=%lld allows %.17g requests "
                                   "per window, which admits nothing; use behavior='throttle' to "
                                   "pace slow rates, or a longer interval_ms (at least %.0f)",
                                   cfg->count, (long long)cfg->interval_ms, l, need);
            return sw_cfg_fail(err, "qps",
                               "qps=%.17g with interval_ms=%lld allows %.17g requests per "
                               "window, which admits nothing, and no interval_ms up to 2**40 makes "
                               "it 1; use behavior='throttle' to pace slow rates", cfg->count,
                               (long long)cfg->interval_ms, l);
        }
    }
    if (sw_lstate_size(cfg->interval_ms, cfg->sample_count) == 0)
        return sw_cfg_fail(err, "sample_count", "interval_ms=%lld with sample_count=%lu is too "
                           "large a window", (long long)cfg->interval_ms,
                           (unsigned long)cfg->sample_count);
    return SW_OK;
}

int sw_limiter_check(const struct sw_limiter_cfg *cfg)
{
    return sw_limiter_check_ex(cfg, NULL);
}

int sw_rule_init(struct sw_rule *rule, const struct sw_limiter_cfg *cfg)
{
    if (rule == NULL || sw_limiter_check(cfg) != SW_OK)
        return SW_EINVAL;
    rule->grade = (uint32_t)cfg->grade;
    rule->behavior = (uint32_t)cfg->behavior;
    rule->count = cfg->count;
    rule->limit = window_limit(cfg->count, cfg->interval_ms);
    double per_window = 1000.0 / (double)cfg->interval_ms;
    rule->min_rate = cfg->count < per_window ? cfg->count : per_window;
    rule->max_queue_ns = sw_sat_mul(cfg->max_queueing_ms, INT64_C(1000000));
    rule->occupy_timeout_ms = cfg->occupy_timeout_ms;
    rule->interval_ms = cfg->interval_ms;
    rule->sample_count = cfg->sample_count;
    rule->shadow = cfg->shadow ? 1u : 0u;
    memset(&rule->adapt, 0, sizeof rule->adapt);
    return sw_warmup_init(&rule->warm, cfg->count, cfg->warm_up_s, cfg->cold_factor);
}


size_t sw_lstate_size(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc = node_cfg_of(interval_ms, sample_count);
    size_t node = sw_node_size(&nc);
    if (node == 0)
        return 0;
    size_t total = sw_align8(sizeof(struct sw_lstate)) + node;
    return total > UINT32_MAX ? 0 : total;
}

int sw_lstate_init(struct sw_lstate *st, int64_t interval_ms, uint32_t sample_count)
{
    size_t total = sw_lstate_size(interval_ms, sample_count);
    if (st == NULL || total == 0)
        return SW_EINVAL;
    sw_lock_init(&st->lock);
    st->pad_[0] = 0;
    st->pad_[1] = 0;
    atomic_init(&st->hot_seq, 0u);
    for (int i = 0; i < SW_HOT_WORDS; i++)
        st->hot[i] = 0;
    st->off_node = (uint32_t)sw_align8(sizeof(struct sw_lstate));
    st->size = (uint32_t)total;
    sw_warm_state_init(&st->warm);
    sw_throttle_init(&st->thr);
    struct sw_node_cfg nc = node_cfg_of(interval_ms, sample_count);
    return sw_node_init(sw_lstate_node(st), &nc);
}

int sw_lstate_validate(struct sw_lstate *st, size_t size, int64_t interval_ms,
                       uint32_t sample_count)
{
    size_t total = sw_lstate_size(interval_ms, sample_count);
    if (st == NULL || total == 0 || size < total || st->size != total ||
        st->off_node != sw_align8(sizeof(struct sw_lstate)))
        return SW_EINVAL;
    struct sw_node_cfg nc = node_cfg_of(interval_ms, sample_count);
    return sw_node_validate(sw_lstate_node(st), &nc);
}

size_t sw_limiter_size(const struct sw_limiter_cfg *cfg)
{
    if (sw_limiter_check(cfg) != SW_OK)
        return 0;
    return offsetof(struct sw_limiter, st) + sw_lstate_size(cfg->interval_ms, cfg->sample_count);
}

int sw_limiter_init(struct sw_limiter *lim, const struct sw_limiter_cfg *cfg)
{
    if (lim == NULL || sw_limiter_size(cfg) == 0)
        return SW_EINVAL;
    int rc = sw_rule_init(&lim->rule, cfg);
    if (rc != SW_OK)
        return rc;
    return sw_lstate_init(&lim->st, cfg->interval_ms, cfg->sample_count);
}

void sw_limiter_view(struct sw_limiter *lim, struct sw_view *out)
{
    out->st = &lim->st;
    out->rule = &lim->rule;
    out->token = SW_LOCK_PRIVATE;
    out->slots = NULL;
    out->n_slots = 0;
    out->my_slot = -1;
    out->held = NULL;
}

/* ---- the counts on the lock's line (struct sw_lstate) ---- */

/* the events kept there, at +0 and +1 of each group */
static const uint32_t hot_ev[2] = {SW_EV_PASS, SW_EV_BLOCK};

static inline void hot_hook(void)
{
    if (sw_test_in_critical != NULL)
        sw_test_in_critical(); /* tests: a process killed between two steps */
}

/* raise *w to v: redoing it changes nothing */
static inline void raise_to(int64_t *w, int64_t v)
{
    if (v > *w)
        *w = v;
}

void sw_lstate_enter(struct sw_lstate *st)
{
    struct sw_node *node = sw_lstate_node(st);
    struct sw_leap *rings[2] = {sw_node_sec(node), sw_node_min(node)};
    /* 0. tell observers (sw_lstate_copy) that the heads may move from here on */
    uint64_t seq = atomic_load_explicit(&st->hot_seq, memory_order_relaxed);
    atomic_store_explicit(&st->hot_seq, (seq + 2u) | 1u, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    /* 1. raise the head buckets and the totals to the counts kept on the lock's line */
    for (int k = 0; k < 2; k++) {
        int64_t *slot = (int64_t *)(uintptr_t)sw_leap_head_slot_(rings[k]);
        if (slot != NULL)
            for (int e = 0; e < 2; e++)
                raise_to(&slot[SW_SLOT_COUNTS + hot_ev[e]], st->hot[2 * k + e]);
        hot_hook();
    }
    for (int e = 0; e < 2; e++)
        raise_to(&node->totals[hot_ev[e]], st->hot[SW_HOT_LIFE + e]);
    /* 2. zero them (each is stored elsewhere now): a head may move from here on */
    atomic_signal_fence(memory_order_seq_cst);
    hot_hook();
    for (int i = 0; i < SW_HOT_WORDS; i++) {
        st->hot[i] = 0;
        if (i == SW_HOT_WORDS / 2)
            hot_hook();
    }
    atomic_signal_fence(memory_order_seq_cst);
}

void sw_lstate_leave(struct sw_lstate *st)
{
    struct sw_node *node = sw_lstate_node(st);
    struct sw_leap *rings[2] = {sw_node_sec(node), sw_node_min(node)};
    atomic_signal_fence(memory_order_seq_cst);
    for (int k = 0; k < 2; k++) {
        const int64_t *slot = sw_leap_head_slot_(rings[k]);
        for (int e = 0; e < 2; e++)
            st->hot[2 * k + e] = slot != NULL ? slot[SW_SLOT_COUNTS + hot_ev[e]] : 0;
        hot_hook();
    }
    for (int e = 0; e < 2; e++)
        st->hot[SW_HOT_LIFE + e] = node->totals[hot_ev[e]];
    uint64_t seq = atomic_load_explicit(&st->hot_seq, memory_order_relaxed);
    atomic_store_explicit(&st->hot_seq, (seq + 1u) & ~(uint64_t)1u, memory_order_release);
}

void sw_lstate_settle(struct sw_lstate *st)
{
    sw_lstate_enter(st);
    sw_lstate_leave(st);
}

void sw_lstate_settle_copy(struct sw_lstate *st, bool hot_ok)
{
    if (!hot_ok)
        for (int i = SW_HOT_SEC; i < SW_HOT_LIFE; i++)
            st->hot[i] = 0;
    sw_lstate_settle(st);
}

int sw_lstate_copy(struct sw_lstate *dst, size_t size,
                   int (*read)(void *ctx, size_t off, size_t len, void *dst), void *ctx,
                   unsigned tries, bool *hot_ok)
{
    const size_t seq_off = offsetof(struct sw_lstate, hot_seq);
    *hot_ok = false;
    if (size < sizeof(struct sw_lstate))
        return -1;
    for (unsigned k = 0; k == 0 || k < tries; k++) {
        uint64_t before, after;
        if (k > 0)
            sched_yield();
        if (read(ctx, seq_off, sizeof before, &before) != 0 || read(ctx, 0, size, dst) != 0 ||
            read(ctx, seq_off, sizeof after, &after) != 0)
            return -1;
        if (before != after)
            continue;
        /* odd and unchanged: an operation is under way, or was until its process died (or
         * the lock was let go): then the state no longer changes and the copy is whole */
        uint64_t owner = atomic_load_explicit(&dst->lock.word, memory_order_relaxed);
        if (!(before & 1u) || owner == 0u ||
            ((owner >> 32) != 0u && sw_proc_token_dead(owner))) {
            *hot_ok = true;
            return 0;
        }
    }
    return 0;
}

static void lstate_enter_cb(const void *st)
{
    sw_lstate_enter((struct sw_lstate *)(uintptr_t)st);
}

static void lstate_leave_cb(const void *st)
{
    sw_lstate_leave((struct sw_lstate *)(uintptr_t)st);
}

void sw_lstate_window(struct sw_lstate *st, struct sw_window *out)
{
    struct sw_node *node = sw_lstate_node(st);
    out->lock = &st->lock;
    out->leap = sw_node_sec(node);
    out->future = sw_node_fut(node);
    out->token = SW_LOCK_PRIVATE;
    out->repair = NULL;
    out->repair_ctx = NULL;
    out->enter = lstate_enter_cb;
    out->leave = lstate_leave_cb;
    out->hot_ctx = st;
}

static void repair_view_cb(const void *view)
{
    sw_lstate_repair(view);
}

void sw_view_window(const struct sw_view *v, struct sw_window *out)
{
    sw_lstate_window(v->st, out);
    out->token = v->token;
    out->repair = repair_view_cb;
    out->repair_ctx = v;
}

void sw_limiter_window(struct sw_limiter *lim, struct sw_window *out)
{
    sw_lstate_window(&lim->st, out);
}

/* A shared state's in-flight total below 0 by `deficit` (a slot's count released in another
 * process, whose acquirer's count was then reaped; or a region's damage): the negative slots
 * are raised toward 0 by as much in all, so the slots add up to 0 and the total is 0. Left
 * below 0, the total would admit `deficit` more than the limit (a total read as 0 while
 * every acquisition raises it from below). Lock held. */
static void cancel_deficit(const struct sw_view *v, int64_t deficit)
{
    for (uint32_t i = 0; i < v->n_slots && deficit > 0; i++) {
        int64_t held = v->slots[i].in_flight;
        if (held >= 0)
            continue;
        int64_t up = held == INT64_MIN ? INT64_MAX : -held;
        if (up > deficit)
            up = deficit;
        v->slots[i].in_flight = held + up;
        deficit -= up;
    }
}

/* A dead process's slot released more than it acquired (held < 0: it gave back counts
 * acquired elsewhere): those acquirers' slots are overstated by as much; lower the positive
 * slots by -held in all, so a later reap of theirs takes nothing out twice. Lock held. */
static void cancel_surplus(const struct sw_view *v, uint32_t except, int64_t surplus)
{
    for (uint32_t i = 0; i < v->n_slots && surplus > 0; i++) {
        int64_t held = v->slots[i].in_flight;
        if (i == except || held <= 0)
            continue;
        int64_t down = held > surplus ? surplus : held;
        v->slots[i].in_flight = held - down;
        surplus -= down;
    }
}

void sw_lstate_repair(const struct sw_view *v)
{
    struct sw_node *node = sw_lstate_node(v->st);
    sw_node_repair(node);
    /* the counts on the lock's line: redo what the dead process may have been doing */
    sw_lstate_settle(v->st);
    if (v->slots != NULL) {
        /* the slots are input too: a free slot holds nothing (a process claiming it would
         * start from its count), and the total is never below 0 (see cancel_deficit) nor
         * above the sum of the slots. Below the sum it stays: the difference is what was
         * released for other processes (add_in_flight), or a dead holder's acquisition
         * counted on its slot and not yet on the total (its reap then takes out nothing) */
        int64_t sum = 0;
        for (uint32_t i = 0; i < v->n_slots; i++) {
            if (atomic_load_explicit(&v->slots[i].token, memory_order_relaxed) != 0)
                sum = sw_sat_add(sum, v->slots[i].in_flight);
            else
                v->slots[i].in_flight = 0;
        }
        if (sum < 0) {
            cancel_deficit(v, sum == INT64_MIN ? INT64_MAX : -sum);
            sum = 0;
        }
        if (node->in_flight < 0 || node->in_flight > sum)
            node->in_flight = sum;
    } else if (node->in_flight < 0) {
        node->in_flight = 0;
    }
    if (v->st->warm.stored < 0)
        v->st->warm.stored = SW_WARM_FRESH;
}

static inline int64_t in_flight_now(const struct sw_node *node)
{
    return sw_node_in_flight_now(node);
}

/* Take the state's lock; repair it when its previous owner died holding it. */
static inline void lock_state(const struct sw_view *v)
{
    if (sw_lock_acquire_as(&v->st->lock, sw_token_resolve(v->token)))
        sw_lstate_repair(v);
}

/* lock_state for a call site that can give up (sw_lock_wait_hook): the same cost when the
 * lock is free. @return false when it gave up (the lock is not held) */
static inline bool lock_state_or_give_up(const struct sw_view *v)
{
    int got = sw_lock_acquire_or_give_up(&v->st->lock, sw_token_resolve(v->token));
    if (got == SW_LOCK_TOOK_OVER)
        sw_lstate_repair(v);
    return got != SW_LOCK_GAVE_UP;
}

static inline void unlock_state(const struct sw_view *v)
{
    sw_lock_release(&v->st->lock);
}

/* The same around work on the node's windows or totals (see struct sw_lstate). */
static inline void lock_node(const struct sw_view *v)
{
    lock_state(v);
    sw_lstate_enter(v->st);
}

static inline void unlock_node(const struct sw_view *v)
{
    sw_lstate_leave(v->st);
    unlock_state(v);
}

/* Lock for counting an event other than PASS and BLOCK at *now_ns (SW_NOW: the coarse clock,
 * read under the lock and stored back): when both windows are at their head bucket there, no
 * bucket starts and no word on the lock's line is concerned, so the counts on it may stay
 * (no sw_lstate_enter). may_give_up: the wait for the lock may give up (lock_state_or_give_up).
 * @return 1 when sw_lstate_enter ran (then unlock with unlock_node), 0 when not (unlock_state),
 *         -1 when it gave up (the lock is not held) */
static inline int lock_for_other_event(const struct sw_view *v, int64_t *now_ns, bool may_give_up)
{
    if (!may_give_up)
        lock_state(v);
    else if (!lock_state_or_give_up(v))
        return -1;
    if (*now_ns == SW_NOW)
        *now_ns = sw_time_coarse_ns();
    struct sw_node *node = sw_lstate_node(v->st);
    int64_t ms = sw_ms_of_ns(*now_ns);
    if (sw_leap_at_head(sw_node_sec(node), ms) && sw_leap_at_head(sw_node_min(node), ms))
        return 0;
    sw_lstate_enter(v->st);
    return 1;
}

/* Change the in-flight count by d (lock held): sw_view_add_in_flight. */
static inline void add_in_flight(const struct sw_view *v, struct sw_node *node, int64_t d)
{
    sw_view_add_in_flight(v, node, d);
}

/* Of `take` counts leaving a living slot (a reap, a dropped object's give-back), how many
 * are still in the total. The total is the sum of the slots less what was released for
 * other processes (sw_view_add_in_flight): that part may have been these counts. Which
 * slot's counts another process released is not recorded, so the leaving ones are taken
 * to be those first: the total never falls below what the others hold (at worst it stays
 * above until they end or die). Lock held, before the slot is lowered. */
static int64_t still_counted(const struct sw_view *v, const struct sw_node *node, int64_t take)
{
    int64_t sum = 0;
    for (uint32_t j = 0; j < v->n_slots; j++)
        if (v->slots[j].in_flight > 0)
            sum = sw_sat_add(sum, v->slots[j].in_flight);
    int64_t released = sw_sat_sub(sum, node->in_flight);
    return released <= 0 ? take : released >= take ? 0 : take - released;
}

uint32_t sw_lstate_reap(const struct sw_view *v)
{
    uint32_t freed = 0;
    if (v->slots == NULL)
        return 0;
    uint64_t me = sw_token_resolve(v->token);
    for (uint32_t i = 0; i < v->n_slots; i++) {
        uint64_t tok = atomic_load_explicit(&v->slots[i].token, memory_order_acquire);
        if (tok == 0 || tok == me || !sw_proc_token_dead(tok))
            continue;
        lock_state(v);
        /* still the same dead owner (another reaper may have freed it meanwhile) */
        if (atomic_load_explicit(&v->slots[i].token, memory_order_relaxed) == tok) {
            struct sw_node *node = sw_lstate_node(v->st);
            int64_t held = v->slots[i].in_flight;
            int64_t counted = held > 0 ? still_counted(v, node, held) : 0;
            v->slots[i].in_flight = 0;
            /* A negative slot (a region written before slots were kept >= 0, or damage):
             * the acquirers' slots are lowered instead (cancel_surplus). Were the total to
             * go below 0, the negative slots take the deficit (cancel_deficit). */
            int64_t total = node->in_flight;
            if (held < 0)
                cancel_surplus(v, i, held == INT64_MIN ? INT64_MAX : -held);
            else
                total = sw_sat_sub(total, counted);
            if (total < 0) {
                cancel_deficit(v, total == INT64_MIN ? INT64_MAX : -total);
                total = 0;
            }
            node->in_flight = total;
            atomic_store_explicit(&v->slots[i].token, 0, memory_order_release);
            freed++;
        }
        unlock_state(v);
    }
    return freed;
}

void sw_view_lock(const struct sw_view *v)
{
    lock_state(v);
}

bool sw_view_lock_or_give_up(const struct sw_view *v)
{
    return lock_state_or_give_up(v);
}

void sw_view_unlock(const struct sw_view *v)
{
    unlock_state(v);
}

void sw_view_set_rule(const struct sw_view *v, struct sw_rule *dst, const struct sw_rule *src)
{
    lock_state(v);
    *dst = *src;
    unlock_state(v);
}

void sw_node_totals(const struct sw_node *node, struct sw_totals *out)
{
    out->pass = node->totals[SW_EV_PASS];
    out->block = node->totals[SW_EV_BLOCK];
    out->exception = node->totals[SW_EV_EXCEPTION];
    out->success = node->totals[SW_EV_SUCCESS];
    out->occupied_pass = node->totals[SW_EV_OCCUPIED_PASS];
    out->rt = node->totals[SW_EV_RT];
    out->shadow_block = node->shadow_block;
}

void sw_totals_read(const struct sw_view *v, struct sw_totals *out)
{
    lock_node(v);
    sw_node_totals(sw_lstate_node(v->st), out);
    unlock_node(v);
}

int sw_lstate_check_repair(const struct sw_view *v)
{
    if (!lock_state_or_give_up(v))
        return SW_EBUSY;
    sw_lstate_repair(v);
    unlock_state(v);
    return SW_OK;
}

int64_t sw_lstate_give_back_locked(const struct sw_view *v, int64_t others)
{
    if (v->slots == NULL || v->my_slot < 0 || v->held == NULL)
        return 0;
    struct sw_proc_slot *slot = &v->slots[v->my_slot];
    int64_t room = sw_sat_sub(slot->in_flight, others < 0 ? 0 : others);
    int64_t take = *v->held < room ? *v->held : room;
    *v->held = 0;
    /* only this process's own slot (a slot reaped and claimed again is another's) */
    if (take <= 0 || atomic_load_explicit(&slot->token, memory_order_relaxed) !=
                         sw_token_resolve(v->token))
        return 0;
    struct sw_node *node = sw_lstate_node(v->st);
    int64_t counted = still_counted(v, node, take);
    slot->in_flight -= take;
    int64_t total = sw_sat_sub(node->in_flight, counted);
    if (total < 0) { /* counts released in another process: see cancel_deficit */
        cancel_deficit(v, total == INT64_MIN ? INT64_MAX : -total);
        total = 0;
    }
    node->in_flight = total;
    return take;
}

void sw_lstate_detach(const struct sw_view *v)
{
    if (v->slots == NULL || v->my_slot < 0)
        return;
    lock_state(v);
    struct sw_proc_slot *slot = &v->slots[v->my_slot];
    if (slot->in_flight == 0)
        atomic_store_explicit(&slot->token, 0, memory_order_release);
    unlock_state(v);
}

static inline bool is_throttle(const struct sw_rule *r)
{
    return r->behavior == SW_THROTTLE || r->behavior == SW_WARM_UP_THROTTLE;
}

/* ns from now_ns until ms time `at_ms`, never negative */
static int64_t ns_until(int64_t at_ms, int64_t now_ns)
{
    int64_t d = sw_sat_sub(sw_sat_mul(at_ms, INT64_C(1000000)), now_ns < 0 ? 0 : now_ns);
    return d < 0 ? 0 : d;
}

/* The warm-up admitted rate with slidewin's rule (c): never below min(q, 1 per window). */
static double warm_rate(const struct sw_rule *r, struct sw_warm_state *ws, struct sw_node *node,
                        int64_t t)
{
    /* paying back an oversize request during the last whole second counts as busy: its
     * passes are spread over the payback, so the tokens keep falling and it warms up */
    bool busy = ws->paid_until_ms != INT64_MIN && ws->paid_until_ms > t - t % 1000 - 1000;
    sw_warmup_sync(&r->warm, ws, t, sw_node_previous_second_pass(node, t), busy);
    double rate = sw_warmup_rate(&r->warm, ws);
    return rate < r->min_rate ? r->min_rate : rate;
}

/* The time an oversize request admitted into an empty window at t is paid back by: n
 * requests at `rate` per second take n / rate seconds (rounded up to a whole ms). */
static int64_t paid_back_at(int64_t t, int64_t n, double rate)
{
    double ms = ceil((double)n * 1000.0 / rate);
    if (!(ms < 9.0e18))
        return INT64_MAX;
    return sw_sat_add(t, (int64_t)ms);
}

/* The general path of a decision, lock held: roll the windows (sw_lstate_enter), sync the
 * warm-up tokens (idempotent at one time), and decide, without counting or holding anything:
 * the throttle's slot and a warm-up payback are computed into the plan, stored by plan_end.
 * now_ns and flags are resolved (SW_NOW read, shadow applied). */
static void plan_general(const struct sw_view *v, int64_t n, int64_t now_ns, unsigned flags,
                         struct sw_plan *p, bool lone)
{
    const struct sw_rule *r = v->rule;
    struct sw_lstate *st = v->st;
    struct sw_node *node = sw_lstate_node(st);
    struct sw_decision *out = &p->d;
    out->verdict = SW_BLOCK;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1;
    out->now_ns = now_ns;
    out->shadowed = 0;
    p->n = n;
    p->flags = flags;
    p->grant_ms = 0;
    p->paid_until_ms = INT64_MIN;
    p->has_thr = 0;
    /* a lone decision (sw_decide) works in place, as it always did: it keeps its token sync
     * admitted or not, and a throttle moves only when it admits. A plan that may not be
     * committed syncs and reserves on copies. */
    struct sw_warm_state *ws = &st->warm;
    struct sw_throttle *th = &st->thr;
    p->keep_sync = lone;
    if (!lone) {
        p->thr = st->thr;
        p->warm = st->warm;
        ws = &p->warm;
        th = &p->thr;
    }
    p->fast = 0;
    p->grade = r->grade;

    sw_lstate_enter(st);
    int64_t t = sw_leap_clamp(sw_node_sec(node), sw_ms_of_ns(now_ns));
    p->t = t;

    if (r->grade == SW_GRADE_CONCURRENCY) {
        /* an adaptive limit: the learned one (computed first when due) */
        struct sw_adapt_state *ad = r->adapt.algo != SW_ADAPT_NONE ? &node->adapt : NULL;
        double cap = r->count;
        if (ad != NULL) {
            if (sw_adapt_due(&r->adapt, ad, sw_node_sec(node), t))
                sw_adapt_update(&r->adapt, ad, sw_node_sec(node), t);
            cap = sw_adapt_cap(&r->adapt, ad);
        }
        if ((double)n > r->count)
            out->verdict = SW_NEVER;
        else if (sw_reject_fits(in_flight_now(node), n, cap))
            out->verdict = SW_PASS;
        if (ad != NULL && out->verdict != SW_PASS)
            sw_adapt_refused(&r->adapt, ad, t);
    } else if (r->count <= 0) {
        out->verdict = SW_NEVER;
    } else {
        switch (r->behavior) {
        case SW_REJECT: {
            int64_t pass = sw_node_pass_at(node, t);
            if ((double)n > r->limit) {
                out->verdict = SW_NEVER;
            } else if (sw_reject_fits(pass, n, r->limit)) {
                out->verdict = SW_PASS;
            } else if ((flags & SW_F_PRIORITIZED) && !(flags & SW_F_TRY) &&
                       sw_borrow_try_occupy(sw_node_sec(node), sw_node_fut(node), t, n,
                                            r->limit, r->occupy_timeout_ms, &p->grant_ms)) {
                out->verdict = SW_PASS;
                out->occupied = 1;
                out->wait_ns = ns_until(p->grant_ms, now_ns);
            } else if (flags & SW_F_RETRY) {
                int64_t wait_ms = sw_reject_retry_ms(sw_node_sec(node), t, n, r->limit);
                out->retry_ns = wait_ms < 0 ? -1 : ns_until(t + wait_ms, now_ns);
            }
            break;
        }
        case SW_WARM_UP: {
            double rate = warm_rate(r, ws, node, t);
            double allowed = window_limit(rate, r->interval_ms);
            int64_t pass = sw_node_pass_at(node, t);
            if ((double)n > r->limit) {
                out->verdict = SW_NEVER;
            } else if (st->warm.paid_until_ms != INT64_MIN && t < st->warm.paid_until_ms) {
                /* an oversize request is being paid back */
                if (flags & SW_F_RETRY)
                    out->retry_ns = ns_until(st->warm.paid_until_ms, now_ns);
            } else if (sw_reject_fits(pass, n, allowed)) {
                out->verdict = SW_PASS;
            } else if (pass == 0) {
                /* rule (c): a cold limiter fed only requests above its cold allowance must
                 * still warm up, so an empty window admits one request of any size n <= L;
                 * it is paid back: nothing more passes until n / rate seconds have gone by,
                 * so the average stays within the admitted rate */
                out->verdict = SW_PASS;
                p->paid_until_ms = paid_back_at(t, n, rate);
            }
            break;
        }
        default: { /* SW_THROTTLE, SW_WARM_UP_THROTTLE: the slot is reserved on a copy */
            double rate = r->behavior == SW_THROTTLE ? r->count : warm_rate(r, ws, node, t);
            int64_t cost = sw_throttle_cost(rate, n);
            if (sw_throttle_reserve(th, cost, now_ns, r->max_queue_ns,
                                    (flags & SW_F_TRY) != 0, &out->wait_ns, &out->retry_ns)) {
                out->verdict = SW_PASS;
                p->has_thr = 1;
            }
            break;
        }
        }
    }
}

/* End a plan, lock held: commit (an admitted plan counts PASS, takes its throttle slot, its
 * warm-up payback, its in-flight count; a refused one, a shadow's, counts BLOCK), or not
 * (only a refusal counts: BLOCK). Then sw_lstate_leave. Cannot fail. */
static void plan_end(const struct sw_view *v, const struct sw_plan *p, bool commit)
{
    struct sw_lstate *st = v->st;
    struct sw_node *node = sw_lstate_node(st);
    int64_t n = p->n, t = p->t;
    if (p->fast) { /* counted on the lock's line, as sw_decide's fast path */
        int k = -1;
        if (p->d.verdict == SW_PASS) {
            if (commit)
                k = 0;
        } else if (!(p->flags & SW_F_NO_BLOCK)) {
            k = 1;
        }
        if (k >= 0) {
            st->hot[SW_HOT_SEC + k] = sw_sat_add(st->hot[SW_HOT_SEC + k], n);
            st->hot[SW_HOT_MIN + k] = sw_sat_add(st->hot[SW_HOT_MIN + k], n);
            st->hot[SW_HOT_LIFE + k] = sw_sat_add(st->hot[SW_HOT_LIFE + k], n);
            if (k == 1 && (p->flags & SW_F_SHADOW))
                node->shadow_block = sw_sat_add(node->shadow_block, n);
        }
        if (k == 0 && (p->grade == SW_GRADE_CONCURRENCY || (p->flags & SW_F_ENTRY)))
            add_in_flight(v, node, n);
        if (k == 0 && p->grade == SW_GRADE_CONCURRENCY && v->rule->adapt.algo != SW_ADAPT_NONE)
            sw_adapt_admitted(&node->adapt, in_flight_now(node));
        return;
    }
    if (p->d.verdict == SW_PASS) {
        if (commit) {
            if (!p->keep_sync) { /* a group's plan: its copies become the state */
                if (p->has_thr)
                    st->thr = p->thr;
                st->warm = p->warm;
            }
            if (p->paid_until_ms != INT64_MIN)
                st->warm.paid_until_ms = p->paid_until_ms;
            if (p->d.occupied) {
                sw_node_add_at(node, SW_EV_OCCUPIED_PASS, n, t);
                sw_borrow_add(sw_node_fut(node), p->grant_ms, n);
                sw_node_total_add(node, SW_EV_PASS, n); /* its PASS, counted when granted */
            } else {
                sw_node_add_at(node, SW_EV_PASS, n, t);
            }
            if (p->grade == SW_GRADE_CONCURRENCY || (p->flags & SW_F_ENTRY))
                add_in_flight(v, node, n);
            if (p->grade == SW_GRADE_CONCURRENCY && v->rule->adapt.algo != SW_ADAPT_NONE)
                sw_adapt_admitted(&node->adapt, in_flight_now(node));
            sw_lstate_leave(st);
            return;
        }
    } else if (!(p->flags & SW_F_NO_BLOCK)) {
        sw_node_add_at(node, SW_EV_BLOCK, n, t);
        if (p->flags & SW_F_SHADOW)
            node->shadow_block = sw_sat_add(node->shadow_block, n);
    }
    sw_lstate_leave(st);
}

int sw_decide(const struct sw_view *v, int64_t n, int64_t now_ns, unsigned flags,
              struct sw_decision *out)
{
    if (n < 1)
        return SW_EINVAL;
    const struct sw_rule *r = v->rule;
    struct sw_lstate *st = v->st;
    out->verdict = SW_BLOCK;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1;
    out->now_ns = now_ns;
    out->shadowed = 0;
    struct sw_node *node = sw_lstate_node(st);
    if (!lock_state_or_give_up(v))
        return SW_EBUSY;
    /* the rule is read under the lock only: sw_view_set_rule swaps it under the lock */
    if (r->shadow)
        flags |= SW_F_SHADOW;
    if (flags & SW_F_SHADOW)
        flags &= ~SW_F_NO_BLOCK;
    if (now_ns == SW_NOW)
        now_ns = is_throttle(r) ? sw_time_ns() : sw_time_coarse_ns();
    out->now_ns = now_ns;

    /* Fast path: a rejecting QPS decision, or a concurrency one, at the head bucket of both
     * windows counts on the lock's line only (struct sw_lstate): one cache line written
     * (and the in-flight count when it holds one). A refusal that needs more (a borrow, a
     * retry time) takes the general path. */
    int64_t ms = sw_ms_of_ns(now_ns);
    bool conc = r->grade == SW_GRADE_CONCURRENCY;
    /* an adaptive limit: the learned one within this rule's bounds, once computed for this
     * time and sound (else the slow path computes or repairs it) */
    struct sw_adapt_state *ad = conc && r->adapt.algo != SW_ADAPT_NONE ? &node->adapt : NULL;
    double cap = r->count;
    bool adapt_ok = true;
    if (ad != NULL) {
        adapt_ok = !sw_adapt_due(&r->adapt, ad, sw_node_sec(node), ms);
        cap = sw_adapt_cap(&r->adapt, ad);
    }
    if ((conc || (r->behavior == SW_REJECT && r->count > 0)) && adapt_ok &&
        sw_leap_at_head(sw_node_sec(node), ms) && sw_leap_at_head(sw_node_min(node), ms)) {
        int k = -1; /* the event counted: 0 PASS, 1 BLOCK */
        if (conc) {
            if ((double)n > r->count) {
                out->verdict = SW_NEVER;
                k = 1;
            } else if (sw_reject_fits(in_flight_now(node), n, cap)) {
                out->verdict = SW_PASS;
                k = 0;
            } else {
                k = 1;
            }
        } else if ((double)n > r->limit) {
            out->verdict = SW_NEVER;
            k = 1;
        } else if (sw_reject_fits(sw_leap_sum_with_head(sw_node_sec(node), SW_EV_PASS,
                                                        st->hot[SW_HOT_SEC]),
                                  n, r->limit)) {
            out->verdict = SW_PASS;
            k = 0;
        } else if (!((flags & SW_F_PRIORITIZED) && !(flags & SW_F_TRY)) &&
                   !(flags & SW_F_RETRY)) {
            k = 1;
        }
        if (k >= 0) {
            if (k == 0 || !(flags & SW_F_NO_BLOCK)) {
                st->hot[SW_HOT_SEC + k] = sw_sat_add(st->hot[SW_HOT_SEC + k], n);
                st->hot[SW_HOT_MIN + k] = sw_sat_add(st->hot[SW_HOT_MIN + k], n);
                st->hot[SW_HOT_LIFE + k] = sw_sat_add(st->hot[SW_HOT_LIFE + k], n);
                if (k == 1 && (flags & SW_F_SHADOW))
                    node->shadow_block = sw_sat_add(node->shadow_block, n);
            }
            if (k == 0 && (conc || (flags & SW_F_ENTRY)))
                add_in_flight(v, node, n);
            if (ad != NULL) {
                if (k == 0)
                    sw_adapt_admitted(ad, in_flight_now(node));
                else
                    sw_adapt_refused(&r->adapt, ad, ms);
            }
            unlock_state(v);
            goto done;
        }
        out->verdict = SW_BLOCK;
    }

    {
        struct sw_plan p;
        plan_general(v, n, now_ns, flags, &p, true);
        plan_end(v, &p, p.d.verdict == SW_PASS);
        *out = p.d;
    }
    unlock_state(v);
done:
    if (flags & SW_F_SHADOW) {
        out->shadowed = out->verdict != SW_PASS;
        out->verdict = SW_PASS;
        out->wait_ns = 0;
        out->retry_ns = -1;
    }
    return SW_OK;
}

int sw_plan_locked(const struct sw_view *v, int64_t n, int64_t now_ns, unsigned flags,
                   struct sw_plan *p)
{
    if (n < 1)
        return SW_EINVAL;
    const struct sw_rule *r = v->rule;
    /* a shadow rule keeps SW_F_NO_BLOCK here (sw_decide drops it: a lone shadow decision
     * admits, so it is never retried): a group retries while another member refuses, and
     * counts a shadow's would-be refusal once, at the end (sw_count_shadow_block) */
    if (r->shadow)
        flags |= SW_F_SHADOW;
    if (now_ns == SW_NOW)
        now_ns = is_throttle(r) ? sw_time_ns() : sw_time_coarse_ns();
    /* as sw_decide's fast path: a rejecting QPS plan, or a concurrency one, at the head
     * bucket of both windows reads the counts on the lock's line and commits there */
    struct sw_lstate *st = v->st;
    struct sw_node *node = sw_lstate_node(st);
    int64_t ms = sw_ms_of_ns(now_ns);
    bool conc = r->grade == SW_GRADE_CONCURRENCY;
    /* (an adaptive limit takes the general path: its learned limit is computed there) */
    if (((conc && r->adapt.algo == SW_ADAPT_NONE) ||
         (!conc && r->behavior == SW_REJECT && r->count > 0)) &&
        sw_leap_at_head(sw_node_sec(node), ms) && sw_leap_at_head(sw_node_min(node), ms)) {
        int verdict = -1;
        if (conc)
            verdict = (double)n > r->count                           ? SW_NEVER
                      : sw_reject_fits(in_flight_now(node), n, r->count) ? SW_PASS
                                                                         : SW_BLOCK;
        else if ((double)n > r->limit)
            verdict = SW_NEVER;
        else if (sw_reject_fits(sw_leap_sum_with_head(sw_node_sec(node), SW_EV_PASS,
                                                      st->hot[SW_HOT_SEC]),
                                n, r->limit))
            verdict = SW_PASS;
        else if (!((flags & SW_F_PRIORITIZED) && !(flags & SW_F_TRY)) && !(flags & SW_F_RETRY))
            verdict = SW_BLOCK;
        if (verdict >= 0) {
            p->d.verdict = verdict;
            p->d.occupied = 0;
            p->d.wait_ns = 0;
            p->d.retry_ns = -1;
            p->d.now_ns = now_ns;
            p->d.shadowed = 0;
            p->n = n;
            p->flags = flags;
            p->grade = r->grade;
            p->fast = 1;
            p->keep_sync = 0;
            return SW_OK;
        }
    }
    plan_general(v, n, now_ns, flags, p, false);
    return SW_OK;
}

void sw_plan_end_locked(const struct sw_view *v, const struct sw_plan *p, bool commit)
{
    plan_end(v, p, commit);
}

int sw_count(const struct sw_view *v, uint32_t ev, int64_t n, int64_t now_ns)
{
    if (ev >= SW_EV_DEFAULT_COUNT)
        return SW_EEVENT;
    if (n < 0)
        return SW_EINVAL;
    bool entered = true;
    if (ev == SW_EV_PASS || ev == SW_EV_BLOCK)
        lock_node(v);
    else
        entered = lock_for_other_event(v, &now_ns, false) == 1;
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    sw_node_add(sw_lstate_node(v->st), ev, n, sw_ms_of_ns(now_ns));
    if (entered)
        unlock_node(v);
    else
        unlock_state(v);
    return SW_OK;
}

int sw_count_shadow_block(const struct sw_view *v, int64_t n, int64_t now_ns)
{
    if (n < 0)
        return SW_EINVAL;
    lock_node(v);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    sw_node_add_shadow_block(sw_lstate_node(v->st), n, sw_ms_of_ns(now_ns));
    unlock_node(v);
    return SW_OK;
}

int sw_charge(const struct sw_view *v, int64_t n, int64_t now_ns)
{
    if (n < 0)
        return SW_EINVAL;
    lock_node(v);
    const struct sw_rule *r = v->rule; /* read under the lock only */
    if (r->grade == SW_GRADE_CONCURRENCY) {
        unlock_node(v);
        return n == 0 ? SW_OK : SW_ESTATE;
    }
    if (n > 0) {
        struct sw_lstate *st = v->st;
        struct sw_node *node = sw_lstate_node(st);
        if (now_ns == SW_NOW)
            now_ns = is_throttle(r) ? sw_time_ns() : sw_time_coarse_ns();
        int64_t t = sw_leap_clamp(sw_node_sec(node), sw_ms_of_ns(now_ns));
        if (is_throttle(r) && r->count > 0) {
            /* the queue moves by the cost of n, as for n admitted now (never backwards) */
            double rate = r->behavior == SW_THROTTLE ? r->count : warm_rate(r, &st->warm, node, t);
            int64_t cost = sw_throttle_cost(rate, n);
            struct sw_throttle *th = &st->thr;
            if (!th->has_last || sw_sat_sub(now_ns, th->last_ns) >= cost) {
                th->last_ns = now_ns;
                th->has_last = 1;
                th->saturated = 0;
            } else if (__builtin_add_overflow(th->last_ns, cost, &th->last_ns)) {
                th->last_ns = INT64_MAX;
                th->saturated = 1;
            }
        }
        sw_node_add_at(node, SW_EV_PASS, n, t);
    }
    unlock_node(v);
    return SW_OK;
}

int sw_refund(const struct sw_view *v, int64_t n, int64_t now_ns)
{
    if (n < 0)
        return SW_EINVAL;
    lock_node(v);
    const struct sw_rule *r = v->rule; /* read under the lock only */
    if (n > 0 && is_throttle(r) && r->count > 0) {
        struct sw_lstate *st = v->st;
        struct sw_throttle *th = &st->thr;
        if (now_ns == SW_NOW)
            now_ns = sw_time_ns();
        if (th->has_last && !th->saturated && th->last_ns > now_ns) {
            double rate = r->count;
            if (r->behavior != SW_THROTTLE) {
                struct sw_node *node = sw_lstate_node(st);
                rate = warm_rate(r, &st->warm, node,
                                 sw_leap_clamp(sw_node_sec(node), sw_ms_of_ns(now_ns)));
            }
            int64_t back = sw_sat_sub(th->last_ns, sw_throttle_cost(rate, n));
            th->last_ns = back > now_ns ? back : now_ns;
        }
    }
    unlock_node(v);
    return SW_OK;
}

static int exit_rt_as(const struct sw_view *v, int64_t n, int64_t rt_ns, int outcome,
                      int64_t now_ns, bool may_give_up);

static int exit_as(const struct sw_view *v, int64_t n, int64_t rt_ms, int outcome,
                   int64_t now_ns, bool may_give_up)
{
    if (rt_ms < 0)
        return SW_EINVAL;
    return exit_rt_as(v, n, sw_sat_mul(rt_ms, INT64_C(1000000)), outcome, now_ns, may_give_up);
}

int sw_exit_rt(const struct sw_view *v, int64_t n, int64_t rt_ns, int outcome, int64_t now_ns)
{
    return exit_rt_as(v, n, rt_ns, outcome, now_ns, false);
}

int sw_exit_rt_or_give_up(const struct sw_view *v, int64_t n, int64_t rt_ns, int outcome,
                          int64_t now_ns)
{
    return exit_rt_as(v, n, rt_ns, outcome, now_ns, true);
}

static int exit_rt_as(const struct sw_view *v, int64_t n, int64_t rt_ns, int outcome,
                      int64_t now_ns, bool may_give_up)
{
    if (n < 0 || rt_ns < 0)
        return SW_EINVAL;
    const struct sw_rule *r = v->rule; /* read under the lock only (sw_view_set_rule) */
    struct sw_node *node = sw_lstate_node(v->st);
    bool entered = false;
    if (outcome == SW_OUT_NONE) {
        /* the in-flight count only: not on the lock's line */
        if (!may_give_up)
            lock_state(v);
        else if (!lock_state_or_give_up(v))
            return SW_EBUSY; /* nothing counted, the count stays held: the caller may retry */
    } else {
        int got = lock_for_other_event(v, &now_ns, may_give_up);
        if (got < 0)
            return SW_EBUSY;
        entered = got == 1;
        int64_t t = sw_ms_of_ns(now_ns);
        /* whole ms, truncated as Sentinel's clock differences are; an adaptive rule's are
         * rounded instead: truncation biases each RT low by half a ms on average, and with
         * it bbr's bound (a mean RT of a few ms) */
        int64_t rt_ms = r->adapt.algo != SW_ADAPT_NONE && rt_ns <= INT64_MAX - 500000
                            ? (rt_ns + 500000) / INT64_C(1000000)
                            : rt_ns / INT64_C(1000000);
        sw_node_add_outcome(node, outcome, n, rt_ms, t);
        if (outcome == SW_OUT_SUCCESS && r->grade == SW_GRADE_CONCURRENCY &&
            r->adapt.algo != SW_ADAPT_NONE)
            sw_adapt_sample(&r->adapt, &node->adapt, sw_node_sec(node), rt_ns, t);
    }
    int64_t held = in_flight_now(node);
    add_in_flight(v, node, -(held > n ? n : held));
    if (entered)
        unlock_node(v);
    else
        unlock_state(v);
    return SW_OK;
}

int sw_exit(const struct sw_view *v, int64_t n, int64_t rt_ms, int outcome, int64_t now_ns)
{
    return exit_as(v, n, rt_ms, outcome, now_ns, false);
}

int sw_exit_or_give_up(const struct sw_view *v, int64_t n, int64_t rt_ms, int outcome,
                       int64_t now_ns)
{
    return exit_as(v, n, rt_ms, outcome, now_ns, true);
}

int sw_release(const struct sw_view *v, int64_t n)
{
    int rc = SW_OK;
    if (n < 1)
        return SW_EINVAL;
    struct sw_node *node = sw_lstate_node(v->st);
    if (!lock_state_or_give_up(v))
        return SW_EBUSY; /* the count stays held: the caller may try again */
    if (in_flight_now(node) < n)
        rc = SW_ESTATE;
    else
        add_in_flight(v, node, -n);
    unlock_state(v);
    return rc;
}

int64_t sw_in_flight(const struct sw_view *v)
{
    lock_state(v);
    int64_t x = in_flight_now(sw_lstate_node(v->st));
    unlock_state(v);
    return x;
}

static void node_stats(struct sw_node *node, int64_t now_ns, struct sw_stats *out)
{
    struct sw_leap *sec = sw_node_sec(node);
    struct sw_leap *fut = sw_node_fut(node);
    int64_t t = sw_leap_clamp(sec, sw_ms_of_ns(now_ns));
    out->min_rt = sw_leap_min_rt(sec, fut, t);
    out->pass = sw_leap_sum(sec, fut, SW_EV_PASS, t);
    out->block = sw_leap_sum(sec, fut, SW_EV_BLOCK, t);
    out->success = sw_leap_sum(sec, fut, SW_EV_SUCCESS, t);
    out->exception = sw_leap_sum(sec, fut, SW_EV_EXCEPTION, t);
    out->rt_sum = sw_leap_sum(sec, fut, SW_EV_RT, t);
    out->occupied_pass = sw_leap_sum(sec, fut, SW_EV_OCCUPIED_PASS, t);
    out->in_flight = in_flight_now(node);
    out->waiting = fut != NULL ? sw_borrow_waiting(fut, t) : 0;
}

void sw_node_stats(struct sw_node *node, int64_t now_ns, struct sw_stats *out)
{
    node_stats(node, now_ns == SW_NOW ? sw_time_coarse_ns() : now_ns, out);
}

void sw_stats_read(const struct sw_view *v, int64_t now_ns, struct sw_stats *out)
{
    lock_node(v);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    node_stats(sw_lstate_node(v->st), now_ns, out);
    unlock_node(v);
}

/* ---- a private limiter through its own view ---- */

int sw_limiter_decide(struct sw_limiter *lim, int64_t n, int64_t now_ns, unsigned flags,
                      struct sw_decision *out)
{
    struct sw_view v;
    sw_limiter_view(lim, &v);
    return sw_decide(&v, n, now_ns, flags, out);
}

int sw_limiter_count(struct sw_limiter *lim, uint32_t ev, int64_t n, int64_t now_ns)
{
    struct sw_view v;
    sw_limiter_view(lim, &v);
    return sw_count(&v, ev, n, now_ns);
}

int sw_limiter_exit(struct sw_limiter *lim, int64_t n, int64_t rt_ms, int outcome,
                    int64_t now_ns)
{
    struct sw_view v;
    sw_limiter_view(lim, &v);
    return sw_exit(&v, n, rt_ms, outcome, now_ns);
}

int sw_limiter_release(struct sw_limiter *lim, int64_t n)
{
    struct sw_view v;
    sw_limiter_view(lim, &v);
    return sw_release(&v, n);
}

int64_t sw_limiter_in_flight(struct sw_limiter *lim)
{
    struct sw_view v;
    sw_limiter_view(lim, &v);
    return sw_in_flight(&v);
}

void sw_limiter_stats(struct sw_limiter *lim, int64_t now_ns, struct sw_stats *out)
{
    struct sw_view v;
    sw_limiter_view(lim, &v);
    sw_stats_read(&v, now_ns, out);
}

void sw_limiter_totals(struct sw_limiter *lim, struct sw_totals *out)
{
    struct sw_view v;
    sw_limiter_view(lim, &v);
    sw_totals_read(&v, out);
}

/* ---- adaptive concurrency (sw_adapt.h) ---- */

int sw_rule_set_adapt(struct sw_rule *rule, const struct sw_adapt_cfg *cfg, const char **param)
{
    if (sw_adapt_check(cfg, param) != SW_OK)
        return SW_EINVAL;
    rule->grade = SW_GRADE_CONCURRENCY;
    rule->behavior = SW_REJECT;
    rule->count = (double)cfg->max_limit;
    rule->limit = rule->count;
    rule->adapt = *cfg;
    return SW_OK;
}

int64_t sw_adapt_limit_of(const struct sw_adapt_cfg *cfg, const struct sw_node *node)
{
    const struct sw_adapt_state *s = &node->adapt;
    double l = (double)s->limit;
    if ((s->flags & SW_ADAPT_PHASE) == SW_ADAPT_FRESH || !(l == l))
        l = cfg->initial_limit;
    if (l < cfg->min_limit)
        l = cfg->min_limit;
    if (l > cfg->max_limit)
        l = cfg->max_limit;
    return (int64_t)l;
}

int64_t sw_adapt_limit_now(const struct sw_view *v, int64_t now_ns)
{
    const struct sw_rule *r = v->rule;
    lock_node(v); /* the rule is read under the lock only (sw_view_set_rule) */
    if (r->grade != SW_GRADE_CONCURRENCY || r->adapt.algo == SW_ADAPT_NONE) {
        unlock_node(v);
        return -1;
    }
    struct sw_node *node = sw_lstate_node(v->st);
    if (now_ns != SW_NOW) {
        int64_t t = sw_leap_clamp(sw_node_sec(node), sw_ms_of_ns(now_ns));
        if (sw_adapt_due(&r->adapt, &node->adapt, sw_node_sec(node), t))
            sw_adapt_update(&r->adapt, &node->adapt, sw_node_sec(node), t);
    }
    int64_t l = sw_adapt_limit_of(&r->adapt, node);
    unlock_node(v);
    return l;
}

void sw_view_set_cpu(const struct sw_view *v, int64_t permille)
{
    lock_state(v);
    sw_adapt_set_cpu(&sw_lstate_node(v->st)->adapt, permille);
    unlock_state(v);
}
