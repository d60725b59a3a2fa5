/* sw_shm.h - regions: flat core state in a file mapping shared by the processes of a host.
 *
 * A region is a header, a table of process slots and one object's flat state (a Metric's
 * ring, a limiter's sw_lstate). It is created in a temporary file (O_EXCL, mode 0600, space
 * reserved with posix_fallocate so that a full tmpfs fails here and not with SIGBUS later),
 * fully initialised, then published under its name with link(): no process ever maps a
 * half-made region, and the loser of a creation race attaches to the winner's. Attaching
 * checks everything the header says (magic, layout version, size, kind, the window's layout)
 * and the state's own layout: a region is input, like any file. A region written before the
 * last boot (its monotonic times are meaningless) is reinitialised, under the state's lock;
 * unless a live process of this boot holds one of its process slots (then only the header's
 * boot id was wrong: the state is this boot's and is kept).
 * What it needs of the system (futexes, /proc, OFD locks) and the fallbacks: sw_platform.h.
 */
#ifndef SW_SHM_H
#define SW_SHM_H

#include "sw_common.h"
#include "sw_lock.h"
#include "sw_platform.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_SHM_LAYOUT_VERSION 10u /* 2: lifetime totals in the node, the region's name;
                                  3: a limiter state's lock shares its line with the node's
                                     totals, rings on 64-byte lines, lazy ring totals; keyed
                                     tables without an index (the probed entry is the key's);
                                  4: key fingerprints seeded per type tag;
                                  5: a keyed table keeps its random hash seed;
                                  6: every process using a region holds the shared OFD
                                     lock on it (a region nobody locks is taken over);
                                  7: a shared keyed table in stripes, each with its own
                                     lock, node, entries and holdings;
                                  8: a keyed stripe's PASS counts on its lock's line;
                                  9: a limiter's BLOCK words on the lock's line raised
                                     without the lock, marked while the heads move;
                                 10: a process slot on its own 64-byte line, with the
                                     limiter's lease of the head bucket */
#define SW_SHM_MAX_PROCS 1024u          /* process slots of a limiter region */
#define SW_SHM_EVENTS_BYTES 1024u       /* a Metric's event names, NUL-separated */
#define SW_SHM_NAME_BYTES 256u          /* the creator's name= for the object, NUL-ended */

/* A Metric's consistency mode, a layout field of its region. */
enum sw_consistency { SW_CONSISTENCY_STRONG = 0, SW_CONSISTENCY_EVENTUAL = 1 };

enum sw_shm_kind { SW_KIND_METRIC = 1, SW_KIND_LIMITER = 2, SW_KIND_KEYED = 3,
                   SW_KIND_BREAKER = 4 };

/* One attached process's share of the in-flight count of a shared state: the count is the
 * sum over the slots, and a dead process's slot is given back (sw_lstate_reap, sw_keyed_reap). */
struct sw_proc_slot {
    _Atomic uint64_t token;   /* the owner's process token, 0 when free */
    int64_t in_flight;        /* guarded by the state's lock */
    /* a shared limiter's lease (sw_decide.c): permits of the head bucket counted as passes
     * and not yet used, taken by the owner without the lock; 0 when none */
    _Atomic uint64_t lease;
    uint64_t pad_[5];         /* one slot a line: the owner's takes touch no other's line */
};

/* What a region holds; compared on attach. */
struct sw_shm_layout {
    uint32_t kind;            /* enum sw_shm_kind */
    int64_t interval_ms;
    uint32_t sample_count;
    uint32_t max_keys;        /* KeyedLimiter only, else 0 */
    uint32_t n_events;        /* Metric: its events; 0 for a limiter */
    uint32_t events_len;      /* bytes of `events` (NUL-separated names, each ended) */
    const char *events;
    const char *name;         /* the object's name= (UTF-8), stored by the creator, or NULL */
    uint32_t n_slots;         /* process slots (0 when the kind needs none) */
    uint32_t consistency;     /* enum sw_consistency (0, strong, for every other kind) */
    uint64_t state_size;      /* bytes of the object's flat state */
    /* initialise a fresh state of state_size bytes (zeroed); validate one read from a
     * region: both return SW_OK or an error */
    int (*init_state)(void *state, const struct sw_shm_layout *lay);
    int (*check_state)(void *state, const struct sw_shm_layout *lay);
    /* the lock every user of the state takes (a reinitialisation after a reboot takes it
     * too), or NULL when the state has none */
    sw_lock *(*state_lock)(void *state);
    void *arg;                /* for the callbacks */
};

/* The header, at offset 0 of the region. Fixed-size fields only. */
struct sw_shm_header {
    char magic[8];            /* "SLIDEWIN" */
    uint32_t version;         /* SW_SHM_LAYOUT_VERSION */
    uint32_t header_size;     /* sizeof(struct sw_shm_header) */
    uint64_t total_size;      /* == the file's size */
    uint32_t endian;          /* 0x01020304 in the writer's byte order */
    uint32_t kind;
    int64_t interval_ms;
    uint32_t sample_count;
    uint32_t max_keys;
    uint32_t n_events;
    uint32_t events_len;
    uint32_t n_slots;
    uint32_t creator_pid;
    uint64_t off_slots;       /* byte offsets from the region's start */
    uint64_t off_state;
    uint64_t state_size;
    int64_t created_unix_ns;
    char boot_id[40];         /* /proc/sys/kernel/random/boot_id when (re)initialised */
    uint64_t pidns_dev;       /* the creator's PID namespace (/proc/self/ns/pid), 0 unknown: */
    uint64_t pidns_ino;       /*   process identities (pids) only mean something inside it */
    uint64_t timens_dev;      /* its time namespace (/proc/self/ns/time), 0 unknown: */
    uint64_t timens_ino;      /*   CLOCK_MONOTONIC may be offset in another one */
    sw_lock lock;             /* guards reinitialisation after a reboot */
    _Atomic uint32_t ready;   /* SW_SHM_READY once initialised */
    _Atomic uint32_t waiters; /* processes waiting on release_seq */
    _Atomic uint32_t release_seq; /* futex word: bumped by a release when waiters > 0 */
    uint32_t consistency;     /* a Metric's statistics mode (enum sw_consistency); 0 in a
                                 region written before the field existed: strong */
    _Atomic int64_t next_reap_ms; /* the next time a process may reap dead slots */
    char events[SW_SHM_EVENTS_BYTES];
    char name[SW_SHM_NAME_BYTES]; /* the creating object's name= (observers label by it), or
                                     empty; never changed after creation */
};
#define SW_SHM_READY 0x52454459u

/* An attached region (process-local). */
struct sw_shm {
    void *base;
    size_t size;
    struct sw_shm_header *hdr;
    void *state;
    struct sw_proc_slot *slots;
    uint32_t n_slots;
    int anonymous;
    int created;              /* this call created it */
    uint64_t dev, ino;        /* the file's (two mappings of one file in a process), else 0 */
};

/* Why an open failed. */
struct sw_shm_error {
    int sys_errno;            /* an errno for SW_EOS, else 0 */
    const char *field;        /* the layout field that differs, or NULL */
    char msg[512];
};

/** Bytes a region of this layout needs (0 when it is too large). */
size_t sw_shm_size(const struct sw_shm_layout *lay);

/** Open the region at `path`, creating it when absent; attach to it otherwise.
 * @param out receives the mapping
 * @param path a file path (the caller has validated the name)
 * @param lay what the region must hold
 * @param err the reason on failure
 * @return SW_OK; SW_EINVAL when the file is not a region of this layout (err->msg says what
 *         differs); SW_EOS with err->sys_errno for a system error (EACCES, ENOSPC, ...) */
int sw_shm_open(struct sw_shm *out, const char *path, const struct sw_shm_layout *lay,
                struct sw_shm_error *err);

/** Create an anonymous region, shared with the processes forked after it.
 * @return SW_OK or SW_EOS */
int sw_shm_anonymous(struct sw_shm *out, const struct sw_shm_layout *lay,
                     struct sw_shm_error *err);

/** Check a region's header on its own (what every attach checks first): magic, byte order,
 * layout version, size (`size`: the file's bytes), initialised, a known kind, offsets in
 * range. Reads only. @return SW_OK, or SW_EINVAL with err->msg naming path */
int sw_shm_check_header(const struct sw_shm_header *h, size_t size, const char *path,
                        struct sw_shm_error *err);

/** Unmap a region (it stays for the other processes). */
void sw_shm_close(struct sw_shm *shm);

/** This process's slot: the one `token` already holds (every object of a process on a region
 * shares it, and keeps it until the process dies and is reaped), else a free one claimed.
 * @return the slot's index, or -1 when all are taken */
int32_t sw_shm_claim_slot(struct sw_shm *shm, uint64_t token);

/** Whether it is time to reap dead processes' slots (at most every `every_ms`); the caller
 * that gets true does it. */
bool sw_shm_reap_due(struct sw_shm *shm, int64_t now_ms, int64_t every_ms);

/* sw_futex_wait, sw_futex_wake_all: sw_platform.h */

#ifdef __cplusplus
}
#endif
#endif /* SW_SHM_H */
