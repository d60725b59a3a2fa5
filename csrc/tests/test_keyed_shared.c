/* test_keyed_shared.c - keyed tables in shared memory: a process killed at any instruction
 * of a decision (the table repaired keeps every key with its counts), a shared region (a
 * killed holder's per-key counts come back, a lock taken over mid-insertion or mid-eviction
 * is repaired), a region attached or reinitialised without a random source. */
#include "keyed_util.h"
#include "shm_util.h"
#include "sw_proc.h"
#include "sw_time.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a process killed at any instruction ---- */

/* Every key of a table with its counts (in flight, window or pacing state): after a kill
 * anywhere and a repair, each must be found by a lookup with the same counts, except the one
 * key a decision may evict (never one held in flight). */
#define KSNAP_MAX 64
#define KSNAP_WORDS 8
struct ksnap {
    uint64_t fp[KSNAP_MAX];
    int64_t in_flight[KSNAP_MAX];
    int64_t a[KSNAP_MAX];
    int64_t c[KSNAP_MAX][KSNAP_WORDS];
    uint32_t count;
};

static size_t kcount_bytes(const struct sw_kstate *st)
{
    size_t n = (size_t)st->entry_size - sizeof(struct sw_kentry);
    CHECK(n <= KSNAP_WORDS * 8u);
    return n <= KSNAP_WORDS * 8u ? n : KSNAP_WORDS * 8u;
}

static void ksnap_of(struct sw_kstate *st, struct ksnap *h)
{
    h->count = 0;
    memset(h->c, 0, sizeof h->c);
    for (uint32_t i = 0; i < st->cap; i++) {
        struct sw_kentry *e = kentry_of(st, i);
        CHECK(e->fp == 0 || h->count < KSNAP_MAX);
        if (e->fp != 0 && h->count < KSNAP_MAX) {
            h->fp[h->count] = e->fp;
            h->in_flight[h->count] = e->in_flight;
            h->a[h->count] = e->a;
            memcpy(h->c[h->count], e->counts, kcount_bytes(st));
            h->count++;
        }
    }
}

/* A lookup as the core does it: the key's probe path from its home up to an empty entry.
 * @return the entry holding fp, or NULL */
static struct sw_kentry *klookup(struct sw_kstate *st, uint64_t fp)
{
    uint32_t plen = st->cap < SW_KEYED_PROBE ? st->cap : SW_KEYED_PROBE;
    uint32_t p = (uint32_t)(((unsigned __int128)fp * st->cap) >> 64);
    for (uint32_t d = 0; d < plen; d++) {
        struct sw_kentry *e = kentry_of(st, p);
        if (e->fp == fp)
            return e;
        if (e->fp == 0 && !(e->flags & SW_KE_TOMB))
            return NULL;
        if (++p == st->cap)
            p = 0;
    }
    return NULL;
}

/* Whether every key of the snapshot is found in st with its counts, but for at most one key
 * not in flight (the victim of an eviction: gone, or its entry being taken over by the new
 * key), and n_live counts the keys. */
static bool ksnap_kept(struct sw_kstate *st, const struct ksnap *h)
{
    uint32_t victims = 0;
    for (uint32_t k = 0; k < h->count; k++) {
        struct sw_kentry *e = klookup(st, h->fp[k]);
        /* the victim is gone, or cleared where the new key takes its entry over */
        if (e == NULL || e->in_flight != h->in_flight[k] || e->a != h->a[k] ||
            memcmp(e->counts, h->c[k], kcount_bytes(st)) != 0)
            if (h->in_flight[k] != 0 || ++victims > 1)
                return false;
    }
    uint32_t live = 0;
    for (uint32_t i = 0; i < st->cap; i++)
        live += kentry_of(st, i)->fp != 0;
    return live == st->n_live && live <= st->max_keys;
}

/* Repair a copy of the table as a process taking the lock over would; @return whether every
 * key is still found with its counts (ksnap_kept) and the table is consistent. */
static bool kcopy_ok(const struct sw_kview *v, size_t size, const struct ksnap *held,
                     struct sw_kstate *copy)
{
    memcpy(copy, v->st, size);
    struct sw_kview cv = *v;
    cv.st = copy;
    sw_keyed_repair(&cv);
    return ksnap_kept(copy, held);
}

/* Decide for key fp in a child stopped after every instruction (ptrace): at every stop, a copy
 * of the table, repaired, still holds every key held in flight (SIGKILL at any instruction).
 * @return the instructions stepped (0: ptrace unavailable) */
