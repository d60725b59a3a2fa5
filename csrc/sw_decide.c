/* sw_decide.c - a limiter's decisions and events: the fast path on the lock's line, the
 * general path (warm-up, throttle, borrowing), counts, exits and releases (docs/design.md §5,
 * §7). The state, its repair and its statistics: sw_limiter.c. */
#include "sw_limiter.h"
#include "sw_limiter_lock.h"

#include "sw_time.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

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
    sw_lease_reclaim(v); /* before a head may move, and a refusal on exact counts */
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

/* The fast path's counts, on the lock's line (lock held): an admission committed counts PASS
 * (and its in-flight count), a refusal BLOCK unless SW_F_NO_BLOCK. @return whether it
 * counted an admission. Inlined: it is try_acquire's path */
static inline __attribute__((always_inline)) bool
fast_count(const struct sw_view *v, struct sw_node *node, int verdict, int64_t n, unsigned flags,
           bool commit)
{
    int k = verdict == SW_PASS ? (commit ? 0 : -1) : (flags & SW_F_NO_BLOCK) ? -1 : 1;
    sw_plan_fast_count(v, n, flags, k);
    if (k == 1 && (flags & SW_F_SHADOW))
        node->shadow_block = sw_sat_add(node->shadow_block, n);
    if (k != 0)
        return false;
    const struct sw_rule *r = v->rule;
    if (r->grade == SW_GRADE_CONCURRENCY && r->adapt.algo != SW_ADAPT_NONE)
        sw_adapt_admitted(&node->adapt, in_flight_now(node));
    return true;
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
        (void)fast_count(v, node, p->d.verdict, n, p->flags, commit);
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

/* A refusal proven without the lock, tried while another holds it: a rejecting QPS rule (no shadow, no warm-up or
 * throttle), n within its limit, a plain request (no borrow, no retry time), whose window
 * already holds the limit's passes at ms. The proof reads, between two loads of hot_seq that
 * must be equal and even, both windows' head (newest bucket, its slot's start stamp: the
 * head of each is the bucket of ms) and the passes of the limiter's window (the running total
 * of the buckets before the head, then hot[SW_HOT_SEC], the head's). While hot_seq stays
 * even no head moves and no running total changes (only sw_lstate_enter .. sw_lstate_leave
 * and a repair move them, and they make it odd first), and hot[SW_HOT_SEC] only grows (a
 * decision at the head raises it). So the sum read is a lower bound of the window's passes
 * at the instant of the last load, and passes within a bucket's life only grow: when it
 * already leaves no room for n, the decision under the lock would refuse too. Nothing is
 * admitted here, so no admission can exceed the limit.
 * The refusal is then counted with a compare-and-swap on each of the three BLOCK words of
 * hot[] (the heads' and the lifetime count), a word at a time, while it does not hold
 * SW_HOT_MARK (a lock holder between sw_lstate_enter and sw_lstate_leave: the word's count
 * is then in the node). An add before the mark is raised into the node by enter (it marks a
 * word only with a compare-and-swap from the value it raised), so no count lives only in a
 * marked word and a holder killed at any step loses none. A word found marked: when it is
 * the first, nothing was counted and the decision is made under the lock; otherwise the rest
 * are counted under the lock, after the holder (a lock stuck past giving up leaves them
 * uncounted: the one case, as a decision there would fail with SW_EBUSY). A refusal counted
 * in a bucket that became the head while it was being proven is counted in that head.
 * Anything uncertain (an odd or changed hot_seq, a head not at ms, a sum with room) takes the
 * locked path. The rule is read without the lock, between the same two loads of hot_seq:
 * a change of rule (sw_lstate_store_rule) makes it odd, so the proof holds for one rule.
 * @return true when refused and counted (out filled), false: decide under the lock */
static bool refuse_unlocked(const struct sw_view *v, int64_t n, int64_t now_ns, unsigned flags,
                            struct sw_decision *out)
{
    if (flags & (SW_F_SHADOW | SW_F_RETRY | SW_F_PRIORITIZED))
        return false;
    struct sw_lstate *st = v->st;
    uint64_t seq = atomic_load_explicit(&st->hot_seq, memory_order_acquire);
    if (seq & 1u)
        return false;
    /* the rule between the two loads of hot_seq too (sw_lstate_store_rule makes it odd):
     * acquire loads, so that the second load of hot_seq stays after them */
    const struct sw_rule *r = v->rule;
    double count, limit;
    __atomic_load(&r->count, &count, __ATOMIC_ACQUIRE);
    __atomic_load(&r->limit, &limit, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&r->grade, __ATOMIC_ACQUIRE) == SW_GRADE_CONCURRENCY ||
        __atomic_load_n(&r->behavior, __ATOMIC_ACQUIRE) != SW_REJECT ||
        __atomic_load_n(&r->shadow, __ATOMIC_ACQUIRE) || !(count > 0) || (double)n > limit)
        return false;
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    int64_t ms = sw_ms_of_ns(now_ns);
    struct sw_node *node = sw_lstate_node(st);
    const struct sw_leap *sec = sw_node_sec(node);
    if (!sw_leap_at_head_peek(sec, ms) || !sw_leap_at_head_peek(sw_node_min(node), ms))
        return false;
    /* acquire loads (free on x86): the second load of hot_seq cannot move before them */
    int64_t pass = sw_leap_sum_peek(sec, SW_EV_PASS,
                                    __atomic_load_n(&st->hot[SW_HOT_SEC], __ATOMIC_ACQUIRE));
    /* a lease out: some of those passes may be permits not yet used (refused only under the
     * lock, once they are taken back). Loaded after the PASS word, whose store in a grant is
     * a release after lease_out's */
    if (atomic_load_explicit(&st->lease_out, memory_order_acquire) != 0u ||
        atomic_load_explicit(&st->hot_seq, memory_order_relaxed) != seq ||
        sw_reject_fits(pass, n, limit))
        return false;
    if (sw_test_in_critical != NULL)
        sw_test_in_critical(); /* tests: a holder enters (and dies) between the proof and the count */
    if (!(flags & SW_F_NO_BLOCK)) {
        int i = sw_hot_count_unlocked(st, SW_HOT_SEC + 1, n);
        if (i == SW_HOT_SEC + 1)
            return false; /* a lock holder is inside sw_lstate_enter .. leave: decide after it */
        if (i < SW_HOT_WORDS && lock_state_or_give_up(v)) {
            for (; i < SW_HOT_WORDS; i += 2) /* the rest, after that holder left */
                sw_hot_add(st, i, n);
            unlock_state(v);
        }
    }
    out->now_ns = now_ns;
    return true;
}

