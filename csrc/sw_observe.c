/* sw_observe.c - reading a shared region as an observer (see sw_observe.h). */
#include "sw_observe.h"

#include "sw_keyed_impl.h"
#include "sw_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a Metric's state ------------------------------------------------------------------ */

size_t sw_metric_mem_size(const struct sw_leap_cfg *cfg, bool eventual)
{
    if (sw_leap_check(cfg) != SW_OK)
        return 0;
    size_t ring = eventual ? sw_evleap_size(cfg) : sw_leap_size(cfg);
    return ring == 0 ? 0 : sizeof(struct sw_metric_mem) + ring;
}

int sw_metric_mem_check(const struct sw_metric_mem *mem, const struct sw_leap_cfg *cfg,
                        bool eventual)
{
    if (eventual)
        return sw_evleap_layout_ok((const struct sw_evleap *)(const void *)mem->leap, cfg)
                   ? SW_OK
                   : SW_EINVAL;
    const struct sw_leap *l = (const struct sw_leap *)(const void *)mem->leap;
    if (l->interval_ms != cfg->interval_ms || l->sample_count != cfg->sample_count ||
        l->n_events != cfg->n_events || l->has_rt != (uint32_t)cfg->has_rt ||
        l->window_ms != cfg->interval_ms / (int64_t)cfg->sample_count ||
        l->stride != SW_SLOT_COUNTS + cfg->n_events || !sw_leap_indices_ok(l))
        return SW_EINVAL;
    return SW_OK;
}

struct sw_leap_cfg sw_region_metric_cfg(const struct sw_shm_header *h)
{
    struct sw_leap_cfg cfg = {h->interval_ms, h->sample_count,
                              h->n_events ? h->n_events : SW_EV_DEFAULT_COUNT, h->n_events == 0};
    return cfg;
}

/* ---- reading a region ------------------------------------------------------------------ */

static int fail(struct sw_shm_error *err, int code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct sw_shm_error *err, int code, int sys_errno, const char *fmt, ...)
{
    err->sys_errno = sys_errno;
    err->field = NULL;
    err->msg[0] = '\0';
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* A region that is not good: SW_EINVAL, the message "path: what". */
static int damaged(struct sw_shm_error *err, const char *path, const char *what)
{
    return fail(err, SW_EINVAL, 0, "%.400s: %s", path, what);
}

/* Read exactly len bytes at off (a file that shrinks under us gives a short read, never a
 * SIGBUS as a mapping would). @return 0, or -1 on a short read or an error */
static int pread_all(int fd, void *buf, size_t len, off_t off)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t got = pread(fd, p, len, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        len -= (size_t)got;
        off += got;
    }
    return 0;
}

static int pread_cb(void *ctx, size_t off, size_t len, void *dst)
{
    return pread_all(*(const int *)ctx, dst, len, (off_t)off);
}

/* Open path read-only and check that it is a region of this user by its header (read into h).
 * @return SW_OK with *fd open, or an error (nothing open) */