static long kill_anywhere(const struct sw_kview *v, size_t size, uint64_t fp, long *bad)
{
    struct ksnap held;
    ksnap_of(v->st, &held);
    struct sw_kstate *copy = malloc(size);
    CHECK(copy != NULL);
    if (copy == NULL)
        return 0;
    pid_t kid = fork();
    if (kid == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
            _exit(3);
        raise(SIGSTOP);
        struct sw_decision d;
        sw_keyed_decide(v, fp, 1, MS(50), 0, &d);
        _exit(0);
    }
    long steps = 0;
    int status;
    if (waitpid(kid, &status, 0) != kid || !WIFSTOPPED(status)) {
        free(copy);
        return 0; /* no tracing here */
    }
    for (;;) {
        if (!kcopy_ok(v, size, &held, copy) && (*bad)++ == 0)
            printf("  a kill at step %ld loses a key or its counts\n", steps);
        if (ptrace(PTRACE_SINGLESTEP, kid, NULL, NULL) != 0)
            break;
        if (waitpid(kid, &status, 0) != kid || !WIFSTOPPED(status))
            break;
        steps++;
    }
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    if (!kcopy_ok(v, size, &held, copy))
        (*bad)++;
    free(copy);
    return steps;
}

/* A table in memory the traced child writes and the parent reads (MAP_SHARED). */
static struct sw_kstate *kshared_new(uint32_t max_keys, size_t *size)
{
    *size = sw_keyed_size(1000, 2, max_keys, false);
    void *p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    if (p == MAP_FAILED)
        return NULL;
    CHECK_EQ(sw_keyed_init(p, 1000, 2, max_keys, false), SW_OK);
    return p;
}

static void test_kill_anywhere(void)
{
    struct sw_krule rule;
    krule_of(&rule, SW_GRADE_CONCURRENCY, 5);
    struct sw_decision d;
    long bad = 0, steps = 0;
    /* 1. a new key takes a free mark that a key held in flight lies behind */
    size_t size;
    struct sw_kstate *st = kshared_new(20, &size);
    if (st == NULL)
        return;
    struct sw_kview v = {st, &rule, SW_LOCK_PRIVATE, NULL, 0, -1, NULL};
    sw_keyed_decide(&v, fp_home(st, 5, 1), 1, MS(10), 0, &d); /* entry 5 */
    sw_keyed_decide(&v, fp_home(st, 5, 2), 1, MS(10), 0, &d); /* entry 6, home 5 */
    CHECK_EQ(sw_keyed_release(&v, fp_home(st, 5, 1), 1), SW_OK);
    struct sw_kentry *e5 = kentry_of(st, 5);
    CHECK_EQ(e5->fp, fp_home(st, 5, 1));
    e5->flags = SW_KE_TOMB; /* as an eviction leaves it */
    e5->fp = 0;
    st->n_live--;
    long s1 = kill_anywhere(&v, size, fp_home(st, 5, 3), &bad);
    if (s1 == 0) {
        printf("  (ptrace unavailable: kill-anywhere checks skipped)\n");
        munmap(st, size);
        return;
    }
    steps += s1;
    CHECK_EQ(bad, 0);
    munmap(st, size);
    /* 2. random small tables, keys crowded on a few homes: each step of a decision (a take,
     * an eviction freeing a victim off the path, emptying marks, the sweep) */
    uint64_t seed = 4242;
    struct sw_krule qrule;
    krule_of(&qrule, SW_GRADE_QPS, 5);
    for (int round = 0; round < 48; round++) {
        /* a concurrency table (keys held in flight never move) and a QPS table (every key
         * idle: moved by evictions and sweeps, its window counts must go with it) */
        v.rule = round % 2 ? &qrule : &rule;
        uint32_t max_keys = 3u + (uint32_t)(rng_next(&seed) % 22u);
        st = kshared_new(max_keys, &size);
        if (st == NULL)
            return;
        v.st = st;
        uint32_t homes = 1u + (uint32_t)(rng_next(&seed) % 4u);
        for (int op = 0; op < 300; op++) {
            uint64_t r = rng_next(&seed);
            uint64_t fp = fp_home(st, (uint32_t)((st->cap - 2u + r % homes) % st->cap),
                                  1u + (r >> 8) % 40u);
            if ((r >> 20) % 3 == 0 && sw_keyed_in_flight(&v, fp) > 0)
                sw_keyed_release(&v, fp, 1);
            else
                sw_keyed_decide(&v, fp, 1, MS(10), 0, &d);
        }
        uint64_t r = rng_next(&seed);
        steps += kill_anywhere(&v, size,
                               fp_home(st, (uint32_t)((st->cap - 2u + r % homes) % st->cap),
                                       41u + r % 5u),
                               &bad);
        munmap(st, size);
    }
    CHECK_EQ(bad, 0);
    CHECK(steps > 1000);
}


