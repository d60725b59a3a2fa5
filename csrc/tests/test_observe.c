/* test_observe.c - seeing and steering a limiter: lifetime totals, shadow decisions, settings
 * swapped in place (sw_view_set_rule) with the state kept, and the repair of damaged totals. */
#include "harness.h"
#include "limiter_util.h"

#include "sw_keyed.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void totals_of(struct sw_limiter *lim, struct sw_totals *t)
{
    sw_limiter_totals(lim, t);
}

/* Every one of the totals *t as expected (a check each). */
static void check_totals(const struct sw_totals *t, struct sw_totals want)
{
    CHECK_EQ(t->pass, want.pass);
    CHECK_EQ(t->block, want.block);
    CHECK_EQ(t->exception, want.exception);
    CHECK_EQ(t->success, want.success);
    CHECK_EQ(t->occupied_pass, want.occupied_pass);
    CHECK_EQ(t->rt, want.rt);
    CHECK_EQ(t->shadow_block, want.shadow_block);
}

/* Every decision, exit and count reaches the totals; a prioritized grant counts its PASS
 * when granted; the window forgets, the totals do not. */
static void test_totals_basic(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_REJECT, 2);
    if (lim == NULL)
        return;
    struct sw_totals t;
    totals_of(lim, &t);
    CHECK_EQ(t.pass + t.block + t.exception + t.success + t.occupied_pass + t.rt, 0);
    CHECK_EQ(decide(lim, 1, MS(100), SW_F_ENTRY, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(100), SW_F_ENTRY, NULL), SW_PASS);
    CHECK_EQ(decide(lim, 1, MS(100), 0, NULL), SW_BLOCK);
    CHECK_EQ(decide(lim, 1, MS(100), SW_F_NO_BLOCK, NULL), SW_BLOCK); /* not counted */
    struct sw_decision d;
    CHECK_EQ(decide(lim, 1, MS(600), SW_F_PRIORITIZED, &d), SW_PASS); /* borrows */
    CHECK_EQ(d.occupied, 1);
    CHECK_EQ(sw_limiter_exit(lim, 1, 7, SW_OUT_SUCCESS, MS(700)), SW_OK);
    CHECK_EQ(sw_limiter_exit(lim, 1, 0, SW_OUT_EXCEPTION, MS(700)), SW_OK);
    CHECK_EQ(sw_limiter_count(lim, SW_EV_BLOCK, 4, MS(700)), SW_OK);
    totals_of(lim, &t);
    check_totals(&t, (struct sw_totals){.pass = 3, .block = 5, .exception = 1, .success = 1,
                                        .occupied_pass = 1, .rt = 7});
    /* long after: the window is empty, the totals stay */
    struct sw_stats s;
    sw_limiter_stats(lim, MS(100000), &s);
    CHECK_EQ(s.pass + s.block, 0);
    sw_node_reset(sw_limiter_node(lim));
    totals_of(lim, &t);
    CHECK_EQ(t.pass, 3);
    CHECK_EQ(t.block, 5);
    /* a damaged (negative) total is repaired to 0, the others are kept */
    sw_limiter_node(lim)->totals[SW_EV_SUCCESS] = -5;
    struct sw_view v;
    sw_limiter_view(lim, &v);
    sw_lstate_repair(&v);
    totals_of(lim, &t);
    CHECK_EQ(t.success, 0);
    CHECK_EQ(t.pass, 3);
    /* saturating, never wrapping */
    sw_limiter_node(lim)->totals[SW_EV_BLOCK] = INT64_MAX - 1;
    CHECK_EQ(sw_limiter_count(lim, SW_EV_BLOCK, 5, MS(100000)), SW_OK);
    totals_of(lim, &t);
    CHECK_EQ(t.block, INT64_MAX);
    free(lim);
}