static int open_region(const char *path, int *fd, struct stat *sb, struct sw_shm_header *h,
                       struct sw_shm_error *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
    if (*fd < 0)
        return errno == ELOOP ? damaged(err, path, "a symbolic link, not a slidewin region")
                              : fail(err, SW_EOS, errno, NULL);
    int rc;
    if (fstat(*fd, sb) != 0) {
        rc = fail(err, SW_EOS, errno, NULL);
    } else if (!S_ISREG(sb->st_mode)) {
        rc = damaged(err, path, "not a regular file, not a slidewin region");
    } else if (sb->st_uid != geteuid()) {
        /* only this user's regions (the opened file's owner, not the path's: no race):
         * another user's file in a shared folder such as /dev/shm is not ours to report */
        rc = fail(err, SW_EOS, EACCES,
                  "%.400s belongs to uid %lu, not to this process's uid %lu: observers read "
                  "only the regions of their own user", path, (unsigned long)sb->st_uid,
                  (unsigned long)geteuid());
    } else if ((uint64_t)sb->st_size < sizeof *h || sb->st_size > (off_t)1 << 42) {
        rc = damaged(err, path, "not a slidewin shared region (its size)");
    } else if (pread_all(*fd, h, sizeof *h, 0) != 0) {
        rc = damaged(err, path, "truncated while being read");
    } else {
        rc = sw_shm_check_header(h, (size_t)sb->st_size, path, err);
    }
    if (rc != SW_OK) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

int sw_region_probe(const char *path, uint64_t *dev, uint64_t *ino, struct sw_shm_error *err)
{
    int fd;
    struct stat sb;
    struct sw_shm_header h;
    int rc = open_region(path, &fd, &sb, &h, err);
    if (rc != SW_OK)
        return rc;
    close(fd);
    *dev = (uint64_t)sb.st_dev;
    *ino = (uint64_t)sb.st_ino;
    return SW_OK;
}

int sw_region_unlink(const char *path, struct sw_shm_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0 && errno == ELOOP)
        return fail(err, SW_EINVAL, 0, "unlink(): %.400s is a symbolic link, not a slidewin "
                    "region: not removed", path);
    if (fd < 0)
        return fail(err, SW_EOS, errno, NULL);
    struct stat sb, now;
    char magic[8];
    const char *why = NULL;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fail(err, SW_EOS, e, NULL);
    }
    if (!S_ISREG(sb.st_mode))
        why = "not a regular file";
    else if ((uint64_t)sb.st_size < sizeof(struct sw_shm_header) ||
             pread_all(fd, magic, sizeof magic, 0) != 0 ||
             memcmp(magic, "SLIDEWIN", sizeof magic) != 0)
        why = "no region header";
    close(fd);
    if (why != NULL)
        return fail(err, SW_EINVAL, 0, "unlink(): %.400s is not a slidewin region (%s): not "
                    "removed", path, why);
    if (sb.st_uid != geteuid())
        return fail(err, SW_EOS, EACCES, "unlink(): shared region %.380s belongs to uid %lu, "
                    "not to this process's uid %lu: not removed", path,
                    (unsigned long)sb.st_uid, (unsigned long)geteuid());
    if (lstat(path, &now) != 0)
        return fail(err, SW_EOS, errno, NULL);
    if (now.st_dev != sb.st_dev || now.st_ino != sb.st_ino)
        return fail(err, SW_EINVAL, 0, "unlink(): %.400s was replaced while being checked: not "
                    "removed", path);
    return unlink(path) == 0 ? SW_OK : fail(err, SW_EOS, errno, NULL);
}

/* Where the statistics of a region of this header lie and how many bytes they take (not a
 * keyed table: read_keyed). @return SW_OK or SW_EINVAL */
static int stats_extent(const char *path, const struct sw_shm_header *h, off_t *off,
                        size_t *len, struct sw_shm_error *err)
{
    *off = (off_t)h->off_state;
    *len = (size_t)h->state_size;
    bool plain = h->max_keys == 0 && h->n_events == 0;
    if (h->kind == SW_KIND_LIMITER) {
        size_t need = sw_lstate_size(h->interval_ms, h->sample_count);
        if (need == 0 || need != h->state_size || !plain)
            return damaged(err, path, "a damaged limiter region (its layout)");
    } else if (h->kind == SW_KIND_BREAKER) {
        size_t need = sw_bstate_size(h->interval_ms, h->sample_count);
        if (need == 0 || need != h->state_size || !plain)
            return damaged(err, path, "a damaged Breaker region (its layout)");
    } else {
        struct sw_leap_cfg cfg = sw_region_metric_cfg(h);
        size_t need = sw_metric_mem_size(&cfg, h->consistency == SW_CONSISTENCY_EVENTUAL);
        if (need == 0 || need != h->state_size)
            return damaged(err, path, "a damaged Metric region (its layout)");
    }
    return SW_OK;
}

/* Read a limiter's or a keyed table's node from its copy. @return SW_OK or SW_EINVAL */
static int read_node(struct sw_region_read *r, void *copy, size_t len, bool hot_ok,
                     struct sw_proc_slot *slots, const char *path, struct sw_shm_error *err)
{
    const struct sw_shm_header *h = &r->hdr;
    struct sw_node *node;
    if (h->kind == SW_KIND_LIMITER) {
        struct sw_lstate *st = copy;
        if (sw_lstate_validate(st, len, h->interval_ms, h->sample_count) != SW_OK)
            return damaged(err, path, "a damaged limiter region (its state)");
        node = sw_lstate_node(st);
        sw_node_repair(node);
        /* the counts on the lock's line into the node, the leases' unused permits out */
        sw_lstate_settle_copy(st, hot_ok, slots, h->n_slots);
    } else {
        node = copy;
        if (sw_keyed_node_validate(node, h->interval_ms, h->sample_count) != SW_OK)
            return damaged(err, path, "a damaged KeyedLimiter region (its statistics)");
    }
    sw_node_repair(node);
    sw_node_stats(node, r->now_ns, &r->stats);
    sw_node_totals(node, &r->totals);
    /* an AdaptiveLimiter's learned limit (sw_adapt.h), once one has decided on the region;
     * input like the rest: a value outside [1, SW_ADAPT_MAX_LIMIT] is left out */
    if (h->kind == SW_KIND_LIMITER && (node->adapt.flags & SW_ADAPT_PHASE) != SW_ADAPT_FRESH) {
        float l = node->adapt.limit;
        if (l >= 1.0f && l <= (float)SW_ADAPT_MAX_LIMIT)
            r->adaptive_limit = (int64_t)l;
    }
    return SW_OK;
}

