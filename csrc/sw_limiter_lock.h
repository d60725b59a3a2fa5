/* sw_limiter_lock.h - a limiter's locking helpers and its window formula, shared by its two
 * sources (sw_limiter.c: state, repair, statistics; sw_decide.c: decisions and events).
 * Internal to the core: included by those two files only. */
#ifndef SW_LIMITER_LOCK_H
#define SW_LIMITER_LOCK_H

#include "sw_limiter.h"
#include "sw_time.h"

/* L = count * interval_ms / 1000: the one formula, used by the check and the decisions */
static inline double window_limit(double count, int64_t interval_ms)
{
    return interval_ms == 1000 ? count : count * ((double)interval_ms / 1000.0);
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

/* One try for the state's lock, no wait: @return true when taken; else *seen is the lock's
 * word (its owner: sw_lock_owner_of) */
static inline bool try_lock_state(const struct sw_view *v, uint64_t *seen)
{
    *seen = 0;
    return atomic_compare_exchange_strong_explicit(&v->st->lock.word, seen,
                                                   sw_token_resolve(v->token),
                                                   memory_order_acquire, memory_order_relaxed);
}

/* After a try that failed: wait for the lock, or give up (sw_lock_wait_hook); repair the
 * state when its previous owner died holding it. @return false when it gave up */
static inline bool wait_lock_state_or_give_up(const struct sw_view *v)
{
    int got = sw_lock_acquire_wait(&v->st->lock, sw_token_resolve(v->token), true);
    if (got == SW_LOCK_TOOK_OVER)
        sw_lstate_repair(v);
    return got != SW_LOCK_GAVE_UP;
}

/* lock_state for a call site that can give up: the same cost when the lock is free.
 * @return false when it gave up (the lock is not held) */
static inline bool lock_state_or_give_up(const struct sw_view *v)
{
    uint64_t seen;
    return try_lock_state(v, &seen) || wait_lock_state_or_give_up(v);
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
    sw_lease_reclaim(v);
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
    sw_lease_reclaim(v);
    return 1;
}

/* Change the in-flight count by d (lock held): sw_view_add_in_flight. */
static inline void add_in_flight(const struct sw_view *v, struct sw_node *node, int64_t d)
{
    sw_view_add_in_flight(v, node, d);
}

static inline bool is_throttle(const struct sw_rule *r)
{
    return r->behavior == SW_THROTTLE || r->behavior == SW_WARM_UP_THROTTLE;
}
#endif /* SW_LIMITER_LOCK_H */
