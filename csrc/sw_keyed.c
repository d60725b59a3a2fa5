/* sw_keyed.c - a bounded table of per-key admission states (see sw_keyed.h). */
#include "sw_keyed_impl.h"

#include "sw_platform.h"
#include "sw_proc.h"
#include "sw_shm.h"
#include "sw_time.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The maintained XXH3 (vendor/xxhash.h, BSD-2-Clause, vendor/LICENSE-xxhash), inlined here
 * only: its own code is not held to the core's warning flags. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#define XXH_INLINE_ALL
#define XXH_NO_STREAM
#include "vendor/xxhash.h"
#pragma GCC diagnostic pop

uint64_t sw_keyed_hash(uint64_t seed, int tag, const void *data, size_t len)
{
    /* the tag goes into the seed (no copy of the key with a tag byte in front: XXH3 reads
     * the caller's bytes in place); every (tag, bytes) pair is still its own input */
    uint64_t h = XXH3_64bits_withSeed(data, len, seed ^ ((uint64_t)(unsigned char)tag << 56));
    return h == 0 ? 1 : h;
}

int (*volatile sw_test_random_seed)(uint64_t *out) = NULL;

int sw_keyed_random_seed(uint64_t *out)
{
    if (sw_test_random_seed != NULL)
        return sw_test_random_seed(out);
    uint64_t x = 0;
    if (sw_platform_random(&x, sizeof x) != 0)
        return SW_EOS;
    *out = x != 0 ? x : 1; /* 0 marks no seed */
    return SW_OK;
}

/* ---- the node's PASS counts on the lock's line (struct sw_kstate, hot[]) ---------------- */

static inline void raise_to(int64_t *w, int64_t v)
{
    if (v > *w)
        *w = v;
}

/* Raise the node's head buckets and lifetime total to the counts of hot[] (redoing it
 * changes nothing). */
static void hot_raise(const int64_t *hot, struct sw_node *node)
{
    struct sw_leap *rings[2] = {sw_node_sec(node), sw_node_min(node)};
    for (int k = 0; k < 2; k++) {
        int64_t *slot = (int64_t *)(uintptr_t)sw_leap_head_slot_(rings[k]);
        if (slot != NULL)
            raise_to(&slot[SW_SLOT_COUNTS + SW_EV_PASS], hot[k]);
    }
    raise_to(&node->totals[SW_EV_PASS], hot[SW_KHOT_LIFE]);
}

void sw_kt_enter(struct sw_kstate *st)
{
    hot_raise(st->hot, sw_keyed_node(st));
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    STORE_ORDER();
    for (int i = 0; i < 3; i++)
        st->hot[i] = 0;
    STORE_ORDER();
}

void sw_kt_leave(struct sw_kstate *st)
{
    struct sw_node *node = sw_keyed_node(st);
    struct sw_leap *rings[2] = {sw_node_sec(node), sw_node_min(node)};
    STORE_ORDER();
    for (int k = 0; k < 2; k++) {
        const int64_t *slot = sw_leap_head_slot_(rings[k]);
        st->hot[k] = slot != NULL ? slot[SW_SLOT_COUNTS + SW_EV_PASS] : 0;
        if (k == 0 && sw_test_in_critical != NULL)
            sw_test_in_critical();
    }
    st->hot[SW_KHOT_LIFE] = node->totals[SW_EV_PASS];
}

void sw_kt_node_add(struct sw_kstate *st, uint32_t ev, int64_t n, int64_t t)
{
    struct sw_node *node = sw_keyed_node(st);
    if (ev == SW_EV_PASS && sw_leap_at_head(sw_node_sec(node), t) &&
        sw_leap_at_head(sw_node_min(node), t)) {
        for (int i = 0; i < 3; i++)
            st->hot[i] = sw_sat_add(st->hot[i], n);
        return;
    }
    sw_kt_enter(st);
    sw_node_add_at(node, ev, n, t);
    sw_kt_leave(st);
}

void sw_keyed_settle_copy(const struct sw_kstate *hdr, struct sw_node *node)
{
    hot_raise(hdr->hot, node);
}

/* ---- per-key windows ------------------------------------------------------------------- */

