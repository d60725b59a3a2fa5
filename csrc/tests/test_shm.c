/* test_shm.c - shared regions: create, attach, layout checks, a creation race, a lock whose
 * owner died inside its critical section, reaping a dead process's in-flight count; and the
 * warm-up payback of an oversize request. */
#include "limiter_util.h"
#include "shm_util.h"
#include "sw_proc.h"
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

void test_shm_review(void);

static int lim_init_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_init(state, lay->interval_ms, lay->sample_count);
}

static sw_lock *lim_state_lock(void *state)
{
    return &((struct sw_lstate *)state)->lock;
}

static int lim_check_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_validate(state, (size_t)lay->state_size, lay->interval_ms,
                              lay->sample_count);
}

static struct sw_shm_layout lim_layout(int64_t interval_ms, uint32_t samples)
{
    struct sw_shm_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.kind = SW_KIND_LIMITER;
    lay.interval_ms = interval_ms;
    lay.sample_count = samples;
    lay.n_slots = SW_SHM_MAX_PROCS;
    lay.state_size = sw_lstate_size(interval_ms, samples);
    lay.init_state = lim_init_state;
    lay.check_state = lim_check_state;
    lay.state_lock = lim_state_lock;
    return lay;
}

static void tmp_path(char *out, size_t cap, const char *tag)
{
    snprintf(out, cap, "/tmp/sw-test-%ld-%s", (long)getpid(), tag);
    unlink(out);
}

/* A rule of these settings (checked). */
static void rule_of(struct sw_rule *rule, int grade, double count)
{
    struct sw_limiter_cfg cfg = cfg_of(grade, SW_REJECT, count);
    CHECK_EQ(sw_rule_init(rule, &cfg), SW_OK);
}

/* A fresh anonymous region of the default layout (1000 ms in 2 buckets), and a rule. */
static void region_open(struct sw_shm *s, struct sw_rule *rule, int grade, double count)
{
    struct sw_shm_layout lay = lim_layout(1000, 2);
    shm_anon(s, &lay);
    rule_of(rule, grade, count);
}

static void view_of(struct sw_shm *shm, const struct sw_rule *rule, struct sw_view *v)
{
    v->st = shm->state;
    v->rule = rule;
    v->token = sw_proc_token();
    v->slots = shm->slots;
    v->n_slots = shm->n_slots;
    v->my_slot = sw_shm_claim_slot(shm, v->token);
    v->held = NULL;
}

static void test_create_attach(void)
{
    char path[128];
    tmp_path(path, sizeof path, "a");
    struct sw_shm_layout lay = lim_layout(1000, 2);
    struct sw_shm a, b;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&a, path, &lay, &err), SW_OK);
    CHECK_EQ(a.created, 1);
    struct stat sb;
    CHECK_EQ(stat(path, &sb), 0);
    CHECK_EQ(sb.st_mode & 0777, 0600);
    CHECK_EQ((size_t)sb.st_size, sw_shm_size(&lay));
    CHECK_EQ(sw_shm_open(&b, path, &lay, &err), SW_OK);
    CHECK_EQ(b.created, 0);
    /* one state: a decision through one mapping is seen through the other */
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 3);
    struct sw_rule rule;
    CHECK_EQ(sw_rule_init(&rule, &cfg), SW_OK);
    struct sw_view va, vb;
    view_of(&a, &rule, &va);
    view_of(&b, &rule, &vb);
    /* one process: one slot, shared by its mappings */
    CHECK(va.my_slot >= 0 && va.my_slot == vb.my_slot);
    struct sw_decision d;
    int passes = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(sw_decide(i % 2 ? &vb : &va, 1, MS(100), 0, &d), SW_OK);
        passes += d.verdict == SW_PASS;
    }
    CHECK_EQ(passes, 3);
    /* settings per process: another threshold on the same counts */
    struct sw_limiter_cfg cfg5 = cfg_of(SW_GRADE_QPS, SW_REJECT, 5);
    struct sw_rule rule5;
    CHECK_EQ(sw_rule_init(&rule5, &cfg5), SW_OK);
    vb.rule = &rule5;
    CHECK_EQ(sw_decide(&vb, 2, MS(100), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS); /* 3 + 2 <= 5 */
    CHECK_EQ(sw_decide(&va, 1, MS(100), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_BLOCK);
    /* layout mismatches name the field */
    struct sw_shm c;
    struct sw_shm_layout other = lim_layout(2000, 2);
    CHECK_EQ(sw_shm_open(&c, path, &other, &err), SW_EINVAL);
    CHECK(err.field != NULL && strcmp(err.field, "interval_ms") == 0);
    CHECK(strstr(err.msg, "interval_ms=1000") != NULL && strstr(err.msg, "interval_ms=2000"));
    other = lim_layout(1000, 4);
    CHECK_EQ(sw_shm_open(&c, path, &other, &err), SW_EINVAL);
    CHECK(err.field != NULL && strcmp(err.field, "sample_count") == 0);
    other = lim_layout(1000, 2);
    other.kind = SW_KIND_METRIC;
    CHECK_EQ(sw_shm_open(&c, path, &other, &err), SW_EINVAL);
    CHECK(err.field != NULL && strcmp(err.field, "kind") == 0);
    sw_shm_close(&a);
    sw_shm_close(&b);
    unlink(path);
}

static void write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_EQ(write(fd, data, len), (long long)len);
        close(fd);
    }
}

