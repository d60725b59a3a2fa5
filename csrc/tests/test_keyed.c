/* test_keyed.c - the keyed table in private memory: per-key decisions equal a private
 * limiter's, eviction rules, tombstones and repair, crafted keys and entries, crowded homes,
 * threads (exact per key), hashing. The shared tables (a process killed at any instruction,
 * shared regions) are in test_keyed_shared.c. */
#include "keyed_util.h"
#include "sw_time.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

static void test_hash(void)
{
    CHECK(sw_keyed_hash(TEST_SEED, SW_KEY_STR, "1", 1) != sw_keyed_hash(TEST_SEED, SW_KEY_BYTES, "1", 1));
    int64_t one = 1;
    CHECK(sw_keyed_hash(TEST_SEED, SW_KEY_INT, &one, 8) != sw_keyed_hash(TEST_SEED, SW_KEY_STR, "1", 1));
    CHECK_EQ(sw_keyed_hash(TEST_SEED, SW_KEY_STR, "user-42", 7), sw_keyed_hash(TEST_SEED, SW_KEY_STR, "user-42", 7));
    CHECK(sw_keyed_hash(TEST_SEED, SW_KEY_STR, "", 0) != 0);
    char big[1000];
    memset(big, 'x', sizeof big);
    CHECK(sw_keyed_hash(TEST_SEED, SW_KEY_STR, big, sizeof big) != sw_keyed_hash(TEST_SEED, SW_KEY_BYTES, big, sizeof big));
    /* the table's size: 48-byte entries for the default window, 1.3 entries a key */
    size_t sz = sw_keyed_size(1000, 2, 65536, false);
    CHECK(sz > 0 && sz <= 65536u * 63u + 8192u);
    CHECK_EQ(sw_keyed_size(1000, 2, 0, false), 0);
    CHECK_EQ(sw_keyed_size(1000, 2, SW_KEYED_MAX_KEYS + 1u, false), 0);
}

/* Random operations on K keys (room for all): every verdict, wait and retry time equals the
 * one of a private limiter per key. */
static void equivalence(int grade, int behavior, double count, int64_t interval_ms,
                        uint32_t samples, uint64_t seed)
{
    enum { K = 5, OPS = 4000 };
    struct sw_limiter_cfg cfg = cfg_of(grade, behavior, count);
    cfg.interval_ms = interval_ms;
    cfg.sample_count = samples;
    cfg.max_queueing_ms = 300;
    struct ktab k;
    if (ktab_new(&k, &cfg, 8) < 0)
        return;
    struct sw_limiter *lim[K];
    for (int i = 0; i < K; i++)
        lim[i] = lim_new(&cfg);
    int64_t now = MS(1000);
    long mismatches = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rng_next(&seed);
        int key = (int)(r % K);
        int64_t n = 1 + (int64_t)((r >> 8) % 3);
        if (((r >> 16) & 7) == 0)
            n = (int64_t)count + 1; /* sometimes a request that can never pass */
        int64_t step = (int64_t)((r >> 20) % 400) * 1000000 - MS(50);
        now += step; /* sometimes backwards: the clamp */
        if (now < 0)
            now = 0;
        unsigned flags = SW_F_RETRY | (((r >> 32) & 1) ? SW_F_TRY : 0u) |
                         (((r >> 33) & 3) == 0 ? SW_F_ENTRY : 0u);
        if (((r >> 36) & 3) == 0) {
            /* release / exit one in flight */
            int64_t have = sw_limiter_in_flight(lim[key]);
            int64_t kh = sw_keyed_in_flight(&k.v, fp_int(key));
            if (have != kh)
                mismatches++;
            if (have > 0) {
                sw_limiter_exit(lim[key], 1, 3, SW_OUT_SUCCESS, now);
                sw_keyed_exit(&k.v, fp_int(key), 1, 3, SW_OUT_SUCCESS, now);
            }
            continue;
        }
        struct sw_decision a, b;
        sw_limiter_decide(lim[key], n, now, flags, &a);
        sw_keyed_decide(&k.v, fp_int(key), n, now, flags, &b);
        if (a.verdict != b.verdict || a.wait_ns != b.wait_ns || a.retry_ns != b.retry_ns) {
            if (mismatches < 5)
                printf("  mismatch op %d key %d n %lld now %lld: %d/%lld/%lld vs %d/%lld/%lld\n",
                       op, key, (long long)n, (long long)now, a.verdict, (long long)a.wait_ns,
                       (long long)a.retry_ns, b.verdict, (long long)b.wait_ns,
                       (long long)b.retry_ns);
            mismatches++;
        }
    }
    CHECK_EQ(mismatches, 0);
    CHECK_EQ(sw_keyed_len(&k.v), K);
    for (int i = 0; i < K; i++)
        free(lim[i]);
    free(k.st);
}

