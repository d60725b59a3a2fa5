/* sw_common.c - error strings and the spinlock. */
#include "sw_common.h"

#include <sched.h>

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
    default: return "unknown error";
    }
}

void sw_lock_init(sw_lock *l)
{
    atomic_init(&l->word, 0u);
}

void sw_lock_acquire_slow(sw_lock *l)
{
    unsigned spins = 0;
    for (;;) {
        if (atomic_exchange_explicit(&l->word, 1u, memory_order_acquire) == 0u)
            return;
        while (atomic_load_explicit(&l->word, memory_order_relaxed) != 0u) {
            if (++spins < 64u)
                sw_cpu_relax();
            else
                sched_yield();
        }
    }
}