static void kwin_clear(struct sw_kstate *st, struct sw_kentry *e)
{
    memset(e->counts, 0, (size_t)st->sample_count * 8u);
    kset_total(st, e, 0);
}

static void kwin_fresh(struct sw_kstate *st, struct sw_kentry *e, int64_t t)
{
    e->flags = SW_KE_WINDOW;
    e->a = kstart(st, t);
    kwin_clear(st, e);
}

/* Roll the key's window to the bucket of t (t clamped): the buckets sliding out leave. */
static void kwin_advance(struct sw_kstate *st, struct sw_kentry *e, int64_t t)
{
    if (!(e->flags & SW_KE_WINDOW)) {
        kwin_fresh(st, e, t);
        return;
    }
    int64_t cur = kstart(st, t);
    if (cur <= e->a)
        return;
    int64_t gap = sw_sat_sub(cur, e->a); /* `a` may be anything in a region */
    if (gap >= st->interval_ms) {
        kwin_clear(st, e);
    } else {
        int64_t k = gap / st->window_ms;
        uint32_t s = kslot(st, e->a);
        bool keep = keeps_total(st->sample_count);
        for (int64_t j = 0; j < k; j++) {
            if (++s == st->sample_count)
                s = 0;
            if (keep)
                e->counts[st->sample_count] =
                    sw_sat_sub(e->counts[st->sample_count], e->counts[s]);
            e->counts[s] = 0;
        }
    }
    e->a = cur;
}

/* n counted in the key's window, in bucket `slot` (and in its total, when kept). */
static void kwin_add(struct sw_kstate *st, struct sw_kentry *e, uint32_t slot, int64_t n)
{
    e->counts[slot] = sw_sat_add(e->counts[slot], n);
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    if (keeps_total(st->sample_count))
        e->counts[st->sample_count] = sw_sat_add(e->counts[st->sample_count], n);
}

/* A key's throttle: its state in entry e (a fresh one unless the entry paces). */
static void kthr_load(const struct sw_kentry *e, struct sw_throttle *th)
{
    sw_throttle_init(th);
    if (e->flags & SW_KE_PACING) {
        th->last_ns = e->a;
        th->has_last = (e->flags & SW_KE_HAS_LAST) ? 1u : 0u;
        th->saturated = (e->flags & SW_KE_SATURATED) ? 1u : 0u;
    }
}

/* The throttle's state kept in entry e, which paces from now on. */
static void kthr_store(struct sw_kentry *e, const struct sw_throttle *th)
{
    e->a = th->last_ns;
    e->flags = SW_KE_PACING | (th->has_last ? SW_KE_HAS_LAST : 0u) |
               (th->saturated ? SW_KE_SATURATED : 0u);
}

/* ns from now_ns until ms time `at_ms`, never negative (as sw_limiter.c) */
static int64_t ns_until(int64_t at_ms, int64_t now_ns)
{
    int64_t d = sw_sat_sub(sw_sat_mul(at_ms, INT64_C(1000000)), now_ns < 0 ? 0 : now_ns);
    return d < 0 ? 0 : d;
}

/* sw_reject_retry_ms over a key's window (already rolled to t, the ms of now_ns): the same
 * formula, as ns from now_ns (-1: never). */
static int64_t kwin_retry_ns(const struct sw_kstate *st, const struct sw_kentry *e, int64_t t,
                             int64_t n, double limit, int64_t now_ns)
{
    if ((double)n > limit)
        return -1;
    int64_t cur = e->a, gone = 0, total = ktotal(st, e);
    for (int64_t k = (int64_t)st->sample_count - 1; k >= 0; k--) {
        int64_t start = sw_sat_sub(cur, k * st->window_ms);
        if (start >= 0)
            gone = sw_sat_add(gone, e->counts[kslot(st, start)]);
        if (sw_reject_fits(sw_sat_sub(total, gone), n, limit)) {
            int64_t at = sw_sat_sub(sw_sat_add(start, st->interval_ms), t);
            return ns_until(sw_sat_add(t, at < 0 ? 0 : at), now_ns);
        }
    }
    return -1;
}

/* ---- settings ---------------------------------------------------------------------------- */

