/* test_group.c - all or nothing across limiters (sw_group.h): every behavior in a group that
 * is refused is left as it was (checked against twins decided one by one on copies), BLOCK
 * only on the refusers, the largest retry and wait, threads on overlapping groups taken in
 * opposite orders (no deadlock, exact counts). */
#include "limiter_util.h"
#include "sw_group.h"
#include "sw_keyed.h"

#include <pthread.h>
#include <string.h>

#define GSEED UINT64_C(0x67726f7570)

static uint64_t grng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One member under test: a private limiter, or a key of a private keyed table. */
struct gm {
    int keyed;
    size_t size;
    struct sw_limiter *lim;   /* !keyed */
    struct sw_kstate *kst;    /* keyed */
    struct sw_krule krule;
    struct sw_view v;
    struct sw_kview kv;
    uint64_t fp;
};

static void gm_views(struct gm *g)
{
    if (g->keyed) {
        g->kv = (struct sw_kview){g->kst, &g->krule, SW_LOCK_PRIVATE, NULL, 0, -1, NULL};
    } else {
        sw_limiter_view(g->lim, &g->v);
    }
}

static int gm_new(struct gm *g, const struct sw_limiter_cfg *cfg, int keyed, uint64_t fp)
{
    memset(g, 0, sizeof *g);
    g->keyed = keyed;
    g->fp = fp;
    if (keyed) {
        g->size = sw_keyed_size(cfg->interval_ms, cfg->sample_count, 4, false);
        g->kst = calloc(1, g->size);
        if (g->kst == NULL)
            return -1;
        CHECK_EQ(sw_keyed_init(g->kst, cfg->interval_ms, cfg->sample_count, 4, false), SW_OK);
        CHECK_EQ(sw_krule_init(&g->krule, cfg), SW_OK);
    } else {
        g->size = sw_limiter_size(cfg);
        g->lim = lim_new(cfg);
        if (g->lim == NULL)
            return -1;
    }
    gm_views(g);
    return 0;
}

/* a copy of g's state (same settings) in scratch memory */
static void gm_copy(struct gm *dst, const struct gm *src)
{
    *dst = *src;
    if (src->keyed) {
        dst->kst = malloc(src->size);
        memcpy(dst->kst, src->kst, src->size);
    } else {
        dst->lim = malloc(src->size);
        memcpy(dst->lim, src->lim, src->size);
    }
    gm_views(dst);
}

static void gm_free(struct gm *g)
{
    free(g->lim);
    free(g->kst);
    g->lim = NULL;
    g->kst = NULL;
}

static void gm_decide(struct gm *g, int64_t n, int64_t now, unsigned flags, struct sw_decision *d)
{
    if (g->keyed)
        CHECK_EQ(sw_keyed_decide(&g->kv, g->fp, n, now, flags, d), SW_OK);
    else
        CHECK_EQ(sw_decide(&g->v, n, now, flags, d), SW_OK);
}

static void gm_totals(struct gm *g, struct sw_totals *t)
{
    if (g->keyed)
        sw_keyed_totals(&g->kv, t);
    else
        sw_totals_read(&g->v, t);
}

static int64_t gm_in_flight(struct gm *g)
{
    return g->keyed ? sw_keyed_in_flight(&g->kv, g->fp) : sw_in_flight(&g->v);
}

static void gm_member(struct gm *g, struct sw_gmember *m, int64_t n)
{
    memset(m, 0, sizeof *m);
    m->kind = g->keyed ? SW_GM_KEYED : SW_GM_LIMITER;
    m->v = &g->v;
    m->kv = &g->kv;
    m->fp = g->fp;
    m->n = n;
    sw_gmember_order_private(m);
}