static void test_shared(void)
{
    struct sw_shm_layout lay;
    struct sw_shm s;
    struct sw_krule rule;
    kregion_open(&s, &lay, &rule, 100, SW_GRADE_CONCURRENCY, 2);
    struct victim kid;
    if (victim_fork(&kid)) {
        struct sw_kview v;
        kshm_view(&s, &rule, &v);
        struct sw_decision d;
        sw_keyed_decide(&v, fp_int(1), 2, MS(10), 0, &d); /* holds key 1 fully */
        sw_keyed_decide(&v, fp_int(2), 1, MS(10), 0, &d); /* and 1 of key 2 */
        victim_arm(victim_hang);
        sw_keyed_decide(&v, fp_int(3), 1, MS(10), 0, &d); /* hangs inside, holding the lock */
        _exit(0);
    }
    victim_wait(&kid);
    victim_kill(&kid);
    struct sw_kview v;
    kshm_view(&s, &rule, &v);
    struct sw_decision d;
    sw_keyed_decide(&v, fp_int(1), 1, MS(10), 0, &d); /* takes the lock over, repairs */
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(sw_keyed_in_flight(&v, fp_int(1)), 2);
    CHECK_EQ(sw_keyed_in_flight(&v, fp_int(2)), 1);
    CHECK_EQ(sw_keyed_reap(&v), 1);
    CHECK_EQ(sw_keyed_in_flight(&v, fp_int(1)), 0);
    CHECK_EQ(sw_keyed_in_flight(&v, fp_int(2)), 0);
    struct sw_stats st;
    int64_t ev, keys;
    sw_keyed_stats(&v, MS(10), &st, &ev, &keys);
    CHECK_EQ(st.in_flight, 0);
    sw_keyed_decide(&v, fp_int(1), 2, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_keyed_release(&v, fp_int(1), 2), SW_OK);
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_OK);
    /* a damaged region is refused: a holding naming an entry past the table */
    struct sw_kstate *ks = s.state;
    struct sw_khold *h = (struct sw_khold *)(void *)((char *)ks + ks->off_hold);
    struct sw_khold saved = h[0];
    h[0].entry = ks->cap + 1u;
    h[0].slot = 0;
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_EINVAL);
    h[0] = saved;
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_OK);
    ks->n_live = ks->max_keys + 1u; /* beyond the layout */
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_EINVAL);
    sw_shm_close(&s);
}

/* what the process's other objects hold (give_back_per_key): b's record */
static int64_t others_b(uint64_t fp, void *ctx)
{
    return sw_kheld_get(ctx, fp);
}

/* An object of a shared table gives back, per key, what it holds; not what
 * the process's other objects hold, nor what another object or process released for it
 * (then the other process's count stays); the record follows claims, exits and releases. */
