/* test_shm.c - shared regions: create, attach, layout checks, bad files, a creation race,
 * process tokens, a region of another PID namespace, giving back per object; and the warm-up
 * payback of an oversize request. The crash tests are in test_shm_crash.c, the crafted and
 * reinitialised regions in test_shm_crafted.c. */

#include "shm_lim_util.h"
#include "sw_time.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

void test_shm(void)
{
    test_tokens();
    test_create_attach();
    test_bad_files();
    test_creation_race();
    test_warmup_payback();
    foreign_namespace_taken_over();
    give_back_per_object();
    test_shm_crash();
    test_shm_crafted();
}
