/* test_keyed_stripes.c - a shared keyed table in stripes: the layout (a stripe per group of
 * keys, the whole table still bounded by max_keys), exact per-key counts from several
 * processes and threads hammering distinct and common keys, and a process killed inside one
 * stripe's critical section (the other stripes go on meanwhile; the stripe is taken over,
 * repaired, and the table's count of keys stays right; its holdings in every stripe come
 * back). */
#include "keyed_util.h"
#include "limiter_util.h"
#include "shm_util.h"
#include "sw_keyed.h"
#include "sw_proc.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KMAX 4096u /* keys of the tables here: 16 stripes */

/* A fingerprint of stripe `stripe` (its low bits), k-th of that stripe. */
static uint64_t fp_in(uint32_t stripe, uint64_t k)
{
    return ((k + 1u) * UINT64_C(0x9e3779b97f4a7c15) & ~(uint64_t)0xff) | stripe;
}

/* The table's count of keys (the first stripe's) equals the keys its stripes hold. */
static void check_live(const struct sw_kview *v)
{
    uint32_t sum = 0;
    sw_keyed_lock(v);
    for (uint32_t i = 0; i < v->st->n_stripes; i++)
        sum += ((struct sw_kstate *)(void *)((char *)v->st + i * v->st->stride))->n_live;
    CHECK_EQ(atomic_load(&v->st->live), sum);
    sw_keyed_unlock(v);
    CHECK_EQ(sw_keyed_len(v), sum);
}

/* A private table has one stripe; a shared one of KMAX keys 16, every one on lines of its
 * own; the whole table holds max_keys keys (not more: a new key then evicts one). */
static void test_stripes_layout(void)
{
    CHECK_EQ(sw_keyed_size(1000, 2, 100, true) > 0, 1);
    struct sw_shm s;
    struct sw_shm_layout lay;
    struct sw_krule rule;
    kregion_open(&s, &lay, &rule, KMAX, SW_GRADE_QPS, 1000);
    struct sw_kstate *st = s.state;
    CHECK_EQ(st->n_stripes, 16u);
    CHECK_EQ(st->stride % 64u, 0u);
    CHECK_EQ(st->max_total, KMAX);
    struct sw_kview v;
    kshm_view(&s, &rule, &v);
    struct sw_decision d;
    uint64_t x = 99;
    for (uint32_t k = 0; k < KMAX + 1000u; k++) {
        x = x * UINT64_C(6364136223846793005) + 1442695040888963407u;
        uint64_t fp = (x ^ (x >> 29)) * UINT64_C(0xbf58476d1ce4e5b9); /* as a hash: every bit */
        fp ^= fp >> 32;
        CHECK_EQ(sw_keyed_decide(&v, fp != 0 ? fp : 1, 1, MS(10), SW_F_TRY, &d), SW_OK);
        CHECK_EQ(d.verdict, SW_PASS);
    }
    struct sw_stats stats;
    int64_t ev, keys;
    sw_keyed_stats(&v, MS(10), &stats, &ev, &keys);
    CHECK_EQ(keys, (int64_t)KMAX);
    CHECK_EQ(ev + keys, (int64_t)KMAX + 1000);
    CHECK_EQ(stats.pass, (int64_t)KMAX + 1000);
    check_live(&v);
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_OK);
    /* a stripe's header that disagrees with the layout is refused */
    struct sw_kstate *s3 = (struct sw_kstate *)(void *)((char *)st + 3u * st->stride);
    s3->stripe = 4;
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_EINVAL);
    s3->stripe = 3;
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_OK);
    sw_shm_close(&s);
    /* a small shared table keeps one stripe (exact LRU over all its keys) */
    kregion_open(&s, &lay, &rule, 300, SW_GRADE_QPS, 1000);
    CHECK_EQ(((struct sw_kstate *)s.state)->n_stripes, 1u);
    sw_shm_close(&s);
}

#define HAMMER_PROCS 3
#define HAMMER_THREADS 2
#define HAMMER_OWN 200    /* keys of each thread's own */
#define HAMMER_COMMON 64  /* keys every thread decides on */
#define HAMMER_TRIES 12   /* decisions per key per thread */
#define HAMMER_LIMIT 5    /* per key, per window */

struct hammer {
    struct sw_shm *s;
    const struct sw_krule *rule;
    int id;
    int64_t passes; /* out */
    int64_t bad;    /* out: a call that failed */
};

static void *hammer_thread(void *arg)
{
    struct hammer *h = arg;
    struct sw_kview v;
    kshm_view(h->s, h->rule, &v);
    struct sw_decision d;
    for (int t = 0; t < HAMMER_TRIES; t++) {
        for (uint32_t k = 0; k < HAMMER_OWN; k++) {
            uint64_t fp = fp_in(k % 16u, 1000u + (uint64_t)h->id * HAMMER_OWN + k);
            if (sw_keyed_decide(&v, fp, 1, MS(10), SW_F_TRY | SW_F_ENTRY, &d) != SW_OK)
                h->bad++;
            if (d.verdict == SW_PASS) {
                h->passes++;
                if (sw_keyed_release(&v, fp, 1) != SW_OK)
                    h->bad++;
            }
        }
        for (uint32_t k = 0; k < HAMMER_COMMON; k++) {
            if (sw_keyed_decide(&v, fp_in(k % 16u, k), 1, MS(10), SW_F_TRY, &d) != SW_OK)
                h->bad++;
            h->passes += d.verdict == SW_PASS;
        }
    }
    return NULL;
}