/* Sum of the window's counts read at the end of each whole window == the totals. */
static void test_totals_vs_windows(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_REJECT, 5);
    if (lim == NULL)
        return;
    uint64_t rng = 12345;
    int64_t sum_pass = 0, sum_block = 0;
    for (int64_t w = 0; w < 50; w++) {
        for (int k = 0; k < 20; k++) {
            rng = rng * 6364136223846793005u + 1442695040888963407u;
            int64_t at = w * 1000 + (int64_t)((rng >> 33) % 1000);
            (void)decide(lim, 1 + (int64_t)((rng >> 20) % 3), MS(at), SW_F_TRY, NULL);
        }
        struct sw_stats s;
        sw_limiter_stats(lim, MS(w * 1000 + 999), &s);
        sum_pass += s.pass;
        sum_block += s.block;
    }
    struct sw_totals t;
    totals_of(lim, &t);
    CHECK_EQ(t.pass, sum_pass);
    CHECK_EQ(t.block, sum_block);
    CHECK(t.pass > 0 && t.block > 0);
    free(lim);
}

/* A shadow limiter and an enforcing twin fed the same calls: the shadow always admits at
 * once, and the windows, totals, in-flight counts and controllers' states stay equal. */
static void shadow_twin(int grade, int behavior, double count)
{
    struct sw_limiter_cfg c = cfg_of(grade, behavior, count);
    c.warm_up_s = 2;
    c.max_queueing_ms = 300;
    struct sw_limiter *twin = lim_new(&c);
    c.shadow = 1;
    struct sw_limiter *sh = lim_new(&c);
    if (twin == NULL || sh == NULL) {
        free(twin);
        free(sh);
        return;
    }
    uint64_t rng = 99 + (uint64_t)behavior * 7 + (uint64_t)grade;
    int64_t now = MS(5000);
    int64_t held = 0;
    for (int i = 0; i < 3000; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        unsigned r = (unsigned)(rng >> 33);
        now += (int64_t)(r % 40) * 1000000;
        if (r % 7 == 0 && held > 0) {
            CHECK_EQ(sw_limiter_exit(twin, 1, 3, SW_OUT_SUCCESS, now), SW_OK);
            CHECK_EQ(sw_limiter_exit(sh, 1, 3, SW_OUT_SUCCESS, now), SW_OK);
            held--;
            continue;
        }
        unsigned flags = (r >> 8) & (SW_F_TRY | SW_F_PRIORITIZED | SW_F_ENTRY | SW_F_RETRY);
        int64_t n = 1 + (int64_t)((r >> 12) % 3);
        struct sw_decision a, b;
        CHECK_EQ(sw_limiter_decide(twin, n, now, flags, &a), SW_OK);
        CHECK_EQ(sw_limiter_decide(sh, n, now, flags, &b), SW_OK);
        if (b.verdict != SW_PASS || b.wait_ns != 0 || b.shadowed != (a.verdict != SW_PASS)) {
            CHECK(b.verdict == SW_PASS);
            CHECK_EQ(b.wait_ns, 0);
            CHECK_EQ(b.shadowed, a.verdict != SW_PASS);
            break;
        }
        if (a.verdict == SW_PASS && (grade == SW_GRADE_CONCURRENCY || (flags & SW_F_ENTRY)))
            held += n;
        /* the caller of an admitted entry later exits; a shadowed one holds nothing */
        if (a.verdict == SW_PASS && (grade == SW_GRADE_CONCURRENCY || (flags & SW_F_ENTRY)) &&
            n > 1) {
            CHECK_EQ(sw_limiter_exit(twin, n - 1, 0, SW_OUT_NONE, now), SW_OK);
            CHECK_EQ(sw_limiter_exit(sh, n - 1, 0, SW_OUT_NONE, now), SW_OK);
            held -= n - 1;
        }
        struct sw_stats x, y;
        sw_limiter_stats(twin, now, &x);
        sw_limiter_stats(sh, now, &y);
        if (memcmp(&x, &y, sizeof x) != 0) {
            CHECK(!"shadow stats differ from the twin's");
            break;
        }
    }
    struct sw_totals ta, tb;
    totals_of(twin, &ta);
    totals_of(sh, &tb);
    /* the shadow's would-be refusals are its shadow_block: every block of the twin */
    CHECK_EQ(ta.shadow_block, 0);
    CHECK_EQ(tb.shadow_block, ta.block);
    tb.shadow_block = 0;
    CHECK(memcmp(&ta, &tb, sizeof ta) == 0);
    CHECK_EQ(sw_limiter_in_flight(twin), sw_limiter_in_flight(sh));
    CHECK(memcmp(&twin->st.thr, &sh->st.thr, sizeof twin->st.thr) == 0);
    CHECK(memcmp(&twin->st.warm, &sh->st.warm, sizeof twin->st.warm) == 0);
    free(twin);
    free(sh);
}

