/* sw_breaker.c - the circuit breaker: one critical section per outcome (docs/design.md §15). */
#include "sw_breaker.h"

#include "sw_proc.h"
#include "sw_time.h"

#include <math.h>
#include <string.h>

/* How often (at most) a refused caller looks whether a shared probe's owner still lives. */
#define SW_BRK_REAP_EVERY_NS (100 * INT64_C(1000000))

void sw_breaker_cfg_default(struct sw_breaker_cfg *cfg)
{
    cfg->grade = SW_BRK_ERROR_RATIO;
    cfg->threshold = 0.0;
    cfg->slow_rt_ms = 0;
    cfg->min_requests = 5;
    cfg->recovery_s = 10.0;
    cfg->probe_timeout_s = 60.0;
    cfg->interval_ms = 1000;
    cfg->sample_count = 1;
}


int sw_breaker_check_ex(const struct sw_breaker_cfg *cfg, struct sw_cfg_error *err)
{
    if (cfg == NULL)
        return sw_cfg_fail(err, "cfg", "no configuration");
    switch (cfg->grade) {
    case SW_BRK_ERROR_RATIO:
        if (!(cfg->threshold >= 0.0 && cfg->threshold <= 1.0))
            return sw_cfg_fail(err, "error_ratio",
                               "error_ratio must be a number in [0, 1], got %.17g",
                               cfg->threshold);
        break;
    case SW_BRK_ERROR_COUNT:
        if (!(cfg->threshold >= 0.0 && cfg->threshold <= SW_BRK_MAX_COUNT) ||
            cfg->threshold != floor(cfg->threshold))
            return sw_cfg_fail(err, "error_count",
                               "error_count must be an int in [0, 9e15], got %.17g",
                               cfg->threshold);
        break;
    case SW_BRK_SLOW_RATIO:
        if (cfg->slow_rt_ms < 0 || cfg->slow_rt_ms > SW_MAX_INTERVAL_MS)
            return sw_cfg_fail(err, "slow_rt_ms",
                               "slow_rt_ms must be an int in [0, 2**40], got %lld",
                               (long long)cfg->slow_rt_ms);
        if (!(cfg->threshold >= 0.0 && cfg->threshold <= 1.0))
            return sw_cfg_fail(err, "slow_ratio",
                               "slow_ratio must be a number in [0, 1], got %.17g",
                               cfg->threshold);
        break;
    default:
        return sw_cfg_fail(err, "error_ratio", "pass exactly one of error_ratio, error_count or "
                           "slow_rt_ms");
    }
    if (cfg->min_requests < 0)
        return sw_cfg_fail(err, "min_requests", "min_requests must be an int >= 0, got %lld",
                           (long long)cfg->min_requests);
    if (!(cfg->recovery_s >= 0.0 && cfg->recovery_s <= SW_BRK_MAX_RECOVERY_S))
        return sw_cfg_fail(err, "recovery_s", "recovery_s must be a number in [0, 1e9], got %.17g",
                           cfg->recovery_s);
    if (!(cfg->probe_timeout_s > 0.0))
        return sw_cfg_fail(err, "probe_timeout_s",
                           "probe_timeout_s must be None or a number > 0, got %.17g",
                           cfg->probe_timeout_s);
    if (sw_cfg_check_window(err, cfg->interval_ms, cfg->sample_count) != SW_OK)
        return SW_EINVAL;
    return SW_OK;
}