int sw_krule_init(struct sw_krule *r, const struct sw_limiter_cfg *cfg)
{
    if (r == NULL || cfg == NULL || cfg->behavior == SW_WARM_UP ||
        cfg->behavior == SW_WARM_UP_THROTTLE)
        return SW_EINVAL;
    r->over = NULL;
    r->n_over = 0;
    return sw_rule_init(&r->base, cfg);
}

double sw_krule_count(const struct sw_krule *r, uint64_t fp, double *limit)
{
    if (r->n_over > 0) {
        uint32_t lo = 0, hi = r->n_over;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2u;
            if (r->over[mid].fp < fp)
                lo = mid + 1u;
            else
                hi = mid;
        }
        if (lo < r->n_over && r->over[lo].fp == fp) {
            *limit = r->over[lo].limit;
            return r->over[lo].count;
        }
    }
    *limit = r->base.limit;
    return r->base.count;
}

/* ---- decisions ---------------------------------------------------------------------------- */

/* A refusal with no wait and no retry time, until decided otherwise. */
static void refused(struct sw_decision *out)
{
    out->verdict = SW_BLOCK;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1;
    out->shadowed = 0;
}

/* A decision of n for key fp (entry e, number i, or NULL) counted in the table: a pass, with
 * the key's requests in flight for a concurrency rule or an entry; a refusal unless
 * SW_F_NO_BLOCK (a shadow rule's too). */
static void count_verdict(const struct sw_kview *v, bool pass, int64_t n, int64_t tn,
                          unsigned flags, bool conc, uint32_t i, struct sw_kentry *e)
{
    struct sw_kstate *st = v->st;
    if (pass) {
        sw_kt_node_add(st, SW_EV_PASS, n, tn);
        if (e != NULL && (conc || (flags & SW_F_ENTRY)))
            sw_kt_add_in_flight(v, i, e, n);
    } else if (!(flags & SW_F_NO_BLOCK)) {
        sw_kt_node_add(st, SW_EV_BLOCK, n, tn);
        if (flags & SW_F_SHADOW) {
            struct sw_node *node = sw_keyed_node(st);
            node->shadow_block = sw_sat_add(node->shadow_block, n);
        }
    }
}

/* What a decision of n for key fp reads of the rule: under the table's lock only
 * (sw_keyed_set_rule swaps the rule under it). */
struct kterms {
    const struct sw_rule *r;
    double limit, count; /* the key's override's, or the rule's */
    bool conc, thr;
    bool never; /* n can never pass: decided without taking an entry */
};

static struct kterms kterms_of(const struct sw_krule *rule, uint64_t fp, int64_t n)
{
    struct kterms k;
    k.r = &rule->base;
    k.limit = k.r->limit;
    k.count = k.r->count;
    if (rule->n_over > 0)
        k.count = sw_krule_count(rule, fp, &k.limit);
    k.conc = k.r->grade == SW_GRADE_CONCURRENCY;
    k.thr = is_throttle(k.r);
    k.never = k.conc ? (double)n > k.count
                     : (k.count <= 0 || (!k.thr && (double)n > k.limit));
    return k;
}