static void test_bad_files(void)
{
    char path[128];
    tmp_path(path, sizeof path, "bad");
    struct sw_shm_layout lay = lim_layout(1000, 2);
    struct sw_shm s;
    struct sw_shm_error err;
    /* garbage, empty, truncated, foreign version, damaged state */
    char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(i * 7 + 3);
    write_file(path, junk, sizeof junk);
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_EINVAL);
    write_file(path, junk, 0);
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_EINVAL);
    unlink(path);
    struct sw_shm good;
    CHECK_EQ(sw_shm_open(&good, path, &lay, &err), SW_OK);
    size_t size = good.size;
    char *copy = malloc(size);
    if (copy == NULL)
        return;
    memcpy(copy, good.base, size);
    sw_shm_close(&good);
    write_file(path, copy, size / 2); /* truncated */
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_EINVAL);
    CHECK(strstr(err.msg, "truncated") != NULL || strstr(err.msg, "not a slidewin") != NULL);
    struct sw_shm_header *h = (struct sw_shm_header *)(void *)copy;
    h->version = 999;
    write_file(path, copy, size);
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_EINVAL);
    CHECK(err.field != NULL && strcmp(err.field, "version") == 0);
    h->version = SW_SHM_LAYOUT_VERSION;
    struct sw_lstate *st = (struct sw_lstate *)(void *)(copy + h->off_state);
    st->off_node = 1u << 30; /* an offset pointing far outside */
    write_file(path, copy, size);
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_EINVAL);
    st->off_node = (uint32_t)((sizeof(struct sw_lstate) + 7u) & ~7u);
    struct sw_leap *sec = sw_node_sec(sw_lstate_node(st));
    sec->newest = 0;
    sec->newest_idx = 12345; /* an index out of range */
    write_file(path, copy, size);
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_EINVAL);
    sec->newest_idx = 0;
    write_file(path, copy, size);
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_OK);
    sw_shm_close(&s);
    free(copy);
    /* a symbolic link is refused */
    char link_path[160];
    snprintf(link_path, sizeof link_path, "%s.link", path);
    unlink(link_path);
    CHECK_EQ(symlink(path, link_path), 0);
    CHECK_EQ(sw_shm_open(&s, link_path, &lay, &err), SW_EINVAL);
    unlink(link_path);
    unlink(path);
    /* a folder that does not exist: a system error */
    CHECK_EQ(sw_shm_open(&s, "/nonexistent-sw-dir/x", &lay, &err), SW_EOS);
    CHECK_EQ(err.sys_errno, ENOENT);
}

/* 8 processes open a fresh name at once: one creates, all end on one region. */
static void test_creation_race(void)
{
    char path[128];
    tmp_path(path, sizeof path, "race");
    struct sw_shm_layout lay = lim_layout(1000, 2);
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    pid_t kids[8];
    for (int i = 0; i < 8; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            struct sw_shm s;
            struct sw_shm_error err;
            char c;
            close(pipefd[1]);
            if (read(pipefd[0], &c, 1) < 0)
                _exit(3);
            if (sw_shm_open(&s, path, &lay, &err) != SW_OK)
                _exit(2);
            struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 1000);
            struct sw_rule rule;
            sw_rule_init(&rule, &cfg);
            struct sw_view v;
            view_of(&s, &rule, &v);
            struct sw_decision d;
            sw_decide(&v, 1, MS(10), 0, &d);
            _exit(s.created ? 10 : 0);
        }
    }
    close(pipefd[0]);
    close(pipefd[1]); /* go */
    int created = 0, failed = 0;
    for (int i = 0; i < 8; i++) {
        int status = 0;
        waitpid(kids[i], &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 10)
            created++;
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
    }
    CHECK_EQ(failed, 0);
    CHECK_EQ(created, 1);
    struct sw_shm s;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&s, path, &lay, &err), SW_OK);
    struct sw_stats stats;
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 1000);
    struct sw_rule rule;
    sw_rule_init(&rule, &cfg);
    struct sw_view v;
    view_of(&s, &rule, &v);
    sw_stats_read(&v, MS(10), &stats);
    CHECK_EQ(stats.pass, 8); /* every process counted into the one region */
    sw_shm_close(&s);
    unlink(path);
    /* no temporary file is left behind */
    char tmp_prefix[160];
    snprintf(tmp_prefix, sizeof tmp_prefix, "ls /tmp/.sw-test-%ld-race.* >/dev/null 2>&1",
             (long)getpid());
    CHECK(system(tmp_prefix) != 0);
}

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
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_CONCURRENCY, 2);
    struct sw_view v;
    view_of(&s, &rule, &v);
    struct sw_lstate *st = s.state;
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
    CHECK_EQ(sw_decide(&v, 1, MS(10), 0, &d), SW_EBUSY); /* gave up, nothing counted */
    CHECK(hook_calls >= 20 && hook_saw_stopped == hook_calls);
    CHECK_EQ(sw_lstate_check_repair(&v), SW_EBUSY);
    /* an exit and a release give up the same way, having done nothing (the count is kept) */
    hook_calls = 0;
    CHECK_EQ(sw_exit_or_give_up(&v, 1, 3, SW_OUT_SUCCESS, MS(10)), SW_EBUSY);
    CHECK(hook_calls >= 20);
    hook_calls = 0;
    CHECK_EQ(sw_release(&v, 1), SW_EBUSY);
    sw_lock_wait_hook = NULL;
    kill(kid, SIGKILL);
    waitpid(kid, &status, 0);
    CHECK_EQ(sw_decide(&v, 1, MS(10), 0, &d), SW_OK); /* taken over from the dead holder */
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_in_flight(&v), 1);
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
    CHECK_EQ(sw_lstate_check_repair(&v), SW_EBUSY);
    int64_t took = sw_time_ns() - t0;
    CHECK(took >= SW_LOCK_STUCK_NS && took < SW_LOCK_STUCK_NS + MS(30000));
    kill(sleeper, SIGKILL);
    waitpid(sleeper, &status, 0);
    CHECK_EQ(sw_lstate_check_repair(&v), SW_OK); /* its owner is gone now: taken over */
    CHECK_EQ(sw_in_flight(&v), 1);
    sw_shm_close(&s);
}

