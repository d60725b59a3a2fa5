/* test_shm_crash.c - shared regions whose processes die or stop at the wrong moment: a lock
 * owner killed or stopped inside its critical section, a crash inside a bucket's refresh, a
 * release for another process, and observers that copy a state without its lock. */

#include "shm_lim_util.h"
#include "sw_time.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The time this thread has waited for a CPU while runnable (ns; the second field of
 * /proc/thread-self/schedstat), or 0 where the kernel does not say. */
static int64_t runqueue_wait_ns(void)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f == NULL)
        return 0;
    long long on_cpu = 0, waited = 0;
    if (fscanf(f, "%lld %lld", &on_cpu, &waited) != 2)
        waited = 0;
    fclose(f);
    return waited;
}

/* A child process takes 1 in flight, then is killed inside its next operation on the region,
 * holding the lock: another decision of 1 (give_back false: after its slot count, before the
 * total) or giving its 1 back (true: its slot is 0, the total not yet).
 * @return whether the lock was the child's when it was killed */
static bool kill_holder(struct sw_shm *s, const struct sw_rule *rule, bool give_back)
{
    struct victim kid;
    if (victim_fork(&kid)) {
        struct sw_view v;
        view_of(s, rule, &v);
        struct sw_decision d;
        sw_decide(&v, 1, MS(10), 0, &d); /* holds 1 in flight */
        victim_arm(victim_hang);
        if (give_back)
            sw_release(&v, 1); /* hangs inside: its slot is 0 now, the total not yet */
        else
            sw_decide(&v, 1, MS(10), 0, &d); /* hangs inside, holding the lock */
        _exit(0);
    }
    victim_wait(&kid);
    struct sw_lstate *st = s->state;
    bool held = (atomic_load(&st->lock.word) >> 32) == (uint64_t)kid.pid;
    victim_kill(&kid);
    return held;
}

/* A process killed while it holds the lock (inside a decision, after its slot count and
 * before the total): the next locker takes the lock over; the total keeps what it held (the
 * dead one's unfinished count is on its slot only), and the reap takes out of the total
 * only what is in it. */