int sw_brule_init(struct sw_brule *rule, const struct sw_breaker_cfg *cfg)
{
    if (rule == NULL || sw_breaker_check_ex(cfg, NULL) != SW_OK)
        return SW_EINVAL;
    memset(rule, 0, sizeof *rule);
    rule->grade = (uint32_t)cfg->grade;
    rule->threshold = cfg->threshold;
    rule->slow_rt_ms = cfg->grade == SW_BRK_SLOW_RATIO ? cfg->slow_rt_ms : -1;
    rule->min_requests = cfg->min_requests;
    rule->recovery_ns = (int64_t)llround(cfg->recovery_s * 1e9);
    /* beyond about 292 years (inf included): never; a timeout > 0 is at least 1 ns (0 would
     * fail every probe at once, and the breaker could never close) */
    rule->probe_timeout_ns = cfg->probe_timeout_s < 9.2e9
                                 ? (int64_t)llround(cfg->probe_timeout_s * 1e9)
                                 : INT64_MAX;
    if (rule->probe_timeout_ns < 1)
        rule->probe_timeout_ns = 1;
    rule->interval_ms = cfg->interval_ms;
    rule->sample_count = cfg->sample_count;
    return SW_OK;
}

static struct sw_leap_cfg leap_cfg_of(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_leap_cfg lc;
    lc.interval_ms = interval_ms;
    lc.sample_count = sample_count;
    lc.n_events = SW_BRK_N_EVENTS;
    lc.has_rt = false;
    return lc;
}

static size_t header_size(void)
{
    return sw_align8(sizeof(struct sw_bstate));
}

size_t sw_bstate_size(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_leap_cfg lc = leap_cfg_of(interval_ms, sample_count);
    size_t leap = sw_leap_size(&lc);
    if (leap == 0 || leap > UINT32_MAX - header_size())
        return 0;
    return header_size() + leap;
}

int sw_bstate_init(struct sw_bstate *st, int64_t interval_ms, uint32_t sample_count)
{
    size_t size = sw_bstate_size(interval_ms, sample_count);
    if (st == NULL || size == 0)
        return SW_EINVAL;
    memset(st, 0, sizeof *st);
    st->magic = SW_BRK_MAGIC;
    st->size = (uint32_t)size;
    st->off_leap = (uint32_t)header_size();
    sw_lock_init(&st->lock);
    atomic_init(&st->word, (uint64_t)SW_BRK_CLOSED);
    st->next_ns = 0;
    st->opened_ns = 0;
    st->probe_ns = 0;
    atomic_init(&st->probe_owner, UINT64_C(0));
    atomic_init(&st->reap_ns, INT64_C(0));
    struct sw_leap_cfg lc = leap_cfg_of(interval_ms, sample_count);
    return sw_leap_init(sw_bstate_leap(st), &lc);
}

int sw_bstate_validate(const struct sw_bstate *st, size_t size, int64_t interval_ms,
                       uint32_t sample_count)
{
    size_t want = sw_bstate_size(interval_ms, sample_count);
    if (st == NULL || want == 0 || size < want || st->magic != SW_BRK_MAGIC ||
        st->size != want || st->off_leap != header_size())
        return SW_EINVAL;
    uint64_t w = atomic_load_explicit(&st->word, memory_order_acquire);
    if ((w & 3u) == 3u)
        return SW_EINVAL;
    const struct sw_leap *l =
        (const struct sw_leap *)(const void *)((const char *)st + st->off_leap);
    if (l->interval_ms != interval_ms || l->sample_count != sample_count ||
        l->window_ms != interval_ms / (int64_t)sample_count ||
        l->n_events != SW_BRK_N_EVENTS || l->has_rt != 0 ||
        l->stride != 2u + SW_BRK_N_EVENTS || !sw_leap_indices_ok(l))
        return SW_EINVAL;
    return SW_OK;
}

size_t sw_breaker_size(const struct sw_breaker_cfg *cfg)
{
    if (sw_breaker_check_ex(cfg, NULL) != SW_OK)
        return 0;
    size_t st = sw_bstate_size(cfg->interval_ms, cfg->sample_count);
    return st == 0 ? 0 : offsetof(struct sw_breaker, st) + st;
}

int sw_breaker_init(struct sw_breaker *br, const struct sw_breaker_cfg *cfg)
{
    if (br == NULL || sw_brule_init(&br->rule, cfg) != SW_OK)
        return SW_EINVAL;
    return sw_bstate_init(&br->st, cfg->interval_ms, cfg->sample_count);
}