static void test_tokens(void)
{
    uint64_t me = sw_proc_token();
    CHECK((me >> 32) == (uint64_t)getpid());
    CHECK(!sw_proc_token_dead(me));
    CHECK(sw_proc_token_dead(((uint64_t)4194303u << 32) | 5u) ||
          kill(4194303, 0) == 0); /* a pid that does not exist */
    CHECK(sw_proc_token_dead(me ^ 1u)); /* our pid, another start time: a reused pid */
    uint64_t gen = sw_proc_fork_generation();
    pid_t kid = fork();
    if (kid == 0)
        _exit(sw_proc_token() != me && (sw_proc_token() >> 32) == (uint64_t)getpid() &&
                      sw_proc_fork_generation() == gen + 1
                  ? 0
                  : 1);
    int status = 0;
    waitpid(kid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A cold warm-up limiter admits an oversize request into an empty window, and pays it back:
 * n / rate seconds pass before the next (not the full rate from cold, one per window). */
static void test_warmup_payback(void)
{
    struct sw_limiter *lim = lim_of(SW_GRADE_QPS, SW_WARM_UP, 100);
    if (lim == NULL)
        return;
    struct sw_decision d;
    int64_t passed = 0;
    /* try_acquire(100) every second for 6 s, from cold (33.3 per second) */
    for (int s = 1; s <= 6; s++) {
        CHECK_EQ(sw_limiter_decide(lim, 100, MS(1000 * s), 0, &d), SW_OK);
        if (d.verdict == SW_PASS)
            passed += 100;
    }
    /* at most the cold rate (plus one request): never 100 per second */
    CHECK(passed <= 6 * 34 + 100); /* was 600: the full rate from cold */
    CHECK(passed >= 100); /* still live: a request larger than the cold allowance passes */
    free(lim);
}

/* A region of another PID namespace (its header's namespace id crafted) is
 * refused while a mapping of it lives (EBUSY, naming the namespace), and taken over, as new
 * and for this namespace, once none does (never refused for ever). The OFD lock a
 * user holds is kept by its mapping (the descriptor is closed after the attach). */
static void foreign_namespace_taken_over(void)
{
    char path[128];
    tmp_path(path, sizeof path, "ns");
    unlink(path);
    struct sw_shm_layout lay = lim_layout(1000, 2);
    struct sw_shm a, b;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&a, path, &lay, &err), SW_OK);
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_CONCURRENCY, SW_REJECT, 5);
    struct sw_rule rule;
    CHECK_EQ(sw_rule_init(&rule, &cfg), SW_OK);
    struct sw_view v;
    view_of(&a, &rule, &v);
    struct sw_decision d;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sw_decide(&v, 1, MS(100), SW_F_ENTRY, &d), SW_OK);
    CHECK_EQ(sw_in_flight(&v), 3);
    uint64_t mine = a.hdr->pidns_ino;
    if (mine == 0) { /* no /proc/self/ns here: nothing to test */
        sw_shm_close(&a);
        unlink(path);
        return;
    }
    a.hdr->pidns_ino = mine + 1; /* "another namespace" */
    CHECK_EQ(sw_shm_open(&b, path, &lay, &err), SW_EOS); /* a maps it: refused */
    CHECK_EQ(err.sys_errno, EBUSY);
    CHECK(strstr(err.msg, "PID namespace") != NULL && strstr(err.msg, "still uses") != NULL);
    sw_shm_close(&a); /* its last mapping: nobody uses it */
    CHECK_EQ(sw_shm_open(&b, path, &lay, &err), SW_OK);
    CHECK_EQ(b.created, 0);
    CHECK_EQ(b.hdr->pidns_ino, mine); /* this namespace's now */
    view_of(&b, &rule, &v);
    CHECK_EQ(sw_in_flight(&v), 0); /* the gone namespace's counts went with it */
    /* and while b maps it, another namespace's attach is refused again */
    b.hdr->pidns_ino = mine + 1;
    struct sw_shm c;
    CHECK_EQ(sw_shm_open(&c, path, &lay, &err), SW_EOS);
    CHECK_EQ(err.sys_errno, EBUSY);
    b.hdr->pidns_ino = mine;
    CHECK_EQ(sw_shm_open(&c, path, &lay, &err), SW_OK); /* this namespace: attached */
    sw_shm_close(&c);
    sw_shm_close(&b);
    unlink(path);
}