static void test_dead_owner(void)
{
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_CONCURRENCY, 2);
    CHECK(kill_holder(&s, &rule, false)); /* the lock was held by the child */
    struct sw_view v;
    view_of(&s, &rule, &v);
    int64_t t0 = sw_time_ns(), w0 = runqueue_wait_ns();
    struct sw_decision d;
    CHECK_EQ(sw_decide(&v, 1, MS(10), 0, &d), SW_OK); /* takes the lock over */
    /* the takeover's own time: not the time it waited while other processes ran (its
     * yields, on a loaded machine) */
    int64_t took = sw_time_ns() - t0 - (runqueue_wait_ns() - w0);
    CHECK(took < MS(100));
    CHECK_EQ(d.verdict, SW_PASS); /* the dead child's finished 1 and this 1: 2 of 2 */
    CHECK_EQ(sw_in_flight(&v), 2);
    CHECK_EQ(sw_decide(&v, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_BLOCK);
    /* reaping gives the child's 1 back (its slot says 2: one never reached the total) */
    CHECK_EQ(sw_lstate_reap(&v), 1);
    CHECK_EQ(sw_in_flight(&v), 1);
    CHECK_EQ(sw_decide(&v, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_decide(&v, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(sw_release(&v, 2), SW_OK);
    CHECK_EQ(sw_lstate_reap(&v), 0); /* we are alive */
    sw_shm_close(&s);
}

/* A lock holder that is stopped (SIGSTOP) inside the lock. A waiter's hook is
 * called (the owner seen stopped) and a call site that may give up does, having done nothing;
 * once the holder is killed, the lock is taken over. A lock word naming a live process
 * that does not hold it: a call site that may give up does once the owner is stuck. */
static int hook_calls, hook_saw_stopped;
static int give_up_hook(const struct sw_lock_wait *w)
{
    hook_calls++;
    if (w->stopped)
        hook_saw_stopped++;
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
    return hook_calls >= 20;
}

static void test_stopped_and_stuck_owner(void)
{
    struct lregion r;
    lregion_new(&r, SW_GRADE_CONCURRENCY, 2);
    struct sw_lstate *st = r.s.state;
    pid_t kid = fork();
    if (kid == 0) {
        (void)sw_lock_acquire_as(&st->lock, sw_proc_token());
        raise(SIGSTOP); /* stopped inside the lock */
        sw_lock_release(&st->lock);
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(kid, &status, WUNTRACED), kid);
    CHECK(WIFSTOPPED(status));
    struct sw_decision d;
    sw_lock_wait_hook = give_up_hook;
    CHECK_EQ(sw_decide(&r.v, 1, MS(10), 0, &d), SW_EBUSY); /* gave up, nothing counted */
    CHECK(hook_calls >= 20 && hook_saw_stopped == hook_calls);
    CHECK_EQ(sw_lstate_check_repair(&r.v), SW_EBUSY);
    /* an exit and a release give up the same way, having done nothing (the count is kept) */
    hook_calls = 0;
    CHECK_EQ(sw_exit_or_give_up(&r.v, 1, 3, SW_OUT_SUCCESS, MS(10)), SW_EBUSY);
    CHECK(hook_calls >= 20);
    hook_calls = 0;
    CHECK_EQ(sw_release(&r.v, 1), SW_EBUSY);
    sw_lock_wait_hook = NULL;
    kill(kid, SIGKILL);
    waitpid(kid, &status, 0);
    CHECK_EQ(sw_decide(&r.v, 1, MS(10), 0, &d), SW_OK); /* taken over from the dead holder */
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_in_flight(&r.v), 1);
    /* a live, running process that does not hold the lock (crafted word): stuck after
     * SW_LOCK_STUCK_NS, then a call site that may give up does (no hook set) */
    pid_t sleeper = fork();
    if (sleeper == 0) {
        for (;;)
            pause();
    }
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)sleeper);
    struct timespec settle = {0, 20000000};
    nanosleep(&settle, NULL); /* let the child reach pause(): its start time is readable now */
    FILE *f = fopen(path, "r");
    unsigned long long start = 0;
    if (f != NULL && fgets(buf, sizeof buf, f) != NULL) {
        char *p = strrchr(buf, ')');
        for (int field = 2; p != NULL && field < 22; field++)
            p = strchr(p + 1, ' ');
        if (p != NULL)
            start = strtoull(p + 1, NULL, 10);
    }
    if (f != NULL)
        fclose(f);
    CHECK(start != 0);
    atomic_store(&st->lock.word, ((uint64_t)sleeper << 32) | (start & 0xffffffffu));
    int64_t t0 = sw_time_ns();
    CHECK_EQ(sw_lstate_check_repair(&r.v), SW_EBUSY);
    int64_t took = sw_time_ns() - t0;
    CHECK(took >= SW_LOCK_STUCK_NS && took < SW_LOCK_STUCK_NS + MS(30000));
    kill(sleeper, SIGKILL);
    waitpid(sleeper, &status, 0);
    CHECK_EQ(sw_lstate_check_repair(&r.v), SW_OK); /* its owner is gone now: taken over */
    CHECK_EQ(sw_in_flight(&r.v), 1);
    sw_shm_close(&r.s);
}

/* ---- processes killed or finishing each other's work on a shared state ---- */

/* A process killed inside the refresh of a new bucket, after the slot's start was written
 * and before its counts were zeroed and head moved (the state it leaves is written here by
 * hand): after the takeover's repair the window admits exactly what a private twin admits
 * (never more than its limit), and add_rt never pops an empty deque (sample_count=1
 * included). */