void sw_breaker_view(struct sw_breaker *br, struct sw_bview *out)
{
    out->st = &br->st;
    out->rule = &br->rule;
    out->token = SW_LOCK_PRIVATE;
    out->seq = NULL;
}

/* ---- the lock ---- */

static inline uint64_t next_word(uint64_t w, uint32_t state)
{
    return (((w >> 2) + 1u) << 2) | state;
}

/* What a process killed inside a critical section may leave: the ring's derived words, a
 * state word with no state, a HALF_OPEN period with no probe owner. Lock held. */
static void repair(struct sw_bstate *st)
{
    sw_leap_repair(sw_bstate_leap(st));
    uint64_t w = atomic_load_explicit(&st->word, memory_order_relaxed);
    /* a shared state's probe is held by a process: an owner with no pid is damage */
    if ((w & 3u) == 3u || ((w & 3u) == SW_BRK_HALF_OPEN &&
                           (atomic_load_explicit(&st->probe_owner, memory_order_relaxed) >> 32) == 0)) {
        atomic_store_explicit(&st->probe_owner, UINT64_C(0), memory_order_relaxed);
        atomic_store_explicit(&st->word, next_word(w, SW_BRK_OPEN), memory_order_release);
    }
}

/* Take the state's lock, or give up (SW_LOCK_GAVE_UP: a stuck owner, a signal handler's
 * exception; the lock is not held and nothing was done). */
static inline bool lock_b(const struct sw_bview *v)
{
    int got = sw_lock_acquire_or_give_up(&v->st->lock, sw_token_resolve(v->token));
    if (got == SW_LOCK_TOOK_OVER)
        repair(v->st);
    return got != SW_LOCK_GAVE_UP;
}

static inline void unlock_b(const struct sw_bview *v)
{
    sw_lock_release(&v->st->lock);
}

int sw_bstate_check_repair(const struct sw_bview *v)
{
    if (!lock_b(v))
        return SW_EBUSY;
    repair(v->st);
    unlock_b(v);
    return SW_OK;
}

void sw_bview_swap_rule_locked(const struct sw_bview *v, struct sw_brule *dst,
                               const struct sw_brule *src)
{
    bool moved = dst->recovery_ns != src->recovery_ns;
    *dst = *src;
    struct sw_bstate *st = v->st;
    if (moved && (atomic_load_explicit(&st->word, memory_order_relaxed) & 3u) == SW_BRK_OPEN)
        st->next_ns = sw_sat_add(st->opened_ns, src->recovery_ns);
}

int sw_bview_set_rule(const struct sw_bview *v, struct sw_brule *dst,
                      const struct sw_brule *src)
{
    if (!lock_b(v))
        return SW_EBUSY;
    sw_bview_swap_rule_locked(v, dst, src);
    unlock_b(v);
    return SW_OK;
}

int sw_bview_lock(const struct sw_bview *v)
{
    return lock_b(v) ? SW_OK : SW_EBUSY;
}

void sw_bview_unlock(const struct sw_bview *v)
{
    unlock_b(v);
}

/* ---- transitions (lock held) ---- */

static void change(const struct sw_bview *v, struct sw_brk_changes *chg, uint64_t w,
                   uint32_t to, double value)
{
    struct sw_bstate *st = v->st;
    atomic_store_explicit(&st->word, next_word(w, to), memory_order_release);
    st->transitions[to] = sw_sat_add(st->transitions[to], 1);
    uint64_t seq = 0;
    if (v->seq != NULL)
        seq = ++*v->seq; /* under the lock: the order of this view's changes */
    if (chg != NULL && chg->n < 2) {
        chg->c[chg->n].seq = seq;
        chg->c[chg->n].from = (uint32_t)(w & 3u);
        chg->c[chg->n].to = to;
        chg->c[chg->n].value = value;
        chg->n++;
    }
}

/* OPEN at now: when the next probe may pass, never further than this view's recovery time
 * after the period opened (or now, for an opened_ns in the future: damage). */
