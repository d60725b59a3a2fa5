/* sw_group.c - all or nothing across limiters (docs/design.md §14). */
#include "sw_group.h"

#include "sw_proc.h"
#include "sw_time.h"

void sw_gmember_order_private(struct sw_gmember *m)
{
    const void *lock = m->kind == SW_GM_KEYED ? sw_keyed_lock_id(m->kv)
                                              : (const void *)&m->v->st->lock;
    m->order[0] = UINT64_MAX;
    m->order[1] = (uint64_t)(uintptr_t)lock;
}

void sw_gmember_order_shared(struct sw_gmember *m, uint64_t id_hi, uint64_t id_lo)
{
    m->order[0] = id_hi == UINT64_MAX ? UINT64_MAX - 1u : id_hi;
    m->order[1] = id_lo;
}

static inline int order_cmp(const struct sw_gmember *a, const struct sw_gmember *b)
{
    if (a->order[0] != b->order[0])
        return a->order[0] < b->order[0] ? -1 : 1;
    if (a->order[1] != b->order[1])
        return a->order[1] < b->order[1] ? -1 : 1;
    return 0;
}

/* whether a member's rule paces (a throttle: it needs the full-resolution clock); lock held */
static bool paces(const struct sw_gmember *m)
{
    if (m->kind == SW_GM_KEYED)
        return m->kv->rule->base.grade == SW_GRADE_QPS &&
               m->kv->rule->base.behavior == SW_THROTTLE;
    return m->v->rule->grade == SW_GRADE_QPS && (m->v->rule->behavior == SW_THROTTLE ||
                                                  m->v->rule->behavior == SW_WARM_UP_THROTTLE);
}

/* Take a member's lock (the CAS inline: the group's cost is mostly its locks); repair the
 * state when it is taken over from a dead process, as the member's own calls do.
 * @return false when the wait gave up (sw_lock_wait_hook; the lock is not held) */
static inline bool lock_member(const struct sw_gmember *m)
{
    if (m->kind == SW_GM_KEYED)
        return sw_keyed_lock_key_or_give_up(m->kv, m->fp); /* the key's stripe's */
    int got = sw_lock_acquire_or_give_up(&m->v->st->lock, sw_token_resolve(m->v->token));
    if (got == SW_LOCK_TOOK_OVER)
        sw_lstate_repair(m->v);
    return got != SW_LOCK_GAVE_UP;
}

static inline void unlock_member(const struct sw_gmember *m)
{
    if (m->kind == SW_GM_KEYED)
        sw_keyed_unlock_key(m->kv, m->fp);
    else
        sw_lock_release(&m->v->st->lock);
}

/* The common group: limiters deciding on their locks' lines (rejecting QPS rules and fixed
 * concurrency limits at their windows' heads, no shadow, a refusal wanting no retry time;
 * sw_plan_fast_locked), decided and counted there without the general plans. Locks held.
 * @return false when a member needs the general plan (nothing done), else true (decided,
 * counted, m[i].d and refused set, out filled) */
static inline bool decide_fast(struct sw_gmember *m, const uint32_t *ord, uint32_t count,
                               int64_t now_ns, unsigned flags, struct sw_decision *out)
{
#define AT(i) (ord != NULL ? &m[ord[(i)]] : &m[(i)])
    int64_t ms = sw_ms_of_ns(now_ns);
    int verdict = SW_PASS;
    for (uint32_t i = 0; i < count; i++) {
        struct sw_gmember *x = AT(i);
        int dv = sw_plan_fast_locked(x->v, x->n, ms, flags);
        if (dv < 0)
            return false;
        x->plan_.l.d.verdict = dv;
        if (dv == SW_NEVER)
            verdict = SW_NEVER;
        else if (dv == SW_BLOCK && verdict == SW_PASS)
            verdict = SW_BLOCK;
    }
    bool commit = verdict == SW_PASS;
    for (uint32_t i = 0; i < count; i++) {
        struct sw_gmember *x = AT(i);
        struct sw_decision *d = &x->plan_.l.d;
        bool pass = d->verdict == SW_PASS;
        sw_plan_fast_count(x->v, x->n, flags, pass ? (commit ? 0 : -1)
                                                   : ((flags & SW_F_NO_BLOCK) ? -1 : 1));
        if (sw_test_in_critical != NULL)
            sw_test_in_critical(); /* tests: a process killed between two members */
        d->occupied = 0;
        d->wait_ns = 0;
        d->retry_ns = -1;
        d->now_ns = now_ns;
        d->shadowed = 0;
        x->d = d;
        x->refused = !pass;
    }
    out->verdict = verdict;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1; /* a refusal here wants none (sw_plan_fast_locked) */
    out->now_ns = now_ns;
    out->shadowed = 0;
    return true;
#undef AT
}

/* The decision over members in lock order: m[ord[i]], or m[i] when ord is NULL (the two
 * callers inline their own copy). Checked by the caller. */