int sw_keyed_decide(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns,
                    unsigned flags, struct sw_decision *out)
{
    if (n < 1)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    /* the key's home entry (and the line after it) is fetched while the lock is taken and
     * the clock read: its address needs only layout constants, no lock */
    const char *home = (const char *)entry_at(st, home_of(st, fp));
    __builtin_prefetch(home, 1, 3);
    __builtin_prefetch(home + 64, 1, 3);
    refused(out);
    if (!lock_table_or_give_up(v))
        return SW_EBUSY;
    struct kterms k = kterms_of(v->rule, fp, n);
    if (k.r->shadow)
        flags |= SW_F_SHADOW;
    if (flags & SW_F_SHADOW)
        flags &= ~SW_F_NO_BLOCK;
    if (now_ns == SW_NOW)
        now_ns = k.thr ? sw_time_ns() : sw_time_coarse_ns();
    out->now_ns = now_ns;
    int64_t t_ms = sw_ms_of_ns(now_ns);
    struct sw_leap *sec = sw_node_sec(node);
    int64_t tn = sw_leap_clamp(sec, t_ms);
    uint32_t i = sw_kt_get_key(v, fp, now_ns, !(k.never && (k.conc || k.thr)));
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (e != NULL)
        e->last_use = (uint32_t)++st->tick;
    if (k.never) {
        out->verdict = SW_NEVER;
        if (e != NULL && !k.conc && !k.thr)
            kwin_advance(st, e, kclamp(e, t_ms)); /* the clamp records the time, as ever */
    } else if (e == NULL) {
        /* the table is full of keys with requests in flight */
    } else if (k.conc) {
        if (sw_reject_fits(e->in_flight, n, k.count))
            out->verdict = SW_PASS;
    } else if (k.thr) {
        struct sw_throttle th;
        kthr_load(e, &th);
        int64_t cost = sw_throttle_cost(k.count, n);
        if (sw_throttle_reserve(&th, cost, now_ns, k.r->max_queue_ns, (flags & SW_F_TRY) != 0,
                                &out->wait_ns, &out->retry_ns))
            out->verdict = SW_PASS;
        kthr_store(e, &th);
    } else {
        int64_t t = kclamp(e, t_ms);
        uint32_t slot;
        if ((e->flags & SW_KE_WINDOW) && e->a == sec->newest && sw_leap_in_newest(sec, t) &&
            (uint32_t)sec->newest_idx < st->sample_count) {
            /* t in the key's newest bucket, which is the table's newest: nothing rolls, and
             * the table's ring knows the bucket's slot (no division) */
            slot = (uint32_t)sec->newest_idx;
        } else {
            kwin_advance(st, e, t);
            slot = kslot(st, e->a);
        }
        if (sw_reject_fits(ktotal(st, e), n, k.limit)) {
            out->verdict = SW_PASS;
            kwin_add(st, e, slot, n);
        } else if (flags & SW_F_RETRY) {
            out->retry_ns = kwin_retry_ns(st, e, t, n, k.limit, now_ns);
        }
    }
    count_verdict(v, out->verdict == SW_PASS, n, tn, flags, k.conc, i, e);
    unlock_table(v);
    if (flags & SW_F_SHADOW) {
        out->shadowed = out->verdict != SW_PASS;
        out->verdict = SW_PASS;
        out->wait_ns = 0;
        out->retry_ns = -1;
    }
    return SW_OK;
}

size_t sw_keyed_node_size(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc = node_cfg(interval_ms, sample_count);
    return sw_node_size(&nc);
}

int sw_keyed_node_validate(struct sw_node *node, int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc = node_cfg(interval_ms, sample_count);
    return sw_node_validate(node, &nc);
}

/* Every stripe's lock held: the table's count of keys recounted when a repair asked for it. */
static void recount_if_asked(const struct sw_kview *v)
{
    if (v->st->n_stripes > 1 && atomic_load_explicit(&v->st->recount, memory_order_relaxed))
        sw_kt_recount(v->st);
}

void sw_keyed_lock(const struct sw_kview *v)
{
    struct sw_kview sv;
    for (uint32_t i = 0; i < v->st->n_stripes; i++)
        lock_table(stripe_view(v, i, &sv));
    recount_if_asked(v);
}

bool sw_keyed_lock_or_give_up(const struct sw_kview *v)
{
    struct sw_kview sv;
    for (uint32_t i = 0; i < v->st->n_stripes; i++) {
        if (!lock_table_or_give_up(stripe_view(v, i, &sv))) {
            while (i-- > 0)
                unlock_table(stripe_view(v, i, &sv));
            return false;
        }
    }
    recount_if_asked(v);
    return true;
}

void sw_keyed_unlock(const struct sw_kview *v)
{
    struct sw_kview sv;
    for (uint32_t i = v->st->n_stripes; i-- > 0;)
        unlock_table(stripe_view(v, i, &sv));
}

bool sw_keyed_lock_key_or_give_up(const struct sw_kview *v, uint64_t fp)
{
    struct sw_kview kbuf;
    return lock_table_or_give_up(key_view(v, fp, &kbuf));
}

void sw_keyed_unlock_key(const struct sw_kview *v, uint64_t fp)
{
    struct sw_kview kbuf;
    unlock_table(key_view(v, fp, &kbuf));
}

