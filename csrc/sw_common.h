/* sw_common.h - error codes, limits and the lock shared by the slidewin C core.
 *
 * The core never includes Python.h, never reads a clock outside sw_time.c, never prints,
 * never aborts. Errors are returned codes; yes/no decisions return bool.
 */
#ifndef SW_COMMON_H
#define SW_COMMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
enum {
    SW_OK = 0,      /* success */
    SW_EINVAL = 1,  /* an argument is out of range or the configuration is impossible */
    SW_ENOMEM = 2,  /* an allocation failed */
    SW_ERANGE = 3,  /* a value overflows what the core can represent */
    SW_ENORT = 4,   /* the window has no RT counters (user-defined events) */
    SW_EEVENT = 5,  /* unknown event index */
    SW_ESTATE = 6,  /* the call does not fit the object's state (release beyond in flight) */
    SW_EOS = 7,     /* a system call failed (shared regions: the error says which errno) */
    SW_EBUSY = 8    /* gave up waiting for another process's lock (sw_lock_wait_hook said so,
                     * or its owner is stuck): nothing was done */
};

/** Describe a return code.
 * @param code one of the SW_* codes
 * @return a static, NUL-terminated English message (never NULL) */
const char *sw_strerror(int code);

/* Pass `SW_NOW` as `now_ns` to let the core read the clock inside its critical section. */
#define SW_NOW INT64_MIN

/* Limits of a window. */
#define SW_MAX_EVENTS 32           /* events per bucket */
#define SW_MAX_SAMPLES 100000      /* buckets per ring */
#define SW_MAX_INTERVAL_MS (INT64_C(1) << 40) /* about 34 years */
#define SW_MIN_RT_INIT 5000        /* Sentinel's statisticMaxRt, ms */

/* The default event set (docs/design.md §3). */
enum sw_event {
    SW_EV_PASS = 0,
    SW_EV_BLOCK = 1,
    SW_EV_EXCEPTION = 2,
    SW_EV_SUCCESS = 3,
    SW_EV_RT = 4,
    SW_EV_OCCUPIED_PASS = 5,
    SW_EV_DEFAULT_COUNT = 6
};

/** Round a byte count up to a multiple of 8 (offsets of the parts of flat state).
 * @param x bytes @return the smallest multiple of 8 >= x */
static inline size_t sw_align8(size_t x)
{
    return (x + 7u) & ~(size_t)7u;
}

/** Tell the CPU this is a spin-wait loop (pause / yield), a no-op elsewhere. */
static inline void sw_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A lock that lives inside flat state (also in memory shared by processes): one 64-bit word,
 * no pointers. Zero-initialised memory is an unlocked lock. The word holds its owner's token:
 * SW_LOCK_PRIVATE (1) for a lock used by the threads of one process, or a process token
 * (sw_proc_token(): pid << 32 | the low 32 bits of the process start time) for a lock in a
 * shared region. A waiter that has spun for a while on a lock whose owner is a process that
 * has died (SIGKILL in the middle of a critical section) takes the lock over, and learns so
 * from the return value: the caller then repairs what the dead owner may have half-written.
 * Critical sections are O(1) and never sleep, so spinning (then yielding, then napping) is
 * enough for a running owner. An owner that is stopped (SIGSTOP, docker pause, the cgroup
 * freezer, a debugger) keeps the lock until it resumes or dies: past about a millisecond, a
 * waiter on another process's lock calls sw_lock_wait_hook (when set) instead of napping,
 * which may release what the caller holds (the Python binding: the GIL), run signal handlers
 * and, where the call site allows it, give up. */
typedef struct sw_lock {
    _Atomic uint64_t word;
} sw_lock;

/* The token of a lock shared only by the threads of one process. */
#define SW_LOCK_PRIVATE UINT64_C(1)
/* In a view (never stored in a lock): "this process's token", resolved at each acquisition,
 * so an object inherited across fork() locks as the child. */
#define SW_LOCK_PROCESS UINT64_C(2)

/* A live owner that is not stopped holds a lock only for an O(1) critical section: one seen
 * holding it longer than this is not in it (the word is damaged or forged) and the waiter is
 * told `stuck` (a call site that may give up then does). */
#define SW_LOCK_STUCK_NS (5 * INT64_C(1000000000))