static void give_back_per_key(void)
{
    struct sw_shm_layout lay;
    struct sw_shm s;
    struct sw_krule rule;
    kregion_open(&s, &lay, &rule, 100, SW_GRADE_CONCURRENCY, 10);
    struct sw_kview a, b, p2, p3;
    struct sw_kheld ha, hb;
    memset(&ha, 0, sizeof ha);
    memset(&hb, 0, sizeof hb);
    kshm_view(&s, &rule, &a);
    kshm_view(&s, &rule, &b);
    kshm_view(&s, &rule, &p2);
    kshm_view(&s, &rule, &p3);
    CHECK_EQ(a.my_slot, b.my_slot); /* one slot a process */
    p2.my_slot = sw_shm_claim_slot(&s, sw_proc_token() ^ 1u); /* as other processes' */
    p3.my_slot = sw_shm_claim_slot(&s, sw_proc_token() ^ 2u);
    CHECK(p2.my_slot >= 0 && p2.my_slot != a.my_slot);
    CHECK(p3.my_slot >= 0 && p3.my_slot != a.my_slot && p3.my_slot != p2.my_slot);
    a.held = &ha;
    b.held = &hb;
    struct sw_decision d;
    CHECK_EQ(sw_keyed_decide(&a, fp_int(1), 3, MS(10), 0, &d), SW_OK); /* a: 3 on key 1 */
    CHECK_EQ(d.verdict, SW_PASS);
    sw_keyed_decide(&a, fp_int(2), 2, MS(10), SW_F_ENTRY, &d);         /* 2 on key 2 */
    sw_keyed_decide(&a, fp_int(4), 1, MS(10), 0, &d);
    CHECK_EQ(sw_keyed_exit(&a, fp_int(4), 1, 0, SW_OUT_SUCCESS, MS(10)), SW_OK); /* none */
    sw_keyed_decide(&b, fp_int(2), 1, MS(10), 0, &d);                  /* b: 1 on key 2 */
    sw_keyed_decide(&a, fp_int(3), 2, MS(10), 0, &d);                  /* a: 2 on key 3 */
    sw_keyed_decide(&p2, fp_int(3), 1, MS(10), 0, &d);                 /* p2: 1 on key 3 */
    CHECK_EQ(sw_keyed_release(&p3, fp_int(3), 2), SW_OK); /* p3 releases a's 2 of key 3 */
    sw_keyed_decide(&a, fp_int(5), 2, MS(10), 0, &d);                  /* a: 2 on key 5 */
    CHECK_EQ(sw_keyed_release(&b, fp_int(5), 2), SW_OK); /* b releases them */
    sw_keyed_decide(&b, fp_int(5), 1, MS(10), 0, &d);                  /* b: 1 on key 5 */
    CHECK_EQ(sw_kheld_get(&ha, fp_int(1)), 3);
    CHECK_EQ(sw_kheld_get(&ha, fp_int(2)), 2);
    CHECK_EQ(sw_kheld_get(&ha, fp_int(3)), 2);
    CHECK_EQ(sw_kheld_get(&ha, fp_int(4)), 0);
    CHECK_EQ(sw_kheld_get(&ha, fp_int(5)), 2);
    CHECK_EQ(sw_kheld_get(&hb, fp_int(5)), 1); /* never below 0: 0, then 1 */
    CHECK_EQ(hb.n, 2u);
    sw_keyed_lock(&a);
    CHECK_EQ(sw_keyed_give_back_locked(&a, others_b, &hb), 5); /* 3 of key 1, 2 of key 2 */
    sw_keyed_unlock(&a);
    CHECK_EQ(ha.n, 0u);
    CHECK_EQ(sw_keyed_in_flight(&b, fp_int(1)), 0);
    CHECK_EQ(sw_keyed_in_flight(&b, fp_int(2)), 1); /* b's own */
    CHECK_EQ(sw_keyed_in_flight(&b, fp_int(3)), 1); /* the other process's */
    CHECK_EQ(sw_keyed_in_flight(&b, fp_int(5)), 1); /* b's own */
    struct sw_stats st;
    int64_t ev, keys;
    sw_keyed_stats(&b, MS(10), &st, &ev, &keys);
    CHECK_EQ(st.in_flight, 3);
    CHECK_EQ(s.slots[a.my_slot].in_flight, 4); /* b's 2, and key 3's 2 (p3's slot is -2) */
    CHECK_EQ(sw_keyed_release(&b, fp_int(2), 1), SW_OK);
    CHECK_EQ(sw_keyed_release(&b, fp_int(5), 1), SW_OK);
    CHECK_EQ(sw_keyed_release(&p2, fp_int(3), 1), SW_OK);
    CHECK_EQ(sw_keyed_region_check(s.state, &lay), SW_OK);
    /* many keys: the record grows, then shrinks as they are released */
    for (int64_t i = 0; i < 90; i++)
        sw_keyed_decide(&a, fp_int(100 + i), 1, MS(10), 0, &d);
    CHECK_EQ(ha.n, 90u);
    for (int64_t i = 0; i < 90; i += 2)
        CHECK_EQ(sw_keyed_release(&a, fp_int(100 + i), 1), SW_OK);
    CHECK_EQ(ha.n, 45u);
    for (int64_t i = 1; i < 90; i += 2)
        CHECK_EQ(sw_kheld_get(&ha, fp_int(100 + i)), 1);
    for (int64_t i = 1; i < 80; i += 2)
        CHECK_EQ(sw_keyed_release(&a, fp_int(100 + i), 1), SW_OK);
    CHECK(ha.cap <= 64u);
    sw_keyed_lock(&a);
    CHECK_EQ(sw_keyed_give_back_locked(&a, NULL, NULL), 5);
    sw_keyed_unlock(&a);
    sw_keyed_stats(&b, MS(10), &st, &ev, &keys);
    CHECK_EQ(st.in_flight, 0);
    sw_kheld_clear(&hb);
    sw_shm_close(&s);
}

