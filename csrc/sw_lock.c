/* sw_lock.c - the lock's slow path: spin, then sleep on the word (a process's lock) or yield
 * (a private one), then nap or the wait hook; a dead owner's lock taken over (sw_proc's
 * liveness). */
#include "sw_lock.h"

#include "sw_platform.h"
#include "sw_proc.h"
#include "sw_time.h"

#include <sched.h>
#include <time.h>

void sw_lock_init(sw_lock *l)
{
    atomic_init(&l->word, 0u);
}

int (*volatile sw_lock_wait_hook)(const struct sw_lock_wait *w) = NULL;

int64_t sw_lock_stuck_ns = SW_LOCK_STUCK_NS;

/* How long a waiter sleeps on a process's lock (woken by its release) before it looks at the
 * owner's liveness and goes on as before: the owner has held it that long. */
#define SW_LOCK_SLEEP_NS INT64_C(1000000)

/* The futex: the word's high half (the owner's pid and SW_LOCK_WAITERS) */
static _Atomic uint32_t *futex_half(sw_lock *l)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (_Atomic uint32_t *)(void *)&l->word;
#else
    return (_Atomic uint32_t *)(void *)((char *)&l->word + 4);
#endif
}

void sw_lock_wake(sw_lock *l)
{
    sw_futex_wake_one(futex_half(l));
}

int sw_lock_acquire_wait(sw_lock *l, uint64_t token, bool may_give_up)
{
    unsigned spins = 64u, pauses = 0, backoff = 1u;
    uint64_t seen = 0;       /* the process owner being waited for, and since when */
    int64_t seen_since = 0, next_look = 0;
    int state = SW_PROC_RUNNING;
    char letter = '?';
    uint64_t mine = token;   /* token | SW_LOCK_WAITERS once this waiter has slept: others may */
    for (;;) {
        uint64_t word = atomic_load_explicit(&l->word, memory_order_relaxed);
        if (word == 0u) {
            if (atomic_compare_exchange_weak_explicit(&l->word, &word, mine,
                                                      memory_order_acquire,
                                                      memory_order_relaxed))
                return SW_LOCK_GOT;
            continue;
        }
        uint64_t owner = sw_lock_owner_of(word);
        if (pauses < 256u) {
            /* held: wait a little before looking again, longer each time (every look takes
             * a copy of the lock's cache line from its owner, who then has to take it back
             * to write it: in a shared region, that line also holds the counts). A few
             * microseconds in all, then sleep (a process's lock) or yield. */
            for (unsigned i = 0; i < backoff; i++)
                sw_cpu_relax();
            pauses += backoff;
            if (backoff < 16u)
                backoff *= 2u;
            continue;
        }
        int64_t now = 0;
        if ((owner >> 32) != 0u) {
            now = sw_time_ns();
            if (owner != seen) {
                seen = owner;
                seen_since = now;
                next_look = now + SW_LOCK_SLEEP_NS;
            }
#if SW_PLATFORM_LINUX
            if (now - seen_since < SW_LOCK_SLEEP_NS) {
                /* a process holds it, maybe preempted inside its critical section: sleep
                 * until its release wakes a waiter (it sees SW_LOCK_WAITERS), rather than
                 * spin on a core it may need */
                if (!(word & SW_LOCK_WAITERS)) {
                    uint64_t flagged = word | SW_LOCK_WAITERS;
                    if (!atomic_compare_exchange_strong_explicit(&l->word, &word, flagged,
                                                                 memory_order_relaxed,
                                                                 memory_order_relaxed))
                        continue;
                    word = flagged;
                }
                (void)sw_futex_wait(futex_half(l), (uint32_t)(word >> 32),
                                    SW_LOCK_SLEEP_NS - (now - seen_since));
                mine = token | SW_LOCK_WAITERS;
                pauses = 128u; /* woken: spin a little again before the next sleep */
                backoff = 1u;
                continue;
            }
#endif
        }
        if (!SW_PLATFORM_LINUX || (owner >> 32) == 0u) {
            /* no sleeping on the word (a private lock: a thread of this process; or no
             * futex): yield, about a millisecond in all */
            spins++;
            if (spins < 2048u) {
                sched_yield();
                continue;
            }
        }
        struct timespec nap = {0, 50000}; /* 50 us */
        if ((owner >> 32) == 0u) { /* a private lock: a thread of this process */
            nanosleep(&nap, NULL);
            continue;
        }
        /* held for a while (about a millisecond) by a process: preempted, stopped, dead, or
         * (a damaged word) not in it at all. Its liveness is read every millisecond; a dead
         * owner's lock is taken over (one CAS, so only one waiter wins it; a waiters bit
         * stays: this waiter's release wakes them). */
        if (now >= next_look) {
            next_look = now + 1000000;
            state = sw_proc_token_state_letter(owner, &letter);
            if (state == SW_PROC_RUNNING && now - seen_since > sw_lock_stuck_ns &&
                sw_proc_frozen(owner))
                state = SW_PROC_STOPPED; /* docker pause, the cgroup freezer: it shows 'S' */
            if (state == SW_PROC_GONE) {
                if (atomic_compare_exchange_strong_explicit(&l->word, &word,
                                                            mine | (word & SW_LOCK_WAITERS),
                                                            memory_order_acquire,
                                                            memory_order_relaxed))
                    return SW_LOCK_TOOK_OVER;
                continue;
            }
        }
        struct sw_lock_wait w = {l, owner, now - seen_since, state == SW_PROC_STOPPED,
                                 state != SW_PROC_STOPPED && now - seen_since > sw_lock_stuck_ns,
                                 may_give_up, letter};
        int (*hook)(const struct sw_lock_wait *) = sw_lock_wait_hook;
        if (hook != NULL) {
            if (hook(&w) != 0 && may_give_up)
                return SW_LOCK_GAVE_UP;
        } else {
            if (w.stuck && may_give_up)
                return SW_LOCK_GAVE_UP;
            nanosleep(&nap, NULL);
        }
    }
}