/* The pool: every behavior, private and keyed. */
enum { POOL = 9 };
static void pool_cfg(int i, struct sw_limiter_cfg *c, int *keyed)
{
    *keyed = 0;
    switch (i) {
    case 0: *c = cfg_of(SW_GRADE_QPS, SW_REJECT, 6); break;
    case 1: *c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 10); c->warm_up_s = 3; break;
    case 2: *c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 10); c->max_queueing_ms = 300; break;
    case 3: *c = cfg_of(SW_GRADE_QPS, SW_WARM_UP_THROTTLE, 20); c->warm_up_s = 3;
        c->max_queueing_ms = 400; break;
    case 4: *c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 3); break;
    case 5: *c = cfg_of(SW_GRADE_QPS, SW_REJECT, 4); *keyed = 1; break;
    case 6: *c = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 5); c->max_queueing_ms = 500; *keyed = 1;
        break;
    case 7: *c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 2); *keyed = 1; break;
    default: *c = cfg_of(SW_GRADE_QPS, SW_REJECT, 8); c->interval_ms = 2000;
        c->sample_count = 4; break;
    }
}

/* Random groups against the model: each member decided one by one on a copy of its twin;
 * all admit: every twin decides for real; else the refusers' twins count BLOCK. */
static void group_model(uint64_t seed, int ops)
{
    struct gm real[POOL], twin[POOL];
    for (int i = 0; i < POOL; i++) {
        struct sw_limiter_cfg c;
        int keyed;
        pool_cfg(i, &c, &keyed);
        uint64_t fp = UINT64_C(0x1234567) + (uint64_t)i;
        if (gm_new(&real[i], &c, keyed, fp) < 0 || gm_new(&twin[i], &c, keyed, fp) < 0)
            return;
    }
    int64_t now = MS(5000);
    long bad = 0, passed = 0, refused = 0;
    for (int op = 0; op < ops && bad < 5; op++) {
        uint64_t r = grng(&seed);
        now += (int64_t)(r % 120) * 1000000;
        if (((r >> 8) & 7) == 0) {
            /* end one in-flight count of a member */
            int i = (int)((r >> 12) % POOL);
            if (gm_in_flight(&real[i]) > 0) {
                if (real[i].keyed) {
                    sw_keyed_exit(&real[i].kv, real[i].fp, 1, 2, SW_OUT_SUCCESS, now);
                    sw_keyed_exit(&twin[i].kv, twin[i].fp, 1, 2, SW_OUT_SUCCESS, now);
                } else {
                    sw_exit(&real[i].v, 1, 2, SW_OUT_SUCCESS, now);
                    sw_exit(&twin[i].v, 1, 2, SW_OUT_SUCCESS, now);
                }
            }
            continue;
        }
        uint32_t k = 1 + (uint32_t)((r >> 16) % 4);
        int idx[4];
        uint32_t have = 0;
        while (have < k) {
            int c = (int)(grng(&seed) % POOL);
            bool dup = false;
            for (uint32_t j = 0; j < have; j++)
                dup |= idx[j] == c;
            if (!dup)
                idx[have++] = c;
        }
        unsigned flags = (((r >> 27) & 1) ? SW_F_RETRY : 0u) | (((r >> 24) & 1) ? SW_F_TRY : 0u) |
                         (((r >> 25) & 3) == 0 ? SW_F_ENTRY : 0u);
        int64_t ns[4];
        struct sw_gmember m[4];
        for (uint32_t j = 0; j < k; j++) {
            ns[j] = 1 + (int64_t)(grng(&seed) % 3);
            gm_member(&real[idx[j]], &m[j], ns[j]);
        }
        /* every other op: the members in lock order, for sw_group_decide_ordered */
        bool ordered = (op & 1) != 0;
        for (uint32_t a = 1; ordered && a < k; a++) {
            for (uint32_t b = a; b > 0 && (m[b - 1].order[0] > m[b].order[0] ||
                                           (m[b - 1].order[0] == m[b].order[0] &&
                                            m[b - 1].order[1] > m[b].order[1]));
                 b--) {
                struct sw_gmember tm = m[b];
                m[b] = m[b - 1];
                m[b - 1] = tm;
                int ti = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = ti;
                int64_t tn = ns[b];
                ns[b] = ns[b - 1];
                ns[b - 1] = tn;
            }
        }
        /* the model */
        struct sw_decision md[4];
        int mv = SW_PASS;
        int64_t mwait = 0, mretry = -1;
        bool known = true;
        for (uint32_t j = 0; j < k; j++) {
            struct gm cp;
            gm_copy(&cp, &twin[idx[j]]);
            gm_decide(&cp, ns[j], now, flags, &md[j]);
            gm_free(&cp);
            if (md[j].verdict == SW_NEVER)
                mv = SW_NEVER;
            else if (md[j].verdict == SW_BLOCK && mv == SW_PASS)
                mv = SW_BLOCK;
        }
        for (uint32_t j = 0; j < k; j++) {
            struct gm *t = &twin[idx[j]];
            if (mv == SW_PASS) {
                struct sw_decision d;
                gm_decide(t, ns[j], now, flags, &d);
                if (d.verdict != SW_PASS || d.wait_ns != md[j].wait_ns)
                    bad++;
                if (md[j].wait_ns > mwait)
                    mwait = md[j].wait_ns;
            } else if (md[j].verdict != SW_PASS) {
                if (t->keyed)
                    sw_keyed_count(&t->kv, SW_EV_BLOCK, ns[j], now);
                else
                    sw_count(&t->v, SW_EV_BLOCK, ns[j], now);
                if (md[j].retry_ns < 0)
                    known = false;
                else if (md[j].retry_ns > mretry)
                    mretry = md[j].retry_ns;
            }
        }
        if (!known || mv == SW_NEVER)
            mretry = -1;
        /* the group */
        struct sw_decision g;
        CHECK_EQ(ordered ? sw_group_decide_ordered(m, k, now, flags, &g)
                         : sw_group_decide(m, k, now, flags, &g),
                 SW_OK);
        if (g.verdict != mv || g.wait_ns != (mv == SW_PASS ? mwait : 0) ||
            (mv != SW_PASS && g.retry_ns != mretry)) {
            if (bad < 3)
                printf("  op %d: group %d/%lld/%lld, model %d/%lld/%lld\n", op, g.verdict,
                       (long long)g.wait_ns, (long long)g.retry_ns, mv, (long long)mwait,
                       (long long)mretry);
            bad++;
        }
        for (uint32_t j = 0; j < k; j++) {
            if (m[j].d->verdict != md[j].verdict || m[j].refused != (md[j].verdict != SW_PASS))
                bad++;
        }
        passed += mv == SW_PASS;
        refused += mv != SW_PASS;
        /* every member equals its twin */
        for (int i = 0; i < POOL; i++) {
            struct sw_totals a, b;
            gm_totals(&real[i], &a);
            gm_totals(&twin[i], &b);
            if (a.pass != b.pass || a.block != b.block || a.occupied_pass != b.occupied_pass ||
                gm_in_flight(&real[i]) != gm_in_flight(&twin[i]) ||
                (real[i].keyed && sw_keyed_len(&real[i].kv) != sw_keyed_len(&twin[i].kv))) {
                if (bad < 3)
                    printf("  op %d member %d: pass %lld/%lld block %lld/%lld\n", op, i,
                           (long long)a.pass, (long long)b.pass, (long long)a.block,
                           (long long)b.block);
                bad++;
            }
            struct sw_stats sa, sb;
            if (!real[i].keyed) {
                sw_stats_read(&real[i].v, now, &sa);
                sw_stats_read(&twin[i].v, now, &sb);
                if (sa.pass != sb.pass || sa.block != sb.block || sa.in_flight != sb.in_flight)
                    bad++;
            }
        }
    }
    CHECK_EQ(bad, 0);
    CHECK(passed > ops / 10);
    CHECK(refused > ops / 10);
    for (int i = 0; i < POOL; i++) {
        gm_free(&real[i]);
        gm_free(&twin[i]);
    }
}

