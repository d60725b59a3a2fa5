/* wait.h - sleeping and waiting with the GIL released, and fork safety of private locks.
 *
 * Every wait sleeps in slices of at most WAIT_SLICE_NS and runs the signal handlers before
 * each. Only an admitted wait spins, and only its last SPIN_NS; polls and retries never spin.
 */
#ifndef SW_BINDING_WAIT_H
#define SW_BINDING_WAIT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sw_common.h"
#include "sw_limiter.h"

/* A sleeper wakes up to its timer slack (50 us) late, and a throttle's caller that wakes after
 * its slot loses it: pacing at 10 000 QPS needs the last stretch spun (measured: a lone
 * acquire() loop went from -0.4 .. -4.3% with 80 us to within 0.03% with 200 us). */
#define SPIN_NS (200 * INT64_C(1000))

#define WAIT_SLICE_NS (50 * INT64_C(1000000))

/** Sleep until the monotonic deadline_ns; spin: spin the last SPIN_NS (admitted waits only).
 * @return 0, or -1 with an exception set (e.g. KeyboardInterrupt) */
int sleep_until(int64_t deadline_ns, bool spin);

/** Before a thread-API wait sleeps: RuntimeError when this thread runs an asyncio event loop
 * (the sleep would stop every task of it). @return 0, or -1 with the error set */
int refuse_in_event_loop(void);

/** Sleep out an admitted request's wait, from the decision's own time (no drift).
 * @return 0, or -1 with an exception */
int sleep_decision(const struct sw_decision *d);

/* Waiting for another process's lock: the core's lock_wait_hook releases the GIL while it
 * waits, then runs the signal handlers and checks this thread's deadline. A call that can give
 * up (a decision, an attach, a release, an exit) does when a handler raised, the deadline
 * passed or the owner is stuck (OSError): the binding sees SW_EBUSY. Any other wait goes on;
 * a handler's exception is raised by the eval loop once the call has returned. */

/** Install the hook (module init). */
void lock_wait_install(void);
/** This thread's deadline (sw_time_ns) for lock waits, 0 for none; returns the previous one. */
int64_t lock_wait_deadline(int64_t deadline_ns);
/** After a core call returned SW_EBUSY: 1 when it gave up at this thread's deadline (nothing
 * raised), else -1 with the exception set (a signal handler's, or OSError). */
int lock_gave_up(void);
/** lock_gave_up for a call with no deadline of its own (a release, an exit): a give-up at
 * this thread's deadline is an OSError too. @return -1, the exception set */
int lock_gave_up_error(void);
/** Whether lock_gave_up has returned 1 on this thread since the last call (then cleared). */
bool lock_wait_expired(void);

/* A destructor's wait for a shared region's lock: the exception being handled and the
 * thread's deadline set aside meanwhile; a give-up is unraisable (what the lock guards is left
 * for the reap). dealloc_wait_begin(&dw); if (dealloc_wait_end(&dw, ..._or_give_up(v))) ... */
struct dealloc_wait {
    PyObject *type, *value, *tb;
    int64_t deadline;
};
void dealloc_wait_begin(struct dealloc_wait *dw);
/** @return got (whether the lock is held) */
bool dealloc_wait_end(struct dealloc_wait *dw, bool got);

/* A private wait queue: threads waiting in acquire() for a release(). */
struct waitq {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* on CLOCK_MONOTONIC */
    atomic_int waiters;
    uint64_t generation; /* bumped under mu by every release */
    int ok;              /* mu and cv initialised */
};

/** @return 0, or -1 with OSError set */
int waitq_init(struct waitq *q);
/** Destroy (no thread may be waiting). */
void waitq_destroy(struct waitq *q);
/** Wake every waiter (cheap when none waits). */
void waitq_notify(struct waitq *q);
/** Register as a waiter before deciding. @return the generation to wait on */
uint64_t waitq_arm(struct waitq *q);
/** Stop being a waiter (after waitq_arm, when not calling waitq_wait). */
void waitq_disarm(struct waitq *q);
/** Sleep until a notify after gen, until_ns or one slice; then stop being a waiter and run the
 * signal handlers. @return 0, or -1 with an exception */
int waitq_wait(struct waitq *q, uint64_t gen, int64_t until_ns);

/* fork(): the forking thread takes every registered private lock (no other thread holds one
 * at the fork), the parent releases them, the child resets them and forgets its waiters. */
struct fork_link {
    struct fork_link *prev, *next;
    sw_lock *lock;      /* the core lock, or NULL */
    struct waitq *wq;   /* the wait queue, or NULL */
    atomic_bool shared; /* lives in memory shared across processes: the handlers skip it */
    bool linked;
    unsigned char kind; /* FORK_KIND_*: the object the link is in (for fork_sum's callers) */
    /* called in the child after the lock is reset, or NULL: the only thread, no Python */
    void (*child)(struct fork_link *l);
};
enum { FORK_KIND_DEFAULT = 0, FORK_KIND_KEYED = 1, FORK_KIND_LIMITER = 2 };

/** Register an object's locks (installs the fork handlers once); child: what the child's
 * handler calls after resetting the lock, or NULL. @return 0, or -1 */
int fork_register_child(struct fork_link *l, sw_lock *lock, struct waitq *wq,
                        void (*child)(struct fork_link *l));
#define fork_register(l, lock, wq) fork_register_child(l, lock, wq, NULL)
/** Register an object in shared memory (the handlers skip it), for fork_sum. */
void fork_register_shared(struct fork_link *l);
/** The sum of fn(link, ctx) over the registered objects, under the registry's mutex. */
int64_t fork_sum(int64_t (*fn)(const struct fork_link *l, const void *ctx), const void *ctx);
/** Remove it (safe to call when not registered). */
void fork_unregister(struct fork_link *l);

#endif /* SW_BINDING_WAIT_H */
