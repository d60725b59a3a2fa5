/* sw_observe.h - reading a shared region as an observer: the statistics of a region that other
 * processes are busy with, without attaching to it (no slot, no lock, no write).
 *
 * A region is input. sw_region_read opens the file read-only (never a symbolic link, only a
 * regular file owned by this process's effective uid), reads it with pread (never mapped: a
 * file that shrinks under the reader gives a short read, not a SIGBUS), checks the header as
 * an attach does and the object's layout, copies the statistics (the limiter's state, a
 * keyed table's node, a Breaker's state, a Metric's ring) into private memory, checks the
 * copy, repairs it (a copy taken while a writer was inside its critical section may be
 * mid-update) and reads it. A damaged or truncated region is an error with a message, never
 * a crash. The totals are whole aligned words (never torn); the window read is a snapshot of
 * a moment give or take the one decision in progress.
 *
 * Also the layout of a standalone Metric's state (its lock, then its ring), which a Metric
 * creates and an observer checks.
 */
#ifndef SW_OBSERVE_H
#define SW_OBSERVE_H

#include "sw_breaker.h"
#include "sw_evleap.h"
#include "sw_limiter.h"
#include "sw_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A standalone Metric's state: the lock, then the ring (sw_leap or sw_evleap). */
struct sw_metric_mem {
    sw_lock lock;
    _Alignas(16) unsigned char leap[];
};

/** Bytes of a Metric's state for this ring (eventual: an sw_evleap, else an sw_leap).
 * @return the size, 0 when cfg is not a valid ring configuration */
size_t sw_metric_mem_size(const struct sw_leap_cfg *cfg, bool eventual);

/** Whether a Metric state's ring has the layout cfg says (a region is input).
 * @return SW_OK or SW_EINVAL */
int sw_metric_mem_check(const struct sw_metric_mem *mem, const struct sw_leap_cfg *cfg,
                        bool eventual);

/** A region header's ring configuration of a Metric (its events, or the default ones). */
struct sw_leap_cfg sw_region_metric_cfg(const struct sw_shm_header *h);

/* What an observer reads of a region. */
struct sw_region_read {
    struct sw_shm_header hdr;  /* the header, checked (its name, events, layout) */
    int64_t now_ns;            /* the time read at (SW_NOW given: the coarse clock's) */
    uint32_t waiters;          /* processes waiting for a release */
    /* limiter and keyed: the window's statistics and the lifetime totals */
    struct sw_stats stats;
    struct sw_totals totals;
    int64_t adaptive_limit;    /* an AdaptiveLimiter's learned limit, else -1 */
    int64_t keys, evicted;     /* keyed: live keys and keys evicted so far, else -1 */
    /* Breaker: the window (enum SW_BRK_EV_*), the lifetime totals, the state */
    int64_t brk_window[SW_BRK_N_EVENTS];
    struct sw_brk_totals brk_totals;
    uint32_t brk_state;        /* enum sw_brk_state */
    /* Metric: each event's sum over the window, and the minimum RT (default events only) */
    uint32_t n_events;
    int64_t sums[SW_MAX_EVENTS];
    int64_t min_rt;            /* -1 unless the default events */
};

/** Read the region at path as of now_ns.
 * @param path the region's file
 * @param now_ns the time, or SW_NOW (the coarse clock)
 * @param out receives what was read (caller-owned)
 * @param err the reason on failure
 * @return SW_OK; SW_EINVAL when the file is not a slidewin region, or a damaged or truncated
 *         one (err->msg: the path and what is wrong); SW_EOS with err->sys_errno for a system
 *         error (err->msg empty), or EACCES with err->msg for another user's file; SW_ENOMEM */
int sw_region_read(const char *path, int64_t now_ns, struct sw_region_read *out,
                   struct sw_shm_error *err);

/** Whether path is a current region of this process's effective uid, by its header alone
 * (what listing the regions of a folder keeps). @param dev, ino receive the file's identity
 * @return SW_OK, or an error as sw_region_read's */
int sw_region_probe(const char *path, uint64_t *dev, uint64_t *ino, struct sw_shm_error *err);

/** Remove the region file at path: only a regular file of this process's effective uid with
 * a region's magic (of any layout version: an upgrade removes the old ones), never a symbolic
 * link, and its name only while it still names the file checked.
 * @return SW_OK when removed; SW_EOS with err->sys_errno (ENOENT: nothing there) and err->msg
 *         empty, or EACCES with err->msg for another user's file; SW_EINVAL with err->msg
 *         (the path and why it was not removed) */
int sw_region_unlink(const char *path, struct sw_shm_error *err);

/** The region files `slidewin-*` of folder dir that sw_region_probe accepts; a file with
 * several names (hard links) once, by its first name in byte order.
 * @param paths receives an array of n paths (dir/name), owned by the caller: release it with
 *        sw_region_list_free (NULL when n is 0)
 * @return SW_OK; SW_EOS with err->sys_errno when dir cannot be read; SW_ENOMEM */
int sw_region_list(const char *dir, char ***paths, size_t *n, struct sw_shm_error *err);
/** Release what sw_region_list gave. */
void sw_region_list_free(char **paths, size_t n);

/** The name of event e of a read Metric region with its own events (hdr.n_events > 0): the
 * e-th NUL-separated name of hdr.events. @param len receives its length in bytes
 * @return a pointer into r->hdr.events (not NUL-ended when len reaches the end) */
const char *sw_region_event_name(const struct sw_region_read *r, uint32_t e, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* SW_OBSERVE_H */