/* A process killed between its holding and the key's count (taking or giving back in flight
 * of a key another process holds too): once the lock is taken over and the dead process
 * reaped, the key holds exactly the other process's count (none lost, none leaked). */
static void kill_mid_hold(bool giving_back)
{
    struct kregion r;
    kregion_new(&r, 100, SW_GRADE_CONCURRENCY, 5);
    struct sw_decision d;
    sw_keyed_decide(&r.v, fp_int(7), 1, MS(10), 0, &d); /* this process holds 1 */
    CHECK_EQ(d.verdict, SW_PASS);
    struct victim kid;
    if (victim_fork(&kid)) {
        struct sw_kview cv = kregion_view(&r);
        struct sw_decision cd;
        if (giving_back)
            sw_keyed_decide(&cv, fp_int(7), 2, MS(10), 0, &cd); /* the child holds 2 */
        victim_arm(victim_hang);
        if (giving_back)
            sw_keyed_exit(&cv, fp_int(7), 1, 0, SW_OUT_NONE, MS(10)); /* hangs: gives 1 back */
        else
            sw_keyed_decide(&cv, fp_int(7), 1, MS(10), 0, &cd); /* hangs: takes 1 */
        _exit(0);
    }
    victim_wait(&kid);
    victim_kill(&kid);
    (void)sw_keyed_in_flight(&r.v, fp_int(7)); /* takes the lock over, repairs */
    CHECK_EQ(sw_keyed_reap(&r.v), 1);
    CHECK_EQ(sw_keyed_in_flight(&r.v, fp_int(7)), 1);
    struct sw_stats st;
    int64_t ev, keys;
    sw_keyed_stats(&r.v, MS(10), &st, &ev, &keys);
    CHECK_EQ(st.in_flight, 1);
    CHECK_EQ(sw_keyed_release(&r.v, fp_int(7), 1), SW_OK);
    CHECK_EQ(sw_keyed_in_flight(&r.v, fp_int(7)), 0);
    sw_shm_close(&r.s);
}

static void test_shared_kill_mid_hold(void)
{
    kill_mid_hold(false);
    kill_mid_hold(true);
}

/* A process killed in the middle of an eviction (the victim's entry freed or being given to
 * the new key): the next process takes the lock over, repairs, and the table stays usable. */
static void test_shared_kill_mid_eviction(void)
{
    struct kregion r;
    kregion_new(&r, 8, SW_GRADE_QPS, 10);
    struct sw_decision d;
    for (int64_t key = 0; key < 8; key++)
        sw_keyed_decide(&r.v, fp_int(key), 1, MS(10), 0, &d);
    CHECK_EQ(sw_keyed_len(&r.v), 8u);
    for (int round = 0; round < 6; round++) {
        struct ksnap snap; /* every key with its counts: each must come through the kill */
        ksnap_of(r.s.state, &snap);
        struct victim kid;
        if (victim_fork(&kid)) {
            struct sw_kview cv = kregion_view(&r);
            victim_arm(victim_hang);
            sw_keyed_decide(&cv, fp_int(100 + round), 1, MS(20), 0, &d); /* evicts: hangs */
            _exit(0);
        }
        victim_wait(&kid);
        victim_kill(&kid);
        sw_keyed_lock(&r.v); /* takes the lock over, repairs */
        CHECK(ksnap_kept(r.s.state, &snap)); /* but for the victim, every key and its counts */
        sw_keyed_unlock(&r.v);
        sw_keyed_decide(&r.v, fp_int(200 + round), 1, MS(30), 0, &d);
        CHECK_EQ(d.verdict, SW_PASS);
        uint32_t len = sw_keyed_len(&r.v);
        CHECK(len >= 7u && len <= 8u);
        CHECK_EQ(sw_keyed_region_check(r.s.state, &r.lay), SW_OK);
        check_repair_keeps(&r.v, len); /* every key held is found */
    }
    for (int64_t key = 1000; key < 1050; key++)
        sw_keyed_decide(&r.v, fp_int(key), 1, MS(40), 0, &d);
    CHECK_EQ(sw_keyed_len(&r.v), 8u);
    for (int64_t key = 1042; key < 1050; key++) {
        sw_keyed_decide(&r.v, fp_int(key), 10, MS(40), SW_F_TRY, &d);
        CHECK_EQ(d.verdict, SW_BLOCK); /* held with its window (1 passed: 10 more do not fit) */
    }
    CHECK_EQ(sw_keyed_region_check(r.s.state, &r.lay), SW_OK);
    sw_shm_close(&r.s);
}