/* How sw_lock_acquire_wait ended. */
enum { SW_LOCK_GOT = 0, SW_LOCK_TOOK_OVER = 1, SW_LOCK_GAVE_UP = -1 };

/* A long wait on another process's lock, as sw_lock_wait_hook sees it. */
struct sw_lock_wait {
    sw_lock *lock;
    uint64_t owner;     /* the token in the lock word */
    int64_t held_ns;    /* how long this waiter has seen that owner hold it */
    bool stopped;       /* the owner is stopped (SIGSTOP, a debugger) */
    bool stuck;         /* held longer than SW_LOCK_STUCK_NS by a live owner not stopped */
    bool may_give_up;   /* the call site can give up (the hook's non-zero return is obeyed) */
    char owner_state;   /* the owner's /proc state letter when last looked at ('?' unknown) */
};

/* Called (when set) by a waiter for another process's lock held past about a millisecond,
 * instead of a nap: it must wait a little (until the word changes, or a few milliseconds),
 * and returns non-zero to give up (obeyed only when w->may_give_up). Unset, a waiter naps
 * 50 us at a time and gives up, where it may, only when the owner is stuck. */
extern int (*volatile sw_lock_wait_hook)(const struct sw_lock_wait *w);

/** Initialise a lock (unlocked). @param l the lock, caller-owned */
void sw_lock_init(sw_lock *l);
/** Slow path of the acquisitions: spin, yield, nap (or sw_lock_wait_hook); take over a dead
 * owner's lock. @param may_give_up whether the caller handles SW_LOCK_GAVE_UP
 * @return SW_LOCK_GOT, SW_LOCK_TOOK_OVER (the owner died holding it: repair), or
 *         SW_LOCK_GAVE_UP (only when may_give_up; the lock is not held) */
int sw_lock_acquire_wait(sw_lock *l, uint64_t token, bool may_give_up);
/** Take the lock as `token` (SW_LOCK_PRIVATE or sw_proc_token()), waiting as long as it takes.
 * @return false normally; true when the previous owner was a process that died holding it
 *         (the caller holds the lock either way and must repair the state when true) */
static inline bool sw_lock_acquire_as(sw_lock *l, uint64_t token)
{
    uint64_t expected = 0;
    if (atomic_compare_exchange_strong_explicit(&l->word, &expected, token,
                                                memory_order_acquire, memory_order_relaxed))
        return false;
    return sw_lock_acquire_wait(l, token, false) == SW_LOCK_TOOK_OVER;
}
/** Take the lock as `token`, or give up (see sw_lock_wait_hook; the same cost when free).
 * @return SW_LOCK_GOT, SW_LOCK_TOOK_OVER or SW_LOCK_GAVE_UP */
static inline int sw_lock_acquire_or_give_up(sw_lock *l, uint64_t token)
{
    uint64_t expected = 0;
    if (atomic_compare_exchange_strong_explicit(&l->word, &expected, token,
                                                memory_order_acquire, memory_order_relaxed))
        return SW_LOCK_GOT;
    return sw_lock_acquire_wait(l, token, true);
}
/** Take a private lock (threads of one process). */
static inline void sw_lock_acquire(sw_lock *l)
{
    (void)sw_lock_acquire_as(l, SW_LOCK_PRIVATE);
}
/** Release a lock taken by sw_lock_acquire or sw_lock_acquire_as. */
static inline void sw_lock_release(sw_lock *l)
{
    atomic_store_explicit(&l->word, 0u, memory_order_release);
}
/** Force a lock open (after fork(), in the only thread of the child, for a private lock whose
 * holder was another thread of the parent). */
static inline void sw_lock_force_release(sw_lock *l)
{
    atomic_store_explicit(&l->word, 0u, memory_order_relaxed);
}

/* Test hook: the core calls it while holding a limiter's lock, in the middle of a decision
 * (between two stores), when set. Tests use it to widen the window in which a process can be
 * killed inside a critical section. NULL (the default) costs one predictable branch. */
extern void (*volatile sw_test_in_critical)(void);

/* Saturating helpers on int64 (the core never overflows silently). */
static inline int64_t sw_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}
static inline int64_t sw_sat_sub(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
}
static inline int64_t sw_sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return ((a < 0) != (b < 0)) ? INT64_MIN : INT64_MAX;
    return r;
}

#ifdef __cplusplus
}
#endif
#endif /* SW_COMMON_H */