/* Read a Breaker's state from its copy. @return SW_OK or SW_EINVAL */
static int read_breaker(struct sw_region_read *r, void *copy, size_t len, const char *path,
                        struct sw_shm_error *err)
{
    struct sw_bstate *st = copy;
    if (sw_bstate_validate(st, len, r->hdr.interval_ms, r->hdr.sample_count) != SW_OK)
        return damaged(err, path, "a damaged Breaker region (its state)");
    struct sw_leap *l = sw_bstate_leap(st);
    sw_leap_repair(l); /* a copy taken without the lock: make its derived words agree */
    int64_t t = sw_leap_clamp(l, sw_ms_of_ns(r->now_ns));
    for (uint32_t e = 0; e < SW_BRK_N_EVENTS; e++)
        r->brk_window[e] = sw_leap_sum_at(l, NULL, e, t);
    memcpy(r->brk_totals.t, st->totals, sizeof r->brk_totals.t);
    memcpy(r->brk_totals.transitions, st->transitions, sizeof r->brk_totals.transitions);
    r->brk_state = atomic_load_explicit(&st->word, memory_order_relaxed) & 3u;
    if (r->brk_state > SW_BRK_HALF_OPEN)
        return damaged(err, path, "a damaged Breaker region (its state)");
    return SW_OK;
}

/* Read a Metric's ring from its copy. @return SW_OK or SW_EINVAL */
static int read_metric(struct sw_region_read *r, void *copy, const char *path,
                       struct sw_shm_error *err)
{
    struct sw_metric_mem *mem = copy;
    struct sw_leap_cfg cfg = sw_region_metric_cfg(&r->hdr);
    bool eventual = r->hdr.consistency == SW_CONSISTENCY_EVENTUAL;
    if (sw_metric_mem_check(mem, &cfg, eventual) != SW_OK)
        return damaged(err, path, "a damaged Metric region (its window)");
    struct sw_leap *l = (struct sw_leap *)(void *)mem->leap;
    struct sw_evleap *evl = (struct sw_evleap *)(void *)mem->leap;
    int64_t t = 0;
    if (!eventual) {
        sw_leap_repair(l);
        t = sw_leap_clamp(l, sw_ms_of_ns(r->now_ns));
    }
    r->n_events = cfg.n_events;
    for (uint32_t e = 0; e < cfg.n_events; e++) {
        r->sums[e] = 0;
        if (eventual)
            (void)sw_evleap_read(evl, SW_READ_SUM, e, r->now_ns, &r->sums[e]);
        else
            r->sums[e] = sw_leap_sum(l, NULL, e, t);
    }
    if (cfg.has_rt) {
        r->min_rt = SW_MIN_RT_INIT;
        if (eventual)
            (void)sw_evleap_rt(evl, r->now_ns, &r->min_rt, NULL, NULL);
        else
            r->min_rt = sw_leap_min_rt(l, NULL, t);
    }
    return SW_OK;
}

/* A keyed table's statistics (a shared table: one stripe or several, each its own header
 * and node, read where it lies, never the whole table): the stripes' sums. @return SW_OK or
 * an error */