static int64_t next_probe_ns(const struct sw_bview *v, int64_t now_ns)
{
    const struct sw_bstate *st = v->st;
    int64_t from = st->opened_ns < now_ns ? st->opened_ns : now_ns;
    int64_t bound = sw_sat_add(from, v->rule->recovery_ns);
    return st->next_ns < bound ? st->next_ns : bound;
}

/* HALF_OPEN at now: the probe's deadline (INT64_MAX: none), probe_ns brought back to now
 * when later (damage). */
static int64_t probe_deadline_ns(const struct sw_bview *v, int64_t now_ns)
{
    struct sw_bstate *st = v->st;
    if (st->probe_ns > now_ns)
        st->probe_ns = now_ns;
    if (v->rule->probe_timeout_ns == INT64_MAX)
        return INT64_MAX;
    return sw_sat_add(st->probe_ns, v->rule->probe_timeout_ns);
}

/* A probe silent past this view's probe timeout at now failed: OPEN, opened at its deadline
 * for the recovery time (as if noticed then). Lock held. */
static void expire_probe(const struct sw_bview *v, int64_t now_ns, struct sw_brk_changes *chg)
{
    struct sw_bstate *st = v->st;
    uint64_t w = atomic_load_explicit(&st->word, memory_order_relaxed);
    if ((w & 3u) != SW_BRK_HALF_OPEN)
        return;
    int64_t deadline = probe_deadline_ns(v, now_ns);
    if (deadline == INT64_MAX || now_ns < deadline)
        return;
    atomic_store_explicit(&st->probe_owner, UINT64_C(0), memory_order_relaxed);
    st->opened_ns = deadline;
    st->next_ns = sw_sat_add(deadline, v->rule->recovery_ns);
    st->totals[SW_BRK_T_PROBE_TIMEOUTS] = sw_sat_add(st->totals[SW_BRK_T_PROBE_TIMEOUTS], 1);
    change(v, chg, w, SW_BRK_OPEN, 1.0);
}

/* Open (a trip, a failed probe) at now. Lock held. */
static void open_at(const struct sw_bview *v, struct sw_brk_changes *chg, uint64_t w,
                    int64_t now_ns, double value)
{
    struct sw_bstate *st = v->st;
    st->opened_ns = now_ns;
    st->next_ns = sw_sat_add(now_ns, v->rule->recovery_ns);
    change(v, chg, w, SW_BRK_OPEN, value);
}

/* A pass decision under the lock. */
static bool pass_locked(const struct sw_bview *v, int64_t now_ns, uint64_t *ticket,
                        struct sw_brk_changes *chg, bool bare)
{
    struct sw_bstate *st = v->st;
    expire_probe(v, now_ns, chg);
    uint64_t w = atomic_load_explicit(&st->word, memory_order_relaxed);
    uint32_t s = (uint32_t)(w & 3u);
    if (s == SW_BRK_CLOSED) {
        *ticket = w;
        return true;
    }
    if (s == SW_BRK_OPEN)
        st->next_ns = next_probe_ns(v, now_ns); /* never further than a trip */
    if (s == SW_BRK_OPEN && now_ns >= st->next_ns) {
        atomic_store_explicit(&st->probe_owner, sw_token_resolve(v->token),
                              memory_order_relaxed);
        st->probe_bare = bare;
        st->probe_ns = now_ns;
        change(v, chg, w, SW_BRK_HALF_OPEN, NAN);
        st->totals[SW_BRK_T_PROBES] = sw_sat_add(st->totals[SW_BRK_T_PROBES], 1);
        *ticket = next_word(w, SW_BRK_HALF_OPEN);
        return true;
    }
    return false;
}

static void cancel_locked(const struct sw_bview *v, uint64_t w, struct sw_brk_changes *chg)
{
    struct sw_bstate *st = v->st;
    atomic_store_explicit(&st->probe_owner, UINT64_C(0), memory_order_relaxed);
    change(v, chg, w, SW_BRK_OPEN, NAN); /* next_ns unchanged (#1638) */
    st->totals[SW_BRK_T_CANCELLED] = sw_sat_add(st->totals[SW_BRK_T_CANCELLED], 1);
}

