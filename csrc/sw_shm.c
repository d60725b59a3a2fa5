/* sw_shm.c - creating, attaching to and checking shared regions (see sw_shm.h). */
#include "sw_shm.h"

#include "sw_platform.h"
#include "sw_proc.h"
#include "sw_time.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ENDIAN_TAG 0x01020304u

static int fail(struct sw_shm_error *err, int code, int sys_errno, const char *field,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(struct sw_shm_error *err, int code, int sys_errno, const char *field,
                const char *fmt, ...)
{
    err->sys_errno = sys_errno;
    err->field = field;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

static size_t align64(size_t x)
{
    return (x + 63u) & ~(size_t)63u;
}

size_t sw_shm_size(const struct sw_shm_layout *lay)
{
    if (lay->n_slots > SW_SHM_MAX_PROCS || lay->events_len > SW_SHM_EVENTS_BYTES ||
        lay->state_size == 0 || lay->state_size > (UINT64_C(1) << 40))
        return 0;
    size_t off_slots = align64(sizeof(struct sw_shm_header));
    size_t off_state = align64(off_slots + (size_t)lay->n_slots * sizeof(struct sw_proc_slot));
    return align64(off_state + (size_t)lay->state_size);
}

static void read_boot_id(char out[40])
{
    memset(out, 0, 40);
    if (!sw_platform_has_proc())
        return; /* unknown */
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t got = read(fd, out, 39);
    close(fd);
    if (got <= 0) {
        memset(out, 0, 40);
        return;
    }
    out[got] = '\0';
    char *nl = strchr(out, '\n');
    if (nl != NULL)
        *nl = '\0';
}

/* The device and inode of one of this process's namespaces (0, 0 when unknown). */
static void ns_id(const char *which, uint64_t *dev, uint64_t *ino)
{
    struct stat sb;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/ns/%s", which);
    if (sw_platform_has_proc() && stat(path, &sb) == 0) {
        *dev = (uint64_t)sb.st_dev;
        *ino = (uint64_t)sb.st_ino;
    } else {
        *dev = 0;
        *ino = 0;
    }
}

static void fill(struct sw_shm *shm, void *base, size_t size)
{
    shm->base = base;
    shm->size = size;
    shm->hdr = base;
    shm->slots = (struct sw_proc_slot *)(void *)((char *)base + shm->hdr->off_slots);
    shm->n_slots = shm->hdr->n_slots;
    shm->state = (char *)base + shm->hdr->off_state;
}

/* Write a fresh header and state into zeroed memory of sw_shm_size(lay) bytes. */
static int init_region(void *base, size_t size, const struct sw_shm_layout *lay)
{
    struct sw_shm_header *h = base;
    memcpy(h->magic, "SLIDEWIN", 8);
    h->version = SW_SHM_LAYOUT_VERSION;
    h->header_size = (uint32_t)sizeof *h;
    h->total_size = size;
    h->endian = ENDIAN_TAG;
    h->kind = lay->kind;
    h->interval_ms = lay->interval_ms;
    h->sample_count = lay->sample_count;
    h->max_keys = lay->max_keys;
    h->n_events = lay->n_events;
    h->events_len = lay->events_len;
    if (lay->events_len)
        memcpy(h->events, lay->events, lay->events_len);
    memset(h->name, 0, sizeof h->name);
    if (lay->name != NULL) {
        size_t nl = strnlen(lay->name, sizeof h->name - 1);
        while (nl > 0 && ((unsigned char)lay->name[nl] & 0xc0u) == 0x80u)
            nl--; /* cut on a UTF-8 character boundary */
        memcpy(h->name, lay->name, nl);
    }
    h->n_slots = lay->n_slots;
    h->consistency = lay->consistency;
    h->creator_pid = (uint32_t)getpid();
    h->off_slots = align64(sizeof *h);
    h->off_state = align64(h->off_slots + (size_t)lay->n_slots * sizeof(struct sw_proc_slot));
    h->state_size = lay->state_size;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h->created_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    read_boot_id(h->boot_id);
    ns_id("pid", &h->pidns_dev, &h->pidns_ino);
    ns_id("time", &h->timens_dev, &h->timens_ino);
    sw_lock_init(&h->lock);
    atomic_init(&h->waiters, 0);
    atomic_init(&h->release_seq, 0);
    atomic_init(&h->next_reap_ms, 0);
    int rc = lay->init_state((char *)base + h->off_state, lay);
    if (rc != SW_OK)
        return rc;
    atomic_store_explicit(&h->ready, SW_SHM_READY, memory_order_release);
    return SW_OK;
}

static const char *kind_name(uint32_t kind)
{
    switch (kind) {
    case SW_KIND_METRIC: return "a Metric";
    case SW_KIND_LIMITER: return "a Limiter";
    case SW_KIND_KEYED: return "a KeyedLimiter";
    case SW_KIND_BREAKER: return "a Breaker";
    default: return "an unknown kind of object";
    }
}

/* Render NUL-separated names as "('a', 'b')" (or "the default events"). */
static void names_repr(const char *names, uint32_t len, uint32_t n, char *out, size_t cap)
{
    if (n == 0 || len == 0) {
        snprintf(out, cap, "the default events");
        return;
    }
    size_t used = 0;
    used += (size_t)snprintf(out + used, cap - used, "(");
    uint32_t i = 0;
    while (i < len && used + 8 < cap) {
        const char *s = names + i;
        size_t l = strnlen(s, len - i);
        used += (size_t)snprintf(out + used, cap - used, "%s'%.*s'", i ? ", " : "", (int)l, s);
        if (used >= cap)
            break;
        i += (uint32_t)l + 1;
    }
    if (used < cap)
        snprintf(out + used, cap - used, n == 1 ? ",)" : ")");
}

int sw_shm_check_header(const struct sw_shm_header *h, size_t size, const char *path,
                        struct sw_shm_error *err)
{
    const char *fix = "use another name, or remove it with slidewin.unlink() once no process "
                      "uses it";
    if (size < sizeof(struct sw_shm_header) || memcmp(h->magic, "SLIDEWIN", 8) != 0)
        return fail(err, SW_EINVAL, 0, "file",
                    "%s is not a slidewin shared region (%s); remove it or use another name",
                    path, size < sizeof(struct sw_shm_header) ? "too short" : "no magic");
    if (h->endian != ENDIAN_TAG)
        return fail(err, SW_EINVAL, 0, "file",
                    "%s was written on a machine of another byte order; %s", path, fix);
    if (h->version != SW_SHM_LAYOUT_VERSION || h->header_size != sizeof(struct sw_shm_header))
        return fail(err, SW_EINVAL, 0, "version",
                    "%s was written by an incompatible slidewin (region layout version %u, "
                    "this slidewin uses %u); %s", path, h->version, SW_SHM_LAYOUT_VERSION, fix);
    if (h->total_size != size)
        return fail(err, SW_EINVAL, 0, "file",
                    "%s is truncated or damaged (%zu bytes, its header says %llu); %s", path,
                    size, (unsigned long long)h->total_size, fix);
    if (atomic_load_explicit(&((struct sw_shm_header *)(uintptr_t)h)->ready,
                             memory_order_acquire) != SW_SHM_READY)
        return fail(err, SW_EINVAL, 0, "file", "%s is not an initialised slidewin region; %s",
                    path, fix);
    if (h->kind < SW_KIND_METRIC || h->kind > SW_KIND_BREAKER || h->n_slots > SW_SHM_MAX_PROCS ||
        h->events_len > SW_SHM_EVENTS_BYTES || h->state_size == 0 ||
        h->off_slots != align64(sizeof *h) ||
        h->off_state != align64(h->off_slots + (size_t)h->n_slots * sizeof(struct sw_proc_slot)) ||
        h->state_size > size || h->off_state > size - h->state_size)
        return fail(err, SW_EINVAL, 0, "file", "%s has a damaged header; %s", path, fix);
    return SW_OK;
}

/* Whether a region's header names another PID or time namespace than this process's: a
 * dead process's lock and counts are taken back by its pid and start time, which only mean
 * something inside one PID namespace; CLOCK_MONOTONIC may be offset in another time
 * namespace. Unknown ids (0) on either side compare equal. */
static bool foreign_ns(const struct sw_shm_header *h)
{
    uint64_t dev, ino;
    ns_id("pid", &dev, &ino);
    if (h->pidns_ino != 0 && ino != 0 && (h->pidns_ino != ino || h->pidns_dev != dev))
        return true;
    ns_id("time", &dev, &ino);
    return h->timens_ino != 0 && ino != 0 && (h->timens_ino != ino || h->timens_dev != dev);
}

static const char *consistency_name(uint32_t c)
{
    return c == SW_CONSISTENCY_STRONG ? "strong" : c == SW_CONSISTENCY_EVENTUAL ? "eventual"
                                                                               : "unknown";
}

/* Check an existing region against what this process asks for; *foreign is set when it was
 * made in another PID or time namespace (see adopt_or_refuse). */
static int check_region(void *base, size_t size, const char *path,
                        const struct sw_shm_layout *lay, struct sw_shm_error *err,
                        bool *foreign)
{
    const struct sw_shm_header *h = base;
    const char *fix = "use another name, or remove it with slidewin.unlink() once no process "
                      "uses it";
    int hrc = sw_shm_check_header(h, size, path, err);
    if (hrc != SW_OK)
        return hrc;
    if (h->kind != lay->kind)
        return fail(err, SW_EINVAL, 0, "kind", "shared region %s holds %s, not %s; %s", path,
                    kind_name(h->kind), kind_name(lay->kind), fix);
    if (h->interval_ms != lay->interval_ms)
        return fail(err, SW_EINVAL, 0, "interval_ms",
                    "shared region %s has interval_ms=%lld, this object asks for "
                    "interval_ms=%lld; %s", path, (long long)h->interval_ms,
                    (long long)lay->interval_ms, fix);
    if (h->sample_count != lay->sample_count)
        return fail(err, SW_EINVAL, 0, "sample_count",
                    "shared region %s has sample_count=%u, this object asks for "
                    "sample_count=%u; %s", path, h->sample_count, lay->sample_count, fix);
    if (h->max_keys != lay->max_keys)
        return fail(err, SW_EINVAL, 0, "max_keys",
                    "shared region %s has max_keys=%u, this object asks for max_keys=%u; %s",
                    path, h->max_keys, lay->max_keys, fix);
    if (h->n_events != lay->n_events || h->events_len != lay->events_len ||
        h->events_len > SW_SHM_EVENTS_BYTES ||
        (lay->events_len && memcmp(h->events, lay->events, lay->events_len) != 0)) {
        char have[256], want[256];
        names_repr(h->events, h->events_len > SW_SHM_EVENTS_BYTES ? 0 : h->events_len,
                   h->n_events, have, sizeof have);
        names_repr(lay->events, lay->events_len, lay->n_events, want, sizeof want);
        return fail(err, SW_EINVAL, 0, "events",
                    "shared region %s has events=%s, this object asks for events=%s; %s", path,
                    have, want, fix);
    }
    if (h->consistency != lay->consistency)
        return fail(err, SW_EINVAL, 0, "consistency",
                    "shared region %s has consistency='%s', this object asks for "
                    "consistency='%s'; %s", path, consistency_name(h->consistency),
                    consistency_name(lay->consistency), fix);
    if (h->n_slots != lay->n_slots || h->state_size != lay->state_size ||
        h->off_slots != align64(sizeof *h) ||
        h->off_state != align64(h->off_slots + (size_t)h->n_slots * sizeof(struct sw_proc_slot)) ||
        h->off_state + h->state_size > size)
        return fail(err, SW_EINVAL, 0, "file", "%s has a damaged header (offsets); %s", path,
                    fix);
    if (lay->check_state((char *)base + h->off_state, lay) != SW_OK)
        return fail(err, SW_EINVAL, 0, "file", "%s holds a damaged state; %s", path, fix);
    *foreign = foreign_ns(h);
    return SW_OK;
}

/* Whether a process of this boot holds one of the region's process slots. */
static bool slot_held_by_live_process(const void *base)
{
    const struct sw_shm_header *h = base;
    const struct sw_proc_slot *slots =
        (const struct sw_proc_slot *)(const void *)((const char *)base + h->off_slots);
    for (uint32_t i = 0; i < h->n_slots; i++) {
        uint64_t tok = atomic_load_explicit(&slots[i].token, memory_order_relaxed);
        if (tok != 0 && !sw_proc_token_dead(tok))
            return true;
    }
    return false;
}

/* Take one of a region's lock words while reinitialising it after a reboot. With a slot held by
 * a live process of this boot, as any lock. Else every token in it is from the other boot (a
 * pid of this boot that matches one is not the holder) or a reinitialiser of this boot's, which
 * holds it for microseconds: a word that names the same owner for SW_LOCK_STUCK_NS (or a dead
 * one) is forced open (never waited for for ever: a crafted word must not hang every
 * attach). The hook, when set, does the naps (without the GIL). */
static void lock_after_reboot(const void *base, sw_lock *l, uint64_t me)
{
    if (slot_held_by_live_process(base)) {
        (void)sw_lock_acquire_as(l, me);
        return;
    }
    uint64_t seen = 0u;
    int64_t since = 0;
    for (;;) {
        uint64_t w = atomic_load_explicit(&l->word, memory_order_relaxed);
        if (w == 0u) {
            if (atomic_compare_exchange_weak_explicit(&l->word, &w, me, memory_order_acquire,
                                                      memory_order_relaxed))
                return;
            continue;
        }
        int64_t now = sw_time_ns();
        if (w != seen) {
            seen = w;
            since = now;
        } else if (now - since > sw_lock_stuck_ns ||
                   sw_proc_token_dead(sw_lock_owner_of(w))) {
            if (atomic_compare_exchange_strong_explicit(&l->word, &w, me, memory_order_acquire,
                                                        memory_order_relaxed))
                return;
            continue;
        }
        struct sw_lock_wait wt = {l, sw_lock_owner_of(w), now - since, false, false, false,
                                  '?'};
        int (*hook)(const struct sw_lock_wait *) = sw_lock_wait_hook;
        if (hook != NULL) {
            (void)hook(&wt);
        } else {
            struct timespec nap = {0, 50000};
            nanosleep(&nap, NULL);
        }
    }
}

/* After a reboot the monotonic clock restarted: a region from before it is reinitialised.
 * Its users take the state's lock and nothing else: the new state is made aside, then copied
 * in under that lock (its lock word excepted), so no user ever sees a half-made state (a
 * state zeroed under live users would divide by a zeroed window). A slot held by a
 * live process of this boot means the header's boot id is what is wrong (damage): the state
 * is then kept, only the boot id is corrected. A new state that cannot be made (no memory;
 * SW_EOS: no random bytes for a table's seed) leaves the region and its boot id as they are
 * (the next attach tries again). @return SW_OK, SW_ENOMEM or init_state's error */
static int reinit_if_rebooted(void *base, const struct sw_shm_layout *lay)
{
    struct sw_shm_header *h = base;
    char now_id[40];
    read_boot_id(now_id);
    (void)atomic_load_explicit(&h->ready, memory_order_acquire); /* orders the reads below */
    /* unknown on either side (no /proc): never reinitialise under possible live users */
    if (now_id[0] == '\0' || h->boot_id[0] == '\0' ||
        strncmp(now_id, h->boot_id, sizeof now_id) == 0)
        return SW_OK;
    void *fresh = calloc(1, (size_t)h->state_size);
    if (fresh == NULL)
        return SW_ENOMEM;
    int rc = lay->init_state(fresh, lay);
    char *state = (char *)base + h->off_state;
    uint64_t me = sw_proc_token();
    lock_after_reboot(base, &h->lock, me); /* one reinitialiser at a time */
    if (rc == SW_OK && strncmp(now_id, h->boot_id, sizeof now_id) != 0) {
        sw_lock *sl = lay->state_lock != NULL ? lay->state_lock(state) : NULL;
        if (sl != NULL)
            lock_after_reboot(base, sl, me);
        if (!slot_held_by_live_process(base)) {
            size_t lo = sl != NULL ? (size_t)((char *)sl - state) : (size_t)h->state_size;
            size_t hi = sl != NULL ? lo + sizeof *sl : (size_t)h->state_size;
            memset((char *)base + h->off_slots, 0, (size_t)(h->off_state - h->off_slots));
            memcpy(state, fresh, lo); /* the lock word stays ours until released */
            memcpy(state + hi, (char *)fresh + hi, (size_t)h->state_size - hi);
            atomic_store(&h->next_reap_ms, 0);
        }
        memcpy(h->boot_id, now_id, sizeof now_id);
        if (sl != NULL)
            sw_lock_release(sl);
    }
    sw_lock_release(&h->lock);
    free(fresh);
    return rc;
}

/* Who maps a region: every process mapping it holds a shared OFD lock on its byte USERS_BYTE,
 * taken on the descriptor it mapped and kept by the mapping after the descriptor is closed
 * (an OFD lock goes with the open file description, which the mapping references: the kernel
 * drops it when the last mapping goes, a fork() child's included, or the process dies).
 * Byte JUDGE_BYTE orders attaching (shared, while the header is checked) against adopting
 * (exclusive): an attach never sees a half-adopted region, and two adopters never race. */
#define USERS_BYTE 0
#define JUDGE_BYTE 1
#define JUDGE_WAIT_NS INT64_C(5000000000) /* an adopter takes milliseconds */

/* F_OFD_SETLK of one byte (F_RDLCK, F_WRLCK, F_UNLCK). @return 0 or an errno (EAGAIN: held
 * by another open file description; ENOSYS: no OFD locks here) */
static int ofd_lock(int fd, int byte, short type)
{
    return sw_platform_lock_byte(fd, byte, type);
}

/* ofd_lock, waiting up to JUDGE_WAIT_NS while another holds it. @return 0 or an errno */
static int ofd_lock_wait(int fd, int byte, short type)
{
    for (int64_t slept = 0;; slept += 1000000) {
        int e = ofd_lock(fd, byte, type);
        if (e != EAGAIN || slept >= JUDGE_WAIT_NS)
            return e;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* A region made in another PID or time namespace (a container that is gone, or one that
 * lives): under the exclusive judge lock, when no process maps it any more (the exclusive
 * users lock is free), it is reinitialised in place for this namespace, as if new (the counts
 * of the processes that are gone go with them); when a process still maps it, it is refused.
 * Called holding no lock of fd; on SW_OK the shared users lock is held.
 * @return SW_OK, SW_ENOMEM, or SW_EOS with err set */
static int adopt_or_refuse(int fd, void *base, size_t size, const char *path,
                           const struct sw_shm_layout *lay, struct sw_shm_error *err)
{
    struct sw_shm_header *h = base;
    int e = ofd_lock_wait(fd, JUDGE_BYTE, F_WRLCK);
    if (e != 0)
        return fail(err, SW_EOS, e, NULL, "cannot open shared region %s: another process has "
                    "been taking it over for %lld s (%s)", path,
                    (long long)(JUDGE_WAIT_NS / 1000000000), strerror(e));
    int rc = SW_OK;
    bool foreign = false;
    /* another attacher may have adopted it meanwhile: check it again */
    rc = check_region(base, size, path, lay, err, &foreign);
    if (rc != SW_OK)
        goto out;
    if (foreign) {
        e = ofd_lock(fd, USERS_BYTE, F_WRLCK);
        if (e != 0) {
            rc = fail(err, SW_EOS, e == EAGAIN ? EBUSY : e, NULL,
                      "shared region %s was created in another PID namespace (pid:[%llu], "
                      "another container?) and a process there still uses it: the processes "
                      "sharing a region must share a PID namespace (e.g. docker --pid=host, "
                      "or one pod with shareProcessNamespace), since a dead process's lock and "
                      "counts are recognised by its pid; once no process of that namespace "
                      "maps it, it is taken over", path, (unsigned long long)h->pidns_ino);
            goto out;
        }
        void *fresh = calloc(1, (size_t)h->state_size);
        int irc = fresh == NULL ? SW_ENOMEM : lay->init_state(fresh, lay);
        if (irc != SW_OK) {
            free(fresh);
            (void)ofd_lock(fd, USERS_BYTE, F_UNLCK);
            if (irc == SW_EOS)
                rc = fail(err, SW_EOS, ENOSYS, NULL, "cannot take over %s (made in another "
                          "PID namespace): no random bytes for its key hash's seed "
                          "(getrandom(2) and /dev/urandom both failed: a seccomp filter?)",
                          path);
            else
                rc = fail(err, irc, irc == SW_ENOMEM ? ENOMEM : 0, NULL, "cannot take over %s%s",
                          path, irc == SW_ENOMEM ? ": out of memory" : "");
            goto out;
        }
        /* nobody maps it (observers read without locks and check what they read): the whole
         * state, the process slots and the header's identities are this namespace's now */
        memset((char *)base + h->off_slots, 0, (size_t)(h->off_state - h->off_slots));
        memcpy((char *)base + h->off_state, fresh, (size_t)h->state_size);
        free(fresh);
        h->creator_pid = (uint32_t)getpid();
        read_boot_id(h->boot_id);
        ns_id("pid", &h->pidns_dev, &h->pidns_ino);
        ns_id("time", &h->timens_dev, &h->timens_ino);
        sw_lock_init(&h->lock);
        atomic_store(&h->waiters, 0);
        atomic_store(&h->next_reap_ms, 0);
        /* the lock calls below order these writes before any later attach reads them */
        e = ofd_lock(fd, USERS_BYTE, F_RDLCK); /* downgraded: never fails */
    } else {
        e = ofd_lock(fd, USERS_BYTE, F_RDLCK);
    }
    if (e != 0)
        rc = fail(err, SW_EOS, e, NULL, "cannot lock shared region %s: %s", path, strerror(e));
out:
    (void)ofd_lock(fd, JUDGE_BYTE, F_UNLCK);
    return rc;
}

static int attach_fd(struct sw_shm *out, int fd, const char *path,
                     const struct sw_shm_layout *lay, struct sw_shm_error *err)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return fail(err, SW_EOS, errno, NULL, "cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return fail(err, SW_EINVAL, 0, "file", "%s is not a regular file, not a slidewin "
                    "region", path);
    /* another user's file (in a world-writable folder such as /dev/shm) could be changed
     * under us after the checks below: only the owner's own regions are used */
    if (sb.st_uid != geteuid())
        return fail(err, SW_EOS, EACCES, NULL, "shared region %s belongs to uid %lu, not to "
                    "this process's uid %lu: run as that user, or use another name", path,
                    (unsigned long)sb.st_uid, (unsigned long)geteuid());
    if ((uint64_t)sb.st_size < sizeof(struct sw_shm_header) || sb.st_size > (off_t)1 << 42)
        return fail(err, SW_EINVAL, 0, "file", "%s is not a slidewin shared region (%lld "
                    "bytes); remove it or use another name", path, (long long)sb.st_size);
    size_t size = (size_t)sb.st_size;
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return fail(err, SW_EOS, errno, NULL, "cannot map %s: %s", path, strerror(errno));
    /* the shared judge lock while checking: no adopter changes the header meanwhile */
    int e = ofd_lock_wait(fd, JUDGE_BYTE, F_RDLCK);
    bool locks = e == 0;
    if (e != 0 && e != EAGAIN && e != EINVAL && e != ENOLCK && e != ENOSYS && e != EOPNOTSUPP) {
        munmap(base, size);
        return fail(err, SW_EOS, e, NULL, "cannot lock shared region %s: %s", path,
                    strerror(e));
    }
    if (e == EAGAIN) {
        munmap(base, size);
        return fail(err, SW_EOS, e, NULL, "cannot open shared region %s: another process has "
                    "been taking it over for %lld s", path,
                    (long long)(JUDGE_WAIT_NS / 1000000000));
    }
    bool foreign = false;
    int rc = check_region(base, size, path, lay, err, &foreign);
    if (rc == SW_OK && !foreign && locks && (e = ofd_lock(fd, USERS_BYTE, F_RDLCK)) != 0)
        rc = fail(err, SW_EOS, e, NULL, "cannot lock shared region %s: %s", path,
                  strerror(e));
    if (locks)
        (void)ofd_lock(fd, JUDGE_BYTE, F_UNLCK);
    if (rc == SW_OK && foreign) {
        if (locks)
            rc = adopt_or_refuse(fd, base, size, path, lay, err);
        else /* no OFD locks here: nothing tells whether a process still uses it */
            rc = fail(err, SW_EOS, EXDEV, NULL,
                      "shared region %s was created in another PID or time namespace (another "
                      "container?) and this system cannot tell whether a process there still "
                      "uses it (no OFD locks): the processes sharing a region must share a PID "
                      "and time namespace; remove it with slidewin.unlink() once none does",
                      path);
    }
    if (rc != SW_OK) {
        munmap(base, size);
        return rc;
    }
    rc = reinit_if_rebooted(base, lay);
    if (rc != SW_OK) {
        munmap(base, size);
        if (rc == SW_EOS)
            return fail(err, SW_EOS, ENOSYS, NULL, "cannot reinitialise %s (made before the "
                        "last reboot): no random bytes for its key hash's seed (getrandom(2) "
                        "and /dev/urandom both failed: a seccomp filter?)", path);
        return fail(err, rc, rc == SW_ENOMEM ? ENOMEM : 0, NULL, "cannot reinitialise %s%s",
                    path, rc == SW_ENOMEM ? ": out of memory" : "");
    }
    fill(out, base, size);
    out->dev = (uint64_t)sb.st_dev;
    out->ino = (uint64_t)sb.st_ino;
    return SW_OK;
}

/* Create the region in a temporary file and publish it under path with link().
 * @return SW_OK (out filled), SW_EEXIST-like: 1 when another process published first */
/* Open a new, unnamed file in path's folder (O_TMPFILE: nothing is left behind if this
 * process dies before publishing it); where the folder or /proc cannot do that, a named
 * temporary file with an unguessable suffix. @return the fd, or -1 with errno; tmp is set
 * to the temporary name, or emptied for an unnamed file */
static int open_temp(const char *path, char *tmp, size_t cap)
{
    static _Atomic unsigned counter;
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) : 0;
    char dir[PATH_MAX];
    if (dirlen == 0)
        snprintf(dir, sizeof dir, "%s", slash ? "/" : ".");
    else
        snprintf(dir, sizeof dir, "%.*s", dirlen, path);
    tmp[0] = '\0';
    int ufd = sw_platform_open_unnamed(dir);
    if (ufd >= 0)
        return ufd;
    for (int attempt = 0; attempt < 16; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned long salt = (unsigned long)ts.tv_nsec ^ ((unsigned long)ts.tv_sec << 20) ^
                             ((unsigned long)atomic_fetch_add(&counter, 1u) << 40);
        int w = snprintf(tmp, cap, "%s/.%s.%ld.%lx.tmp", dir, slash ? slash + 1 : path,
                         (long)getpid(), salt);
        if (w < 0 || (size_t)w >= cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Create the region in a temporary file and publish it under path with a link.
 * @return SW_OK (out filled, or *lost set when another process published first) or an error */
static int create_region(struct sw_shm *out, const char *path, const struct sw_shm_layout *lay,
                         struct sw_shm_error *err, int *lost)
{
    size_t size = sw_shm_size(lay);
    if (size == 0)
        return fail(err, SW_EINVAL, 0, "sample_count", "the region for %s would be too large",
                    path);
    char tmp[PATH_MAX];
    int fd = open_temp(path, tmp, sizeof tmp);
    if (fd < 0)
        return fail(err, SW_EOS, errno, NULL, "cannot create a shared region next to %s: %s",
                    path, strerror(errno));
    int rc = SW_OK;
    void *base = MAP_FAILED;
    (void)fchmod(fd, 0600);
    int e = sw_platform_reserve(fd, (off_t)size);
    if (e != 0) {
        rc = fail(err, SW_EOS, e, NULL,
                  "cannot reserve %zu bytes for shared region %s: %s%s", size, path,
                  strerror(e), e == ENOSPC ? " (the folder's filesystem is full: /dev/shm is "
                  "64 MB in a default Docker container, see --shm-size; or set "
                  "SLIDEWIN_SHM_DIR / pass a path on a larger tmpfs)" : "");
        goto out;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = fail(err, SW_EOS, errno, NULL, "cannot map a new region for %s: %s", path,
                  strerror(errno));
        goto out;
    }
    rc = init_region(base, size, lay);
    if (rc != SW_OK) {
        fail(err, rc, rc == SW_EOS ? ENOSYS : 0, NULL, "cannot initialise shared region %s%s",
             path, rc == SW_EOS ? ": no random bytes for its key hash's seed (getrandom(2) "
             "and /dev/urandom both failed: a seccomp filter?)" : "");
        goto out;
    }
    (void)ofd_lock(fd, USERS_BYTE, F_RDLCK); /* a user from before it is published */
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        memset(&sb, 0, sizeof sb);
    int linked;
    if (tmp[0] == '\0') {
        linked = sw_platform_link_unnamed(fd, path);
    } else {
        linked = link(tmp, path);
    }
    if (linked != 0) {
        if (errno == EEXIST) {
            *lost = 1;
            rc = SW_OK;
        } else {
            rc = fail(err, SW_EOS, errno, NULL, "cannot publish shared region %s: %s", path,
                      strerror(errno));
        }
        goto out;
    }
    if (tmp[0] != '\0')
        unlink(tmp);
    close(fd);
    fill(out, base, size);
    out->dev = (uint64_t)sb.st_dev;
    out->ino = (uint64_t)sb.st_ino;
    out->created = 1;
    return SW_OK;
out:
    if (base != MAP_FAILED)
        munmap(base, size);
    if (tmp[0] != '\0')
        unlink(tmp);
    close(fd);
    return rc;
}

int sw_shm_open(struct sw_shm *out, const char *path, const struct sw_shm_layout *lay,
                struct sw_shm_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            int rc = attach_fd(out, fd, path, lay, err);
            close(fd);
            return rc;
        }
        if (errno == ELOOP)
            return fail(err, SW_EINVAL, 0, "file", "%s is a symbolic link; a shared region "
                        "must be a regular file", path);
        if (errno != ENOENT)
            return fail(err, SW_EOS, errno, NULL, "cannot open shared region %s: %s", path,
                        strerror(errno));
        int lost = 0;
        int rc = create_region(out, path, lay, err, &lost);
        if (rc != SW_OK || !lost)
            return rc;
        /* another process published it first: attach to theirs */
    }
    return fail(err, SW_EOS, EAGAIN, NULL, "cannot open shared region %s: it keeps "
                "disappearing (removed while being opened)", path);
}

int sw_shm_anonymous(struct sw_shm *out, const struct sw_shm_layout *lay,
                     struct sw_shm_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    size_t size = sw_shm_size(lay);
    if (size == 0)
        return fail(err, SW_EINVAL, 0, "sample_count", "the region would be too large");
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return fail(err, SW_EOS, errno, NULL, "cannot map an anonymous shared region: %s",
                    strerror(errno));
    int rc = init_region(base, size, lay);
    if (rc != SW_OK) {
        munmap(base, size);
        return fail(err, rc, rc == SW_EOS ? ENOSYS : 0, NULL,
                    "cannot initialise an anonymous shared region%s", rc == SW_EOS ? ": no "
                    "random bytes for its key hash's seed (getrandom(2) and /dev/urandom both "
                    "failed: a seccomp filter?)" : "");
    }
    fill(out, base, size);
    out->anonymous = 1;
    out->created = 1;
    return SW_OK;
}

void sw_shm_close(struct sw_shm *shm)
{
    if (shm->base != NULL)
        munmap(shm->base, shm->size);
    shm->base = NULL;
    shm->hdr = NULL;
    shm->state = NULL;
    shm->slots = NULL;
}

int32_t sw_shm_claim_slot(struct sw_shm *shm, uint64_t token)
{
    /* one slot per process: every object of this process on the region shares it */
    for (uint32_t i = 0; i < shm->n_slots; i++)
        if (atomic_load_explicit(&shm->slots[i].token, memory_order_acquire) == token)
            return (int32_t)i;
    for (uint32_t i = 0; i < shm->n_slots; i++) {
        uint64_t expected = 0;
        if (atomic_load_explicit(&shm->slots[i].token, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&shm->slots[i].token, &expected, token)) {
            /* a lease a killed owner left (a reap or a detach takes one back under the
             * lock): its permits stay counted, and are not the new owner's to use */
            atomic_store_explicit(&shm->slots[i].lease, 0u, memory_order_relaxed);
            return (int32_t)i;
        }
    }
    return -1;
}

bool sw_shm_reap_due(struct sw_shm *shm, int64_t now_ms, int64_t every_ms)
{
    int64_t due = atomic_load_explicit(&shm->hdr->next_reap_ms, memory_order_relaxed);
    if (now_ms < due)
        return false;
    return atomic_compare_exchange_strong(&shm->hdr->next_reap_ms, &due, now_ms + every_ms);
}