static void test_shadow(void)
{
    shadow_twin(SW_GRADE_QPS, SW_REJECT, 10);
    shadow_twin(SW_GRADE_QPS, SW_WARM_UP, 50);
    shadow_twin(SW_GRADE_QPS, SW_THROTTLE, 20);
    shadow_twin(SW_GRADE_QPS, SW_WARM_UP_THROTTLE, 40);
    shadow_twin(SW_GRADE_CONCURRENCY, SW_REJECT, 3);
    /* the flag on an enforcing rule: a refusal counts BLOCK even with SW_F_NO_BLOCK */
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_REJECT, 0);
    if (lim == NULL)
        return;
    struct sw_decision d;
    CHECK_EQ(decide(lim, 1, MS(10), SW_F_SHADOW | SW_F_NO_BLOCK, &d), SW_PASS);
    CHECK_EQ(d.shadowed, 1);
    CHECK_EQ(decide(lim, 1, MS(10), 0, &d), SW_NEVER);
    CHECK_EQ(d.shadowed, 0);
    struct sw_totals t;
    totals_of(lim, &t);
    CHECK_EQ(t.block, 2);
    CHECK_EQ(t.pass, 0);
    free(lim);
}

/* Settings swapped in place keep the state: a warm-up limiter whose queue setting changes in
 * the middle of its ramp decides exactly as one never changed; a fresh one starts cold. */
static void test_set_rule_keeps_ramp(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_WARM_UP, 100);
    c.warm_up_s = 10;
    struct sw_limiter *a = lim_new(&c), *b = lim_new(&c), *fresh = NULL;
    if (a == NULL || b == NULL)
        goto done;
    int64_t now = MS(1000);
    int64_t pa = 0, pb = 0;
    for (int s = 0; s < 6; s++)
        for (int k = 0; k < 200; k++, now += MS(5)) {
            pa += decide(a, 1, now, SW_F_TRY, NULL) == SW_PASS;
            pb += decide(b, 1, now, SW_F_TRY, NULL) == SW_PASS;
        }
    CHECK_EQ(pa, pb);
    struct sw_limiter_cfg c2 = c;
    c2.max_queueing_ms = 50;
    c2.occupy_timeout_ms = 100;
    struct sw_rule r2;
    CHECK_EQ(sw_rule_init(&r2, &c2), SW_OK);
    struct sw_view vb;
    sw_limiter_view(b, &vb);
    sw_view_set_rule(&vb, &b->rule, &r2);
    fresh = lim_new(&c2);
    if (fresh == NULL)
        goto done;
    int64_t qa = 0, qb = 0, qf = 0;
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 200; k++, now += MS(5)) {
            qa += decide(a, 1, now, SW_F_TRY, NULL) == SW_PASS;
            qb += decide(b, 1, now, SW_F_TRY, NULL) == SW_PASS;
            qf += decide(fresh, 1, now, SW_F_TRY, NULL) == SW_PASS;
        }
    CHECK_EQ(qa, qb);
    CHECK(qf < qb); /* a fresh limiter is cold: it admits less */
    CHECK(memcmp(&a->st.warm, &b->st.warm, sizeof a->st.warm) == 0);
    /* raising qps keeps the tokens: the ramp continues from where it was (not cold) */
    struct sw_limiter_cfg c3 = c;
    c3.count = 200;
    CHECK_EQ(sw_rule_init(&r2, &c3), SW_OK);
    int64_t stored = b->st.warm.stored;
    sw_view_set_rule(&vb, &b->rule, &r2);
    CHECK_EQ(b->st.warm.stored, stored);
    CHECK_EQ(b->rule.count, 200);