/* A view's object gives back what it holds, not what the process's other
 * objects hold, nor what it released for them. */
static void give_back_per_object(void)
{
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_CONCURRENCY, 10);
    struct sw_view a, b;
    int64_t ha = 0, hb = 0;
    view_of(&s, &rule, &a);
    view_of(&s, &rule, &b);
    a.held = &ha;
    b.held = &hb;
    struct sw_decision d;
    for (int i = 0; i < 3; i++)
        sw_decide(&a, 1, MS(10), SW_F_ENTRY, &d);
    sw_decide(&b, 1, MS(10), SW_F_ENTRY, &d);
    CHECK_EQ(ha, 3);
    CHECK_EQ(hb, 1);
    CHECK_EQ(sw_release(&b, 2), SW_OK); /* b gives back its own and one of a's */
    CHECK_EQ(hb, 0);                     /* never below 0 */
    CHECK_EQ(sw_in_flight(&a), 2);
    sw_decide(&b, 1, MS(10), SW_F_ENTRY, &d); /* b holds 1 again: 3 in all */
    sw_view_lock(&a);
    CHECK_EQ(sw_lstate_give_back_locked(&a, hb), 2); /* a's 3, less the one b released */
    sw_view_unlock(&a);
    CHECK_EQ(ha, 0);
    CHECK_EQ(sw_in_flight(&b), 1); /* b's own stays */
    sw_shm_close(&s);
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

void test_shm(void)
{
    test_tokens();
    test_create_attach();
    test_bad_files();
    test_creation_race();
    test_dead_owner();
    test_stopped_and_stuck_owner();
    test_lock_waiter_sleeps_and_is_woken();
    test_warmup_payback();
    test_shm_review();
    foreign_namespace_taken_over();
    give_back_per_object();
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

/* A release in another process than the acquisition, then both die: reaping keeps the total
 * the sum of the slots, so nothing phantom stays in flight (never clamped to 0, then +1). */
static void reap_keeps_the_sum(void)
{
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_CONCURRENCY, 1);
    struct sw_view a, b, me;
    view_of(&s, &rule, &a);
    view_of(&s, &rule, &b);
    b.my_slot = sw_shm_claim_slot(&s, sw_proc_token() ^ 1u); /* as another process's */
    CHECK(b.my_slot >= 0 && b.my_slot != a.my_slot);
    struct sw_decision d;
    sw_decide(&a, 1, MS(10), 0, &d);  /* a's slot +1 */
    CHECK_EQ(sw_release(&b, 1), SW_OK); /* b's slot -1: the total is 0 */
    /* both "die": their slots now name processes that do not exist */
    uint64_t dead1 = ((uint64_t)4194301u << 32) | 7u, dead2 = ((uint64_t)4194302u << 32) | 7u;
    if (kill(4194301, 0) == 0 || kill(4194302, 0) == 0)
        return; /* those pids exist here: skip */
    atomic_store(&s.slots[a.my_slot].token, a.my_slot < b.my_slot ? dead1 : dead2);
    atomic_store(&s.slots[b.my_slot].token, a.my_slot < b.my_slot ? dead2 : dead1);
    view_of(&s, &rule, &me);
    CHECK_EQ(sw_lstate_reap(&me), 2);
    CHECK_EQ(sw_in_flight(&me), 0);
    CHECK_EQ(sw_decide(&me, 1, MS(10), 0, &d), SW_OK);
    CHECK_EQ(d.verdict, SW_PASS); /* nothing phantom in flight */
    sw_shm_close(&s);
}

/* A release for another process, then the releaser acquires again, then the acquirer dies:
 * the reap takes out of the total only what the dead process still held, never the released
 * counts a second time (the releaser's slot may go below 0 and be filled back by its own
 * acquisitions: the total stays the count held, never 4 admitted under a limit of 2). */
static void release_for_another_then_acquire(void)
{
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_CONCURRENCY, 2);
    struct sw_view kid, me;
    view_of(&s, &rule, &me);
    view_of(&s, &rule, &kid);
    kid.my_slot = sw_shm_claim_slot(&s, sw_proc_token() ^ 1u); /* as another process's */
    CHECK(kid.my_slot >= 0 && kid.my_slot != me.my_slot);
    struct sw_decision d;
    sw_decide(&kid, 2, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_release(&me, 1), SW_OK); /* the kid's counts, released here */
    CHECK_EQ(sw_release(&me, 1), SW_OK);
    CHECK_EQ(sw_in_flight(&me), 0);
    CHECK_EQ(s.slots[me.my_slot].in_flight, 0); /* never below 0 */
    sw_decide(&me, 2, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    uint64_t dead = ((uint64_t)4194301u << 32) | 7u;
    if (kill(4194301, 0) == 0)
        return; /* that pid exists here: skip */
    atomic_store(&s.slots[kid.my_slot].token, dead); /* the kid "dies" */
    CHECK_EQ(sw_lstate_reap(&me), 1);
    CHECK_EQ(sw_in_flight(&me), 2); /* this process's 2 */
    sw_decide(&me, 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK);
    CHECK_EQ(sw_release(&me, 2), SW_OK);
    CHECK_EQ(sw_in_flight(&me), 0);
    sw_shm_close(&s);
}