static inline int decide_in_order(struct sw_gmember *m, const uint32_t *ord, uint32_t count,
                                  int64_t now_ns, unsigned flags, struct sw_decision *out)
{
#define AT(i) (ord != NULL ? &m[ord[(i)]] : &m[(i)])
    /* the locks in order; the clock wanted (the rules are read under their locks) */
    bool precise = false, limiters = true;
    for (uint32_t i = 0; i < count; i++) {
        if (!lock_member(AT(i))) {
            while (i-- > 0)
                unlock_member(AT(i));
            return SW_EBUSY;
        }
        if (!precise && now_ns == SW_NOW)
            precise = paces(AT(i));
        limiters = limiters && AT(i)->kind == SW_GM_LIMITER;
    }
    /* one time for every member, read once every lock is held: the full-resolution clock
     * when a throttle paces, else the coarse one (as the members' own decisions) */
    if (now_ns == SW_NOW)
        now_ns = precise ? sw_time_ns() : sw_time_coarse_ns();
    if (limiters && decide_fast(m, ord, count, now_ns, flags, out)) {
        for (uint32_t i = count; i-- > 0;)
            unlock_member(AT(i));
        return SW_OK;
    }
    int verdict = SW_PASS;
    for (uint32_t i = 0; i < count; i++) {
        struct sw_gmember *x = AT(i);
        const struct sw_decision *d;
        unsigned f;
        if (x->kind == SW_GM_KEYED) {
            (void)sw_keyed_plan_locked(x->kv, x->fp, x->n, now_ns, flags, &x->plan_.k);
            d = &x->plan_.k.d;
            f = x->plan_.k.flags;
        } else {
            (void)sw_plan_locked(x->v, x->n, now_ns, flags, &x->plan_.l);
            d = &x->plan_.l.d;
            f = x->plan_.l.flags;
        }
        int dv = d->verdict;
        x->refused = 0;
        if (!(f & SW_F_SHADOW) && dv != SW_PASS) { /* a shadow admits */
            x->refused = 1;
            if (dv == SW_NEVER)
                verdict = SW_NEVER;
            else if (verdict == SW_PASS)
                verdict = SW_BLOCK;
        }
    }
    bool commit = verdict == SW_PASS;
    out->verdict = verdict;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1;
    out->now_ns = now_ns;
    out->shadowed = 0;
    bool retry_known = true;
    for (uint32_t i = 0; i < count; i++) {
        struct sw_gmember *x = AT(i);
        struct sw_decision *d;
        unsigned f;
        if (x->kind == SW_GM_KEYED) {
            sw_keyed_plan_end_locked(x->kv, &x->plan_.k, commit);
            d = &x->plan_.k.d;
            f = x->plan_.k.flags;
        } else {
            sw_plan_end_locked(x->v, &x->plan_.l, commit);
            d = &x->plan_.l.d;
            f = x->plan_.l.flags;
        }
        if (sw_test_in_critical != NULL)
            sw_test_in_critical(); /* tests: a process killed between two members */
        x->d = d; /* the plan is ended: its decision becomes the member's */
        if (f & SW_F_SHADOW) { /* a shadow admits; its would-be refusal counted BLOCK */
            d->shadowed = d->verdict != SW_PASS;
            d->verdict = SW_PASS;
            d->wait_ns = 0;
            d->retry_ns = -1;
        }
        if (commit) {
            if (d->wait_ns > out->wait_ns)
                out->wait_ns = d->wait_ns;
            out->occupied |= d->occupied;
        } else if (x->refused) {
            if (d->retry_ns < 0)
                retry_known = false;
            else if (d->retry_ns > out->retry_ns)
                out->retry_ns = d->retry_ns;
        }
    }
    if (!retry_known || verdict == SW_NEVER)
        out->retry_ns = -1;
    for (uint32_t i = count; i-- > 0;)
        unlock_member(AT(i));
    return SW_OK;
#undef AT
}

int sw_group_decide(struct sw_gmember *m, uint32_t count, int64_t now_ns, unsigned flags,
                    struct sw_decision *out)
{
    uint32_t ord[SW_GROUP_MAX];
    if (m == NULL || out == NULL || count < 1 || count > SW_GROUP_MAX)
        return SW_EINVAL;
    /* the members in lock order (insertion sort: groups are small) */
    for (uint32_t i = 0; i < count; i++) {
        if (m[i].n < 1 || (m[i].kind == SW_GM_KEYED ? m[i].kv == NULL : m[i].v == NULL) ||
            (m[i].kind != SW_GM_KEYED && m[i].kind != SW_GM_LIMITER))
            return SW_EINVAL;
        uint32_t j = i;
        while (j > 0 && order_cmp(&m[ord[j - 1]], &m[i]) >= 0) {
            if (order_cmp(&m[ord[j - 1]], &m[i]) == 0)
                return SW_EINVAL; /* one state twice: its lock would be taken twice */
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = i;
    }
    return decide_in_order(m, ord, count, now_ns, flags, out);
}

int sw_group_decide_ordered(struct sw_gmember *m, uint32_t count, int64_t now_ns,
                            unsigned flags, struct sw_decision *out)
{
    return decide_in_order(m, NULL, count, now_ns, flags, out);
}
