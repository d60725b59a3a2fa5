/* sw_lock.h - the lock of the slidewin C core: one word in flat state, private or shared
 * across processes (base layer: above sw_proc, whose liveness checks its slow path uses).
 */
#ifndef SW_LOCK_H
#define SW_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sw_common.h"
#include "sw_proc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A lock that lives inside flat state (also in memory shared by processes): one 64-bit word,
 * no pointers. Zero-initialised memory is an unlocked lock. The word holds its owner's token:
 * SW_LOCK_PRIVATE (1) for a lock used by the threads of one process, or a process token
 * (sw_proc_token(): pid << 32 | the low 32 bits of the process start time) for a lock in a
 * shared region. A waiter that has spun for a while on a lock whose owner is a process that
 * has died (SIGKILL in the middle of a critical section) takes the lock over, and learns so
 * from the return value: the caller then repairs what the dead owner may have half-written.
 * Critical sections are O(1) and never sleep. A waiter spins a few microseconds (testing the
 * word before writing it, backing off); then, for a lock held by a process, it sleeps on the
 * word (a futex on its high half) after setting SW_LOCK_WAITERS, and the release that finds
 * that bit wakes one sleeper: an owner that was preempted inside its critical section gets
 * a core back instead of waiting behind waiters that burn their time slices spinning (a
 * private lock's waiters, threads of one process, yield then nap as before). A sleep lasts
 * at most until the owner has held the lock about a millisecond (a wake lost to a SIGKILL
 * costs that at most). An owner that is stopped (SIGSTOP, docker pause, the cgroup
 * freezer, a debugger) keeps the lock until it resumes or dies: past about a millisecond, a
 * waiter on another process's lock calls sw_lock_wait_hook (when set) instead of napping,
 * which may release what the caller holds (the Python binding: the GIL), run signal handlers
 * and, where the call site allows it, give up. */
typedef struct sw_lock {
    _Atomic uint64_t word;
} sw_lock;

/* Set in a process-owned lock's word, beside the owner's token, by a waiter about to sleep on
 * it: its release wakes one. No token has it (a pid is below 2**22). */
#define SW_LOCK_WAITERS (UINT64_C(1) << 63)

/** The owner's token in a lock word (0: free), without SW_LOCK_WAITERS. */
static inline uint64_t sw_lock_owner_of(uint64_t word)
{
    return word & ~SW_LOCK_WAITERS;
}

/* The token of a lock shared only by the threads of one process. */
#define SW_LOCK_PRIVATE UINT64_C(1)
/* In a view (never stored in a lock): "this process's token", resolved at each acquisition,
 * so an object inherited across fork() locks as the child. */
#define SW_LOCK_PROCESS UINT64_C(2)

/* A live owner that is not stopped holds a lock only for an O(1) critical section: one seen
 * holding it longer than this is not in it (the word is damaged or forged) and the waiter is
 * told `stuck` (a call site that may give up then does). */
#define SW_LOCK_STUCK_NS (5 * INT64_C(1000000000))
/* The threshold in force: SW_LOCK_STUCK_NS, unless a test shortened it (the binding reads
 * SLIDEWIN_TEST_LOCK_STUCK_MS at import: the test suite's stuck-owner scenarios) */
extern int64_t sw_lock_stuck_ns;

/* How sw_lock_acquire_wait ended. */
enum { SW_LOCK_GOT = 0, SW_LOCK_TOOK_OVER = 1, SW_LOCK_GAVE_UP = -1 };

/* A long wait on another process's lock, as sw_lock_wait_hook sees it. */
struct sw_lock_wait {
    sw_lock *lock;
    uint64_t owner;     /* the token in the lock word (sw_lock_owner_of: no waiters bit) */
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
/** Wake one waiter sleeping on a lock (sw_lock_release, when SW_LOCK_WAITERS was set). */
void sw_lock_wake(sw_lock *l);
/** Release a lock taken by sw_lock_acquire or sw_lock_acquire_as. */
static inline void sw_lock_release(sw_lock *l)
{
    /* a private lock (token 1, the holder's own word: nobody else writes it while held) has
     * no sleeper: a plain store; a process's lock may have one (SW_LOCK_WAITERS) */
    if ((atomic_load_explicit(&l->word, memory_order_relaxed) >> 32) == 0u) {
        atomic_store_explicit(&l->word, 0u, memory_order_release);
        return;
    }
    if (atomic_exchange_explicit(&l->word, 0u, memory_order_release) & SW_LOCK_WAITERS)
        sw_lock_wake(l);
}
/** Force a lock open (after fork(), in the only thread of the child, for a private lock whose
 * holder was another thread of the parent). */
static inline void sw_lock_force_release(sw_lock *l)
{
    atomic_store_explicit(&l->word, 0u, memory_order_relaxed);
}

/** A view's token as a lock word: SW_LOCK_PROCESS becomes this process's token. */
static inline uint64_t sw_token_resolve(uint64_t token)
{
    return token == SW_LOCK_PROCESS ? sw_proc_token() : token;
}

#ifdef __cplusplus
}
#endif
#endif /* SW_LOCK_H */