/* Processes and threads on one striped table, each on keys of its own and on common keys, all
 * at one instant: every key admits exactly its limit (no count lost or doubled), the
 * table's statistics add up, nothing stays in flight. */
static void test_stripes_hammer(void)
{
    struct sw_shm s;
    struct sw_shm_layout lay;
    struct sw_krule rule;
    kregion_open(&s, &lay, &rule, KMAX, SW_GRADE_QPS, HAMMER_LIMIT);
    int pipes[HAMMER_PROCS][2];
    pid_t kids[HAMMER_PROCS];
    for (int p = 0; p < HAMMER_PROCS; p++) {
        CHECK_EQ(pipe(pipes[p]), 0);
        kids[p] = fork();
        if (kids[p] == 0) {
            struct hammer h[HAMMER_THREADS];
            pthread_t th[HAMMER_THREADS];
            for (int t = 0; t < HAMMER_THREADS; t++) {
                h[t] = (struct hammer){&s, &rule, p * HAMMER_THREADS + t, 0, 0};
                pthread_create(&th[t], NULL, hammer_thread, &h[t]);
            }
            int64_t out[2] = {0, 0};
            for (int t = 0; t < HAMMER_THREADS; t++) {
                pthread_join(th[t], NULL);
                out[0] += h[t].passes;
                out[1] += h[t].bad;
            }
            _exit(write(pipes[p][1], out, sizeof out) == (ssize_t)sizeof out ? 0 : 3);
        }
        close(pipes[p][1]);
    }
    int64_t passes = 0;
    for (int p = 0; p < HAMMER_PROCS; p++) {
        int64_t out[2] = {0, 1};
        CHECK_EQ(read(pipes[p][0], out, sizeof out), (ssize_t)sizeof out);
        close(pipes[p][0]);
        int status = -1;
        waitpid(kids[p], &status, 0);
        CHECK_EQ(status, 0);
        CHECK_EQ(out[1], 0);
        passes += out[0];
    }
    int64_t workers = HAMMER_PROCS * HAMMER_THREADS;
    /* own keys: released at once, the window's limit still counts every pass */
    int64_t want = workers * HAMMER_OWN * HAMMER_LIMIT + HAMMER_COMMON * HAMMER_LIMIT;
    CHECK_EQ(passes, want);
    struct sw_kview v;
    kshm_view(&s, &rule, &v);
    struct sw_stats st;
    int64_t ev, keys;
    sw_keyed_stats(&v, MS(10), &st, &ev, &keys);
    CHECK_EQ(st.pass, want);
    CHECK_EQ(st.block, workers * (HAMMER_OWN + HAMMER_COMMON) * HAMMER_TRIES - want);
    CHECK_EQ(st.in_flight, 0);
    CHECK_EQ(keys, workers * HAMMER_OWN + HAMMER_COMMON);
    CHECK_EQ(ev, 0);
    struct sw_decision d;
    for (uint32_t k = 0; k < HAMMER_COMMON; k++) {
        CHECK_EQ(sw_keyed_in_flight(&v, fp_in(k % 16u, k)), 0);
        sw_keyed_decide(&v, fp_in(k % 16u, k), 1, MS(10), SW_F_TRY | SW_F_NO_BLOCK, &d);
        CHECK_EQ(d.verdict, SW_BLOCK); /* full: exactly its limit went through */
    }
    check_live(&v);
    sw_shm_close(&s);
}

/* Test hook calls a victim lets by before it hangs (victim_hang). */
static int hang_skip;

static void hang_later(void)
{
    if (hang_skip-- > 0)
        return;
    victim_hang();
}

/* The table's count of keys equals the keys its stripes hold, read stripe by stripe (no
 * sw_keyed_lock: it would count them again). */
static void check_live_as_is(const struct sw_kview *v)
{
    uint32_t held = sw_keyed_len(v);
    CHECK_EQ(atomic_load(&v->st->live), held);
}

/* A process killed inside one stripe's critical section (round 0: a new key being taken,
 * its place in the table's count held and noted; round 2: killed between counting it in
 * the table's count and noting it; round 1: giving back): the other stripes decide
 * meanwhile, without waiting; the stripe is taken over and repaired (the table's count of
 * keys right again, never a key ahead: the table still holds max_keys); what the dead
 * process held in flight in every stripe is given back by the reap. */
