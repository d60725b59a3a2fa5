/* test_region_read.c - an observer's read of a region file (sw_observe.h): a limiter's and a
 * Metric's statistics as the writer left them, one file under two names, and a damaged,
 * truncated or foreign file refused with a message, never a crash. */
#include "harness.h"
#include "lim_region.h"
#include "limiter_util.h"

#include "sw_observe.h"
#include "sw_proc.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int mem_init(void *state, const struct sw_shm_layout *lay)
{
    struct sw_metric_mem *mem = state;
    sw_lock_init(&mem->lock);
    return sw_leap_init((struct sw_leap *)(void *)mem->leap, lay->arg);
}

static int mem_check(void *state, const struct sw_shm_layout *lay)
{
    return sw_metric_mem_check(state, lay->arg, false);
}

static void path_of(char *out, size_t cap, const char *tag)
{
    snprintf(out, cap, "/tmp/sw-read-%ld-%s", (long)getpid(), tag);
    unlink(out);
}

/* A limiter region at path, named "api", with 3 decisions of a 2-QPS rule at 100 ms taken
 * (2 passed, 1 blocked). The caller closes shm. */
static void limiter_region(struct sw_shm *shm, const char *path)
{
    struct sw_shm_layout lay = {.kind = SW_KIND_LIMITER, .interval_ms = 1000, .sample_count = 2,
                                .n_slots = SW_SHM_MAX_PROCS, .name = "api",
                                .state_size = sw_lstate_size(1000, 2),
                                .init_state = lim_init_state, .check_state = lim_check_state,
                                .state_lock = lim_state_lock};
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(shm, path, &lay, &err), SW_OK);
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 2);
    struct sw_rule rule;
    CHECK_EQ(sw_rule_init(&rule, &cfg), SW_OK);
    struct sw_view v = {.st = shm->state, .rule = &rule, .token = sw_proc_token(),
                        .slots = shm->slots, .n_slots = shm->n_slots};
    v.my_slot = sw_shm_claim_slot(shm, v.token);
    struct sw_decision d;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sw_decide(&v, 1, MS(100), 0, &d), SW_OK);
}

static void test_read_limiter(void)
{
    char path[128], link2[128];
    path_of(path, sizeof path, "lim");
    path_of(link2, sizeof link2, "lim2");
    struct sw_shm shm;
    limiter_region(&shm, path);
    struct sw_region_read r;
    struct sw_shm_error err;
    CHECK_EQ(sw_region_read(path, MS(200), &r, &err), SW_OK);
    CHECK_EQ(r.hdr.kind, SW_KIND_LIMITER);
    CHECK(strcmp(r.hdr.name, "api") == 0);
    CHECK_EQ(r.now_ns, MS(200));
    CHECK_EQ(r.stats.pass, 2);
    CHECK_EQ(r.stats.block, 1);
    CHECK_EQ(r.totals.pass, 2);
    CHECK_EQ(r.totals.block, 1);
    CHECK_EQ(r.adaptive_limit, -1);
    CHECK_EQ(r.keys, -1);
    /* the window forgets, the totals stay */
    CHECK_EQ(sw_region_read(path, MS(5000), &r, &err), SW_OK);
    CHECK_EQ(r.stats.pass + r.stats.block, 0);
    CHECK_EQ(r.totals.pass, 2);
    /* one file under two names: one identity */
    uint64_t dev1, ino1, dev2, ino2;
    CHECK_EQ(link(path, link2), 0);
    CHECK_EQ(sw_region_probe(path, &dev1, &ino1, &err), SW_OK);
    CHECK_EQ(sw_region_probe(link2, &dev2, &ino2, &err), SW_OK);
    CHECK(dev1 == dev2 && ino1 == ino2);
    sw_shm_close(&shm);
    unlink(path);
    unlink(link2);
}