static void test_equivalence(void)
{
    equivalence(SW_GRADE_QPS, SW_REJECT, 5, 1000, 2, 11);
    equivalence(SW_GRADE_QPS, SW_REJECT, 7, 1000, 5, 12);
    equivalence(SW_GRADE_QPS, SW_REJECT, 3, 600, 3, 13);
    equivalence(SW_GRADE_QPS, SW_REJECT, 40, 100, 1, 14);
    equivalence(SW_GRADE_QPS, SW_THROTTLE, 10, 1000, 2, 15);
    equivalence(SW_GRADE_QPS, SW_THROTTLE, 2.5, 1000, 2, 16);
    equivalence(SW_GRADE_CONCURRENCY, SW_REJECT, 3, 1000, 2, 17);
}

static void test_eviction(void)
{
    struct ktab k;
    if (ktab_of(&k, SW_GRADE_QPS, SW_REJECT, 2, 3) < 0)
        return;
    struct sw_decision d;
    /* keys 1, 2, 3 busy at t=0 (1 used first) */
    for (int key = 1; key <= 3; key++) {
        sw_keyed_decide(&k.v, fp_int(key), 2, MS(0), 0, &d);
        CHECK_EQ(d.verdict, SW_PASS);
    }
    CHECK_EQ(sw_keyed_len(&k.v), 3);
    /* key 2 used again: key 1 is the least recently used */
    sw_keyed_decide(&k.v, fp_int(2), 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    sw_keyed_decide(&k.v, fp_int(4), 1, MS(20), 0, &d); /* evicts key 1 (none is empty) */
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_keyed_len(&k.v), 3);
    struct sw_stats s;
    int64_t ev, keys;
    sw_keyed_stats(&k.v, MS(20), &s, &ev, &keys);
    CHECK_EQ(ev, 1);
    CHECK_EQ(keys, 3);
    CHECK_EQ(s.pass, 7);
    CHECK_EQ(s.block, 1);
    /* key 1 restarts (its limit restarts): evicts key 3 (LRU now: 3, 2, 4) */
    sw_keyed_decide(&k.v, fp_int(1), 2, MS(30), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    /* at t=1100 key 2's window still holds (it passed at 0 and was refused at 10: its passes
     * slid out at 1000), keys 4 and 1 passed at 20, 30: key 2's window is empty and it is the
     * least recently used idle one */
    sw_keyed_decide(&k.v, fp_int(5), 1, MS(1100), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_keyed_decide(&k.v, fp_int(2), 2, MS(1100), 0, &d); /* key 2 was evicted: fresh again */
    CHECK_EQ(d.verdict, SW_PASS);
    free(k.st);

    /* concurrency: keys in flight are never evicted; all in flight -> refused (BLOCK) */
    if (ktab_of(&k, SW_GRADE_CONCURRENCY, SW_REJECT, 1, 2) < 0)
        return;
    sw_keyed_decide(&k.v, fp_int(1), 1, MS(0), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_keyed_decide(&k.v, fp_int(2), 1, MS(0), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_keyed_decide(&k.v, fp_int(3), 1, MS(0), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    sw_keyed_stats(&k.v, MS(0), &s, &ev, &keys);
    CHECK_EQ(s.block, 1);
    CHECK_EQ(ev, 0);
    CHECK_EQ(s.in_flight, 2);
    CHECK_EQ(sw_keyed_release(&k.v, fp_int(2), 1), SW_OK);
    CHECK_EQ(sw_keyed_release(&k.v, fp_int(2), 1), SW_ESTATE);
    sw_keyed_decide(&k.v, fp_int(3), 1, MS(0), 0, &d); /* takes key 2's place */
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_keyed_in_flight(&k.v, fp_int(1)), 1);
    CHECK_EQ(sw_keyed_in_flight(&k.v, fp_int(3)), 1);
    free(k.st);
}

static void test_big_table(void)
{
    /* many keys through a table with sampling: bounded, in-flight keys kept */
    struct ktab k;
    if (ktab_of(&k, SW_GRADE_QPS, SW_REJECT, 3, 1000) < 0)
        return;
    struct sw_decision d;
    long pass = 0;
    for (int64_t key = 0; key < 20000; key++) {
        sw_keyed_decide(&k.v, fp_int(key), 1, MS(key), key < 10 ? SW_F_ENTRY : 0u, &d);
        pass += d.verdict == SW_PASS;
    }
    CHECK_EQ(pass, 20000);
    CHECK_EQ(sw_keyed_len(&k.v), 1000);
    for (int64_t key = 0; key < 10; key++)
        CHECK_EQ(sw_keyed_in_flight(&k.v, fp_int(key)), 1);
    struct sw_stats s;
    int64_t ev, keys;
    sw_keyed_stats(&k.v, MS(20000), &s, &ev, &keys);
    CHECK_EQ(ev, 19000);
    CHECK_EQ(s.in_flight, 10);
    /* the keys just used are still there with their windows */
    for (int64_t key = 19990; key < 20000; key++) {
        sw_keyed_decide(&k.v, fp_int(key), 3, MS(20000), SW_F_TRY, &d);
        CHECK_EQ(d.verdict, SW_BLOCK);
    }
    free(k.st);
}

/* Every key held is where a lookup finds it: a repair (which forgets any key it would not
 * find) keeps them all. */
static uint32_t count_tombs(struct ktab *k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < k->st->cap; i++) {
        const struct sw_kentry *e = (const struct sw_kentry *)(const void *)(
            (const char *)k->st + k->st->off_entries + (size_t)i * k->st->entry_size);
        n += e->fp == 0 && (e->flags & SW_KE_TOMB);
    }
    return n;
}

static void check_table(struct ktab *k, uint32_t want_len)
{
    uint32_t before = sw_keyed_len(&k->v);
    CHECK_EQ(before, want_len);
    check_repair_keeps(&k->v, before);
}

/* @param max_keys table size @param n_keys distinct keys @return free marks seen */
static uint32_t churn(uint32_t max_keys, uint64_t n_keys)
{
    /* many more keys than the table holds, some held in flight for a while: evictions free
     * entries (marked for probes to go past) and new keys reuse them; every key held stays
     * findable, in-flight counts stay with their keys */
    struct ktab k;
    if (ktab_of(&k, SW_GRADE_CONCURRENCY, SW_REJECT, 5, max_keys) < 0)
        return 0;
    uint64_t seed = 99;
    int64_t held[16] = {0}; /* key + 1, 0: none */
    struct sw_decision d;
    long refused = 0;
    uint32_t tombs = 0;
    for (int op = 0; op < 60000; op++) {
        int64_t key = (int64_t)(rng_next(&seed) % n_keys);
        unsigned slot = (unsigned)(rng_next(&seed) % (max_keys < 32u ? max_keys / 2u : 16u));
        if (held[slot] != 0) {
            CHECK_EQ(sw_keyed_in_flight(&k.v, fp_int(held[slot] - 1)), 1);
            CHECK_EQ(sw_keyed_release(&k.v, fp_int(held[slot] - 1), 1), SW_OK);
            held[slot] = 0;
        }
        sw_keyed_decide(&k.v, fp_int(key), 1, MS(op), 0, &d);
        if (d.verdict == SW_PASS) {
            bool dup = false;
            for (unsigned j = 0; j < 16; j++)
                dup |= held[j] == key + 1;
            if (dup)
                CHECK_EQ(sw_keyed_release(&k.v, fp_int(key), 1), SW_OK);
            else
                held[slot] = key + 1;
        } else {
            refused++;
        }
        if (op % 5000 == 4999) {
            tombs += count_tombs(&k);
            check_table(&k, max_keys);
        }
    }
    CHECK_EQ(refused, 0);
    int64_t ev, keys;
    struct sw_stats s;
    sw_keyed_stats(&k.v, MS(60000), &s, &ev, &keys);
    CHECK_EQ(keys, max_keys);
    CHECK(ev > 30000);
    free(k.st);
    return tombs;
}

/* ---- crafted keys and floods ---- */

/* A str key's fingerprint as the binding computes it for a table of seed `seed`. */
static uint64_t fp_str(uint64_t seed, const char *key)
{
    return sw_keyed_hash(seed, SW_KEY_STR, key, strlen(key));
}

static uint32_t home_in(const struct sw_kstate *st, uint64_t fp)
{
    return (uint32_t)(((unsigned __int128)fp * st->cap) >> 64);
}

/* The attacker's keys: `n` keys whose home, under the seed the attacker believes the table
 * has, lies at most 8 entries before the victim's (their probe runs go through it). */
static char (*craft(const struct sw_kstate *st, uint64_t seed, const char *victim, int n))[16]
{
    char(*keys)[16] = calloc((size_t)n, 16);
    if (keys == NULL)
        return NULL;
    uint32_t h = home_in(st, fp_str(seed, victim));
    for (int got = 0, i = 0; got < n; i++) {
        char k[16];
        snprintf(k, sizeof k, "u%07d", i);
        uint32_t kh = home_in(st, fp_str(seed, k));
        if ((h + st->cap - kh) % st->cap <= 8u)
            memcpy(keys[got++], k, 16);
    }
    return keys;
}

/* A login limit (5 per 60 s) under a flood of 300 keys crafted for the public seed, again
 * and again within one window: alice gets 5 in all with a random seed; a table that has
 * the seed the keys were crafted for restarts her limit every round. */
static int64_t login_attack(uint64_t forced_seed)
{
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 5.0 / 60.0);
    cfg.interval_ms = 60000;
    struct ktab k;
    if (ktab_new(&k, &cfg, 4096) < 0)
        return -1;
    if (forced_seed != 0)
        CHECK_EQ(sw_keyed_set_seed(&k.v, forced_seed), SW_OK);
    uint64_t seed = k.st->seed; /* what the binding hashes with */
    char(*keys)[16] = craft(k.st, TEST_SEED, "alice", 300);
    CHECK(keys != NULL);
    int64_t admitted = 0, t = MS(100000);
    struct sw_decision d;
    for (int round = 0; keys != NULL && round < 10; round++) {
        for (int a = 0; a < 6; a++) {
            sw_keyed_decide(&k.v, fp_str(seed, "alice"), 1, t, SW_F_TRY, &d);
            admitted += d.verdict == SW_PASS;
        }
        for (int i = 0; i < 300; i++) {
            t += 100000;
            sw_keyed_decide(&k.v, fp_str(seed, keys[i]), 1, t, SW_F_TRY, &d);
        }
    }
    free(keys);
    free(k.st);
    return admitted;
}

static void test_crafted_keys(void)
{
    /* the seed: random, never 0, its own per table; set only on an empty table */
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 1);
    struct ktab a, b;
    if (ktab_new(&a, &cfg, 4096) < 0 || ktab_new(&b, &cfg, 4096) < 0)
        return;
    CHECK(a.st->seed != 0 && b.st->seed != 0 && a.st->seed != b.st->seed);
    CHECK_EQ(sw_keyed_set_seed(&a.v, 0), SW_EINVAL);
    CHECK(fp_str(a.st->seed, "alice") != fp_str(b.st->seed, "alice"));

    CHECK_EQ(login_attack(0), 5);
    CHECK(login_attack(TEST_SEED) >= 20); /* the control: the keys are crafted right */

    /* per-client concurrency 1: 316 crafted clients each hold a request; bobby holds one:
     * his count stays, and alice (nothing in flight) is admitted */
    struct sw_decision d;
    uint64_t seed = a.st->seed;
    sw_keyed_decide(&a.v, fp_str(seed, "bobby"), 1, MS(1), SW_F_TRY, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    char(*ka)[16] = craft(a.st, TEST_SEED, "alice", 316);
    char(*kb)[16] = craft(a.st, TEST_SEED, "bobby", 316);
    for (int i = 0; ka != NULL && kb != NULL && i < 316; i++) {
        sw_keyed_decide(&a.v, fp_str(seed, ka[i]), 1, MS(1), SW_F_TRY, &d);
        sw_keyed_decide(&a.v, fp_str(seed, kb[i]), 1, MS(1), SW_F_TRY, &d);
    }
    CHECK_EQ(sw_keyed_in_flight(&a.v, fp_str(seed, "bobby")), 1);
    sw_keyed_decide(&a.v, fp_str(seed, "bobby"), 1, MS(1), SW_F_TRY, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    sw_keyed_decide(&a.v, fp_str(seed, "alice"), 1, MS(1), SW_F_TRY, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_keyed_set_seed(&a.v, TEST_SEED), SW_ESTATE); /* holds keys */
    /* the same attack on a table with the public seed: alice's window is all in flight */
    CHECK_EQ(sw_keyed_set_seed(&b.v, TEST_SEED), SW_OK);
    for (int i = 0; ka != NULL && i < 316; i++)
        sw_keyed_decide(&b.v, fp_str(TEST_SEED, ka[i]), 1, MS(1), SW_F_TRY, &d);
    sw_keyed_decide(&b.v, fp_str(TEST_SEED, "alice"), 1, MS(1), SW_F_TRY, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    free(ka);
    free(kb);
    free(a.st);
    free(b.st);
}

/* A random flood (9 new keys in 10) does not evict a hot key: it gets its limit (100) in
 * one window, once, whatever the table's size. */
static void test_hot_key_flood(void)
{
    static const uint32_t sizes[] = {17, 100, 1000, 65536};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        struct ktab k;
        if (ktab_of(&k, SW_GRADE_QPS, SW_REJECT, 100, sizes[z]) < 0)
            return;
        uint64_t rng = 18 + z, hot = fp_int(-1);
        long admitted = 0;
        struct sw_decision d;
        for (int i = 0; i < 200000; i++) {
            if (i % 10 == 0) {
                sw_keyed_decide(&k.v, hot, 1, MS(5000), SW_F_TRY, &d);
                admitted += d.verdict == SW_PASS;
            } else {
                sw_keyed_decide(&k.v, rng_next(&rng), 1, MS(5000), SW_F_TRY, &d);
            }
        }
        int64_t ev, keys;
        struct sw_stats s;
        sw_keyed_stats(&k.v, MS(5000), &s, &ev, &keys);
        CHECK(ev > 100000);
        if (admitted != 100)
            printf("  max_keys %u: the hot key got %ld\n", sizes[z], admitted);
        CHECK_EQ(count_tombs(&k), 0u); /* nothing in flight: every hole was filled */
        CHECK_EQ(admitted, 100);
        check_repair_keeps(&k.v, sizes[z]);
        free(k.st);
    }
}

static void test_churn(void)
{
    /* a small table: every key a candidate, victims off the new key's path leave marks */
    CHECK(churn(12, 40) > 0);
    /* a larger one: a victim's entry is taken by the new key (on its path) or filled by the
     * keys behind it, which move up (linear probing's deletion); only a key in flight (16 at
     * a time here) does not move and keeps a mark before it: marks do not pile up (a sum
     * over 12 looks) */
    CHECK(churn(200, 5000) < 60);
    CHECK(churn(2000, 50000) < 60);
}

static void test_repair_damage(void)
{
    /* what a repair restores in a table written by a process killed mid-write, or damaged */
    struct ktab k;
    if (ktab_of(&k, SW_GRADE_QPS, SW_REJECT, 100, 50) < 0)
        return;
    struct sw_decision d;
    for (int64_t key = 0; key < 40; key++)
        sw_keyed_decide(&k.v, fp_int(key), 3, MS(10), 0, &d);
    struct sw_kstate *st = k.st;
    struct sw_kentry *first = NULL, *free_e = NULL;
    for (uint32_t i = 0; i < st->cap; i++) {
        struct sw_kentry *e =
            (struct sw_kentry *)(void *)((char *)st + st->off_entries + (size_t)i * st->entry_size);
        if (e->fp != 0 && first == NULL)
            first = e;
        if (e->fp == 0 && free_e == NULL && i > 0)
            free_e = e;
    }
    CHECK(first != NULL && free_e != NULL);
    if (first == NULL || free_e == NULL)
        return;
    uint64_t kept = first->fp;
    /* a key whose entry still has the free mark (a take cut short), a wrong stored total,
     * a negative count, and a stray copy of a key outside its probe path */
    first->flags |= SW_KE_TOMB;
    first->counts[0] = -5;
    memcpy(free_e, first, st->entry_size);
    free_e->flags = SW_KE_WINDOW;
    check_repair_keeps(&k.v, 40);
    CHECK_EQ(first->flags & SW_KE_TOMB, 0u);
    CHECK(first->counts[0] >= 0);
    uint32_t copies = 0;
    for (uint32_t i = 0; i < st->cap; i++)
        copies += ((struct sw_kentry *)(void *)((char *)st + st->off_entries +
                                               (size_t)i * st->entry_size))->fp == kept;
    CHECK_EQ(copies, 1u); /* the copy a lookup would not find (or the original behind it) */
    /* every key is found with its window (3 passed of 100; 97 more fit, 98 do not) */
    for (int64_t key = 0; key < 40; key++) {
        sw_keyed_decide(&k.v, fp_int(key), 98, MS(20), SW_F_TRY, &d);
        if (fp_int(key) == kept)
            continue; /* its counts were damaged */
        CHECK_EQ(d.verdict, SW_BLOCK);
    }
    free(k.st);
}

/* Keys crowded on a few homes (long runs, wrap-around at the table's end, free marks) in
 * tables of 1 to 40 keys, against a model: every key held is found, in-flight counts are
 * exact, `evicted` is the keys that left, and (max_keys <= SW_KEYED_SAMPLE: every key a
 * candidate) the victim is the least recently used key not in flight, a key is refused only
 * when every key is in flight. */
static void crowded(uint32_t max_keys, uint32_t n_keys, uint32_t homes, uint64_t seed)
{
    struct ktab k;
    if (ktab_of(&k, SW_GRADE_CONCURRENCY, SW_REJECT, 3, max_keys) < 0)
        return;
    struct sw_kstate *st = k.st;
    uint64_t fps[64];
    int64_t in[64] = {0};
    uint64_t used[64] = {0}, tick = 0;
    long inserted = 0, bad = 0;
    for (uint32_t j = 0; j < n_keys; j++)
        fps[j] = fp_home(st, (st->cap - 2u + (uint32_t)(rng_next(&seed) % homes)) % st->cap,
                         1u + j);
    for (int op = 0; op < 6000; op++) {
        uint64_t r = rng_next(&seed);
        uint32_t j = (uint32_t)(r % n_keys);
        if ((r >> 16) % 4 == 0) {
            if (in[j] > 0) {
                bad += sw_keyed_release(&k.v, fps[j], 1) != SW_OK;
                in[j]--;
                used[j] = ++tick;
            }
            continue;
        }
        bool was = kentry_find(st, fps[j]) >= 0;
        int64_t lru = -1;
        if (!was && max_keys <= SW_KEYED_SAMPLE && st->n_live == max_keys)
            for (uint32_t q = 0; q < n_keys; q++)
                if (in[q] == 0 && kentry_find(st, fps[q]) >= 0 && (lru < 0 || used[q] < used[lru]))
                    lru = q;
        struct sw_decision d;
        sw_keyed_decide(&k.v, fps[j], 1, MS(op), 0, &d);
        bool now = kentry_find(st, fps[j]) >= 0;
        inserted += !was && now;
        if (now)
            used[j] = ++tick;
        if (d.verdict == SW_PASS)
            in[j]++;
        if (lru >= 0)
            bad += kentry_find(st, fps[lru]) >= 0 || !now; /* the LRU key went, the new one came */
        if (max_keys <= SW_KEYED_SAMPLE && !now && st->n_live == max_keys) {
            bool any_free = false; /* refused: every key held is in flight */
            for (uint32_t q = 0; q < n_keys; q++)
                any_free |= in[q] == 0 && kentry_find(st, fps[q]) >= 0;
            bad += any_free;
        }
        if ((r >> 24) % 64 == 0) /* all given back now and then */
            for (uint32_t q = 0; q < n_keys; q++)
                for (; in[q] > 0; in[q]--) {
                    bad += sw_keyed_release(&k.v, fps[q], 1) != SW_OK;
                    used[q] = ++tick;
                }
        if (op % 50 == 0) {
            bad += !ktable_sound(st, NULL, 0);
            for (uint32_t q = 0; q < n_keys; q++)
                bad += sw_keyed_in_flight(&k.v, fps[q]) != in[q];
        }
    }
    bad += !ktable_sound(st, NULL, 0);
    CHECK_EQ(st->evicted, inserted - (long)st->n_live);
    if (bad != 0)
        printf("  crowded(%u keys, %u homes): %ld wrong\n", max_keys, homes, bad);
    CHECK_EQ(bad, 0);
    free(k.st);
}

static void test_crowded(void)
{
    static const uint32_t sizes[][3] = {{1, 3, 1},  {1, 5, 2},  {2, 6, 1},  {3, 10, 2},
                                        {5, 20, 1}, {8, 30, 3}, {16, 40, 2}, {16, 40, 16},
                                        {17, 50, 1}, {24, 60, 3}, {40, 64, 5}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        crowded(sizes[i][0], sizes[i][1], sizes[i][2], 11u + i);
}

/* A region is untrusted: attaching validates only the layout, so decisions meet entries with
 * any bit pattern (extreme window starts, counts, in-flight) and must stay defined (no
 * overflow: the asan build's UBSan stops at one), bounded, and in range. */
static void test_crafted_entries(void)
{
    static const int64_t wild[] = {INT64_MIN, INT64_MIN + 1, -1, INT64_MAX, INT64_MAX - 1,
                                   INT64_MAX / 2, INT64_MIN / 2};
    static const int modes[][2] = {{SW_GRADE_QPS, SW_REJECT},
                                   {SW_GRADE_CONCURRENCY, SW_REJECT},
                                   {SW_GRADE_QPS, SW_THROTTLE}};
    static const uint32_t samples[] = {1, 2, 4};
    for (int m = 0; m < 3; m++) {
        for (int si = 0; si < 3; si++) {
            struct sw_limiter_cfg cfg = cfg_of(modes[m][0], modes[m][1], 3);
            cfg.sample_count = samples[si];
            cfg.max_queueing_ms = 500;
            struct ktab k;
            if (ktab_new(&k, &cfg, 4) < 0)
                return;
            struct sw_decision d;
            int crafted = 0;
            for (size_t w = 0; w < sizeof wild / sizeof wild[0]; w++) {
                for (int field = 0; field < 3; field++) {
                    int64_t key = (int64_t)w;
                    sw_keyed_decide(&k.v, fp_int(key), 1, MS(1000), SW_F_ENTRY, &d);
                    struct sw_kentry *e = NULL;
                    for (uint32_t i = 0; i < k.st->cap; i++)
                        if (kentry_of(k.st, i)->fp == fp_int(key))
                            e = kentry_of(k.st, i);
                    if (e == NULL)
                        continue; /* refused: every candidate in flight (crafted counts) */
                    crafted++;
                    if (field == 0)
                        e->a = wild[w];
                    else if (field == 1)
                        e->in_flight = wild[w];
                    else
                        for (uint32_t c = 0; c < (k.st->entry_size - 32u) / 8u; c++)
                            e->counts[c] = wild[(w + c) % 7];
                    static const int64_t times[] = {0, MS(1000), MS(3000), INT64_MAX};
                    for (int t = 0; t < 4; t++) {
                        sw_keyed_decide(&k.v, fp_int(key), 1, times[t], SW_F_RETRY, &d);
                        sw_keyed_decide(&k.v, fp_int(key), 2, times[t], SW_F_TRY | SW_F_ENTRY,
                                        &d);
                        sw_keyed_exit(&k.v, fp_int(key), 1, 3, SW_OUT_SUCCESS, times[t]);
                        (void)sw_keyed_release(&k.v, fp_int(key), 1);
                        /* new keys: the crafted one may be the eviction's candidate */
                        int64_t other = 100 + t + 4 * (int64_t)w;
                        sw_keyed_decide(&k.v, fp_int(other), 1, times[t], 0, &d);
                        (void)sw_keyed_release(&k.v, fp_int(other), 1); /* (concurrency) */
                    }
                    CHECK(sw_keyed_len(&k.v) <= 4u);
                }
            }
            CHECK(crafted >= 7);
            sw_keyed_lock(&k.v);
            sw_keyed_repair(&k.v);
            sw_keyed_unlock(&k.v);
            for (uint32_t i = 0; i < k.st->cap; i++) {
                struct sw_kentry *e = kentry_of(k.st, i);
                if (e->fp != 0)
                    CHECK(e->in_flight >= 0 && e->a >= 0);
            }
            free(k.st);
        }
    }
}

/* ---- threads: exact per key ---- */

struct kworker {
    struct sw_kview *v;
    uint64_t seed;
    long pass[4];
};

static void *kwork(void *arg)
{
    struct kworker *w = arg;
    for (int i = 0; i < 20000; i++) {
        int key = (int)(rng_next(&w->seed) % 4);
        struct sw_decision d;
        sw_keyed_decide(w->v, fp_int(key), 1, MS(5), SW_F_TRY, &d);
        if (d.verdict == SW_PASS)
            w->pass[key]++;
    }
    return NULL;
}

static void test_threads(void)
{
    struct ktab k;
    if (ktab_of(&k, SW_GRADE_QPS, SW_REJECT, 1000, 64) < 0)
        return;
    enum { T = 4 };
    pthread_t th[T];
    struct kworker w[T];
    for (int i = 0; i < T; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].v = &k.v;
        w[i].seed = 77u + (uint64_t)i;
        pthread_create(&th[i], NULL, kwork, &w[i]);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int key = 0; key < 4; key++) {
        long total = 0;
        for (int i = 0; i < T; i++)
            total += w[i].pass[key];
        CHECK_EQ(total, 1000); /* exactly the limit per key: 80000 tries over 4 keys */
    }
    struct sw_stats s;
    int64_t ev, keys;
    sw_keyed_stats(&k.v, MS(5), &s, &ev, &keys);
    CHECK_EQ(s.pass, 4000);
    CHECK_EQ(s.pass + s.block, 80000);
    free(k.st);
}

/* ---- settings swapped while threads decide (what the binding's update() and overrides
 * setter do: a new rule and overrides array installed under the table's lock, the old array
 * freed after the unlock) ---- */

struct kswap {
    struct ktab *k;
    _Atomic int stop;
    _Atomic long swaps;
    _Atomic int bad; /* what went wrong in the thread (checked after the join) */
};

/* Overrides of keys 0 and 1 (10 and 20), with key 3 at the base threshold (7) in every other
 * array: a key's threshold is the same in every array, so its passes are exact. */
static struct sw_kover *kswap_over(const struct sw_limiter_cfg *cfg, bool with3, uint32_t *n)
{
    struct sw_kover *o = calloc(3, sizeof *o); /* no CHECK: called from threads */
    if (o == NULL)
        return NULL;
    double counts[3] = {10, 20, 7};
    *n = 0;
    for (int64_t key = 0; key < 4; key++) {
        if (key == 2 || (key == 3 && !with3))
            continue;
        o[*n].fp = fp_int(key);
        o[*n].count = counts[key == 3 ? 2 : key];
        o[*n].limit = o[*n].count * (double)cfg->interval_ms / 1000.0;
        (*n)++;
    }
    for (uint32_t i = 1; i < *n; i++) /* sorted by fp */
        for (uint32_t j = i; j > 0 && o[j - 1].fp > o[j].fp; j--) {
            struct sw_kover t = o[j];
            o[j] = o[j - 1];
            o[j - 1] = t;
        }
    return o;
}

static void *kswapper(void *arg)
{
    struct kswap *w = arg;
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 7);
    while (!atomic_load(&w->stop)) {
        struct sw_krule fresh;
        uint32_t n;
        struct sw_kover *o = kswap_over(&cfg, atomic_load(&w->swaps) % 2 == 0, &n);
        if (o == NULL || sw_krule_init(&fresh, &cfg) != SW_OK) {
            w->bad = 1;
            free(o);
            return NULL;
        }
        sw_keyed_lock(&w->k->v);
        const struct sw_kover *old = w->k->rule.over;
        w->k->rule.base = fresh.base;
        w->k->rule.over = o;
        w->k->rule.n_over = n;
        sw_keyed_unlock(&w->k->v);
        free((void *)old); /* freed after the unlock: no decision reads it any more */
        atomic_fetch_add(&w->swaps, 1);
    }
    return NULL;
}

static void test_threads_swap_settings(void)
{
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 7);
    struct ktab k;
    if (ktab_new(&k, &cfg, 64) < 0)
        return;
    uint32_t n;
    k.rule.over = kswap_over(&cfg, false, &n);
    CHECK(k.rule.over != NULL);
    k.rule.n_over = n;
    struct kswap sw = {&k, 0, 0, 0};
    enum { T = 3 };
    pthread_t th[T], swapper;
    struct kworker w[T];
    CHECK_EQ(pthread_create(&swapper, NULL, kswapper, &sw), 0);
    /* the deciders start once the swapper runs (on a loaded machine it could otherwise get
     * its first slice after they are done, and the test would prove nothing) */
    while (atomic_load(&sw.swaps) == 0 && !sw.bad)
        sched_yield();
    for (int i = 0; i < T; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].v = &k.v;
        w[i].seed = 500u + (uint64_t)i;
        CHECK_EQ(pthread_create(&th[i], NULL, kwork, &w[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    atomic_store(&sw.stop, 1);
    pthread_join(swapper, NULL);
    /* the window's limit is count * interval_ms / 1000 passes */
    double want[4] = {10, 20, 7, 7};
    for (int key = 0; key < 4; key++) {
        long total = 0;
        for (int i = 0; i < T; i++)
            total += w[i].pass[key];
        CHECK_EQ(total, (long)(want[key] * (double)cfg.interval_ms / 1000.0));
    }
    CHECK(atomic_load(&sw.swaps) > 1);
    CHECK_EQ(sw.bad, 0);
    free((void *)k.rule.over);
    free(k.st);
}

void test_keyed(void)
{
    test_hash();
    test_equivalence();
    test_eviction();
    test_big_table();
    test_churn();
    test_repair_damage();
    test_crowded();
    test_crafted_entries();
    test_crafted_keys();
    test_hot_key_flood();
    test_threads();
    test_threads_swap_settings();
    test_keyed_shared();
}
