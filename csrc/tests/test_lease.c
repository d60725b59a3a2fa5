/* test_lease.c - a shared limiter's leases of the head bucket (sw_decide.c): decisions on a
 * lease with the real clock, exact totals with threads as processes (each view with a slot of
 * its own), a refusal taking back every lease (a dead slot's too), reads and a change of rule
 * taking them back, a view without `lease` never deciding on one, and an observer's copy
 * (read_region) reading the passes used, never going back when a lease is taken back. */

#include "shm_lim_util.h"
#include "sw_time.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROCS 4

/* A region of one window of 60 s (a test never leaves it) with a limit of `limit` a window,
 * and PROCS views of it, each as another process: a slot of its own, leasing. */
struct leased {
    struct sw_shm shm;
    struct sw_rule rule;
    struct sw_view v[PROCS];
};

/* a rule of `limit` (a multiple of 60) a window of 60 s */
static void rule_window(struct sw_rule *rule, int64_t limit)
{
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, (double)(limit / 60));
    cfg.interval_ms = 60000;
    cfg.sample_count = 1;
    CHECK_EQ(sw_rule_init(rule, &cfg), SW_OK);
    CHECK_EQ(rule->limit, (double)limit);
}

static void leased_open(struct leased *l, int64_t limit)
{
    struct sw_shm_layout lay = lim_layout(60000, 1);
    shm_anon(&l->shm, &lay);
    rule_window(&l->rule, limit);
    for (int i = 0; i < PROCS; i++) {
        view_of(&l->shm, &l->rule, &l->v[i]);
        l->v[i].my_slot = sw_shm_claim_slot(&l->shm, sw_proc_token() ^ (uint64_t)(i + 1) << 8);
        CHECK(l->v[i].my_slot >= 0);
        l->v[i].lease = (uint32_t)i + 1u; /* a tag each */
    }
}

static uint64_t lease_of(const struct leased *l, int i)
{
    return atomic_load(&l->shm.slots[l->v[i].my_slot].lease);
}

static int64_t passes(struct leased *l)
{
    struct sw_totals t;
    sw_totals_read(&l->v[0], &t);
    return t.pass;
}

static bool try_now(struct sw_view *v)
{
    struct sw_decision d;
    CHECK_EQ(sw_decide(v, 1, SW_NOW, SW_F_TRY, &d), SW_OK);
    return d.verdict == SW_PASS;
}

/* Two decisions of view i at the heads' start: the first starts them (the general path),
 * the second takes a lease. @return the lease word */
static uint64_t lease_after_two(struct leased *l, int i)
{
    CHECK(try_now(&l->v[i]));
    CHECK(try_now(&l->v[i]));
    return lease_of(l, i);
}

/* Decisions of v until the first refusal (at most cap + 1): how many were admitted */
static int64_t admitted_until_refused(struct sw_view *v, int64_t cap)
{
    int64_t admitted = 0;
    while (admitted <= cap && try_now(v))
        admitted++;
    return admitted;
}

struct hammer {
    struct sw_view *v;
    int64_t admitted;
    int64_t errors; /* decisions that did not return SW_OK (checked once, after) */
};

/* decide until 1000 refusals in a row */
static void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    for (int refused = 0; refused < 1000 && h->errors == 0;) {
        struct sw_decision d;
        if (sw_decide(h->v, 1, SW_NOW, SW_F_TRY, &d) != SW_OK)
            h->errors++;
        else if (d.verdict == SW_PASS) {
            h->admitted++;
            refused = 0;
        } else {
            refused++;
        }
    }
    return NULL;
}

/* PROCS deciding together on the clock admit exactly the limit, and the totals hold it */
static void lease_threads_admit_exactly(void)
{
    struct leased l;
    leased_open(&l, 120000);
    pthread_t th[PROCS];
    struct hammer h[PROCS];
    for (int i = 0; i < PROCS; i++) {
        h[i] = (struct hammer){&l.v[i], 0, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, hammer_run, &h[i]), 0);
    }
    int64_t sum = 0;
    for (int i = 0; i < PROCS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(h[i].errors, 0);
        sum += h[i].admitted;
    }
    CHECK_EQ(sum, 120000);
    CHECK_EQ(passes(&l), 120000);
    sw_shm_close(&l.shm);
}

