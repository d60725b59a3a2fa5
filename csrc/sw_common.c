/* sw_common.c - error strings and the spinlock. */
#include "sw_common.h"

#include "sw_proc.h"

#include <sched.h>
#include <time.h>

const char *sw_strerror(int code)
{
    switch (code) {
    case SW_OK: return "success";
    case SW_EINVAL: return "invalid argument";
    case SW_ENOMEM: return "out of memory";
    case SW_ERANGE: return "value out of range";
    case SW_ENORT: return "this window has no RT counters (user-defined events)";
    case SW_EEVENT: return "unknown event";
    case SW_ESTATE: return "operation does not fit the current state";
    case SW_EOS: return "a system call failed";
    default: return "unknown error";
    }
}

void (*volatile sw_test_in_critical)(void) = NULL;

void sw_lock_init(sw_lock *l)
{
    atomic_init(&l->word, 0u);
}

bool sw_lock_acquire_slow(sw_lock *l, uint64_t token)
{
    unsigned spins = 64u, pauses = 0, backoff = 1u;
    for (;;) {
        uint64_t owner = atomic_load_explicit(&l->word, memory_order_relaxed);
        if (owner == 0u) {
            if (atomic_compare_exchange_weak_explicit(&l->word, &owner, token,
                                                      memory_order_acquire,
                                                      memory_order_relaxed))
                return false;
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
        } else {
            /* held for a while (about a millisecond of yields): the owner is preempted,
             * stopped, or dead. A process token can be checked; a dead owner's lock is
             * taken over (one CAS, so only one waiter wins it). */
            if ((owner >> 32) != 0u && (spins & 15u) == 0u && sw_proc_token_dead(owner)) {
                if (atomic_compare_exchange_strong_explicit(&l->word, &owner, token,
                                                            memory_order_acquire,
                                                            memory_order_relaxed))
                    return true;
                continue;
            }
            struct timespec nap = {0, 50000}; /* 50 us */
            nanosleep(&nap, NULL);
        }
    }
}