const void *sw_keyed_lock_id(const struct sw_kview *v)
{
    return &v->st->lock;
}

void sw_keyed_totals(const struct sw_kview *v, struct sw_totals *out)
{
    struct sw_kview sv;
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < v->st->n_stripes; i++) {
        const struct sw_kview *s = stripe_view(v, i, &sv);
        struct sw_totals t;
        lock_table(s);
        sw_kt_enter(s->st);
        sw_node_totals(sw_keyed_node(s->st), &t);
        sw_kt_leave(s->st);
        unlock_table(s);
        out->pass = sw_sat_add(out->pass, t.pass);
        out->block = sw_sat_add(out->block, t.block);
        out->exception = sw_sat_add(out->exception, t.exception);
        out->success = sw_sat_add(out->success, t.success);
        out->occupied_pass = sw_sat_add(out->occupied_pass, t.occupied_pass);
        out->rt = sw_sat_add(out->rt, t.rt);
        out->shadow_block = sw_sat_add(out->shadow_block, t.shadow_block);
    }
}

static int kexit_as(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms, int outcome,
                    int64_t now_ns, bool may_give_up)
{
    if (n < 0 || rt_ms < 0)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    if (!may_give_up)
        lock_table(v);
    else if (!lock_table_or_give_up(v))
        return SW_EBUSY; /* nothing counted, the count stays held: the caller may retry */
    uint32_t i = lookup(st, fp);
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (outcome != SW_OUT_NONE) {
        if (now_ns == SW_NOW)
            now_ns = sw_time_coarse_ns();
        int64_t t = sw_ms_of_ns(now_ns);
        sw_kt_enter(st);
        sw_node_add_outcome(node, outcome, n, rt_ms, t);
        sw_kt_leave(st);
        /* a private limiter's window sees this time too (its clamp) */
        if (e != NULL && (e->flags & SW_KE_WINDOW))
            kwin_advance(st, e, kclamp(e, t));
    }
    if (e != NULL) {
        e->last_use = (uint32_t)++st->tick;
        sw_kt_add_in_flight(v, i, e, -(e->in_flight > n ? n : e->in_flight > 0 ? e->in_flight : 0));
    }
    unlock_table(v);
    return SW_OK;
}

int sw_keyed_exit(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms, int outcome,
                  int64_t now_ns)
{
    return kexit_as(v, fp, n, rt_ms, outcome, now_ns, false);
}

int sw_keyed_exit_or_give_up(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms,
                             int outcome, int64_t now_ns)
{
    return kexit_as(v, fp, n, rt_ms, outcome, now_ns, true);
}

int sw_keyed_release(const struct sw_kview *v, uint64_t fp, int64_t n)
{
    int rc = SW_OK;
    if (n < 1)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    if (!lock_table_or_give_up(v))
        return SW_EBUSY; /* the count stays held: the caller may try again */
    uint32_t i = lookup(st, fp);
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (e == NULL || e->in_flight < n) {
        rc = SW_ESTATE;
    } else {
        e->last_use = (uint32_t)++st->tick;
        sw_kt_add_in_flight(v, i, e, -n);
    }
    unlock_table(v);
    return rc;
}

int64_t sw_keyed_in_flight(const struct sw_kview *v, uint64_t fp)
{
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    lock_table(v);
    uint32_t i = lookup(v->st, fp);
    int64_t x = i != UINT32_MAX ? entry_at(v->st, i)->in_flight : 0;
    unlock_table(v);
    return x;
}

int sw_keyed_count(const struct sw_kview *v, uint32_t ev, int64_t n, int64_t now_ns)
{
    if (ev >= SW_EV_DEFAULT_COUNT)
        return SW_EEVENT;
    if (n < 0)
        return SW_EINVAL;
    lock_table(v);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    sw_kt_enter(v->st);
    sw_node_add(sw_keyed_node(v->st), ev, n, sw_ms_of_ns(now_ns));
    sw_kt_leave(v->st);
    unlock_table(v);
    return SW_OK;
}

int sw_keyed_count_shadow_block(const struct sw_kview *v, int64_t n, int64_t now_ns)
{
    if (n < 0)
        return SW_EINVAL;
    lock_table(v);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    sw_kt_enter(v->st);
    sw_node_add_shadow_block(sw_keyed_node(v->st), n, sw_ms_of_ns(now_ns));
    sw_kt_leave(v->st);
    unlock_table(v);
    return SW_OK;
}