static int read_keyed(int fd, const char *path, struct sw_region_read *r,
                      struct sw_shm_error *err)
{
    const struct sw_shm_header *h = &r->hdr;
    struct klayout k;
    if (!sw_kt_layout(h->interval_ms, h->sample_count, h->max_keys, true, &k) ||
        k.total != h->state_size)
        return damaged(err, path, "a damaged KeyedLimiter region (its layout)");
    size_t nsz = sw_keyed_node_size(h->interval_ms, h->sample_count);
    if (nsz == 0 || k.off_node > k.size || nsz > k.size - k.off_node)
        return damaged(err, path, "a damaged KeyedLimiter region (its node)");
    void *copy = aligned_alloc(64, (nsz + 63u) & ~(size_t)63u);
    if (copy == NULL)
        return fail(err, SW_ENOMEM, 0, "%.400s: out of memory", path);
    int rc = SW_OK;
    uint64_t seed = 0;
    int64_t keys = 0, evicted = 0;
    for (uint32_t i = 0; i < k.n_stripes && rc == SW_OK; i++) {
        off_t at = (off_t)h->off_state + (off_t)((uint64_t)i * k.stride);
        struct sw_kstate kh, again;
        /* the header's counts on the lock's line (hot[]) with the node they go with: read
         * again while a decision moves them in between (a few tries) */
        for (int tries = 0; tries < 8 && rc == SW_OK; tries++) {
            if (pread_all(fd, &kh, sizeof kh, at) != 0 ||
                pread_all(fd, copy, nsz, at + (off_t)k.off_node) != 0 ||
                pread_all(fd, &again, sizeof again, at) != 0)
                rc = damaged(err, path, "truncated while being read");
            else if (memcmp(kh.hot, again.hot, sizeof kh.hot) == 0)
                break;
        }
        if (rc != SW_OK)
            break;
        if (i == 0)
            seed = kh.seed;
        if (sw_kt_validate_stripe(&kh, i, &k, h->interval_ms, h->sample_count, h->max_keys,
                                  seed) != SW_OK) {
            rc = damaged(err, path, "a damaged KeyedLimiter region (its table)");
            break;
        }
        struct sw_node *node = copy;
        if (sw_keyed_node_validate(node, h->interval_ms, h->sample_count) != SW_OK) {
            rc = damaged(err, path, "a damaged KeyedLimiter region (its statistics)");
            break;
        }
        sw_node_repair(node);
        sw_keyed_settle_copy(&kh, node);
        struct sw_stats s;
        struct sw_totals t;
        sw_node_stats(node, r->now_ns, &s);
        sw_node_totals(node, &t);
        keys += kh.n_live;
        evicted = sw_sat_add(evicted, kh.evicted < 0 ? 0 : kh.evicted);
        if (i == 0) {
            r->stats = s;
            r->totals = t;
            continue;
        }
        /* (a stripe without data reads SW_MIN_RT_INIT, the most a bucket's minimum is) */
        if (s.min_rt < r->stats.min_rt)
            r->stats.min_rt = s.min_rt;
        r->stats.pass = sw_sat_add(r->stats.pass, s.pass);
        r->stats.block = sw_sat_add(r->stats.block, s.block);
        r->stats.success = sw_sat_add(r->stats.success, s.success);
        r->stats.exception = sw_sat_add(r->stats.exception, s.exception);
        r->stats.rt_sum = sw_sat_add(r->stats.rt_sum, s.rt_sum);
        r->stats.in_flight = sw_sat_add(r->stats.in_flight, s.in_flight);
        r->stats.waiting = sw_sat_add(r->stats.waiting, s.waiting);
        r->stats.occupied_pass = sw_sat_add(r->stats.occupied_pass, s.occupied_pass);
        r->totals.pass = sw_sat_add(r->totals.pass, t.pass);
        r->totals.block = sw_sat_add(r->totals.block, t.block);
        r->totals.exception = sw_sat_add(r->totals.exception, t.exception);
        r->totals.success = sw_sat_add(r->totals.success, t.success);
        r->totals.occupied_pass = sw_sat_add(r->totals.occupied_pass, t.occupied_pass);
        r->totals.rt = sw_sat_add(r->totals.rt, t.rt);
        r->totals.shadow_block = sw_sat_add(r->totals.shadow_block, t.shadow_block);
    }
    free(copy);
    if (rc == SW_OK) {
        r->keys = keys;
        r->evicted = evicted;
    }
    return rc;
}

int sw_region_read(const char *path, int64_t now_ns, struct sw_region_read *r,
                   struct sw_shm_error *err)
{
    int fd;
    struct stat sb;
    memset(r, 0, sizeof *r);
    r->adaptive_limit = r->keys = r->evicted = r->min_rt = -1;
    r->now_ns = now_ns == SW_NOW ? sw_time_coarse_ns() : now_ns;
    int rc = open_region(path, &fd, &sb, &r->hdr, err);
    if (rc != SW_OK)
        return rc;
    /* everything below reads copies: the file may change under us */
    const struct sw_shm_header *h = &r->hdr;
    r->waiters = atomic_load_explicit(&r->hdr.waiters, memory_order_relaxed);
    if (h->kind == SW_KIND_KEYED) {
        rc = read_keyed(fd, path, r, err);
        close(fd);
        return rc;
    }
    off_t off;
    size_t len;
    void *copy = NULL;
    struct sw_proc_slot *slots = NULL; /* a limiter's, copied with its state */
    bool hot_ok = true;
    rc = stats_extent(path, h, &off, &len, err);
    if (rc == SW_OK && ((copy = aligned_alloc(64, (len + 63u) & ~(size_t)63u)) == NULL ||
                        (h->kind == SW_KIND_LIMITER && h->n_slots > 0 &&
                         (slots = calloc(h->n_slots, sizeof *slots)) == NULL)))
        rc = fail(err, SW_ENOMEM, 0, "%.400s: out of memory", path);
    if (rc == SW_OK) {
        struct sw_lstate_src src = {pread_cb, &fd, (size_t)off, (size_t)h->off_slots,
                                    h->n_slots};
        /* a limiter's state and its leases: copied while no other process moves a head bucket
         * or grants a lease */
        int got = h->kind == SW_KIND_LIMITER
                      ? sw_lstate_copy(copy, len, &src, slots, 16u, &hot_ok)
                      : pread_all(fd, copy, len, off);
        if (got != 0)
            rc = damaged(err, path, "truncated while being read");
    }
    close(fd);
    if (rc == SW_OK) {
        if (h->kind == SW_KIND_BREAKER)
            rc = read_breaker(r, copy, len, path, err);
        else if (h->kind == SW_KIND_METRIC)
            rc = read_metric(r, copy, path, err);
        else
            rc = read_node(r, copy, len, hot_ok, slots, path, err);
    }
    free(slots);
    free(copy);
    return rc;
}