static void test_stripes_kill(void)
{
    for (int round = 0; round < 3; round++) {
        struct kregion r;
        kregion_new(&r, KMAX, SW_GRADE_CONCURRENCY, 3);
        struct sw_decision d;
        for (uint32_t k = 0; k < 16; k++) /* this process holds 1 of a key in every stripe */
            sw_keyed_decide(&r.v, fp_in(k, 7), 1, MS(10), 0, &d);
        struct victim kid;
        if (victim_fork(&kid)) {
            struct sw_kview cv = kregion_view(&r);
            struct sw_decision cd;
            for (uint32_t k = 0; k < 16; k++) /* the child holds 2 of each */
                sw_keyed_decide(&cv, fp_in(k, 7), 2, MS(10), 0, &cd);
            hang_skip = round == 0 ? 1 : 0; /* round 2: at the first hook, before `pending` */
            victim_arm(hang_later);
            if (round != 1)
                sw_keyed_decide(&cv, fp_in(3, 500), 1, MS(10), 0, &cd); /* a new key */
            else
                sw_keyed_exit(&cv, fp_in(3, 7), 1, 0, SW_OUT_NONE, MS(10)); /* giving back */
            _exit(0);
        }
        CHECK_EQ(victim_wait(&kid), 'h');
        /* stripe 3 is held by a process hung inside it: the others decide */
        for (uint32_t k = 0; k < 16; k++) {
            if (k == 3)
                continue;
            sw_keyed_decide(&r.v, fp_in(k, 900), 1, MS(10), 0, &d);
            CHECK_EQ(d.verdict, SW_PASS);
            CHECK_EQ(sw_keyed_release(&r.v, fp_in(k, 900), 1), SW_OK);
        }
        victim_kill(&kid);
        CHECK_EQ(sw_keyed_in_flight(&r.v, fp_in(3, 7)), round != 1 ? 3 : 2); /* taken over */
        check_live_as_is(&r.v);
        check_live(&r.v);
        CHECK_EQ(sw_keyed_reap(&r.v), 1);
        for (uint32_t k = 0; k < 16; k++)
            CHECK_EQ(sw_keyed_in_flight(&r.v, fp_in(k, 7)), 1);
        struct sw_stats st;
        int64_t ev, keys;
        sw_keyed_stats(&r.v, MS(10), &st, &ev, &keys);
        CHECK_EQ(st.in_flight, 16);
        check_live(&r.v);
        sw_keyed_decide(&r.v, fp_in(3, 501), 1, MS(10), 0, &d);
        CHECK_EQ(d.verdict, SW_PASS);
        check_live(&r.v);
        CHECK_EQ(sw_keyed_region_check(r.s.state, &r.lay), SW_OK);
        sw_shm_close(&r.s);
    }
}

/* A stripe's PASS counts kept on its lock's line: decisions at the heads count there, and a
 * process killed while moving them into the node (round 0: after raising the node's words,
 * before zeroing them; round 1: while loading them back) loses or doubles none: the
 * stripe's statistics and totals count every PASS, including those decided after the
 * repair. */
static void test_stripes_hot_counts_survive_a_kill(void)
{
    for (int round = 0; round < 2; round++) {
        struct kregion r;
        kregion_new(&r, KMAX, SW_GRADE_QPS, 1000);
        struct sw_decision d;
        uint64_t fp = fp_in(5, 1);
        for (int k = 0; k < 5; k++) {
            sw_keyed_decide(&r.v, fp, 1, MS(10), SW_F_TRY, &d);
            CHECK_EQ(d.verdict, SW_PASS);
        }
        struct victim kid;
        if (victim_fork(&kid)) {
            struct sw_kview cv = kregion_view(&r);
            struct sw_decision cd;
            for (int k = 0; k < 3; k++)
                sw_keyed_decide(&cv, fp, 1, MS(10), SW_F_TRY, &cd);
            hang_skip = round;
            victim_arm(hang_later);
            sw_keyed_exit(&cv, fp, 1, 5, SW_OUT_SUCCESS, MS(10)); /* moves them */
            _exit(0);
        }
        CHECK_EQ(victim_wait(&kid), 'h');
        victim_kill(&kid);
        for (int k = 0; k < 2; k++) {
            sw_keyed_decide(&r.v, fp, 1, MS(10), SW_F_TRY, &d); /* takes the stripe over */
            CHECK_EQ(d.verdict, SW_PASS);
        }
        struct sw_totals t;
        sw_keyed_totals(&r.v, &t);
        CHECK_EQ(t.pass, 10);
        struct sw_stats st;
        int64_t ev, keys;
        sw_keyed_stats(&r.v, MS(10), &st, &ev, &keys);
        CHECK_EQ(st.pass, 10);
        CHECK_EQ(sw_keyed_region_check(r.s.state, &r.lay), SW_OK);
        sw_shm_close(&r.s);
    }
}

void test_keyed_stripes(void)
{
    test_stripes_layout();
    test_stripes_hammer();
    test_stripes_kill();
    test_stripes_hot_counts_survive_a_kill();
}