/* One stripe's statistics (as sw_keyed_stats). */
static void stripe_stats(const struct sw_kview *v, int64_t now_ns, struct sw_stats *out,
                         int64_t *evicted, int64_t *keys)
{
    struct sw_node *node = sw_keyed_node(v->st);
    struct sw_leap *sec = sw_node_sec(node);
    lock_table(v);
    sw_kt_enter(v->st);
    int64_t t = sw_leap_clamp(sec, sw_ms_of_ns(now_ns));
    out->min_rt = sw_leap_min_rt(sec, NULL, t);
    out->pass = sw_leap_sum(sec, NULL, SW_EV_PASS, t);
    out->block = sw_leap_sum(sec, NULL, SW_EV_BLOCK, t);
    out->success = sw_leap_sum(sec, NULL, SW_EV_SUCCESS, t);
    out->exception = sw_leap_sum(sec, NULL, SW_EV_EXCEPTION, t);
    out->rt_sum = sw_leap_sum(sec, NULL, SW_EV_RT, t);
    out->occupied_pass = 0;
    out->in_flight = node->in_flight;
    out->waiting = 0;
    *evicted = v->st->evicted;
    *keys = v->st->n_live;
    sw_kt_leave(v->st);
    unlock_table(v);
}

void sw_keyed_stats(const struct sw_kview *v, int64_t now_ns, struct sw_stats *out,
                    int64_t *evicted, int64_t *keys)
{
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    stripe_stats(v, now_ns, out, evicted, keys);
    struct sw_kview sv;
    for (uint32_t i = 1; i < v->st->n_stripes; i++) {
        struct sw_stats s;
        int64_t ev, k;
        stripe_stats(stripe_view(v, i, &sv), now_ns, &s, &ev, &k);
        /* (a stripe without data reads SW_MIN_RT_INIT, the most a bucket's minimum is) */
        if (s.min_rt < out->min_rt)
            out->min_rt = s.min_rt;
        out->pass = sw_sat_add(out->pass, s.pass);
        out->block = sw_sat_add(out->block, s.block);
        out->success = sw_sat_add(out->success, s.success);
        out->exception = sw_sat_add(out->exception, s.exception);
        out->rt_sum = sw_sat_add(out->rt_sum, s.rt_sum);
        out->in_flight = sw_sat_add(out->in_flight, s.in_flight);
        *evicted = sw_sat_add(*evicted, ev);
        *keys += k;
    }
}

uint32_t sw_keyed_len(const struct sw_kview *v)
{
    struct sw_kview sv;
    uint32_t x = 0;
    for (uint32_t i = 0; i < v->st->n_stripes; i++) {
        const struct sw_kview *s = stripe_view(v, i, &sv);
        lock_table(s);
        x += s->st->n_live;
        unlock_table(s);
    }
    return x;
}

/* ---- plans (sw_group.c): decide a key without counting, then commit or not -------------- */