/* A region file found by sw_region_list: its identity and one of its names. */
struct seen {
    uint64_t dev, ino;
    char *path;
};

/* By file, then name: the names of one file next to each other, the first one first. */
static int seen_cmp(const void *pa, const void *pb)
{
    const struct seen *a = pa, *b = pb;
    if (a->dev != b->dev)
        return a->dev < b->dev ? -1 : 1;
    if (a->ino != b->ino)
        return a->ino < b->ino ? -1 : 1;
    return strcmp(a->path, b->path);
}

void sw_region_list_free(char **paths, size_t n)
{
    for (size_t k = 0; paths != NULL && k < n; k++)
        free(paths[k]);
    free(paths);
}

/* The regions of an open folder, each name of each file. @return SW_OK or SW_ENOMEM */
static int list_seen(DIR *dp, const char *dir, struct seen **seen, size_t *n)
{
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        if (strncmp(de->d_name, "slidewin-", 9) != 0 || de->d_name[9] == '\0')
            continue;
        char path[4096 + 256];
        struct sw_shm_error err;
        uint64_t dev, ino;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (sw_region_probe(path, &dev, &ino, &err) != SW_OK)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            struct seen *ns = realloc(*seen, cap * sizeof **seen);
            if (ns == NULL)
                return SW_ENOMEM;
            *seen = ns;
        }
        struct seen *s = &(*seen)[*n];
        s->dev = dev;
        s->ino = ino;
        if ((s->path = strdup(path)) == NULL)
            return SW_ENOMEM;
        (*n)++;
    }
    return SW_OK;
}

int sw_region_list(const char *dir, char ***paths, size_t *n, struct sw_shm_error *err)
{
    struct seen *seen = NULL;
    size_t n_seen = 0;
    *paths = NULL;
    *n = 0;
    DIR *dp = opendir(dir);
    if (dp == NULL)
        return fail(err, SW_EOS, errno, NULL);
    int rc = list_seen(dp, dir, &seen, &n_seen);
    closedir(dp);
    if (rc == SW_OK && n_seen > 0) {
        qsort(seen, n_seen, sizeof *seen, seen_cmp);
        if ((*paths = malloc(n_seen * sizeof **paths)) == NULL)
            rc = SW_ENOMEM;
    }
    for (size_t k = 0; k < n_seen; k++) {
        bool again = k > 0 && seen[k].dev == seen[k - 1].dev && seen[k].ino == seen[k - 1].ino;
        if (rc == SW_OK && !again) /* else another name of the same file */
            (*paths)[(*n)++] = seen[k].path;
        else
            free(seen[k].path);
    }
    free(seen);
    if (rc != SW_OK) {
        sw_region_list_free(*paths, *n);
        *paths = NULL;
        *n = 0;
        return fail(err, rc, 0, NULL);
    }
    return SW_OK;
}

const char *sw_region_event_name(const struct sw_region_read *r, uint32_t e, size_t *len)
{
    size_t end = r->hdr.events_len < sizeof r->hdr.events ? r->hdr.events_len
                                                          : sizeof r->hdr.events;
    size_t off = 0;
    for (uint32_t i = 0;; i++) {
        size_t n = off < end ? strnlen(r->hdr.events + off, end - off) : 0;
        if (i == e || off >= end) {
            *len = i == e ? n : 0;
            return r->hdr.events + (off < end ? off : end);
        }
        off += n + 1;
    }
}