done:
    free(a);
    free(b);
    free(fresh);
}

/* Rules swapped by one thread while others decide: every decision sees one whole rule (a
 * concurrency of 1 or of 2 limits in flight to 2 at most), and TSan sees no race. */
struct flip_arg {
    struct sw_limiter *lim;
    _Atomic int stop;
    int64_t over;
};

static void *flip_decider(void *p)
{
    struct flip_arg *fa = p;
    while (!atomic_load(&fa->stop)) {
        struct sw_decision d;
        if (sw_limiter_decide(fa->lim, 1, SW_NOW, 0, &d) == SW_OK && d.verdict == SW_PASS) {
            if (sw_limiter_in_flight(fa->lim) > 2)
                fa->over++;
            (void)sw_limiter_exit(fa->lim, 1, 0, SW_OUT_NONE, SW_NOW);
        }
    }
    return NULL;
}

static void test_set_rule_threads(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 1);
    struct sw_limiter *lim = lim_new(&c);
    if (lim == NULL)
        return;
    struct sw_rule r1, r2;
    CHECK_EQ(sw_rule_init(&r1, &c), SW_OK);
    c.count = 2;
    c.shadow = 0;
    CHECK_EQ(sw_rule_init(&r2, &c), SW_OK);
    struct flip_arg fa = {lim, 0, 0};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, flip_decider, &fa), 0);
    struct sw_view v;
    sw_limiter_view(lim, &v);
    for (int i = 0; i < 20000; i++)
        sw_view_set_rule(&v, &lim->rule, (i & 1) ? &r1 : &r2);
    atomic_store(&fa.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(fa.over, 0);
    CHECK_EQ(sw_limiter_in_flight(lim), 0);
    free(lim);
}

/* KeyedLimiter: table-wide totals and shadow decisions. */
static void test_keyed_totals_shadow(void)
{
    struct sw_limiter_cfg c = cfg_of(SW_GRADE_QPS, SW_REJECT, 1);
    size_t sz = sw_keyed_size(c.interval_ms, c.sample_count, 16, false);
    struct sw_kstate *st = calloc(1, sz);
    if (st == NULL)
        return;
    CHECK_EQ(sw_keyed_init(st, c.interval_ms, c.sample_count, 16, false), SW_OK);
    struct sw_krule rule;
    CHECK_EQ(sw_krule_init(&rule, &c), SW_OK);
    struct sw_kview v = {st, &rule, SW_LOCK_PRIVATE, NULL, 0, -1, NULL};
    struct sw_decision d;
    CHECK_EQ(sw_keyed_decide(&v, 11, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_keyed_decide(&v, 11, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(sw_keyed_decide(&v, 12, 1, MS(10), SW_F_ENTRY, &d), SW_OK);
    CHECK_EQ(sw_keyed_exit(&v, 12, 1, 9, SW_OUT_SUCCESS, MS(20)), SW_OK);
    /* shadow through the rule: admitted, counted BLOCK, nothing held */
    sw_keyed_lock(&v);
    rule.base.shadow = 1;
    sw_keyed_unlock(&v);
    CHECK_EQ(sw_keyed_decide(&v, 12, 1, MS(30), SW_F_ENTRY, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(d.shadowed, 1);
    CHECK_EQ(sw_keyed_in_flight(&v, 12), 0);
    struct sw_totals t;
    sw_keyed_totals(&v, &t);
    check_totals(&t, (struct sw_totals){.pass = 2, .block = 2, .success = 1, .rt = 9,
                                        .shadow_block = 1});
    free(st);
}

void test_observe(void)
{
    test_totals_basic();
    test_totals_vs_windows();
    test_shadow();
    test_set_rule_keeps_ramp();
    test_set_rule_threads();
    test_keyed_totals_shadow();
}