/* A holds 2, B 1, and C finishes B's job (releases 1); then B's object is dropped, every
 * process alive: its give-back takes out of the total only what B still held, not the count
 * C released (the total stays A's 2: nothing more admitted under 3 than fits). */
static void give_back_after_a_release_for_it(void)
{
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_CONCURRENCY, 3);
    struct sw_view a, b, c;
    int64_t hb = 0;
    view_of(&s, &rule, &a);
    view_of(&s, &rule, &b);
    view_of(&s, &rule, &c);
    a.my_slot = sw_shm_claim_slot(&s, sw_proc_token() ^ 1u); /* as other processes' */
    c.my_slot = sw_shm_claim_slot(&s, sw_proc_token() ^ 2u);
    CHECK(a.my_slot >= 0 && c.my_slot >= 0 && a.my_slot != b.my_slot && c.my_slot != b.my_slot);
    b.held = &hb;
    struct sw_decision d;
    sw_decide(&a, 2, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_decide(&b, 1, MS(10), SW_F_ENTRY, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    CHECK_EQ(sw_release(&c, 1), SW_OK); /* B's job, finished in C */
    CHECK_EQ(sw_in_flight(&a), 2);
    sw_view_lock(&b);
    (void)sw_lstate_give_back_locked(&b, 0); /* B's object dropped */
    sw_view_unlock(&b);
    CHECK_EQ(sw_in_flight(&a), 2); /* A's 2 */
    sw_decide(&a, 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_PASS);
    sw_decide(&a, 1, MS(10), 0, &d);
    CHECK_EQ(d.verdict, SW_BLOCK); /* 3 of 3 */
    CHECK_EQ(sw_release(&a, 3), SW_OK);
    sw_shm_close(&s);
}

/* A region at a fresh path, opened by a first process (checked) with a view of a QPS rule of
 * 10 (v), damaged by hand; then attached by a second (b, vb) that checks and repairs it. */
struct crafted {
    char path[128];
    struct sw_shm_layout lay;
    struct sw_shm a, b;
    struct sw_rule rule;
    struct sw_view v, vb;
};

static void crafted_open(struct crafted *c, const char *tag, uint32_t samples)
{
    tmp_path(c->path, sizeof c->path, tag);
    c->lay = lim_layout(1000, samples);
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&c->a, c->path, &c->lay, &err), SW_OK);
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    cfg.sample_count = samples;
    CHECK_EQ(sw_rule_init(&c->rule, &cfg), SW_OK);
    view_of(&c->a, &c->rule, &c->v);
}

/* The second process attaches after the damage: the check and repair on attaching. */
static void crafted_attach(struct crafted *c)
{
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&c->b, c->path, &c->lay, &err), SW_OK);
    view_of(&c->b, &c->rule, &c->vb);
    sw_lstate_check_repair(&c->vb);
}

static void crafted_close(struct crafted *c)
{
    sw_shm_close(&c->a);
    sw_shm_close(&c->b);
    unlink(c->path);
}

/* A crafted region (an RT deque emptied while head is set) is made consistent on attach: the
 * next add_rt is exact and safe (no out-of-bounds access). */
static void crafted_deque(void)
{
    struct crafted c;
    crafted_open(&c, "dq", 4);
    struct sw_window w;
    sw_view_window(&c.v, &w);
    CHECK_EQ(sw_window_add_rt(&w, 9, MS(300)), SW_OK);
    struct sw_leap *sec = sw_node_sec(sw_lstate_node(c.a.state));
    sec->dq_len = 0;    /* the crafted damage */
    sec->head = MS(1) / 1000 * 0 + 750; /* a slot ahead of head's real bucket: 750 > 250 */
    crafted_attach(&c);
    struct sw_window wb;
    sw_view_window(&c.vb, &wb);
    CHECK_EQ(sw_window_add_rt(&wb, 4, MS(800)), SW_OK);
    int64_t min_rt, rt_sum, success;
    CHECK_EQ(sw_window_rt(&wb, MS(800), &min_rt, &rt_sum, &success), SW_OK);
    CHECK(min_rt == 4 || min_rt == 9);
    crafted_close(&c);
}

/* A region is input: a count below 0 (no operation ever stores one) in a bucket of the
 * window would let the limiter admit that many more than its limit; the repair on attaching
 * puts it back to 0. Before: all 20 admitted, against a limit of 10. */