int sw_keyed_plan_locked(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns,
                         unsigned flags, struct sw_kplan *p)
{
    if (n < 1)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    struct kterms k = kterms_of(v->rule, fp, n);
    if (k.r->shadow)
        flags |= SW_F_SHADOW; /* (a shadow keeps SW_F_NO_BLOCK here, as sw_plan_locked) */
    if (now_ns == SW_NOW)
        now_ns = k.thr ? sw_time_ns() : sw_time_coarse_ns();
    struct sw_decision *out = &p->d;
    refused(out);
    out->now_ns = now_ns;
    p->fp = fp;
    p->n = n;
    p->flags = flags;
    p->conc = k.conc;
    p->has_thr = 0;
    p->t_ms = sw_ms_of_ns(now_ns);
    p->tn = sw_leap_clamp(sw_node_sec(node), p->t_ms);
    uint32_t i = lookup(st, fp);
    p->entry = i;
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (k.never) {
        out->verdict = SW_NEVER;
    } else if (e == NULL) {
        /* a new key starts empty (its window, its throttle, nothing in flight): it passes
         * when it can be held (a throttle's first request at once) */
        if (sw_kt_can_insert(st, fp)) {
            out->verdict = SW_PASS;
            if (k.thr) {
                sw_throttle_init(&p->thr);
                int64_t w, rt;
                (void)sw_throttle_reserve(&p->thr, sw_throttle_cost(k.count, n), now_ns,
                                          k.r->max_queue_ns, true, &w, &rt);
                p->has_thr = 1;
            }
        }
    } else if (k.conc) {
        if (sw_reject_fits(e->in_flight, n, k.count))
            out->verdict = SW_PASS;
    } else if (k.thr) {
        kthr_load(e, &p->thr);
        if (sw_throttle_reserve(&p->thr, sw_throttle_cost(k.count, n), now_ns, k.r->max_queue_ns,
                                (flags & SW_F_TRY) != 0, &out->wait_ns, &out->retry_ns)) {
            out->verdict = SW_PASS;
            p->has_thr = 1;
        }
    } else {
        /* the key's window rolls to t (the buckets sliding out leave: no count changes) */
        int64_t t = kclamp(e, p->t_ms);
        kwin_advance(st, e, t);
        if (sw_reject_fits(ktotal(st, e), n, k.limit)) {
            out->verdict = SW_PASS;
        } else if (flags & SW_F_RETRY) {
            out->retry_ns = kwin_retry_ns(st, e, t, n, k.limit, now_ns);
        }
    }
    return SW_OK;
}

void sw_keyed_plan_end_locked(const struct sw_kview *v, const struct sw_kplan *p, bool commit)
{
    struct sw_kview kbuf;
    v = key_view(v, p->fp, &kbuf);
    struct sw_kstate *st = v->st;
    int64_t n = p->n;
    bool pass = p->d.verdict == SW_PASS;
    uint32_t i = p->entry;
    struct sw_kentry *e = NULL;
    if (pass) {
        if (!commit)
            return;
        if (i == UINT32_MAX)
            i = sw_kt_get_key(v, p->fp, p->d.now_ns, true); /* can_insert said it can */
        e = i != UINT32_MAX ? entry_at(st, i) : NULL;
        if (e != NULL) {
            e->last_use = (uint32_t)++st->tick;
            if (p->has_thr) {
                kthr_store(e, &p->thr);
            } else if (!p->conc) {
                kwin_advance(st, e, kclamp(e, p->t_ms));
                kwin_add(st, e, kslot(st, e->a), n);
            }
        }
    }
    count_verdict(v, pass, n, p->tn, p->flags, p->conc, i, e);
}

int sw_keyed_charge(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns)
{
    if (n < 0)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    lock_table(v);
    const struct sw_rule *r = &v->rule->base;
    if (r->grade == SW_GRADE_CONCURRENCY || n == 0) {
        unlock_table(v);
        return n == 0 ? SW_OK : SW_ESTATE;
    }
    double limit, count = sw_krule_count(v->rule, fp, &limit);
    bool thr = is_throttle(r);
    if (now_ns == SW_NOW)
        now_ns = thr ? sw_time_ns() : sw_time_coarse_ns();
    int64_t t_ms = sw_ms_of_ns(now_ns);
    int64_t tn = sw_leap_clamp(sw_node_sec(node), t_ms);
    uint32_t i = sw_kt_get_key(v, fp, now_ns, true);
    if (i != UINT32_MAX) { /* (a table full of keys in flight: the table's count only) */
        struct sw_kentry *e = entry_at(st, i);
        e->last_use = (uint32_t)++st->tick;
        if (thr) {
            struct sw_throttle th;
            kthr_load(e, &th);
            if (count > 0) { /* the queue moves by the cost of n, as for n admitted now */
                int64_t w, rt;
                (void)sw_throttle_reserve(&th, sw_throttle_cost(count, n), now_ns, INT64_MAX,
                                          false, &w, &rt);
            }
            kthr_store(e, &th);
        } else {
            kwin_advance(st, e, kclamp(e, t_ms));
            kwin_add(st, e, kslot(st, e->a), n);
        }
    }
    sw_kt_node_add(st, SW_EV_PASS, n, tn);
    unlock_table(v);
    return SW_OK;
}