/* Whether this refused caller should look whether the probe's owner lives: a shared state's
 * probe held by another process, looked at by nobody for SW_BRK_REAP_EVERY_NS. */
static bool reap_due(const struct sw_bview *v, uint64_t owner)
{
    if (owner == 0 || v->token == SW_LOCK_PRIVATE || owner == sw_token_resolve(v->token))
        return false;
    int64_t real = sw_time_coarse_ns();
    int64_t last = atomic_load_explicit(&v->st->reap_ns, memory_order_relaxed);
    if (sw_sat_sub(real, last) < SW_BRK_REAP_EVERY_NS && last <= real)
        return false;
    return atomic_compare_exchange_strong_explicit(&v->st->reap_ns, &last, real,
                                                   memory_order_relaxed, memory_order_relaxed);
}

static int try_pass_as(const struct sw_bview *v, int64_t now_ns, uint64_t *ticket,
                       struct sw_brk_changes *chg, bool bare)
{
    chg->n = 0;
    uint64_t w = atomic_load_explicit(&v->st->word, memory_order_acquire);
    if ((w & 3u) == SW_BRK_CLOSED) { /* the hot path: no lock, no clock */
        *ticket = w;
        return 1;
    }
    struct sw_bstate *st = v->st;
    if (!lock_b(v))
        return SW_EBUSY;
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    bool passed = pass_locked(v, now_ns, ticket, chg, bare);
    uint64_t owner = 0;
    if (!passed) {
        w = atomic_load_explicit(&st->word, memory_order_relaxed);
        if ((w & 3u) == SW_BRK_HALF_OPEN)
            owner = atomic_load_explicit(&st->probe_owner, memory_order_relaxed);
        if (!reap_due(v, owner)) {
            owner = 0;
            st->totals[SW_BRK_T_REFUSED] = sw_sat_add(st->totals[SW_BRK_T_REFUSED], 1);
        }
    }
    unlock_b(v);
    if (owner == 0)
        return passed;
    /* the probe's owner may have died holding it: look outside the lock (/proc); an owner
     * with no pid (damage) is no process */
    bool dead = (owner >> 32) == 0 || sw_proc_token_dead(owner);
    if (!lock_b(v))
        return SW_EBUSY; /* nothing done: the refusal is not counted */
    if (dead && atomic_load_explicit(&st->word, memory_order_relaxed) == w &&
        atomic_load_explicit(&st->probe_owner, memory_order_relaxed) == owner) {
        cancel_locked(v, w, chg);
        passed = pass_locked(v, now_ns, ticket, chg, bare);
    }
    if (!passed)
        st->totals[SW_BRK_T_REFUSED] = sw_sat_add(st->totals[SW_BRK_T_REFUSED], 1);
    unlock_b(v);
    return passed;
}

int sw_breaker_try_pass(const struct sw_bview *v, int64_t now_ns, uint64_t *ticket,
                        struct sw_brk_changes *chg)
{
    return try_pass_as(v, now_ns, ticket, chg, true);
}

int sw_breaker_pass_ticket(const struct sw_bview *v, int64_t now_ns, uint64_t *ticket,
                           struct sw_brk_changes *chg)
{
    return try_pass_as(v, now_ns, ticket, chg, false);
}

/* The grade's value over the window and whether it trips. */
static bool trips(const struct sw_brule *r, const struct sw_leap *l, double *value)
{
    int64_t total = sw_leap_held_sum(l, SW_BRK_EV_TOTAL);
    if (total <= 0 || total < r->min_requests)
        return false;
    int64_t errors = r->grade == SW_BRK_SLOW_RATIO ? 0 : sw_leap_held_sum(l, SW_BRK_EV_ERRORS);
    int64_t slow = r->grade == SW_BRK_SLOW_RATIO ? sw_leap_held_sum(l, SW_BRK_EV_SLOW) : 0;
    switch (r->grade) {
    case SW_BRK_ERROR_RATIO:
        *value = (double)errors / (double)total;
        return *value > r->threshold;
    case SW_BRK_ERROR_COUNT:
        *value = (double)errors;
        return *value > r->threshold;
    default:
        *value = (double)slow / (double)total;
        return *value > r->threshold || (*value == 1.0 && r->threshold == 1.0);
    }
}

