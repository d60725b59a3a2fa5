/* fuzz_group.c - mode 6 (first byte 8 mod 16): all or nothing over a group (sw_group.c).
 *
 * Decides groups (sw_group.c) of 1-4 private limiters and keyed tables (reject, warm-up,
 * throttle, concurrency, shadow) against copies of the members decided alone: the group's
 * verdict, wait and retry, each member's decision, and all or nothing: admitted, each member's
 * counts, in flight, throttle slot and payback are its lone copy's; refused, a refuser's are
 * its lone copy's (BLOCK) and an admitter's are unchanged (a lone keyed refusal may take an
 * entry that a plan does not: keys held are not compared then).
 */
#include "fuzz.h"

/* A member: a private limiter or a keyed table (one key of it per decision), with two
 * scratch copies of its state (flat, pointer-free): before the group, and decided alone. */
struct gmem {
    int keyed;
    size_t sz;
    void *real, *pre, *ind;
    struct sw_rule rule;
    struct sw_krule krule;
};
static const uint64_t k_gfp[] = {0x1111111111111111ull, 0x2222222222222222ull,
                                 0x3333333333333333ull};

/* What a member's state shows: its window and lifetime counts, in flight (per key), the
 * throttle's slot and a warm-up's payback (a plan's token sync is not compared: it changes
 * no count and no later decision). */
struct gsnap {
    struct sw_stats s;
    struct sw_totals t;
    int64_t thr_last, paid_until, keys, key_in_flight[3];
    uint32_t thr_has;
};
static void g_views(struct gmem *g, void *st, struct sw_view *v, struct sw_kview *kv)
{
    memset(v, 0, sizeof *v);
    memset(kv, 0, sizeof *kv);
    if (g->keyed) {
        kv->st = st;
        kv->rule = &g->krule;
        kv->token = SW_LOCK_PRIVATE;
        kv->my_slot = -1;
    } else {
        v->st = &((struct sw_limiter *)st)->st;
        v->rule = &g->rule;
        v->token = SW_LOCK_PRIVATE;
        v->my_slot = -1;
    }
}
static void g_snap(struct gmem *g, void *st, int64_t now, struct gsnap *o)
{
    struct sw_view v;
    struct sw_kview kv;
    g_views(g, st, &v, &kv);
    memset(o, 0, sizeof *o);
    if (g->keyed) {
        int64_t evicted;
        sw_keyed_stats(&kv, now, &o->s, &evicted, &o->keys);
        sw_keyed_totals(&kv, &o->t);
        for (int k = 0; k < 3; k++)
            o->key_in_flight[k] = sw_keyed_in_flight(&kv, k_gfp[k]);
    } else {
        struct sw_lstate *ls = v.st;
        sw_stats_read(&v, now, &o->s);
        sw_node_totals(sw_lstate_node(ls), &o->t);
        o->thr_last = ls->thr.last_ns;
        o->thr_has = ls->thr.has_last;
        o->paid_until = ls->warm.paid_until_ms;
    }
}
static void g_expect_same(const struct gsnap *g, const struct gsnap *e, unsigned i,
                          const char *what)
{
    const int64_t gw[] = {g->s.pass, g->s.block, g->s.success, g->s.exception, g->s.rt_sum,
                          g->s.min_rt, g->s.in_flight, g->s.waiting, g->s.occupied_pass,
                          g->t.pass, g->t.block, g->t.exception, g->t.success,
                          g->t.occupied_pass, g->thr_last, g->thr_has, g->paid_until, g->keys,
                          g->key_in_flight[0], g->key_in_flight[1], g->key_in_flight[2]};
    const int64_t ew[] = {e->s.pass, e->s.block, e->s.success, e->s.exception, e->s.rt_sum,
                          e->s.min_rt, e->s.in_flight, e->s.waiting, e->s.occupied_pass,
                          e->t.pass, e->t.block, e->t.exception, e->t.success,
                          e->t.occupied_pass, e->thr_last, e->thr_has, e->paid_until, e->keys,
                          e->key_in_flight[0], e->key_in_flight[1], e->key_in_flight[2]};
    static const char *const names[] = {
        "pass", "block", "success", "exception", "rt_sum", "min_rt", "in_flight", "waiting",
        "occupied_pass", "total pass", "total block", "total exception", "total success",
        "total occupied", "throttle slot", "throttle has_last", "warm-up payback", "keys",
        "key 0 in flight", "key 1 in flight", "key 2 in flight"};
    for (size_t k = 0; k < sizeof gw / sizeof gw[0]; k++)
        if (gw[k] != ew[k])
            FAIL("member %u %s: %s %lld, expected %lld", i, what, names[k], (long long)gw[k],
                 (long long)ew[k]);
}