/* Each behavior alone beside a refusing member: the refused group leaves it as it was. */
static void group_each_behavior(void)
{
    for (int i = 0; i < POOL; i++) {
        struct sw_limiter_cfg c, zc = cfg_of(SW_GRADE_QPS, SW_REJECT, 1);
        int keyed;
        pool_cfg(i, &c, &keyed);
        struct gm x, blocker;
        if (gm_new(&x, &c, keyed, 77) < 0 || gm_new(&blocker, &zc, 0, 0) < 0)
            return;
        int64_t now = MS(10000);
        struct sw_decision d;
        gm_decide(&blocker, 1, now, 0, &d); /* the blocker's window is full */
        CHECK_EQ(d.verdict, SW_PASS);
        struct sw_totals before, after, bb, ba;
        gm_totals(&x, &before);
        gm_totals(&blocker, &bb);
        int64_t fl = gm_in_flight(&x);
        for (int r = 0; r < 5; r++) {
            struct sw_gmember m[2];
            gm_member(&x, &m[0], 1);
            gm_member(&blocker, &m[1], 1);
            CHECK_EQ(sw_group_decide(m, 2, now, SW_F_ENTRY | SW_F_RETRY, &d), SW_OK);
            CHECK_EQ(d.verdict, SW_BLOCK);
            CHECK_EQ(m[0].refused, 0);
            CHECK_EQ(m[1].refused, 1);
            CHECK(d.retry_ns > 0);
        }
        gm_totals(&x, &after);
        gm_totals(&blocker, &ba);
        CHECK_EQ(after.pass, before.pass);
        CHECK_EQ(after.block, before.block);
        CHECK_EQ(gm_in_flight(&x), fl);
        CHECK_EQ(ba.block, bb.block + 5);
        CHECK_EQ(ba.pass, bb.pass);
        if (keyed)
            CHECK_EQ(sw_keyed_len(&x.kv), 0); /* the key was never taken */
        /* alone, it admits: nothing was taken from it */
        gm_decide(&x, 1, now, SW_F_TRY, &d);
        CHECK_EQ(d.verdict, SW_PASS);
        gm_free(&x);
        gm_free(&blocker);
    }
}