static int record_as(const struct sw_bview *v, double rt_ms, bool error, bool timed_out,
                     uint64_t ticket, int64_t now_ns, struct sw_brk_changes *chg)
{
    chg->n = 0;
    if (!(rt_ms >= 0.0) || !isfinite(rt_ms))
        return SW_EINVAL;
    const struct sw_brule *r = v->rule;
    struct sw_bstate *st = v->st;
    if (!lock_b(v))
        return SW_EBUSY; /* nothing counted */
    /* the settings are read under the lock (sw_bview_set_rule swaps them under it) */
    bool slow = r->slow_rt_ms >= 0 && (timed_out || rt_ms > (double)r->slow_rt_ms);
    error = error || timed_out;
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns(); /* window math on ms buckets: the coarse clock */
    struct sw_leap *l = sw_bstate_leap(st);
    int64_t t = sw_leap_clamp(l, sw_ms_of_ns(now_ns));
    /* the head's slot, refreshed once: the three counts are one cache line */
    int64_t *slot = sw_leap_refresh(l, NULL, t);
    slot[SW_SLOT_COUNTS + SW_BRK_EV_TOTAL] = sw_sat_add(slot[SW_SLOT_COUNTS + SW_BRK_EV_TOTAL], 1);
    if (error)
        slot[SW_SLOT_COUNTS + SW_BRK_EV_ERRORS] =
            sw_sat_add(slot[SW_SLOT_COUNTS + SW_BRK_EV_ERRORS], 1);
    if (slow)
        slot[SW_SLOT_COUNTS + SW_BRK_EV_SLOW] =
            sw_sat_add(slot[SW_SLOT_COUNTS + SW_BRK_EV_SLOW], 1);
    st->totals[SW_BRK_T_TOTAL] = sw_sat_add(st->totals[SW_BRK_T_TOTAL], 1);
    if (error)
        st->totals[SW_BRK_T_ERRORS] = sw_sat_add(st->totals[SW_BRK_T_ERRORS], 1);
    if (slow)
        st->totals[SW_BRK_T_SLOW] = sw_sat_add(st->totals[SW_BRK_T_SLOW], 1);
    if (timed_out)
        st->totals[SW_BRK_T_TIMED_OUT] = sw_sat_add(st->totals[SW_BRK_T_TIMED_OUT], 1);
    expire_probe(v, now_ns, chg); /* a probe's outcome after its timeout decides nothing */
    uint64_t w = atomic_load_explicit(&st->word, memory_order_relaxed);
    /* a bare record() decides a probe only when a bare try_pass() let it through (an
     * entry's probe is decided by its own ticket: a bare call admitted before the trip and
     * ending during the probe decides nothing) */
    if (ticket == w ||
        (ticket == SW_BRK_ANY && ((w & 3u) != SW_BRK_HALF_OPEN || st->probe_bare != 0))) {
        uint32_t s = (uint32_t)(w & 3u);
        if (s == SW_BRK_HALF_OPEN) {
            atomic_store_explicit(&st->probe_owner, UINT64_C(0), memory_order_relaxed);
            if (error || slow) {
                open_at(v, chg, w, now_ns, 1.0);
            } else {
                sw_leap_reset(l); /* a closed breaker starts an empty window */
                change(v, chg, w, SW_BRK_CLOSED, NAN);
            }
        } else if (s == SW_BRK_CLOSED) {
            double value = 0.0;
            if (trips(r, l, &value))
                open_at(v, chg, w, now_ns, value);
        }
    }
    unlock_b(v);
    return SW_OK;
}

int sw_breaker_record(const struct sw_bview *v, double rt_ms, bool error, uint64_t ticket,
                      int64_t now_ns, struct sw_brk_changes *chg)
{
    return record_as(v, rt_ms, error, false, ticket, now_ns, chg);
}