static void crafted_negative_count(void)
{
    struct crafted c;
    crafted_open(&c, "neg", 2);
    struct sw_decision d;
    CHECK_EQ(sw_decide(&c.v, 1, MS(600), SW_F_TRY, &d), SW_OK);  /* bucket 500 */
    CHECK_EQ(sw_decide(&c.v, 1, MS(1100), SW_F_TRY, &d), SW_OK); /* bucket 1000, the head */
    struct sw_node *node = sw_lstate_node(c.a.state);
    int64_t *old = sw_leap_slot(sw_node_sec(node), sw_leap_index(sw_node_sec(node), 500));
    CHECK_EQ(old[SW_SLOT_START], 500);
    old[SW_SLOT_COUNTS + SW_EV_PASS] = -1000; /* the crafted damage */
    ((struct sw_lstate *)c.a.state)->hot[SW_HOT_SEC] = -1000; /* and on the lock's line */
    crafted_attach(&c);
    int passed = 0;
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(sw_decide(&c.vb, 1, MS(1200), SW_F_TRY, &d), SW_OK);
        passed += d.verdict == SW_PASS;
    }
    CHECK_EQ(passed, 9); /* bucket 500's 1 counted as 0, bucket 1000's 1 */
    crafted_close(&c);
}

/* ---- observers: a state copied without its lock (sw_lstate_copy) ---- */

/* Copies from a live state; with `inject` set, the first `inject` whole-state copies are torn:
 * the lock's line (hot[]) is copied, then a decision in a new bucket runs (it moves the head
 * buckets and loads hot[] anew), then the node is copied. */
struct torn_src {
    struct sw_view *v;
    int inject;
    int64_t at_ns; /* the injected decision's time, one bucket later each time */
};

static int torn_read(void *ctx, size_t off, size_t len, void *dst)
{
    struct torn_src *src = ctx;
    const char *base = (const char *)src->v->st;
    if (off != 0 || len <= sizeof(struct sw_lstate) || src->inject == 0) {
        memcpy(dst, base + off, len);
        return 0;
    }
    src->inject--;
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
    CHECK_EQ(sw_lstate_copy(copy, size, torn_read, src, tries, hot_ok), 0);
    struct sw_node *node = sw_lstate_node(copy);
    CHECK_EQ(sw_lstate_validate(copy, size, v->rule->interval_ms, v->rule->sample_count), SW_OK);
    sw_node_repair(node);
    sw_lstate_settle_copy(copy, *hot_ok);
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
    struct sw_shm s;
    struct sw_rule rule;
    region_open(&s, &rule, SW_GRADE_QPS, 1000);
    struct sw_view v;
    view_of(&s, &rule, &v);
    struct sw_decision d;
    for (int i = 0; i < 100; i++) /* bucket 1000: 100 passes, 99 on the lock's line only */
        CHECK_EQ(sw_decide(&v, 1, MS(1100), SW_F_TRY, &d), SW_OK);
    struct torn_src src = {&v, 1, MS(2100)};
    bool hot_ok = false;
    struct sw_stats st;
    struct sw_totals tot;
    int64_t min_pass;
    copy_stats(&v, &src, 16, &hot_ok, MS(2100), &st, &tot, &min_pass);
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
        CHECK_EQ(sw_decide(&v, 1, MS(2600), SW_F_TRY, &d), SW_OK);
    copy_stats(&v, &src, 3, &hot_ok, MS(4100), &st, &tot, &min_pass);
    CHECK_EQ(src.inject, 0);
    CHECK(!hot_ok);
    /* each injected decision started a bucket (the general path: stored in the node) */
    CHECK_EQ(st.pass, 2);     /* buckets 3500 and 4000: 1 each */
    CHECK_EQ(tot.pass, 154);
    CHECK_EQ(min_pass, 154);  /* not 155: minute bucket 3000's 2 (on the line) into 4000 */
    sw_shm_close(&s);
}

/* A decision at the head of both windows counts on the lock's line only; the next other
 * operation moves those counts into the windows and the totals in steps (sw_lstate_enter,
 * sw_lstate_leave). A process killed at any of those steps loses and doubles nothing: the
 * next locker takes the lock over and redoes them. Round k kills the child at the k-th test
 * hook call inside such an operation, until one completes before its k-th call. */
static volatile int hang_countdown;
static void hang_at_countdown(void)
{
    if (hang_countdown > 0 && --hang_countdown == 0)
        victim_hang();
}

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
            hang_countdown = k;
            victim_arm(hang_at_countdown);
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
        struct torn_src src = {&v, 0, 0};
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

/* ---- crafted regions ---- */

/* A bucket start within one window of INT64_MAX. */
static int64_t near_max(int64_t window_ms)
{
    return INT64_MAX - INT64_MAX % window_ms;
}

/* A ring head (and newest bucket, and its slot) within a window of INT64_MAX: refused on
 * attaching, as damaged, in time. Before: the attach's repair stepped `s += window_ms` past
 * INT64_MAX and never ended, holding the state's lock (killed here by the alarm). The same
 * for the borrow ring and the minute ring, and a head that is not a bucket start. */
