/* sw_lock.c - the lock's slow path: spin, yield, nap or the wait hook; a dead owner's lock
 * taken over (sw_proc's liveness). */
#include "sw_lock.h"

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

int sw_lock_acquire_wait(sw_lock *l, uint64_t token, bool may_give_up)
{
    unsigned spins = 64u, pauses = 0, backoff = 1u;
    uint64_t seen = 0;       /* the process owner being waited for, and since when */
    int64_t seen_since = 0, next_look = 0;
    int state = SW_PROC_RUNNING;
    char letter = '?';
    for (;;) {
        uint64_t owner = atomic_load_explicit(&l->word, memory_order_relaxed);
        if (owner == 0u) {
            if (atomic_compare_exchange_weak_explicit(&l->word, &owner, token,
                                                      memory_order_acquire,
                                                      memory_order_relaxed))
                return SW_LOCK_GOT;
            continue;
        }
        if (pauses < 256u) {
            /* held: wait a little before looking again, longer each time (every look takes
             * a copy of the lock's cache line from its owner, who then has to take it back
             * to write it: in a shared region, that line also holds the counts). A few
             * microseconds in all, then yield. */
            for (unsigned i = 0; i < backoff; i++)
                sw_cpu_relax();
            pauses += backoff;
            if (backoff < 16u)
                backoff *= 2u;
            continue;
        }
        spins++;
        if (spins < 2048u) {
            sched_yield();
            continue;
        }
        struct timespec nap = {0, 50000}; /* 50 us */
        if ((owner >> 32) == 0u) { /* a private lock: a thread of this process */
            nanosleep(&nap, NULL);
            continue;
        }
        /* held for a while (about a millisecond of yields) by a process: preempted, stopped,
         * dead, or (a damaged word) not in it at all. Its liveness is read every millisecond;
         * a dead owner's lock is taken over (one CAS, so only one waiter wins it). */
        int64_t now = sw_time_ns();
        if (owner != seen) {
            seen = owner;
            seen_since = now;
            next_look = now;
        }
        if (now >= next_look) {
            next_look = now + 1000000;
            state = sw_proc_token_state_letter(owner, &letter);
            if (state == SW_PROC_RUNNING && now - seen_since > sw_lock_stuck_ns &&
                sw_proc_frozen(owner))
                state = SW_PROC_STOPPED; /* docker pause, the cgroup freezer: it shows 'S' */
            if (state == SW_PROC_GONE) {
                if (atomic_compare_exchange_strong_explicit(&l->word, &owner, token,
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