static void crash_in_refresh(uint32_t samples)
{
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    cfg.sample_count = samples;
    struct sw_limiter *lim = lim_new(&cfg), *twin = lim_new(&cfg);
    if (lim == NULL || twin == NULL)
        return;
    struct sw_decision d;
    for (int i = 0; i < 5; i++) {
        sw_limiter_decide(lim, 1, MS(100), SW_F_TRY, &d);
        sw_limiter_decide(twin, 1, MS(100), SW_F_TRY, &d);
    }
    if (samples == 2) {
        for (int i = 0; i < 5; i++) {
            sw_limiter_decide(lim, 1, MS(600), SW_F_TRY, &d);
            sw_limiter_decide(twin, 1, MS(600), SW_F_TRY, &d);
        }
    }
    struct sw_leap *l = sw_node_sec(sw_limiter_node(lim));
    /* the dead owner's decision at 1100 (2 x 500 ms) or 1000 (1 x 1000 ms): clamped, the
     * slid-out bucket taken off the totals, the slot's start stored; killed there */
    int64_t start = samples == 2 ? 1000 : 1000;
    l->newest = start;
    l->newest_idx = sw_leap_index(l, start);
    uint64_t *tot = (uint64_t *)(void *)(l->slots + (size_t)l->sample_count * l->stride);
    tot[2 * SW_EV_PASS] -= 5;
    sw_leap_slot(l, (uint32_t)l->newest_idx)[SW_SLOT_START] = start;
    atomic_store(&lim->st.lock.word, ((uint64_t)4194000u << 32) | 77u); /* a dead owner */
    if (kill(4194000, 0) == 0) {
        free(lim);
        free(twin);
        return; /* that pid exists here */
    }
    struct sw_view v;
    sw_limiter_view(lim, &v);
    v.token = SW_LOCK_PROCESS; /* checks the owner's liveness, as a shared view does */
    int64_t times[] = {MS(1100), MS(1600), MS(2100), MS(2600)};
    for (size_t k = 0; k < sizeof times / sizeof times[0]; k++) {
        int got = 0, want = 0;
        for (int i = 0; i < 20; i++) {
            sw_decide(&v, 1, times[k], SW_F_TRY, &d);
            got += d.verdict == SW_PASS;
            sw_limiter_decide(twin, 1, times[k], SW_F_TRY, &d);
            want += d.verdict == SW_PASS;
        }
        CHECK_EQ(got, want);
    }
    struct sw_window w;
    sw_view_window(&v, &w);
    CHECK_EQ(sw_window_add_rt(&w, 7, MS(2700)), SW_OK);
    CHECK_EQ(sw_window_add_rt(&w, 3, MS(2700)), SW_OK);
    int64_t min_rt, rt_sum, success;
    CHECK_EQ(sw_window_rt(&w, MS(2700), &min_rt, &rt_sum, &success), SW_OK);
    CHECK_EQ(min_rt, 3);
    free(lim);
    free(twin);
}

/* The first process to take a dead owner's lock does it through the limiter's window (a
 * Metric view): the whole state is repaired, the in-flight total included (never wedged). */