static void test_read_metric(void)
{
    char path[128];
    path_of(path, sizeof path, "met");
    struct sw_leap_cfg cfg = {1000, 4, 2, false};
    const char events[] = "hits\0misses";
    struct sw_shm_layout lay = {.kind = SW_KIND_METRIC, .interval_ms = 1000, .sample_count = 4,
                                .n_events = 2, .events = events,
                                .events_len = (uint32_t)sizeof events,
                                .state_size = sw_metric_mem_size(&cfg, false),
                                .init_state = mem_init, .check_state = mem_check, .arg = &cfg};
    struct sw_shm shm;
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&shm, path, &lay, &err), SW_OK);
    struct sw_leap *l = (struct sw_leap *)(void *)((struct sw_metric_mem *)shm.state)->leap;
    sw_leap_add(l, NULL, 0, 5, 100);
    sw_leap_add(l, NULL, 1, 2, 300);
    struct sw_region_read r;
    CHECK_EQ(sw_region_read(path, MS(400), &r, &err), SW_OK);
    CHECK_EQ(r.n_events, 2);
    CHECK_EQ(r.sums[0], 5);
    CHECK_EQ(r.sums[1], 2);
    CHECK_EQ(r.min_rt, -1); /* its own events: no RT */
    size_t len;
    const char *nm = sw_region_event_name(&r, 1, &len);
    CHECK(len == 6 && memcmp(nm, "misses", 6) == 0);
    nm = sw_region_event_name(&r, 7, &len); /* past the names: empty */
    CHECK_EQ(len, 0);
    /* a damaged ring in the file: refused, named */
    l->stride = 1000;
    CHECK_EQ(sw_region_read(path, MS(400), &r, &err), SW_EINVAL);
    CHECK(strstr(err.msg, "damaged Metric region") != NULL);
    sw_shm_close(&shm);
    unlink(path);
}

/* What is not a region: refused with a message (ValueError in Python) or an errno. */
static void test_read_not_a_region(void)
{
    char path[128], sym[128];
    struct sw_region_read r;
    struct sw_shm_error err;
    path_of(path, sizeof path, "none");
    CHECK_EQ(sw_region_read(path, 0, &r, &err), SW_EOS);
    CHECK_EQ(err.sys_errno, ENOENT);
    CHECK_EQ(sw_region_read("/tmp", 0, &r, &err), SW_EINVAL);
    CHECK(strstr(err.msg, "not a regular file") != NULL);
    int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, "SLIDEWIN", 8), 8);
    close(fd);
    CHECK_EQ(sw_region_read(path, 0, &r, &err), SW_EINVAL);
    CHECK(strstr(err.msg, "not a slidewin shared region") != NULL);
    path_of(sym, sizeof sym, "sym");
    CHECK_EQ(symlink(path, sym), 0);
    CHECK_EQ(sw_region_read(sym, 0, &r, &err), SW_EINVAL);
    CHECK(strstr(err.msg, "symbolic link") != NULL);
    unlink(sym);
    unlink(path);
}

/* A region truncated, or with any byte of its header or state overwritten: read or refused,
 * never a crash (run under ASan/UBSan by `make asan`). */
static void test_read_damaged(void)
{
    char path[128];
    path_of(path, sizeof path, "dmg");
    struct sw_shm shm;
    limiter_region(&shm, path);
    size_t size = shm.size;
    sw_shm_close(&shm);
    unsigned char *good = malloc(size);
    int fd = open(path, O_RDWR);
    CHECK(good != NULL && fd >= 0);
    if (good == NULL || fd < 0)
        return;
    CHECK_EQ(pread(fd, good, size, 0), (ssize_t)size);
    struct sw_region_read r;
    struct sw_shm_error err;
    /* truncated inside the state: the size no longer matches the header */
    CHECK_EQ(ftruncate(fd, (off_t)size - 8), 0);
    CHECK_EQ(sw_region_read(path, MS(200), &r, &err), SW_EINVAL);
    CHECK(err.msg[0] != '\0');
    CHECK_EQ(ftruncate(fd, (off_t)size), 0);
    /* every byte of the header's fields (not its names), and a spread of the rest, set to a
     * few values */
    static const unsigned char vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    size_t step = size / 1024 + 1;
    int refused = 0, read_ok = 0;
    for (size_t off = 0; off < size; off += off < offsetof(struct sw_shm_header, events) ? 1 : step) {
        for (size_t k = 0; k < sizeof vals; k++) {
            if (vals[k] == good[off])
                continue;
            CHECK_EQ(pwrite(fd, &vals[k], 1, (off_t)off), 1);
            int rc = sw_region_read(path, MS(200), &r, &err);
            if (rc == SW_OK)
                read_ok++;
            else
                refused += rc == SW_EINVAL && err.msg[0] != '\0';
            CHECK(rc == SW_OK || rc == SW_EINVAL);
            CHECK_EQ(pwrite(fd, &good[off], 1, (off_t)off), 1);
        }
    }
    CHECK(refused > 0 && read_ok > 0);
    CHECK_EQ(sw_region_read(path, MS(200), &r, &err), SW_OK);
    CHECK_EQ(r.totals.pass, 2);
    close(fd);
    free(good);
    unlink(path);
}