/* a lease is taken at the heads and used without the lock; a read takes it back */
static void lease_taken_used_and_read_back(void)
{
    struct leased l;
    leased_open(&l, 1200);
    CHECK(try_now(&l.v[0])); /* the first: the heads start (the general path) */
    CHECK_EQ(lease_of(&l, 0), 0u);
    CHECK(try_now(&l.v[0])); /* at the heads: (1200 - 2) / 8 = 149, at most 64 */
    uint64_t w = lease_of(&l, 0);
    CHECK_EQ(w & SW_LEASE_LEFT, 64u);
    CHECK((int64_t)(w >> SW_LEASE_BITS) > sw_time_coarse_ns() / 1000000);
    CHECK(try_now(&l.v[0])); /* on the lease */
    CHECK_EQ(lease_of(&l, 0) & SW_LEASE_LEFT, 63u);
    /* another object of the process (the same slot, another tag) decides under the lock */
    struct sw_view same_slot = l.v[0];
    same_slot.lease = 9;
    CHECK(try_now(&same_slot));
    CHECK_EQ(lease_of(&l, 0) & SW_LEASE_LEFT, 63u);
    CHECK_EQ(atomic_load(&l.shm.hdr->ready), SW_SHM_READY);
    /* the read takes it back: the counts hold the 4 used */
    CHECK_EQ(passes(&l), 4);
    CHECK_EQ(lease_of(&l, 0), 0u);
    CHECK_EQ(atomic_load(&((struct sw_lstate *)l.shm.state)->lease_out), 0u);
    /* a view without `lease` never takes one */
    l.v[1].lease = 0;
    CHECK_EQ(lease_after_two(&l, 1), 0u);
    /* an explicit time takes none either */
    struct sw_decision d;
    CHECK_EQ(sw_decide(&l.v[2], 1, sw_time_coarse_ns(), SW_F_TRY, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(lease_of(&l, 2), 0u);
    CHECK_EQ(passes(&l), 7);
    sw_shm_close(&l.shm);
}

/* a refusal takes back every lease, one in a slot whose owner is gone (no one takes from it
 * again) too: the others reach the limit exactly */
static void lease_refusal_takes_back_a_dead_ones(void)
{
    struct leased l;
    leased_open(&l, 240);
    CHECK_EQ(lease_after_two(&l, 1) & SW_LEASE_LEFT, 29u); /* (240 - 2) / 8 */
    CHECK_EQ(admitted_until_refused(&l.v[0], 240), 238);
    CHECK_EQ(lease_of(&l, 1), 0u);
    CHECK(!try_now(&l.v[1]));
    CHECK_EQ(passes(&l), 240);
    sw_shm_close(&l.shm);
}

/* a change of rule takes the lease back: the next decision is made with the new settings */
static void lease_back_on_a_new_rule(void)
{
    struct leased l;
    leased_open(&l, 6000);
    CHECK(lease_after_two(&l, 0) != 0u);
    struct sw_rule low;
    rule_window(&low, 60); /* 60 a window: 58 more */
    struct sw_rule mine = l.rule;
    l.v[0].rule = &mine;
    sw_view_set_rule(&l.v[0], &mine, &low);
    CHECK_EQ(lease_of(&l, 0), 0u);
    CHECK_EQ(admitted_until_refused(&l.v[0], 60), 58);
    CHECK_EQ(passes(&l), 60);
    sw_shm_close(&l.shm);
}

/* a lease word of a region is input: a slot beyond lease_hi is not looked at, lease_hi past
 * the slots is bounded by them, and the permits taken back never take a count below 0 */
static void lease_words_are_input(void)
{
    struct leased l;
    leased_open(&l, 1200);
    uint64_t w = lease_after_two(&l, 0);
    struct sw_lstate *st = l.shm.state;
    st->lease_hi = UINT32_MAX;
    /* a word claiming more permits than were ever counted, in the current bucket */
    uint64_t tags = (uint64_t)SW_LEASE_TAG_MAX << SW_LEASE_TAG_SHIFT;
    atomic_store(&l.shm.slots[l.v[3].my_slot].lease,
                 (w & ~(tags | SW_LEASE_LEFT)) | (uint64_t)l.v[3].lease << SW_LEASE_TAG_SHIFT |
                     127u);
    CHECK(try_now(&l.v[3])); /* under the lock: 127 > SW_LEASE_MAX is damage, not a lease */
    CHECK_EQ(lease_of(&l, 3) & SW_LEASE_LEFT, 127u);
    CHECK_EQ(passes(&l), 0); /* 67 counted, 63 + 127 taken back: 0, not below */
    CHECK_EQ(lease_of(&l, 3), 0u);
    CHECK(try_now(&l.v[1]));
    CHECK_EQ(passes(&l), 1);
    sw_shm_close(&l.shm);
}

/* a process killed at every step of one decision: the next process takes the lock over and
 * goes on exactly, the permits left counted at most once, never admitted twice.
 * at_grant 0: taking its lease back (a read of the totals: the bracket of sw_lstate_enter,
 * the swap, the subtraction): taken back (3 used), or swapped and killed before the
 * subtraction (the 63 left stay counted).
 * at_grant 1: the decision that grants its lease (the count of its permit with the lease's,
 * the word stored after them): killed before the word, the lease's 64 stay counted (passes
 * never made: the window admits fewer, never more); after it, taken back (2 used). */
static void lease_killed_anywhere(int at_grant)
{
    int completed = 0;
    int64_t used = at_grant ? 2 : 3;
    for (int k = 1; k < 64 && !completed; k++) {
        struct leased l;
        leased_open(&l, 1200);
        struct victim kid;
        if (victim_fork(&kid)) {
            struct sw_view v; /* the child's own token and slot */
            view_of(&l.shm, &l.rule, &v);
            v.lease = 7;
            /* the second takes a lease of 64, the third uses one */
            for (int i = 0; i < 3; i++) {
                if (i == 1 && at_grant)
                    victim_arm_at(k);
                if (i < 2 || !at_grant)
                    (void)try_now(&v);
            }
            if (!at_grant) {
                victim_arm_at(k);
                struct sw_totals t;
                sw_totals_read(&v, &t);
            }
            victim_tell('d');
            for (;;)
                pause();
        }
        char c = victim_wait(&kid);
        CHECK(c == 'h' || c == 'd');
        victim_kill(&kid);
        completed = c == 'd';
        if (completed && getenv("SW_STRESS_VERBOSE"))
            printf("  lease_killed_anywhere(%d): %d steps killed at\n", at_grant, k - 1);
        int64_t before = passes(&l); /* takes the lock over: repairs, takes back a lease */
        CHECK(before == used || before == (at_grant ? 2 + 64 : 3 + 63) ||
              (at_grant && before == 1));
        if (completed)
            CHECK_EQ(before, used);
        CHECK_EQ(before + admitted_until_refused(&l.v[1], 1200), 1200);
        CHECK_EQ(passes(&l), 1200);
        sw_shm_close(&l.shm);
    }
    CHECK(completed); /* every step was tried */
}

/* ---- an observer's copy (sw_lstate_copy, as read_region makes it) ---- */

/* copies through /proc/self/mem, as pread copies a region's file for read_region: the kernel
 * copies, so a thread reading while others write races in no way the sanitizers track (the
 * state and the slots are whole aligned words: a racing writer tears none) */
static int words_read(void *ctx, size_t off, size_t len, void *dst)
{
    static int fd = -1;
    if (fd < 0)
        fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    uintptr_t at = (uintptr_t)ctx + off;
    return fd >= 0 && pread(fd, dst, len, (off_t)at) == (ssize_t)len ? 0 : -1;
}

/* words_read, with a decision of `v` (once) before the first read of the slots: after the
 * state was copied */
struct grant_between {
    struct leased *l;
    struct sw_view *v;
};

static int grant_between_read(void *ctx, size_t off, size_t len, void *dst)
{
    struct grant_between *g = ctx;
    if (g->v != NULL && off == (size_t)g->l->shm.hdr->off_slots) {
        CHECK(try_now(g->v));
        g->v = NULL;
    }
    return words_read(g->l->shm.base, off, len, dst);
}

/* What read_region reads of l's state now: the lifetime totals and the window's passes
 * (between: a view deciding while the copy is made, or NULL). No CHECK (a watcher thread
 * calls it): @return whether the copy was made and valid */
static bool observe_with(struct leased *l, struct sw_view *between, struct sw_totals *tot,
                         int64_t *window_pass)
{
    const struct sw_shm_header *h = l->shm.hdr;
    size_t size = (size_t)h->state_size;
    struct sw_lstate *copy = aligned_alloc(64, (size + 63u) & ~(size_t)63u);
    struct sw_proc_slot *slots = calloc(h->n_slots, sizeof *slots);
    if (copy == NULL || slots == NULL)
        abort();
    struct grant_between g = {l, between};
    struct sw_lstate_src src = {grant_between_read, &g, (size_t)h->off_state,
                                (size_t)h->off_slots, h->n_slots};
    bool hot_ok = false;
    bool ok = sw_lstate_copy(copy, size, &src, slots, 64u, &hot_ok) == 0 &&
              sw_lstate_validate(copy, size, 60000, 1) == SW_OK;
    if (!ok) {
        free(slots);
        free(copy);
        return false;
    }
    struct sw_node *node = sw_lstate_node(copy);
    sw_node_repair(node);
    sw_lstate_settle_copy(copy, hot_ok, slots, h->n_slots);
    sw_node_totals(node, tot);
    struct sw_stats st;
    sw_node_stats(node, sw_time_coarse_ns(), &st);
    *window_pass = st.pass;
    free(slots);
    free(copy);
    return true;
}

static bool observe(struct leased *l, struct sw_totals *tot, int64_t *window_pass)
{
    return observe_with(l, NULL, tot, window_pass);
}

/* the copy counts a lease's permits left out of the passes, as a read under the lock does, and
 * changes nothing of the region: the holder goes on using its lease */
static void lease_observed_as_used(void)
{
    struct leased l;
    leased_open(&l, 1200);
    uint64_t w = lease_after_two(&l, 0); /* 2 used, 64 leased */
    CHECK_EQ(w & SW_LEASE_LEFT, 64u);
    CHECK(try_now(&l.v[0]));
    CHECK(lease_after_two(&l, 1) != 0u); /* 5 used, two leases out */
    struct sw_totals tot;
    int64_t window;
    CHECK(observe(&l, &tot, &window));
    CHECK_EQ(tot.pass, 5);
    CHECK_EQ(window, 5);
    CHECK_EQ(lease_of(&l, 0) & SW_LEASE_LEFT, 63u); /* still the holder's */
    CHECK(try_now(&l.v[0]));
    CHECK(observe(&l, &tot, &window));
    CHECK_EQ(tot.pass, 6);
    CHECK_EQ(passes(&l), 6); /* under the lock: the leases taken back, the same count */
    CHECK(observe(&l, &tot, &window));
    CHECK_EQ(tot.pass, 6);
    CHECK_EQ(window, 6);
    sw_shm_close(&l.shm);
}

/* a lease granted after the copy of the state and before the read of the slots: the copy
 * lacks its permits, the slots hold them; the copy is taken again (before: it read 0 passes
 * of 3, and the next read 3 again) */
static void lease_granted_while_copied(void)
{
    struct leased l;
    leased_open(&l, 1200);
    CHECK(lease_after_two(&l, 0) != 0u);
    CHECK_EQ(passes(&l), 2); /* taken back: the slot is looked at (lease_hi), its word 0 */
    CHECK_EQ(lease_of(&l, 0), 0u);
    struct sw_totals tot;
    int64_t window;
    CHECK(observe_with(&l, &l.v[0], &tot, &window)); /* the next decision takes a lease again */
    CHECK_EQ(lease_of(&l, 0) & SW_LEASE_LEFT, 64u);
    CHECK_EQ(tot.pass, 3);
    CHECK_EQ(window, 3);
    sw_shm_close(&l.shm);
}

struct watcher {
    struct leased *l;
    _Atomic int stop, ready; /* ready: the first copy was read (the deciders start then) */
    int64_t reads, backwards, last, errors;
};

static void *watch_run(void *arg)
{
    struct watcher *w = arg;
    while (!atomic_load(&w->stop)) {
        struct sw_totals tot;
        int64_t window;
        if (!observe(w->l, &tot, &window)) {
            w->errors++;
            atomic_store(&w->ready, 1);
            break;
        }
        if (tot.pass < w->last)
            w->backwards++;
        w->last = tot.pass;
        w->reads++;
        atomic_store(&w->ready, 1);
    }
    return NULL;
}

/* processes deciding on leases (granted, used, taken back by refusals) while an observer
 * copies the state again and again: the passes it reads never go back, and end exact */
static void lease_observer_never_goes_back(void)
{
    struct leased l;
    leased_open(&l, 120000);
    struct watcher w = {&l, 0, 0, 0, 0, 0, 0};
    pthread_t wt, th[PROCS];
    CHECK_EQ(pthread_create(&wt, NULL, watch_run, &w), 0);
    while (!atomic_load(&w.ready)) /* (slow under the sanitizers) */
        sched_yield();
    struct hammer h[PROCS];
    for (int i = 0; i < PROCS; i++) {
        h[i] = (struct hammer){&l.v[i], 0, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, hammer_run, &h[i]), 0);
    }
    for (int i = 0; i < PROCS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(h[i].errors, 0);
    }
    atomic_store(&w.stop, 1);
    pthread_join(wt, NULL);
    CHECK(w.reads > 0);
    CHECK_EQ(w.errors, 0);
    CHECK_EQ(w.backwards, 0);
    struct sw_totals tot;
    int64_t window;
    CHECK(observe(&l, &tot, &window));
    CHECK_EQ(tot.pass, 120000);
    CHECK_EQ(passes(&l), 120000);
    sw_shm_close(&l.shm);
}

void test_lease(void)
{
    lease_observed_as_used();
    lease_granted_while_copied();
    lease_observer_never_goes_back();
    lease_killed_anywhere(0);
    lease_killed_anywhere(1);
    lease_taken_used_and_read_back();
    lease_refusal_takes_back_a_dead_ones();
    lease_back_on_a_new_rule();
    lease_words_are_input();
    lease_threads_admit_exactly();
}
