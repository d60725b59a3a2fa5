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
    SW_EOS = 7      /* a system call failed (shared regions: the error says which errno) */
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
 * enough. */
typedef struct sw_lock {
    _Atomic uint64_t word;
} sw_lock;

/* The token of a lock shared only by the threads of one process. */
#define SW_LOCK_PRIVATE UINT64_C(1)
/* In a view (never stored in a lock): "this process's token", resolved at each acquisition,
 * so an object inherited across fork() locks as the child. */
#define SW_LOCK_PROCESS UINT64_C(2)

/** Initialise a lock (unlocked). @param l the lock, caller-owned */
void sw_lock_init(sw_lock *l);
/** Slow path of sw_lock_acquire_as: spin, yield, nap; take over a dead owner's lock.
 * @return true when the lock was taken over from a dead process */
bool sw_lock_acquire_slow(sw_lock *l, uint64_t token);
/** Take the lock as `token` (SW_LOCK_PRIVATE or sw_proc_token()).
 * @return false normally; true when the previous owner was a process that died holding it
 *         (the caller holds the lock either way and must repair the state when true) */
static inline bool sw_lock_acquire_as(sw_lock *l, uint64_t token)
{
    uint64_t expected = 0;
    if (atomic_compare_exchange_strong_explicit(&l->word, &expected, token,
                                                memory_order_acquire, memory_order_relaxed))
        return false;
    return sw_lock_acquire_slow(l, token);
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