/* A folder's regions: each file once (by its first name), what is not a region left out. */
static void test_list_regions(void)
{
    char dir[] = "/tmp/sw-list-XXXXXX", a[64], b[64], junk[64], other[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(a, sizeof a, "%s/slidewin-a", dir);
    snprintf(b, sizeof b, "%s/slidewin-b", dir);
    snprintf(junk, sizeof junk, "%s/slidewin-junk", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    struct sw_shm shm;
    limiter_region(&shm, a);
    sw_shm_close(&shm);
    CHECK_EQ(link(a, b), 0);
    CHECK_EQ(link(a, other), 0);
    int fd = open(junk, O_CREAT | O_WRONLY | O_EXCL, 0600);
    CHECK(fd >= 0);
    close(fd);
    char **paths;
    size_t n;
    struct sw_shm_error err;
    CHECK_EQ(sw_region_list(dir, &paths, &n, &err), SW_OK);
    CHECK_EQ(n, 1);
    CHECK(n == 1 && strcmp(paths[0], a) == 0);
    sw_region_list_free(paths, n);
    unlink(a);
    unlink(b);
    unlink(junk);
    unlink(other);
    CHECK_EQ(sw_region_list(dir, &paths, &n, &err), SW_OK);
    CHECK_EQ(n, 0);
    rmdir(dir);
    CHECK_EQ(sw_region_list(dir, &paths, &n, &err), SW_EOS);
    CHECK_EQ(err.sys_errno, ENOENT);
}

/* Only a region of this user is removed: never a symbolic link, a folder or a file without a
 * region's magic; nothing there is ENOENT. */
static void test_unlink(void)
{
    char path[128], sym[128];
    struct sw_shm_error err;
    path_of(path, sizeof path, "unlink");
    CHECK_EQ(sw_region_unlink(path, &err), SW_EOS);
    CHECK_EQ(err.sys_errno, ENOENT);
    CHECK_EQ(sw_region_unlink("/tmp", &err), SW_EINVAL);
    CHECK(strstr(err.msg, "not a regular file") != NULL);
    int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, "NOTAREGION", 10), 10);
    close(fd);
    CHECK_EQ(sw_region_unlink(path, &err), SW_EINVAL);
    CHECK(strstr(err.msg, "no region header") != NULL);
    CHECK_EQ(access(path, F_OK), 0); /* still there */
    unlink(path);
    struct sw_shm shm;
    limiter_region(&shm, path);
    sw_shm_close(&shm);
    path_of(sym, sizeof sym, "unlink-sym");
    CHECK_EQ(symlink(path, sym), 0);
    CHECK_EQ(sw_region_unlink(sym, &err), SW_EINVAL);
    CHECK(strstr(err.msg, "symbolic link") != NULL);
    CHECK_EQ(access(path, F_OK), 0);
    unlink(sym);
    CHECK_EQ(sw_region_unlink(path, &err), SW_OK);
    CHECK(access(path, F_OK) != 0);
}

void test_region_read(void)
{
    test_unlink();
    test_list_regions();
    test_read_limiter();
    test_read_metric();
    test_read_not_a_region();
    test_read_damaged();
}