#define G_MAX 4u

void run_group(struct rd *r)
{
    unsigned count = 1u + u8(r) % G_MAX;
    struct gmem gs[G_MAX];
    struct sw_view v[G_MAX];
    struct sw_kview kv[G_MAX];
    int64_t w_ms = 1000;
    memset(gs, 0, sizeof gs);
    for (unsigned i = 0; i < count; i++) {
        struct gmem *g = &gs[i];
        unsigned c0 = u8(r), c1 = u8(r), c2 = u8(r), kb = u8(r);
        struct sw_limiter_cfg c;
        limiter_cfg_of(c0, c1, c2, &c);
        c.shadow = (kb & 0x0eu) == 0x0eu; /* a shadow member now and then */
        g->keyed = (kb & 1u) != 0;
        if (c.interval_ms % (int64_t)c.sample_count != 0)
            c.sample_count = 2;
        if (g->keyed && (c.behavior == SW_WARM_UP || c.behavior == SW_WARM_UP_THROTTLE))
            c.behavior = SW_THROTTLE; /* a keyed table has no warm-up */
        if (sw_limiter_check(&c) != SW_OK)
            c.behavior = SW_REJECT; /* e.g. warm-up with a cold factor the count refuses */
        if (sw_limiter_check(&c) != SW_OK)
            c.count = 5; /* e.g. a fractional concurrency */
        if (sw_limiter_check(&c) != SW_OK)
            FAIL("member cfg refused");
        uint32_t max_keys = 1u + ((kb >> 4) & 1u); /* full tables: keys wait or evict */
        if (g->keyed) {
            EXPECT_EQ(sw_krule_init(&g->krule, &c), SW_OK, "keyed rule");
            g->sz = sw_keyed_size(c.interval_ms, c.sample_count, max_keys, false);
        } else {
            g->sz = sw_limiter_size(&c);
        }
        g->real = calloc(1, g->sz);
        g->pre = malloc(g->sz);
        g->ind = malloc(g->sz);
        if (g->sz == 0 || g->real == NULL || g->pre == NULL || g->ind == NULL)
            abort();
        if (g->keyed) {
            EXPECT_EQ(sw_keyed_init(g->real, c.interval_ms, c.sample_count, max_keys, false),
                      SW_OK, "keyed init");
        } else {
            EXPECT_EQ(sw_limiter_init(g->real, &c), SW_OK, "member init");
            g->rule = ((struct sw_limiter *)g->real)->rule;
        }
        g_views(g, g->real, &v[i], &kv[i]);
        if (i == 0)
            w_ms = c.interval_ms / (int64_t)c.sample_count;
    }
    int64_t now = (int64_t)u32(r) * 1000;
    static const unsigned k_gflags[] = {0, SW_F_TRY, SW_F_NO_BLOCK, SW_F_ENTRY, SW_F_RETRY,
                                        SW_F_PRIORITIZED, SW_F_TRY | SW_F_RETRY,
                                        SW_F_ENTRY | SW_F_NO_BLOCK};

    for (g_op = 0; r->i < r->n && g_op < 2000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        switch (op % 8u) {
        case 0: case 1: case 2: case 3: { /* a group decision */
            struct sw_gmember gm[G_MAX];
            struct sw_decision e[G_MAX], out;
            struct gsnap before[G_MAX], after[G_MAX], exp[G_MAX];
            unsigned idx[G_MAX];
            unsigned k = 1u + a % count; /* members taken: k of them, rotated */
            unsigned rot = (a >> 2) % count;
            unsigned flags = k_gflags[(a >> 5) & 7u] | (op & 0x10u ? SW_F_RETRY : 0u);
            memset(gm, 0, sizeof gm);
            int expect = SW_PASS;
            bool loose[G_MAX]; /* a shadow's would-be refusal with NO_BLOCK: not compared */
            for (unsigned j = 0; j < k; j++) {
                unsigned i = (j + rot) % count;
                struct gmem *g = &gs[i];
                unsigned b = u8(r);
                idx[j] = i;
                gm[j].n = (b & 0xc0u) == 0xc0u ? (int64_t)(b & 0x3fu) * 37 + 1
                                               : (int64_t)(b & 3u) + 1;
                /* the reference: a copy of the member deciding alone */
                memcpy(g->pre, g->real, g->sz);
                memcpy(g->ind, g->real, g->sz);
                struct sw_view iv;
                struct sw_kview ikv;
                g_views(g, g->ind, &iv, &ikv);
                if (g->keyed) {
                    gm[j].kind = SW_GM_KEYED;
                    gm[j].kv = &kv[i];
                    gm[j].fp = k_gfp[(b >> 2) % 3u];
                    EXPECT_EQ(sw_keyed_decide(&ikv, gm[j].fp, gm[j].n, now,
                                              flags & ~SW_F_PRIORITIZED, &e[j]),
                              SW_OK, "key alone");
                } else {
                    gm[j].kind = SW_GM_LIMITER;
                    gm[j].v = &v[i];
                    EXPECT_EQ(sw_decide(&iv, gm[j].n, now, flags, &e[j]), SW_OK, "alone");
                }
                sw_gmember_order_private(&gm[j]);
                if (e[j].verdict == SW_NEVER)
                    expect = SW_NEVER;
                else if (e[j].verdict != SW_PASS && expect == SW_PASS)
                    expect = SW_BLOCK;
                loose[j] = e[j].shadowed && (flags & SW_F_NO_BLOCK);
                g_snap(g, g->pre, now, &before[j]);
                g_snap(g, g->ind, now, &exp[j]);
            }
            if (op & 0x20u) { /* the binding's checked group: sorted by the lock order */
                for (unsigned x = 1; x < k; x++)
                    for (unsigned y = x; y > 0 && (gm[y - 1].order[0] > gm[y].order[0] ||
                                                   (gm[y - 1].order[0] == gm[y].order[0] &&
                                                    gm[y - 1].order[1] > gm[y].order[1]));
                         y--) {
#define G_SWAP(T, arr) do { T t_ = arr[y]; arr[y] = arr[y - 1]; arr[y - 1] = t_; } while (0)
                        G_SWAP(struct sw_gmember, gm);
                        G_SWAP(struct sw_decision, e);
                        G_SWAP(struct gsnap, before);
                        G_SWAP(struct gsnap, exp);
                        G_SWAP(unsigned, idx);
                        G_SWAP(bool, loose);
#undef G_SWAP
                    }
                EXPECT_EQ(sw_group_decide_ordered(gm, k, now, flags, &out), SW_OK, "ordered");
            } else {
                EXPECT_EQ(sw_group_decide(gm, k, now, flags, &out), SW_OK, "group decide");
            }
            EXPECT_EQ(out.verdict, expect, "group verdict");
            int64_t wait = 0, retry = -1;
            bool known = true;
            for (unsigned j = 0; j < k; j++) {
                unsigned i = idx[j];
                g_snap(&gs[i], gs[i].real, now, &after[j]);
                EXPECT_EQ(gm[j].refused, e[j].verdict != SW_PASS, "member refused");
                EXPECT_EQ(gm[j].d->verdict, e[j].verdict, "member verdict");
                EXPECT_EQ(gm[j].d->shadowed, e[j].shadowed, "member shadowed");
                /* alone, a refused new key takes an entry (evicting one not in flight); a
                 * group's plan takes it only when admitted: the counts agree, the keys
                 * held may not */
                if (gs[i].keyed && (e[j].verdict != SW_PASS || e[j].shadowed))
                    exp[j].keys = after[j].keys;
                if (expect == SW_PASS) {
                    EXPECT_EQ(gm[j].d->wait_ns, e[j].wait_ns, "member wait");
                    EXPECT_EQ(gm[j].d->occupied, e[j].occupied, "member occupied");
                    if (e[j].wait_ns > wait)
                        wait = e[j].wait_ns;
                    if (!loose[j])
                        g_expect_same(&after[j], &exp[j], i, "admitted with the group");
                } else if (gm[j].refused) {
                    EXPECT_EQ(gm[j].d->retry_ns, e[j].retry_ns, "member retry");
                    if (e[j].retry_ns < 0)
                        known = false;
                    else if (e[j].retry_ns > retry)
                        retry = e[j].retry_ns;
                    g_expect_same(&after[j], &exp[j], i, "refused");
                } else if (e[j].shadowed) { /* a shadow's would-be refusal counts BLOCK */
                    if (!loose[j])
                        g_expect_same(&after[j], &exp[j], i, "shadow, the group refused");
                } else {
                    g_expect_same(&after[j], &before[j], i, "admitted, the group refused");
                }
            }
            if (expect == SW_PASS)
                EXPECT_EQ(out.wait_ns, wait, "group wait");
            else
                EXPECT_EQ(out.retry_ns, known && expect != SW_NEVER ? retry : -1,
                          "group retry");
            break;
        }
        case 4: { /* a member alone */
            unsigned i = a % count;
            struct sw_decision d;
            int64_t n = 1 + (int64_t)(u8(r) & 3u);
            if (gs[i].keyed)
                (void)sw_keyed_decide(&kv[i], k_gfp[(a >> 2) % 3u], n, now, (a >> 4) & 0xdu,
                                      &d);
            else
                (void)sw_decide(&v[i], n, now, (a >> 2) & 0x1fu, &d);
            break;
        }
        case 5: { /* an exit */
            unsigned i = a % count;
            int64_t n = 1 + (int64_t)((a >> 2) & 3u), rt = (int64_t)u8(r);
            int outcome = (int)((a >> 4) % 3u);
            if (gs[i].keyed)
                (void)sw_keyed_exit(&kv[i], k_gfp[(a >> 6) % 3u], n, rt, outcome, now);
            else
                (void)sw_exit(&v[i], n, rt, outcome, now);
            break;
        }
        case 6: { /* refused whole, nothing done: n < 1, one state twice */
            struct sw_gmember gm[2];
            struct sw_decision out;
            struct gsnap b0, a0;
            unsigned i = a % count;
            memset(gm, 0, sizeof gm);
            for (int j = 0; j < 2; j++) {
                gm[j].kind = gs[i].keyed ? SW_GM_KEYED : SW_GM_LIMITER;
                gm[j].v = &v[i];
                gm[j].kv = &kv[i];
                gm[j].fp = k_gfp[j];
                gm[j].n = 1;
                sw_gmember_order_private(&gm[j]);
            }
            gm[1].n = (a & 0x80u) ? 1 : 0;
            g_snap(&gs[i], gs[i].real, now, &b0);
            EXPECT_EQ(sw_group_decide(gm, 2, now, 0, &out), SW_EINVAL, "a bad group");
            g_snap(&gs[i], gs[i].real, now, &a0);
            g_expect_same(&a0, &b0, i, "a bad group");
            break;
        }
        default:
            now = move_time(r, now, w_ms);
            break;
        }
    }
    for (unsigned i = 0; i < count; i++) {
        free(gs[i].real);
        free(gs[i].pre);
        free(gs[i].ind);
    }
}
