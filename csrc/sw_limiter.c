/* sw_limiter.c - a limiter's configuration and state: checks, layout, the counts kept on the
 * lock's line, copies, repair after a dead owner, process slots, statistics (docs/design.md
 * §5, §7). Its decisions and events: sw_decide.c. */
#include "sw_limiter.h"
#include "sw_limiter_lock.h"

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
    st->pad_ = 0;
    atomic_init(&st->lease_out, 0u);
    st->lease_hi = 0;
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
    out->lease = 0;
}

/* ---- the counts on the lock's line (struct sw_lstate) ---- */

/* the events kept there, at +0 and +1 of each group */
static const uint32_t hot_ev[2] = {SW_EV_PASS, SW_EV_BLOCK};

static inline void hot_hook(void)
{
    if (sw_test_in_critical != NULL)
        sw_test_in_critical(); /* tests: a process killed between two steps */
}

/* readers without the lock (sw_lstate_copy, refuse_unlocked in sw_decide.c) trust what they
 * read between two equal, even loads of hot_seq: made odd (and fenced) before a change, even
 * again after it (a new value each time: a reader sees any change between its loads).
 * Not inlined: GCC rejects a fence inlined into a ThreadSanitizer build (-Wtsan) */
static __attribute__((noinline)) void seq_make_odd(struct sw_lstate *st)
{
    uint64_t seq = atomic_load_explicit(&st->hot_seq, memory_order_relaxed);
    atomic_store_explicit(&st->hot_seq, (seq + 2u) | 1u, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static inline void seq_make_even(struct sw_lstate *st)
{
    uint64_t seq = atomic_load_explicit(&st->hot_seq, memory_order_relaxed);
    atomic_store_explicit(&st->hot_seq, (seq + 1u) & ~(uint64_t)1u, memory_order_release);
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
    seq_make_odd(st);
    /* 1. raise the head buckets and the totals to the counts kept on the lock's line */
    int64_t *to[SW_HOT_WORDS]; /* where each word of hot[] is kept (NULL: nowhere) */
    for (int k = 0; k < 2; k++) {
        int64_t *slot = (int64_t *)(uintptr_t)sw_leap_head_slot_(rings[k]);
        for (int e = 0; e < 2; e++) {
            to[2 * k + e] = slot != NULL ? &slot[SW_SLOT_COUNTS + hot_ev[e]] : NULL;
            if (slot != NULL)
                raise_to(to[2 * k + e], sw_hot_get(st, 2 * k + e));
        }
        hot_hook();
    }
    for (int e = 0; e < 2; e++) {
        to[SW_HOT_LIFE + e] = &node->totals[hot_ev[e]];
        raise_to(to[SW_HOT_LIFE + e], sw_hot_get(st, SW_HOT_LIFE + e));
    }
    /* 2. zero them (each is stored elsewhere now): a head may move from here on. A BLOCK
     * word may have been raised by a refusal without the lock since step 1: it is marked
     * (SW_HOT_MARK, no such refusal adds to it any more) only with a compare-and-swap from the
     * value just raised into its place */
    atomic_signal_fence(memory_order_seq_cst);
    hot_hook();
    for (int i = 0; i < SW_HOT_WORDS; i++) {
        if (i & 1) {
            int64_t x = sw_hot_get(st, i);
            do {
                if (to[i] != NULL)
                    raise_to(to[i], x); /* SW_HOT_MARK: nothing */
                /* a release: the raise is stored before the mark (a kill in between) */
            } while (!__atomic_compare_exchange_n(&st->hot[i], &x, SW_HOT_MARK, false,
                                                  __ATOMIC_RELEASE, __ATOMIC_RELAXED));
        } else {
            sw_hot_set(st, i, 0);
        }
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
    /* a BLOCK word holds SW_HOT_MARK here: no refusal without the lock changes it */
    for (int k = 0; k < 2; k++) {
        const int64_t *slot = sw_leap_head_slot_(rings[k]);
        for (int e = 0; e < 2; e++)
            sw_hot_set(st, 2 * k + e, slot != NULL ? slot[SW_SLOT_COUNTS + hot_ev[e]] : 0);
        hot_hook();
    }
    for (int e = 0; e < 2; e++)
        sw_hot_set(st, SW_HOT_LIFE + e, node->totals[hot_ev[e]]);
    seq_make_even(st);
}

void sw_lstate_settle(struct sw_lstate *st)
{
    sw_lstate_enter(st);
    sw_lstate_leave(st);
}

void sw_lstate_seq_odd(struct sw_lstate *st)
{
    seq_make_odd(st);
}

void sw_lstate_seq_even(struct sw_lstate *st)
{
    seq_make_even(st);
}

void sw_lstate_settle_copy(struct sw_lstate *st, bool hot_ok, struct sw_proc_slot *slots,
                           uint32_t n_slots)
{
    if (!hot_ok)
        for (int i = SW_HOT_SEC; i < SW_HOT_LIFE; i++)
            st->hot[i] = 0;
    sw_lstate_enter(st);
    /* the copy's leases, every copied slot looked at (lease_out and lease_hi are input) */
    struct sw_view v = {.st = st, .slots = slots, .n_slots = n_slots, .my_slot = -1};
    atomic_store_explicit(&st->lease_out, 1u, memory_order_relaxed);
    st->lease_hi = n_slots;
    sw_lease_reclaim(&v);
    sw_lstate_leave(st);
}

int sw_lstate_copy(struct sw_lstate *dst, size_t size, const struct sw_lstate_src *src,
                   struct sw_proc_slot *slots, unsigned tries, bool *hot_ok)
{
    const size_t seq_off = src->off_state + offsetof(struct sw_lstate, hot_seq);
    *hot_ok = false;
    if (size < sizeof(struct sw_lstate))
        return -1;
    for (unsigned k = 0; k == 0 || k < tries; k++) {
        uint64_t before, after;
        if (k > 0)
            sched_yield();
        if (src->read(src->ctx, seq_off, sizeof before, &before) != 0 ||
            src->read(src->ctx, src->off_state, size, dst) != 0)
            return -1;
        /* the slots a lease may be in (lease_hi only grows, and only with hot_seq odd) */
        uint32_t n = dst->lease_hi < src->n_slots ? dst->lease_hi : src->n_slots;
        if (src->n_slots > 0)
            memset(slots, 0, (size_t)src->n_slots * sizeof *slots);
        if ((n > 0 && src->read(src->ctx, src->off_slots, (size_t)n * sizeof *slots, slots) != 0) ||
            src->read(src->ctx, seq_off, sizeof after, &after) != 0)
            return -1;
        if (before != after)
            continue;
        /* odd and unchanged: an operation is under way, or was until its process died (or
         * the lock was let go): then the state no longer changes and the copy is whole */
        uint64_t owner = sw_lock_owner_of(atomic_load_explicit(&dst->lock.word,
                                                               memory_order_relaxed));
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

static void view_enter_cb(const void *view)
{
    const struct sw_view *v = view;
    sw_lstate_enter(v->st);
    sw_lease_reclaim(v);
}

static void view_leave_cb(const void *view)
{
    sw_lstate_leave(((const struct sw_view *)view)->st);
}

void sw_view_window(const struct sw_view *v, struct sw_window *out)
{
    sw_lstate_window(v->st, out);
    out->token = v->token;
    out->repair = repair_view_cb;
    out->repair_ctx = v;
    out->enter = view_enter_cb;
    out->leave = view_leave_cb;
    out->hot_ctx = v;
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
    /* the windows change here: a refusal without the lock must not trust them (an odd
     * sequence count; sw_lstate_settle below makes it even) */
    seq_make_odd(v->st);
    sw_node_repair(node);
    if (v->slots != NULL) {
        /* a lease word may be out whatever lease_out and lease_hi say (the region is input):
         * every slot is looked at once, below; lease_hi grows with hot_seq odd (observers) */
        atomic_store_explicit(&v->st->lease_out, 1u, memory_order_relaxed);
        v->st->lease_hi = v->n_slots;
    }
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
    sw_lease_settle(v);
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
            sw_lease_settle(v); /* the dead owner's lease among them */
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

void sw_lstate_store_rule(struct sw_lstate *st, struct sw_rule *dst, const struct sw_rule *src)
{
    /* the sequence count odd first (as sw_lstate_enter makes it): a refusal without the lock
     * (refuse_unlocked in sw_decide.c) loads the rule's fields atomically between two loads
     * of it, so it never pairs a field of the old rule with one of the new */
    seq_make_odd(st);
    _Static_assert(sizeof *dst % 8 == 0, "struct sw_rule: whole 8-byte words");
    uint64_t w[sizeof *dst / 8];
    memcpy(w, src, sizeof w);
    uint64_t *d = (uint64_t *)(void *)dst;
    for (size_t i = 0; i < sizeof w / 8; i++)
        __atomic_store_n(&d[i], w[i], __ATOMIC_RELAXED);
    seq_make_even(st);
}

void sw_view_store_rule(const struct sw_view *v, struct sw_rule *dst, const struct sw_rule *src)
{
    sw_lease_settle(v);
    sw_lstate_store_rule(v->st, dst, src);
}

void sw_view_set_rule(const struct sw_view *v, struct sw_rule *dst, const struct sw_rule *src)
{
    lock_state(v);
    sw_view_store_rule(v, dst, src);
    unlock_state(v);
}

/* Take n permits left in a lease out of the head bucket of a ring that holds `end - 1` (the
 * lease's bucket; another head means that bucket already left it: nothing to take). */
static void lease_untake(struct sw_leap *ring, int64_t end, int64_t n)
{
    int64_t *head = (int64_t *)(uintptr_t)sw_leap_head_slot_(ring);
    if (head == NULL || head[SW_SLOT_START] > end - 1 ||
        end - 1 - head[SW_SLOT_START] >= ring->window_ms)
        return;
    int64_t *pass = &head[SW_SLOT_COUNTS + SW_EV_PASS];
    *pass = *pass > n ? *pass - n : 0;
}

void sw_lease_reclaim(const struct sw_view *v)
{
    struct sw_lstate *st = v->st;
    if (v->slots == NULL || atomic_load_explicit(&st->lease_out, memory_order_relaxed) == 0u)
        return;
    struct sw_node *node = sw_lstate_node(st);
    /* the slots up to the highest one ever leased (the region is input: at most n_slots) */
    uint32_t hi = st->lease_hi < v->n_slots ? st->lease_hi : v->n_slots;
    for (uint32_t i = 0; i < hi; i++) {
        if (atomic_load_explicit(&v->slots[i].lease, memory_order_relaxed) == 0u)
            continue;
        /* swapped first: a process killed after it leaves the permits counted (never more
         * admitted than counted), and the owner's next take finds nothing */
        uint64_t x = atomic_exchange_explicit(&v->slots[i].lease, 0u, memory_order_relaxed);
        int64_t left = (int64_t)(x & SW_LEASE_LEFT), end = (int64_t)(x >> SW_LEASE_BITS);
        if (left == 0)
            continue;
        hot_hook();
        lease_untake(sw_node_sec(node), end, left);
        lease_untake(sw_node_min(node), end, left);
        int64_t *total = &node->totals[SW_EV_PASS];
        *total = *total > left ? *total - left : 0;
    }
    atomic_store_explicit(&st->lease_out, 0u, memory_order_relaxed);
}

void sw_lease_settle(const struct sw_view *v)
{
    if (v->slots == NULL || atomic_load_explicit(&v->st->lease_out, memory_order_relaxed) == 0u)
        return;
    sw_lstate_enter(v->st);
    sw_lease_reclaim(v);
    sw_lstate_leave(v->st);
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
    if (slot->in_flight == 0) {
        sw_lease_settle(v); /* this process's lease among them */
        atomic_store_explicit(&slot->token, 0, memory_order_release);
    }
    unlock_state(v);
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