int sw_breaker_record_timeout(const struct sw_bview *v, double rt_ms, uint64_t ticket,
                              int64_t now_ns, struct sw_brk_changes *chg)
{
    return record_as(v, rt_ms, true, true, ticket, now_ns, chg);
}

int sw_breaker_cancel(const struct sw_bview *v, uint64_t ticket, int64_t now_ns,
                      struct sw_brk_changes *chg)
{
    chg->n = 0;
    uint64_t w = atomic_load_explicit(&v->st->word, memory_order_acquire);
    if ((w & 3u) != SW_BRK_HALF_OPEN) /* nothing to cancel: no lock */
        return 0;
    int done = 0;
    if (!lock_b(v))
        return SW_EBUSY;
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    expire_probe(v, now_ns, chg); /* a timed-out probe failed: its cancel decides nothing */
    w = atomic_load_explicit(&v->st->word, memory_order_relaxed);
    if ((w & 3u) == SW_BRK_HALF_OPEN &&
        ((ticket == SW_BRK_ANY && v->st->probe_bare != 0) || ticket == w)) {
        cancel_locked(v, w, chg);
        done = 1;
    }
    unlock_b(v);
    return done;
}

static int64_t retry_locked(const struct sw_bview *v, int64_t now_ns)
{
    const struct sw_bstate *st = v->st;
    int64_t next;
    switch (atomic_load_explicit(&st->word, memory_order_relaxed) & 3u) {
    case SW_BRK_CLOSED:
        return -1;
    case SW_BRK_OPEN:
        next = next_probe_ns(v, now_ns);
        break;
    default: {
        /* the deadline as probe_deadline_ns has it, without writing */
        int64_t from = st->probe_ns < now_ns ? st->probe_ns : now_ns;
        if (v->rule->probe_timeout_ns == INT64_MAX ||
            now_ns < sw_sat_add(from, v->rule->probe_timeout_ns))
            return v->rule->recovery_ns; /* a probe is out: if it fails, that long */
        next = sw_sat_add(sw_sat_add(from, v->rule->probe_timeout_ns), v->rule->recovery_ns);
    }
    }
    int64_t d = sw_sat_sub(next, now_ns);
    if (d > v->rule->recovery_ns) /* never further than a trip (a damaged next_ns) */
        d = v->rule->recovery_ns;
    return d > 0 ? d : 0;
}

int sw_breaker_retry_ns(const struct sw_bview *v, int64_t now_ns, int64_t *out)
{
    *out = -1;
    if (sw_breaker_state(v) == SW_BRK_CLOSED)
        return SW_OK;
    if (!lock_b(v))
        return SW_EBUSY;
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    *out = retry_locked(v, now_ns);
    unlock_b(v);
    return SW_OK;
}

int sw_breaker_stats(const struct sw_bview *v, int64_t now_ns, struct sw_brk_stats *out)
{
    if (!lock_b(v))
        return SW_EBUSY;
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    struct sw_leap *l = sw_bstate_leap(v->st);
    int64_t t = sw_leap_clamp(l, sw_ms_of_ns(now_ns));
    out->total = sw_leap_sum_at(l, NULL, SW_BRK_EV_TOTAL, t);
    out->errors = sw_leap_sum_at(l, NULL, SW_BRK_EV_ERRORS, t);
    out->slow = sw_leap_sum_at(l, NULL, SW_BRK_EV_SLOW, t);
    out->state = (int)(atomic_load_explicit(&v->st->word, memory_order_relaxed) & 3u);
    out->retry_ns = retry_locked(v, now_ns);
    unlock_b(v);
    return SW_OK;
}

int sw_breaker_totals(const struct sw_bview *v, struct sw_brk_totals *out)
{
    if (!lock_b(v))
        return SW_EBUSY;
    memcpy(out->t, v->st->totals, sizeof out->t);
    memcpy(out->transitions, v->st->transitions, sizeof out->transitions);
    unlock_b(v);
    return SW_OK;
}