static void crafted_head_near_max(void)
{
    for (int which = 0; which < 4; which++) {
        struct crafted c;
        crafted_open(&c, "max", 2);
        struct sw_decision d;
        CHECK_EQ(sw_decide(&c.v, 1, MS(600), SW_F_TRY, &d), SW_OK);
        struct sw_node *node = sw_lstate_node(c.a.state);
        struct sw_leap *l = which == 1 ? sw_node_fut(node) : which == 2 ? sw_node_min(node)
                                                                        : sw_node_sec(node);
        int64_t h = which == 3 ? 501 : near_max(l->window_ms);
        if (which != 1) {
            int64_t *slot = sw_leap_slot(l, (uint32_t)l->newest_idx);
            slot[SW_SLOT_START] = h;
        }
        l->head = h;
        l->newest = h;
        l->newest_idx = (int64_t)(((uint64_t)h / (uint64_t)l->window_ms) % l->sample_count);
        alarm(60); /* a hang fails (SIGALRM) instead of wedging the run */
        struct sw_shm_error err;
        int rc = sw_shm_open(&c.b, c.path, &c.lay, &err);
        if (rc == SW_OK) { /* attached: the repair must end */
            view_of(&c.b, &c.rule, &c.vb);
            sw_lstate_check_repair(&c.vb);
            sw_shm_close(&c.b);
        }
        alarm(0);
        CHECK_EQ(rc, SW_EINVAL);
        CHECK(strstr(err.msg, "damaged state") != NULL);
        /* a private ring with such a head is started afresh by a repair, in time */
        alarm(60);
        sw_leap_repair(l);
        alarm(0);
        CHECK(l->head == SW_LEAP_EMPTY || l->head <= SW_LEAP_T_MAX);
        sw_shm_close(&c.a);
        unlink(c.path);
    }
}

/* A process slot below 0 (no release leaves the slots' sum below 0): on attaching, the
 * total is not below 0, so a concurrency limit of 5 admits 5. Before: the slot's -100 went
 * into the total, read as 0 while each admission raised it: 105 admitted. And a dead
 * process's negative slot, reaped, adds nothing in flight (before: +100, nothing admitted). */
static void crafted_negative_in_flight(void)
{
    for (int dead = 0; dead < 2; dead++) {
        char path[128];
        tmp_path(path, sizeof path, "nif");
        struct sw_shm_layout lay = lim_layout(1000, 2);
        struct sw_shm a, b;
        struct sw_shm_error err;
        CHECK_EQ(sw_shm_open(&a, path, &lay, &err), SW_OK);
        struct sw_rule rule;
        rule_of(&rule, SW_GRADE_CONCURRENCY, 5);
        struct sw_view va, vb;
        view_of(&a, &rule, &va);
        CHECK(va.my_slot >= 0);
        if (!dead) {
            a.slots[va.my_slot].in_flight = -100; /* the crafted damage, a live process's */
        } else {
            uint64_t gone = ((uint64_t)4194301u << 32) | 7u;
            if (kill(4194301, 0) == 0) { /* that pid exists here: skip */
                sw_shm_close(&a);
                unlink(path);
                continue;
            }
            atomic_store(&a.slots[va.my_slot].token, gone);
            a.slots[va.my_slot].in_flight = -100;
            sw_lstate_node(a.state)->in_flight = -100; /* the sum of the slots */
        }
        CHECK_EQ(sw_shm_open(&b, path, &lay, &err), SW_OK);
        view_of(&b, &rule, &vb);
        if (dead)
            CHECK_EQ(sw_lstate_reap(&vb), 1);
        else
            sw_lstate_check_repair(&vb);
        int passed = 0;
        for (int i = 0; i < 20; i++) {
            struct sw_decision d;
            CHECK_EQ(sw_decide(&vb, 1, MS(100), SW_F_TRY, &d), SW_OK);
            passed += d.verdict == SW_PASS;
        }
        CHECK_EQ(passed, 5);
        CHECK_EQ(sw_in_flight(&vb), 5);
        sw_shm_close(&a);
        sw_shm_close(&b);
        unlink(path);
    }
}

/* Write a boot id that is not this boot's into a region's header. */
static void fake_boot_id(struct sw_shm *s)
{
    memset(s->hdr->boot_id, 0, sizeof s->hdr->boot_id);
    snprintf(s->hdr->boot_id, sizeof s->hdr->boot_id, "00000000-0000-0000-0000-000000000000");
}

struct attacher {
    const char *path;
    const struct sw_shm_layout *lay;
    struct sw_shm shm;
    int rc;
    _Atomic int done;
};

static void *attach_thread(void *arg)
{
    struct attacher *t = arg;
    struct sw_shm_error err;
    t->rc = sw_shm_open(&t->shm, t->path, t->lay, &err);
    atomic_store(&t->done, 1);
    return NULL;
}

/* A limiter region at path (qps 10) that no live process holds a slot in: *v is a view of it
 * whose own slot's token was cleared. */
static void open_unheld_region(const char *path, const struct sw_shm_layout *lay,
                               struct sw_shm *a, struct sw_rule *rule, struct sw_view *v)
{
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(a, path, lay, &err), SW_OK);
    rule_of(rule, SW_GRADE_QPS, 10);
    view_of(a, rule, v);
    atomic_store(&a->slots[v->my_slot].token, 0);
}

/* The attacher t joined: it attached, and the region's boot id is this boot's again. */
static void attach_joined(struct attacher *t, pthread_t th, const struct sw_shm *a)
{
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(t->rc, SW_OK);
    CHECK(strcmp(a->hdr->boot_id, "00000000-0000-0000-0000-000000000000") != 0);
}

/* A region whose header names another boot is reinitialised under the state's lock: while a
 * user holds the lock, the attacher waits, and the user's state is not touched under it.
 * Before: reinitialised at once under the user (its counts zeroed while it held the lock; a
 * user mid-decision divided by a zeroed window: SIGFPE). */