static void group_counts(void)
{
    struct sw_limiter_cfg c5 = cfg_of(SW_GRADE_QPS, SW_REJECT, 5);
    struct gm a, b, c, t1, t2, cc;
    struct sw_limiter_cfg th1 = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 10);
    struct sw_limiter_cfg th2 = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 5);
    struct sw_limiter_cfg conc = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 1);
    if (gm_new(&a, &c5, 0, 0) < 0 || gm_new(&b, &c5, 0, 0) < 0 || gm_new(&c, &c5, 0, 0) < 0 ||
        gm_new(&t1, &th1, 0, 0) < 0 || gm_new(&t2, &th2, 0, 0) < 0 ||
        gm_new(&cc, &conc, 0, 0) < 0)
        return;
    struct sw_decision d;
    /* a full at 0 ms (frees at 1000), b full at 600 ms (its bucket 500 frees at 1500) */
    gm_decide(&a, 5, MS(0), 0, &d);
    gm_decide(&b, 5, MS(600), 0, &d);
    struct sw_gmember m[3];
    gm_member(&a, &m[0], 1);
    gm_member(&b, &m[1], 1);
    gm_member(&c, &m[2], 2);
    CHECK_EQ(sw_group_decide(m, 3, MS(700), SW_F_RETRY, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(800)); /* the largest: b's */
    CHECK_EQ(m[0].d->retry_ns, MS(300));
    CHECK_EQ(m[1].d->retry_ns, MS(800));
    struct sw_totals ta, tb, tc;
    gm_totals(&a, &ta);
    gm_totals(&b, &tb);
    gm_totals(&c, &tc);
    CHECK_EQ(ta.block, 1);
    CHECK_EQ(tb.block, 1);
    CHECK_EQ(tc.block, 0);
    CHECK_EQ(tc.pass, 0);
    /* a concurrency refuser does not know its retry: the group's is unknown */
    gm_decide(&cc, 1, MS(700), 0, &d);
    gm_member(&a, &m[0], 1);
    gm_member(&cc, &m[1], 1);
    CHECK_EQ(sw_group_decide(m, 2, MS(700), SW_F_RETRY, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(d.retry_ns, -1);
    /* never: a member that can never admit it */
    gm_member(&c, &m[0], 6);
    gm_member(&t1, &m[1], 1);
    CHECK_EQ(sw_group_decide(m, 2, MS(700), SW_F_RETRY, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_NEVER);
    /* waits: the largest of the throttles' */
    gm_decide(&t1, 1, MS(1000), 0, &d);
    gm_decide(&t2, 1, MS(1000), 0, &d);
    gm_member(&t1, &m[0], 1);
    gm_member(&t2, &m[1], 1);
    gm_member(&c, &m[2], 1);
    CHECK_EQ(sw_group_decide(m, 3, MS(1000), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(d.wait_ns, MS(200));
    CHECK_EQ(m[0].d->wait_ns, MS(100));
    gm_totals(&c, &tc);
    CHECK_EQ(tc.pass, 1);
    /* try: a throttle with a wait refuses, its retry the wait */
    CHECK_EQ(sw_group_decide(m, 3, MS(1000), SW_F_TRY | SW_F_RETRY, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(400));
    /* bad input: nothing done */
    gm_member(&a, &m[0], 1);
    gm_member(&a, &m[1], 1);
    CHECK_EQ(sw_group_decide(m, 2, MS(1000), 0, &d), SW_EINVAL);
    CHECK_EQ(sw_group_decide(m, 0, MS(1000), 0, &d), SW_EINVAL);
    gm_member(&b, &m[1], 0);
    CHECK_EQ(sw_group_decide(m, 2, MS(1000), 0, &d), SW_EINVAL);
    gm_totals(&a, &ta);
    CHECK_EQ(ta.block, 2);
    gm_free(&a);
    gm_free(&b);
    gm_free(&c);
    gm_free(&t1);
    gm_free(&t2);
    gm_free(&cc);
}

/* Threads on overlapping groups in opposite orders: no deadlock, exact counts. */
enum { GT_THREADS = 4, GT_LIMS = 4 };
struct gt_ctx {
    struct gm *lims;
    int id;
    int iters;
    long pass[GT_LIMS], block[GT_LIMS];
};

static void *gt_run(void *arg)
{
    struct gt_ctx *c = arg;
    uint64_t s = GSEED + (uint64_t)c->id * 7919u;
    for (int it = 0; it < c->iters; it++) {
        int a = (c->id + it) % GT_LIMS, b = (a + 1 + (int)(grng(&s) % (GT_LIMS - 1))) % GT_LIMS;
        struct sw_gmember m[2];
        /* odd threads name them in the other order */
        gm_member(&c->lims[c->id & 1 ? b : a], &m[0], 1);
        gm_member(&c->lims[c->id & 1 ? a : b], &m[1], 1);
        struct sw_decision d;
        if (sw_group_decide(m, 2, SW_NOW, SW_F_ENTRY, &d) != SW_OK)
            continue;
        int who[2] = {c->id & 1 ? b : a, c->id & 1 ? a : b};
        for (int j = 0; j < 2; j++) {
            if (d.verdict == SW_PASS) {
                c->pass[who[j]]++;
                sw_exit(&c->lims[who[j]].v, 1, 0, SW_OUT_NONE, SW_NOW);
            } else if (m[j].refused) {
                c->block[who[j]]++;
            }
        }
    }
    return NULL;
}

static void group_threads(void)
{
    struct gm lims[GT_LIMS];
    for (int i = 0; i < GT_LIMS; i++) {
        /* concurrency limits: both outcomes, whatever the clock */
        struct sw_limiter_cfg c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 2);
        if (gm_new(&lims[i], &c, 0, 0) < 0)
            return;
    }
    pthread_t th[GT_THREADS];
    struct gt_ctx ctx[GT_THREADS];
    for (int i = 0; i < GT_THREADS; i++) {
        memset(&ctx[i], 0, sizeof ctx[i]);
        ctx[i].lims = lims;
        ctx[i].id = i;
        ctx[i].iters = 20000;
        pthread_create(&th[i], NULL, gt_run, &ctx[i]);
    }
    for (int i = 0; i < GT_THREADS; i++)
        pthread_join(th[i], NULL);
    long tp = 0, tb = 0;
    for (int l = 0; l < GT_LIMS; l++) {
        long p = 0, b = 0;
        for (int i = 0; i < GT_THREADS; i++) {
            p += ctx[i].pass[l];
            b += ctx[i].block[l];
        }
        struct sw_totals t;
        gm_totals(&lims[l], &t);
        CHECK_EQ(t.pass, p);
        CHECK_EQ(t.block, b);
        CHECK_EQ(gm_in_flight(&lims[l]), 0);
        tp += p;
        tb += b;
        gm_free(&lims[l]);
    }
    CHECK(tp > 0);
    CHECK_EQ(tp / 2 + 0, tp / 2); /* every admitted group counted on both members */
    CHECK(tp % 2 == 0);
    (void)tb;
}

/* charge: what a request used beyond its admission, counted in the window */
static void group_charge(void)
{
    struct sw_limiter_cfg rc = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    struct sw_limiter_cfg tc = cfg_of(SW_GRADE_QPS, SW_THROTTLE, 10);
    struct sw_limiter_cfg cc = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 2);
    struct gm r, t, c, kr, kt;
    if (gm_new(&r, &rc, 0, 0) < 0 || gm_new(&t, &tc, 0, 0) < 0 || gm_new(&c, &cc, 0, 0) < 0 ||
        gm_new(&kr, &rc, 1, 5) < 0 || gm_new(&kt, &tc, 1, 6) < 0)
        return;
    struct sw_decision d;
    gm_decide(&r, 4, MS(100), 0, &d);
    CHECK_EQ(sw_charge(&r.v, 5, MS(100)), SW_OK); /* 9 of 10 */
    gm_decide(&r, 2, MS(100), SW_F_RETRY, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(900)); /* the bucket holding the charge slides out at 1000 */
    CHECK_EQ(sw_charge(&r.v, 20, MS(600)), SW_OK); /* beyond the limit: refused until it goes */
    gm_decide(&r, 1, MS(1100), SW_F_RETRY, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(d.retry_ns, MS(400));
    gm_decide(&r, 10, MS(1500), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    struct sw_totals tt;
    gm_totals(&r, &tt);
    CHECK_EQ(tt.pass, 4 + 5 + 20 + 10);
    CHECK_EQ(sw_charge(&r.v, -1, MS(1500)), SW_EINVAL);
    /* throttle: the queue moves by the cost of the charge */
    gm_decide(&t, 1, MS(1000), 0, &d);
    CHECK_EQ(sw_charge(&t.v, 2, MS(1000)), SW_OK);
    gm_decide(&t, 1, MS(1000), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(d.wait_ns, MS(300));
    /* refund: the queue moves back by the cost of n, never before now */
    CHECK_EQ(sw_refund(&t.v, -1, MS(1000)), SW_EINVAL);
    CHECK_EQ(sw_refund(&t.v, 2, MS(1000)), SW_OK); /* last: 1300 -> 1100 */
    gm_decide(&t, 1, MS(1000), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(d.wait_ns, MS(200));
    CHECK_EQ(sw_refund(&t.v, 50, MS(1000)), SW_OK); /* last: 1200 -> 1000 (now), not 700 */
    gm_decide(&t, 1, MS(1000), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(d.wait_ns, MS(100));
    CHECK_EQ(sw_refund(&r.v, 5, MS(1000)), SW_OK); /* not a throttle: nothing moves */
    /* concurrency: nothing to charge */
    CHECK_EQ(sw_charge(&c.v, 1, MS(1000)), SW_ESTATE);
    CHECK_EQ(sw_charge(&c.v, 0, MS(1000)), SW_OK);
    /* keyed: the key's window, the key's queue */
    CHECK_EQ(sw_keyed_charge(&kr.kv, kr.fp, 10, MS(100)), SW_OK);
    gm_decide(&kr, 1, MS(100), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    gm_decide(&kr, 1, MS(1100), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    gm_decide(&kt, 1, MS(1000), 0, &d);
    CHECK_EQ(sw_keyed_charge(&kt.kv, kt.fp, 2, MS(1000)), SW_OK);
    gm_decide(&kt, 1, MS(1000), 0, &d);
    CHECK_EQ(d.wait_ns, MS(300));
    struct sw_limiter_cfg kc = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 2);
    struct gm kk;
    if (gm_new(&kk, &kc, 1, 7) == 0) {
        CHECK_EQ(sw_keyed_charge(&kk.kv, kk.fp, 1, MS(1000)), SW_ESTATE);
        gm_free(&kk);
    }
    gm_free(&r);
    gm_free(&t);
    gm_free(&c);
    gm_free(&kr);
    gm_free(&kt);
}

/* A shadow member's would-be refusal counts nothing on a retry (SW_F_NO_BLOCK is kept for a
 * plan, unlike a lone shadow decision), BLOCK once without it; sw_count_shadow_block counts
 * the one of a group's request that retried (BLOCK and shadow_block), limiter and keyed. */
static void group_shadow_retries(void)
{
    for (int keyed = 0; keyed < 2; keyed++) {
        struct sw_limiter_cfg sc = cfg_of(SW_GRADE_QPS, SW_REJECT, 1);
        sc.shadow = 1;
        struct sw_limiter_cfg cc = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 1);
        struct gm s, c;
        if (gm_new(&s, &sc, keyed, 3) < 0 || gm_new(&c, &cc, 0, 0) < 0)
            return;
        struct sw_decision d;
        gm_decide(&s, 1, MS(100), 0, &d); /* its one slot */
        gm_decide(&c, 1, MS(100), 0, &d); /* full */
        struct sw_gmember m[2];
        gm_member(&s, &m[0], 1);
        gm_member(&c, &m[1], 1);
        for (int i = 0; i < 5; i++) {     /* retries */
            CHECK_EQ(sw_group_decide(m, 2, MS(200), SW_F_RETRY | SW_F_NO_BLOCK, &d), SW_OK);
            CHECK_EQ(d.verdict, SW_BLOCK);
            CHECK(m[0].d->shadowed);
            CHECK(!m[0].refused);
            CHECK(m[1].refused);
        }
        struct sw_totals t;
        gm_totals(&s, &t);
        CHECK_EQ(t.block, 0);
        CHECK_EQ(t.shadow_block, 0);
        CHECK_EQ(sw_group_decide(m, 2, MS(200), SW_F_RETRY, &d), SW_OK); /* one decision */
        gm_totals(&s, &t);
        CHECK_EQ(t.block, 1);
        CHECK_EQ(t.shadow_block, 1);
        if (keyed)
            CHECK_EQ(sw_keyed_count_shadow_block(&s.kv, 2, MS(200)), SW_OK);
        else
            CHECK_EQ(sw_count_shadow_block(&s.v, 2, MS(200)), SW_OK);
        gm_totals(&s, &t);
        CHECK_EQ(t.block, 3);
        CHECK_EQ(t.shadow_block, 3);
        CHECK_EQ(keyed ? sw_keyed_count_shadow_block(&s.kv, -1, MS(200))
                       : sw_count_shadow_block(&s.v, -1, MS(200)), SW_EINVAL);
        gm_free(&s);
        gm_free(&c);
    }
}

void test_group(void)
{
    group_shadow_retries();
    group_charge();
    group_counts();
    group_each_behavior();
    group_model(GSEED, 20000);
    group_model(GSEED ^ 0x5555, 20000);
    group_threads();
}