/* ---- leases of the head bucket (a shared limiter) ----
 * Every admission under the lock writes the lock's line: processes deciding together move
 * that line between their cores once a decision. So a view that admits there may take a
 * lease: up to SW_LEASE_MAX more permits of the head bucket, counted as passes at once (the
 * window never holds more than the limit), kept in its process slot (a line of its own) as a
 * word sw_limiter.h describes, and taken there by its next decisions with one
 * compare-and-swap, without the lock, until the bucket ends or they run out. A refusal under
 * the lock, and every step that may move a head bucket (sw_lstate_enter's callers with a
 * view), first takes all leases back (sw_lease_reclaim): the permits left leave the counts,
 * so a refusal is made on the passes used, and each bucket starts with no lease out. A lease
 * is granted to a view with a tag (`lease`; only that view takes from it) for a plain
 * decision on the clock (no entry, no shadow), at most an eighth of the room left under the
 * limit, so near the limit no permit waits in a lease while another process would be
 * refused. */

/* The view's take: n permits of its own lease while its bucket lasts at ms. */
static inline bool lease_take(const struct sw_view *v, int64_t n, int64_t ms)
{
    _Atomic uint64_t *w = &v->slots[v->my_slot].lease;
    uint64_t x = atomic_load_explicit(w, memory_order_relaxed);
    while ((int64_t)(x >> SW_LEASE_BITS) > ms &&
           ((x >> SW_LEASE_TAG_SHIFT) & SW_LEASE_TAG_MAX) == v->lease &&
           (int64_t)(x & SW_LEASE_LEFT) >= n && (x & SW_LEASE_LEFT) <= SW_LEASE_MAX)
        if (atomic_compare_exchange_weak_explicit(w, &x, x - (uint64_t)n, memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    return false;
}

/* Lock held, on the fast path: n admitted at ms at both heads (not yet counted). A lease for
 * the view's slot when it may take one and the slot holds none: lease_out set here; the
 * caller counts the permits with n (sw_hot_count, PASS stored with release), then stores the
 * word, so a process killed in between leaves permits counted, never a word
 * whose permits are not. hot_seq is odd from here until the word is stored (the caller makes
 * it even), so that an observer's copy pairs no count with a word it lacks. @return the permits leased (to count with n), *word its word */
static int64_t lease_grant(const struct sw_view *v, struct sw_node *node, int64_t n, int64_t ms,
                           uint64_t *word)
{
    struct sw_lstate *st = v->st;
    uint64_t x = atomic_load_explicit(&v->slots[v->my_slot].lease, memory_order_relaxed);
    if ((x & SW_LEASE_LEFT) != 0u && (int64_t)(x >> SW_LEASE_BITS) > ms)
        return 0; /* one in hand still (too few for this n, or another view's) */
    const struct sw_leap *sec = sw_node_sec(node), *min = sw_node_min(node);
    int64_t end = sw_sat_add(sec->newest, sec->window_ms);
    int64_t end_min = sw_sat_add(min->newest, min->window_ms);
    if (end_min < end)
        end = end_min;
    double room = v->rule->limit -
                  (double)sw_leap_sum_with_head(sec, SW_EV_PASS, st->hot[SW_HOT_SEC]) -
                  (double)n;
    double k = room / 8.0;
    if (!(k >= 1.0) || end <= ms || end >= (INT64_C(1) << (63 - SW_LEASE_BITS)) ||
        v->lease > SW_LEASE_TAG_MAX)
        return 0;
    int64_t extra = k >= (double)SW_LEASE_MAX ? SW_LEASE_MAX : (int64_t)k;
    /* observers (sw_lstate_copy) copy no grant halfway: odd until the caller stores the word */
    sw_lstate_seq_odd(st);
    if (atomic_load_explicit(&st->lease_out, memory_order_relaxed) == 0u)
        atomic_store_explicit(&st->lease_out, 1u, memory_order_relaxed);
    if (st->lease_hi <= (uint32_t)v->my_slot)
        st->lease_hi = (uint32_t)v->my_slot + 1u;
    *word = (uint64_t)end << SW_LEASE_BITS | (uint64_t)v->lease << SW_LEASE_TAG_SHIFT |
            (uint64_t)extra;
    return extra;
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
    /* a lease in hand: decided here, with no lock and no shared line */
    bool may_lease = v->lease && v->my_slot >= 0 && now_ns == SW_NOW &&
                     !(flags & (SW_F_ENTRY | SW_F_SHADOW));
    int64_t at = SW_NOW; /* the coarse clock read here: the decision's when the lock comes
                            at once (after a wait, the clock is read again) */
    if (may_lease) {
        at = sw_time_coarse_ns();
        if (lease_take(v, n, sw_ms_of_ns(at))) {
            out->verdict = SW_PASS;
            out->now_ns = at;
            return SW_OK;
        }
    }
    /* the lock tried first: one compare-and-swap takes the lock's line once, where a load
     * before it took the line twice from another process deciding on it. Only when another
     * holds it, a refusal is proven without it (an uncontended decision would otherwise
     * make the proof and then the decision) */
    uint64_t seen;
    if (!try_lock_state(v, &seen)) {
        if (sw_lock_owner_of(seen) != 0u &&
            refuse_unlocked(v, n, at != SW_NOW ? at : now_ns, flags, out))
            return SW_OK;
        if (!wait_lock_state_or_give_up(v))
            return SW_EBUSY;
        at = SW_NOW;
    }
    /* the rule is read under the lock only: sw_view_set_rule swaps it under the lock */
    if (r->shadow)
        flags |= SW_F_SHADOW;
    if (flags & SW_F_SHADOW)
        flags &= ~SW_F_NO_BLOCK;
    if (now_ns == SW_NOW)
        now_ns = is_throttle(r) ? sw_time_ns() : at != SW_NOW ? at : sw_time_coarse_ns();
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
        int verdict = sw_fast_verdict(r, st, node, n, flags, cap);
        if (verdict >= 0) {
            out->verdict = verdict;
            uint64_t word = 0;
            int64_t extra = verdict == SW_PASS && may_lease && !conc && !(flags & SW_F_SHADOW)
                                ? lease_grant(v, node, n, ms, &word)
                                : 0;
            bool admitted = fast_count(v, node, verdict, n + extra, flags, true);
            if (extra > 0) { /* after its permits are counted */
                if (sw_test_in_critical != NULL)
                    sw_test_in_critical(); /* tests: killed between the count and the word */
                atomic_store_explicit(&v->slots[v->my_slot].lease, word, memory_order_relaxed);
                sw_lstate_seq_even(st);
            }
            if (ad != NULL && !admitted)
                sw_adapt_refused(&r->adapt, ad, ms);
            unlock_state(v);
            goto done;
        }
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
        int verdict = sw_fast_verdict(r, st, node, n, flags, r->count);
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

/* The throttle's queue moved by the cost of n requests at its rate at now_ns (lock held):
 * forward (charge: as for n admitted now, never backwards), or back (refund: never before
 * now_ns, and not a queue saturated at the end of time) */
static void move_throttle(const struct sw_view *v, int64_t n, int64_t now_ns, bool forward)
{
    const struct sw_rule *r = v->rule;
    struct sw_lstate *st = v->st;
    struct sw_node *node = sw_lstate_node(st);
    struct sw_throttle *th = &st->thr;
    if (!forward && !(th->has_last && !th->saturated && th->last_ns > now_ns))
        return;
    double rate = r->behavior == SW_THROTTLE
                      ? r->count
                      : warm_rate(r, &st->warm, node,
                                  sw_leap_clamp(sw_node_sec(node), sw_ms_of_ns(now_ns)));
    int64_t cost = sw_throttle_cost(rate, n);
    if (!forward) {
        int64_t back = sw_sat_sub(th->last_ns, cost);
        th->last_ns = back > now_ns ? back : now_ns;
    } else if (!th->has_last || sw_sat_sub(now_ns, th->last_ns) >= cost) {
        th->last_ns = now_ns;
        th->has_last = 1;
        th->saturated = 0;
    } else if (__builtin_add_overflow(th->last_ns, cost, &th->last_ns)) {
        th->last_ns = INT64_MAX;
        th->saturated = 1;
    }
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
        struct sw_node *node = sw_lstate_node(v->st);
        if (now_ns == SW_NOW)
            now_ns = is_throttle(r) ? sw_time_ns() : sw_time_coarse_ns();
        if (is_throttle(r) && r->count > 0)
            move_throttle(v, n, now_ns, true);
        sw_node_add_at(node, SW_EV_PASS, n, sw_leap_clamp(sw_node_sec(node), sw_ms_of_ns(now_ns)));
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
    if (n > 0 && is_throttle(r) && r->count > 0)
        move_throttle(v, n, now_ns == SW_NOW ? sw_time_ns() : now_ns, false);
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