static int no_random(uint64_t *out)
{
    (void)out;
    return SW_EOS; /* as getrandom(2) and /dev/urandom both failing (a seccomp filter) */
}

/* An attach of path that finds no random source: it fails, naming the cause (checked). */
static void open_fails_without_random(const char *path, const struct sw_shm_layout *lay)
{
    struct sw_shm b;
    struct sw_shm_error err;
    sw_test_random_seed = no_random;
    int rc = sw_shm_open(&b, path, lay, &err);
    sw_test_random_seed = NULL;
    CHECK_EQ(rc, SW_EOS);
    CHECK(strstr(err.msg, "random") != NULL);
    CHECK(strstr(err.msg, "out of memory") == NULL);
    if (rc == SW_OK)
        sw_shm_close(&b);
}

/* A table of 16 keys in a region at a fresh path under /tmp (tag names it), opened as shm
 * (checked). */
struct kfile {
    char path[128];
    struct sw_shm_layout lay;
    struct sw_shm shm;
};

static void kfile_open(struct kfile *f, const char *tag)
{
    struct sw_shm_error err;
    tmp_path(f->path, sizeof f->path, tag);
    f->lay = kshm_layout(16);
    CHECK_EQ(sw_shm_open(&f->shm, f->path, &f->lay, &err), SW_OK);
}

/* A region left by another PID namespace, taken over by an attach that finds no random
 * source: the attach fails naming the cause. Before: "cannot take over ...: out of memory". */
static void test_takeover_without_random(void)
{
    struct kfile a;
    kfile_open(&a, "kns");
    a.shm.hdr->pidns_ino ^= UINT64_C(0x5a5a5a); /* made in another PID namespace */
    sw_shm_close(&a.shm);                       /* nobody maps it now: it is taken over */
    open_fails_without_random(a.path, &a.lay);
    struct sw_shm b;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&b, a.path, &a.lay, &err), SW_OK); /* with a random source, it is */
    sw_shm_close(&b);
    unlink(a.path);
}

/* A region from another boot, reinitialised by an attach that finds no random source (no
 * seed for the new table): the attach fails with an error that says so, the region is left
 * as it was (boot id included, so the next attach tries again), and nothing divides by a
 * zeroed window. Before: the failure was reported as "out of memory". */
static void test_reinit_without_random(void)
{
    struct kfile a;
    kfile_open(&a, "kboot");
    struct sw_krule rule;
    krule_of(&rule, SW_GRADE_QPS, 10);
    /* a view that holds no slot */
    struct sw_kview v = {a.shm.state, &rule, SW_LOCK_PROCESS, NULL, 0, -1, NULL};
    struct sw_decision d;
    for (int64_t key = 0; key < 3; key++)
        sw_keyed_decide(&v, fp_int(key), 1, MS(10), 0, &d);
    struct sw_kstate *st = a.shm.state;
    uint64_t seed = st->seed;
    char *boot_id = a.shm.hdr->boot_id;
    memset(boot_id, 0, sizeof a.shm.hdr->boot_id);
    snprintf(boot_id, sizeof a.shm.hdr->boot_id, "00000000-0000-0000-0000-000000000000");
    open_fails_without_random(a.path, &a.lay);
    CHECK(strcmp(boot_id, "00000000-0000-0000-0000-000000000000") == 0);
    CHECK_EQ(st->n_live, 3u); /* untouched */
    CHECK_EQ(st->seed, seed);
    CHECK(st->window_ms > 0 && st->cap > 0);
    /* the next attach, with a random source, reinitialises */
    struct sw_shm b;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&b, a.path, &a.lay, &err), SW_OK);
    CHECK(strcmp(boot_id, "00000000-0000-0000-0000-000000000000") != 0);
    CHECK_EQ(st->n_live, 0u);
    CHECK(st->seed != 0 && st->window_ms > 0);
    sw_keyed_decide(&v, fp_int(1), 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_shm_close(&b);
    sw_shm_close(&a.shm);
    unlink(a.path);
}

void test_keyed_shared(void)
{
    test_kill_anywhere();
    test_shared();
    test_shared_kill_mid_eviction();
    test_shared_kill_mid_hold();
    give_back_per_key();
    test_reinit_without_random();
    test_takeover_without_random();
}