static void reinit_takes_the_state_lock(void)
{
    char path[128];
    tmp_path(path, sizeof path, "boot");
    struct sw_shm_layout lay = lim_layout(1000, 2);
    struct sw_shm a;
    struct sw_rule rule;
    struct sw_view v; /* no process slot: nothing says a live process uses it */
    open_unheld_region(path, &lay, &a, &rule, &v);
    v.slots = NULL;
    v.my_slot = -1;
    struct sw_decision d;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sw_decide(&v, 1, MS(100), SW_F_TRY, &d), SW_OK);
    fake_boot_id(&a);
    sw_view_lock(&v); /* a user inside its critical section */
    struct attacher t = {path, &lay, {0}, -1, 0};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, attach_thread, &t), 0);
    /* give the attacher ample time to reach the state: it must wait for the lock */
    for (int i = 0; i < 50 && !atomic_load(&t.done); i++)
        usleep(10000);
    CHECK_EQ(atomic_load(&t.done), 0);
    struct sw_lstate *st = a.state;
    int64_t life = sw_lstate_node(st)->totals[SW_EV_PASS];
    if (st->hot[SW_HOT_LIFE] > life)
        life = st->hot[SW_HOT_LIFE]; /* the count is the larger (struct sw_lstate) */
    CHECK_EQ(life, 3); /* untouched under the lock */
    sw_view_unlock(&v);
    attach_joined(&t, th, &a);
    struct sw_totals tot;
    sw_totals_read(&v, &tot);
    CHECK_EQ(tot.pass, 0); /* reinitialised after the user let go */
    CHECK_EQ(atomic_load(&st->lock.word), 0); /* and the lock free */
    sw_shm_close(&t.shm);
    sw_shm_close(&a);
    unlink(path);
}

/* A region from another boot whose state lock word names a live process that is not in it
 * (a pid of this boot that matches a token of the other, or a crafted word), and no slot of a
 * live process: the attach forces the word open after SW_LOCK_STUCK_NS and reinitialises.
 * Before: it waited for the word forever (the attach hung). */
static void reinit_forces_a_stale_lock_word(void)
{
    char path[128];
    tmp_path(path, sizeof path, "bootw");
    struct sw_shm_layout lay = lim_layout(1000, 2);
    struct sw_shm a;
    struct sw_rule rule;
    struct sw_view v;
    open_unheld_region(path, &lay, &a, &rule, &v);
    fake_boot_id(&a);
    struct sw_lstate *st = a.state;
    atomic_store(&st->lock.word, sw_proc_token()); /* live (this process), not holding it */
    struct attacher t = {path, &lay, {0}, -1, 0};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, attach_thread, &t), 0);
    for (int i = 0; i < 3000 && !atomic_load(&t.done); i++) /* 30 s: a hang */
        usleep(10000);
    CHECK_EQ(atomic_load(&t.done), 1);
    if (!atomic_load(&t.done))
        return; /* hung: the thread is left behind */
    attach_joined(&t, th, &a);
    CHECK_EQ(atomic_load(&st->lock.word), 0); /* reinitialised, the lock free */
    sw_shm_close(&t.shm);
    sw_shm_close(&a);
    unlink(path);
}

/* A region in use by a live process of this boot (it holds a process slot) whose header
 * names another boot: the boot id is what is wrong; the state is kept (before: wiped, the
 * live process's 3 in flight lost: 3 more admitted than the limit). */
static void reinit_keeps_a_live_region(void)
{
    char path[128];
    tmp_path(path, sizeof path, "boot2");
    struct sw_shm_layout lay = lim_layout(1000, 2);
    struct sw_shm a, b;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&a, path, &lay, &err), SW_OK);
    struct sw_rule rule;
    rule_of(&rule, SW_GRADE_CONCURRENCY, 5);
    struct sw_view va, vb;
    view_of(&a, &rule, &va);
    struct sw_decision d;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sw_decide(&va, 1, MS(100), SW_F_TRY, &d), SW_OK);
    fake_boot_id(&a);
    CHECK_EQ(sw_shm_open(&b, path, &lay, &err), SW_OK);
    CHECK(strcmp(a.hdr->boot_id, "00000000-0000-0000-0000-000000000000") != 0);
    view_of(&b, &rule, &vb);
    sw_lstate_check_repair(&vb);
    CHECK_EQ(sw_in_flight(&vb), 3);
    int passed = 0;
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(sw_decide(&vb, 1, MS(100), SW_F_TRY, &d), SW_OK);
        passed += d.verdict == SW_PASS;
    }
    CHECK_EQ(passed, 2);
    sw_shm_close(&a);
    sw_shm_close(&b);
    unlink(path);
}

void test_shm_review(void);
void test_shm_review(void)
{
    crafted_head_near_max();
    crafted_negative_in_flight();
    reinit_takes_the_state_lock();
    reinit_forces_a_stale_lock_word();
    reinit_keeps_a_live_region();
    observer_torn_copy();
    crafted_negative_count();
    kill_while_settling();
    crash_in_refresh(2);
    crash_in_refresh(1);
    takeover_through_window();
    reap_keeps_the_sum();
    release_for_another_then_acquire();
    give_back_after_a_release_for_it();
    crafted_deque();
}