static void takeover_through_window(void)
{
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_CONCURRENCY, 1);
    (void)kill_holder(&s, &rule, true); /* holds the 1, killed giving it back */
    struct sw_view v;
    view_of(&s, &rule, &v);
    struct sw_window w;
    sw_view_window(&v, &w);
    int64_t pass = -1;
    CHECK_EQ(sw_window_read(&w, SW_READ_SUM, SW_EV_PASS, MS(10), &pass), SW_OK);
    CHECK_EQ(pass, 1);
    CHECK_EQ(sw_in_flight(&v), 0); /* the total rebuilt from the slots */
    struct sw_decision d;
    CHECK_EQ(sw_decide(&v, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_shm_close(&s);
}

/* A region of a concurrency limit of `count`, this process's view of it (r->v) and one as
 * another process's (*other), on distinct slots (checked). */
static void region_and_other(struct lregion *r, double count, struct sw_view *other)
{
    lregion_new(r, SW_GRADE_CONCURRENCY, count);
    view_as_other(r, other, 1u);
    CHECK(other->my_slot >= 0 && other->my_slot != r->v.my_slot);
}

/* A release in another process than the acquisition, then both die: reaping keeps the total
 * the sum of the slots, so nothing phantom stays in flight (never clamped to 0, then +1). */
static void reap_keeps_the_sum(void)
{
    struct lregion r;
    struct sw_view b;
    region_and_other(&r, 1, &b);
    struct sw_decision d;
    sw_decide(&r.v, 1, MS(10), 0, &d);  /* this process's slot +1 */
    CHECK_EQ(sw_release(&b, 1), SW_OK); /* b's slot -1: the total is 0 */
    /* both "die": their slots now name processes that do not exist */
    uint64_t dead1 = ((uint64_t)4194301u << 32) | 7u, dead2 = ((uint64_t)4194302u << 32) | 7u;
    if (kill(4194301, 0) == 0 || kill(4194302, 0) == 0)
        return; /* those pids exist here: skip */
    int mine = r.v.my_slot;
    atomic_store(&r.s.slots[mine].token, mine < b.my_slot ? dead1 : dead2);
    atomic_store(&r.s.slots[b.my_slot].token, mine < b.my_slot ? dead2 : dead1);
    struct sw_view me;
    view_of(&r.s, &r.rule, &me);
    CHECK_EQ(sw_lstate_reap(&me), 2);
    CHECK_EQ(sw_in_flight(&me), 0);
    CHECK_EQ(sw_decide(&me, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS); /* nothing phantom in flight */
    sw_shm_close(&r.s);
}

/* A release for another process, then the releaser acquires again, then the acquirer dies:
 * the reap takes out of the total only what the dead process still held, never the released
 * counts a second time (the releaser's slot may go below 0 and be filled back by its own
 * acquisitions: the total stays the count held, never 4 admitted under a limit of 2). */
static void release_for_another_then_acquire(void)
{
    struct lregion r;
    struct sw_view kid;
    region_and_other(&r, 2, &kid);
    struct sw_view *me = &r.v;
    struct sw_decision d;
    sw_decide(&kid, 2, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_release(me, 1), SW_OK); /* the kid's counts, released here */
    CHECK_EQ(sw_release(me, 1), SW_OK);
    CHECK_EQ(sw_in_flight(me), 0);
    CHECK_EQ(r.s.slots[me->my_slot].in_flight, 0); /* never below 0 */
    sw_decide(me, 2, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    uint64_t dead = ((uint64_t)4194301u << 32) | 7u;
    if (kill(4194301, 0) == 0)
        return; /* that pid exists here: skip */
    atomic_store(&r.s.slots[kid.my_slot].token, dead); /* the kid "dies" */
    CHECK_EQ(sw_lstate_reap(me), 1);
    CHECK_EQ(sw_in_flight(me), 2); /* this process's 2 */
    sw_decide(me, 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(sw_release(me, 2), SW_OK);
    CHECK_EQ(sw_in_flight(me), 0);
    sw_shm_close(&r.s);
}

/* A holds 2, B 1, and C finishes B's job (releases 1); then B's object is dropped, every
 * process alive: its give-back takes out of the total only what B still held, not the count
 * C released (the total stays A's 2: nothing more admitted under 3 than fits). */
static void give_back_after_a_release_for_it(void)
{
    struct lregion r;
    lregion_new(&r, SW_GRADE_CONCURRENCY, 3);
    struct sw_view a, *b = &r.v, c;
    int64_t hb = 0;
    view_as_other(&r, &a, 1u);
    view_as_other(&r, &c, 2u);
    CHECK(a.my_slot >= 0 && c.my_slot >= 0 && a.my_slot != b->my_slot && c.my_slot != b->my_slot);
    b->held = &hb;
    struct sw_decision d;
    sw_decide(&a, 2, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_decide(b, 1, MS(10), SW_F_ENTRY, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_release(&c, 1), SW_OK); /* B's job, finished in C */
    CHECK_EQ(sw_in_flight(&a), 2);
    sw_view_lock(b);
    (void)sw_lstate_give_back_locked(b, 0); /* B's object dropped */
    sw_view_unlock(b);
    CHECK_EQ(sw_in_flight(&a), 2); /* A's 2 */
    sw_decide(&a, 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_decide(&a, 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK); /* 3 of 3 */
    CHECK_EQ(sw_release(&a, 3), SW_OK);
    sw_shm_close(&r.s);
}

/* ---- observers: a state copied without its lock (sw_lstate_copy) ---- */

/* Copies from a live state; with `inject` set, the first `inject` whole-state copies are torn:
 * the lock's line (hot[]) is copied, then a decision in a new bucket runs (it moves the head
 * buckets and loads hot[] anew), then the node is copied. */
struct torn_src {
    struct sw_view *v;
    int inject;
    int64_t at_ns; /* the injected decision's time, one bucket later each time */
    const char *base; /* the region's start (set by copy_stats) */
    size_t off_state;
};

static int torn_read(void *ctx, size_t off, size_t len, void *dst)
{
    struct torn_src *src = ctx;
    const char *base = src->base;
    if (off != src->off_state || len <= sizeof(struct sw_lstate) || src->inject == 0) {
        memcpy(dst, base + off, len);
        return 0;
    }
    src->inject--;
    base += off;
    memcpy(dst, base, sizeof(struct sw_lstate));
    struct sw_decision d;
    CHECK_EQ(sw_decide(src->v, 1, src->at_ns, SW_F_TRY, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS);
    src->at_ns += MS(500);
    memcpy((char *)dst + sizeof(struct sw_lstate), base + sizeof(struct sw_lstate),
           len - sizeof(struct sw_lstate));
    return 0;
}

/* What read_region does with a copy: check it, repair it, settle it, read it at t. */
static void copy_stats(struct sw_view *v, struct torn_src *src, unsigned tries, bool *hot_ok,
                       int64_t t_ns, struct sw_stats *st, struct sw_totals *tot,
                       int64_t *min_pass)
{
    size_t size = v->st->size;
    struct sw_lstate *copy = aligned_alloc(64, (size + 63u) & ~(size_t)63u);
    CHECK(copy != NULL);
    if (copy == NULL)
        abort();
    /* a region's slots follow its header (sw_shm.c), its state follows them */
    size_t off_slots = (sizeof(struct sw_shm_header) + 63u) & ~(size_t)63u;
    src->base = (const char *)v->slots - off_slots;
    src->off_state = (size_t)((const char *)v->st - src->base);
    struct sw_lstate_src from = {torn_read, src, src->off_state, off_slots, v->n_slots};
    struct sw_proc_slot *slots = calloc(v->n_slots, sizeof *slots);
    CHECK(slots != NULL);
    if (slots == NULL)
        abort();
    CHECK_EQ(sw_lstate_copy(copy, size, &from, slots, tries, hot_ok), 0);
    struct sw_node *node = sw_lstate_node(copy);
    CHECK_EQ(sw_lstate_validate(copy, size, v->rule->interval_ms, v->rule->sample_count), SW_OK);
    sw_node_repair(node);
    sw_lstate_settle_copy(copy, *hot_ok, slots, v->n_slots);
    free(slots);
    sw_node_stats(node, t_ns, st);
    sw_node_totals(node, tot);
    *min_pass = sw_leap_sum(sw_node_min(node), NULL, SW_EV_PASS, sw_ms_of_ns(t_ns));
    free(copy);
}

/* A copy whose lock line is older than its node (a decision in a new bucket ran between the
 * two) must not add the old head bucket's counts, kept on the lock's line, to the new one:
 * it is taken again. Before: the window read 100 passes in a bucket that held 1. */
static void observer_torn_copy(void)
{
    struct lregion r;
    lregion_new(&r, SW_GRADE_QPS, 1000);
    struct sw_decision d;
    for (int i = 0; i < 100; i++) /* bucket 1000: 100 passes, 99 on the lock's line only */
        CHECK_EQ(sw_decide(&r.v, 1, MS(1100), SW_F_TRY, &d), SW_OK);
    struct torn_src src = {&r.v, 1, MS(2100), NULL, 0};
    bool hot_ok = false;
    struct sw_stats st;
    struct sw_totals tot;
    int64_t min_pass;
    copy_stats(&r.v, &src, 16, &hot_ok, MS(2100), &st, &tot, &min_pass);
    CHECK_EQ(src.inject, 0);  /* the first copy was torn */
    CHECK(hot_ok);            /* the second was not */
    CHECK_EQ(st.pass, 1);     /* the window at 2100: bucket 2000 only */
    CHECK_EQ(tot.pass, 101);
    CHECK_EQ(min_pass, 101);  /* minute bucket 1000 and 2000 */

    /* torn every time: the copy's head counts on the lock's line are left out, never added
     * to a newer bucket; the lifetime totals (only rising) still settle */
    src.inject = 3;
    src.at_ns = MS(3100);
    for (int i = 0; i < 50; i++) /* bucket 2500 (the window 2000..2999): 50 on the line */
        CHECK_EQ(sw_decide(&r.v, 1, MS(2600), SW_F_TRY, &d), SW_OK);
    copy_stats(&r.v, &src, 3, &hot_ok, MS(4100), &st, &tot, &min_pass);
    CHECK_EQ(src.inject, 0);
    CHECK(!hot_ok);
    /* each injected decision started a bucket (the general path: stored in the node) */
    CHECK_EQ(st.pass, 2);     /* buckets 3500 and 4000: 1 each */
    CHECK_EQ(tot.pass, 154);
    CHECK_EQ(min_pass, 154);  /* not 155: minute bucket 3000's 2 (on the line) into 4000 */
    sw_shm_close(&r.s);
}

/* A decision at the head of both windows counts on the lock's line only; the next other
 * operation moves those counts into the windows and the totals in steps (sw_lstate_enter,
 * sw_lstate_leave). A process killed at any of those steps loses and doubles nothing: the
 * next locker takes the lock over and redoes them. Round k kills the child at the k-th test
 * hook call inside such an operation, until one completes before its k-th call. */
static void kill_while_settling(void)
{
    struct sw_shm_layout lay = lim_layout(1000, 2);
    struct sw_rule rule;
    rule_of(&rule, SW_GRADE_QPS, 100);
    int completed = 0;
    for (int k = 1; k < 64 && !completed; k++) {
        struct sw_shm s;
        shm_anon(&s, &lay);
        struct victim kid;
        if (victim_fork(&kid)) {
            struct sw_view v;
            view_of(&s, &rule, &v);
            struct sw_decision d;
            for (int i = 0; i < 30; i++) /* 30 passes (the first takes the general path) */
                sw_decide(&v, 1, MS(1100), SW_F_TRY, &d);
            for (int i = 0; i < 5; i++) /* 5 x 200 refused (never fits): 1000 blocks */
                sw_decide(&v, 200, MS(1200), SW_F_TRY, &d);
            victim_arm_at(k);
            /* the next bucket of the limiter's window, the same second: the general path
             * moves the 30 + 1000 into the rings and totals, then counts this pass */
            sw_decide(&v, 1, MS(1600), SW_F_TRY, &d);
            victim_tell('d');
            for (;;)
                pause();
        }
        char c = victim_wait(&kid);
        CHECK(c == 'h' || c == 'd'); /* hangs at its k-th step, or was done before it */
        victim_kill(&kid);
        completed = c == 'd';
        if (completed && getenv("SW_STRESS_VERBOSE"))
            printf("  kill_while_settling: %d steps killed at\n", k - 1);
        struct sw_view v;
        view_of(&s, &rule, &v);
        /* an observer first: the copy of a state left by a dead process is whole */
        struct torn_src src = {&v, 0, 0, NULL, 0};
        bool hot_ok = false;
        struct sw_stats cst;
        struct sw_totals ctot;
        int64_t cmin;
        copy_stats(&v, &src, 4, &hot_ok, MS(1600), &cst, &ctot, &cmin);
        CHECK(hot_ok);
        CHECK(ctot.pass == 30 || ctot.pass == 31);
        CHECK_EQ(ctot.block, 1000);
        CHECK_EQ(cst.pass, ctot.pass);
        CHECK_EQ(cst.block, 1000);
        CHECK_EQ(cmin, ctot.pass);
        struct sw_totals tot;
        sw_totals_read(&v, &tot); /* takes the lock over when the child died holding it */
        CHECK_EQ(tot.pass, ctot.pass);
        if (completed)
            CHECK_EQ(tot.pass, 31);
        CHECK(tot.pass == 30 || tot.pass == 31); /* the last pass: counted or not, once */
        CHECK_EQ(tot.block, 1000);
        struct sw_stats st;
        sw_stats_read(&v, MS(1600), &st); /* the limiter's window: buckets 1000 and 1500 */
        CHECK_EQ(st.pass, tot.pass);
        CHECK_EQ(st.block, 1000);
        sw_view_lock(&v);
        sw_lstate_enter(v.st);
        struct sw_leap *min = sw_node_min(sw_lstate_node(v.st));
        CHECK_EQ(sw_leap_sum(min, NULL, SW_EV_PASS, 1600), tot.pass);
        CHECK_EQ(sw_leap_sum(min, NULL, SW_EV_BLOCK, 1600), 1000);
        sw_lstate_leave(v.st);
        sw_view_unlock(&v);
        /* and it goes on exactly: 100 a window, tot.pass already in it */
        struct sw_decision d;
        int64_t more = 0;
        for (int i = 0; i < 200; i++) {
            CHECK_EQ(sw_decide(&v, 1, MS(1700), SW_F_TRY, &d), SW_OK);
            more += d.verdict == SW_PASS;
        }
        CHECK_EQ(more, 100 - tot.pass);
        sw_totals_read(&v, &tot);
        CHECK_EQ(tot.pass, 100);
        CHECK_EQ(tot.block, 1000 + 200 - more);
        sw_shm_close(&s);
    }
    CHECK(completed); /* every step was tried */
}

/* A waiter for a lock held by another process sleeps on it: it sets SW_LOCK_WAITERS beside
 * the owner's token (the owner's pid stays readable), the owner's release wakes it, it holds
 * the lock with the bit (other sleepers may remain: its own release wakes the next), and the
 * last release leaves the word free. */
struct lock_waiter {
    sw_lock *lock;
    uint64_t held_as; /* the word while the waiter held the lock */
};

static void *lock_waiter_run(void *arg)
{
    struct lock_waiter *w = arg;
    (void)sw_lock_acquire_as(w->lock, sw_proc_token());
    w->held_as = atomic_load(&w->lock->word);
    sw_lock_release(w->lock);
    return NULL;
}

static void test_lock_waiter_sleeps_and_is_woken(void)
{
    sw_lock *l = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int ready[2], go[2];
    CHECK(l != MAP_FAILED && pipe(ready) == 0 && pipe(go) == 0);
    if (l == MAP_FAILED)
        return;
    sw_lock_init(l);
    pid_t kid = fork();
    if (kid == 0) {
        char c = 0;
        (void)sw_lock_acquire_as(l, sw_proc_token());
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(2);
        sw_lock_release(l);
        _exit(0);
    }
    char c = 0;
    CHECK(kid > 0 && read(ready[0], &c, 1) == 1);
    uint64_t kid_word = atomic_load(&l->word);
    CHECK_EQ(kid_word >> 32, (uint64_t)kid);
    struct lock_waiter w = {l, 0};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, lock_waiter_run, &w), 0);
    bool flagged = false;
    for (int i = 0; i < 20000 && !flagged; i++) { /* 2 s at most */
        flagged = atomic_load(&l->word) == (kid_word | SW_LOCK_WAITERS);
        if (!flagged) {
            struct timespec nap = {0, 100000};
            nanosleep(&nap, NULL);
        }
    }
    CHECK(flagged);
    CHECK_EQ(sw_lock_owner_of(atomic_load(&l->word)), kid_word);
    CHECK(write(go[1], &c, 1) == 1);
    int status = -1;
    CHECK_EQ(waitpid(kid, &status, 0), kid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK(w.held_as == (sw_proc_token() | SW_LOCK_WAITERS));
    CHECK_EQ(atomic_load(&l->word), 0);
    /* a private lock's release stays a plain store; its word holds no bit */
    sw_lock_acquire(l);
    CHECK_EQ(atomic_load(&l->word), SW_LOCK_PRIVATE);
    sw_lock_release(l);
    CHECK_EQ(atomic_load(&l->word), 0);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
    munmap(l, 4096);
}

/* A refusal proven without the lock, when a process takes the lock and enters the
 * bracket of sw_lstate_enter (zeroing hot[] for a move of the heads) between the proof and
 * the count, then dies there: the refusal is counted all the same, once (the takeover's
 * repair keeps every count; here the refusal, finding hot[] marked, is decided and counted
 * under the lock). */
static struct sw_limiter *bracket_lim;
static int bracket_entered;
static void enter_then_die(void)
{
    if (bracket_entered++)
        return; /* the hooks inside sw_lstate_enter itself */
    sw_lstate_enter(&bracket_lim->st); /* the lock's owner, dead below */
}

static void unlocked_refusal_beside_a_holder_killed_in_the_bracket(void)
{
    if (kill(4194003, 0) == 0)
        return; /* that pid exists here */
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    struct sw_limiter *lim = lim_new(&cfg);
    if (lim == NULL)
        return;
    struct sw_decision d;
    for (int i = 0; i < 10; i++)
        sw_limiter_decide(lim, 1, MS(600), SW_F_TRY, &d);
    sw_limiter_decide(lim, 1, MS(650), SW_F_TRY, &d); /* full: refused without the lock */
    CHECK_EQ(d.verdict, SW_BLOCK);
    struct sw_view v;
    sw_limiter_view(lim, &v);
    v.token = SW_LOCK_PROCESS; /* checks the owner's liveness, as a shared view does */
    bracket_lim = lim;
    bracket_entered = 0;
    /* the lock held (a refusal without it is tried only then) by a process that dies */
    atomic_store(&lim->st.lock.word, ((uint64_t)4194003u << 32) | 77u);
    sw_test_in_critical = enter_then_die;
    CHECK_EQ(sw_decide(&v, 1, MS(700), SW_F_TRY, &d), SW_OK);
    sw_test_in_critical = NULL;
    CHECK(bracket_entered > 0);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(sw_decide(&v, 1, MS(720), SW_F_TRY, &d), SW_OK); /* and one more, as usual */
    CHECK_EQ(d.verdict, SW_BLOCK);
    check_counted(lim, MS(720), 10, 3);
    free(lim);
}

void test_shm_crash(void)
{
    test_dead_owner();
    test_stopped_and_stuck_owner();
    test_lock_waiter_sleeps_and_is_woken();
    observer_torn_copy();
    kill_while_settling();
    crash_in_refresh(2);
    crash_in_refresh(1);
    takeover_through_window();
    reap_keeps_the_sum();
    release_for_another_then_acquire();
    give_back_after_a_release_for_it();
    unlocked_refusal_beside_a_holder_killed_in_the_bracket();
}
