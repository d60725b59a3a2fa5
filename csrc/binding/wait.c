/* wait.c - sleeping and waiting with the GIL released, and fork safety of private locks. */
#include "wait.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "sw_platform.h"
#include "sw_time.h"

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int sleep_until(int64_t deadline_ns, bool spin)
{
    for (;;) {
        if (PyErr_CheckSignals() < 0)
            return -1;
        int64_t now = sw_time_ns();
        if (now >= deadline_ns)
            return 0;
        int64_t coarse = spin ? deadline_ns - SPIN_NS : deadline_ns;
        if (now >= coarse) { /* the last stretch of an admitted wait: spin it */
            Py_BEGIN_ALLOW_THREADS
            while (sw_time_ns() < deadline_ns)
                cpu_relax();
            Py_END_ALLOW_THREADS
            return 0;
        }
        int64_t until = coarse - now > WAIT_SLICE_NS ? now + WAIT_SLICE_NS : coarse;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = sw_platform_sleep_until(until);
        Py_END_ALLOW_THREADS
        if (rc != 0 && rc != EINTR) {
            errno = rc;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
}

int refuse_in_event_loop(void)
{
    /* asyncio not imported: no loop can run; else asyncio's own _get_running_loop() */
    PyObject *events = PyDict_GetItemString(PyImport_GetModuleDict(), "asyncio.events");
    if (events == NULL)
        return 0;
    PyObject *loop = PyObject_CallMethod(events, "_get_running_loop", NULL);
    if (loop == NULL)
        return -1;
    int running = loop != Py_None;
    Py_DECREF(loop);
    if (!running)
        return 0;
    PyErr_SetString(PyExc_RuntimeError,
                    "acquire() or entry(timeout=...) would sleep in the thread that runs an "
                    "asyncio event loop, blocking every task of it: inside a running event "
                    "loop use await lim.acquire_async(...), async with lim.entry(...) or "
                    "async with lim");
    return -1;
}

int sleep_decision(const struct sw_decision *d)
{
    if (d->wait_ns <= 0)
        return 0;
    if (refuse_in_event_loop() < 0)
        return -1;
    return sleep_until(sw_sat_add(d->now_ns, d->wait_ns), true);
}

/* ---- another process's lock ---- */

static _Thread_local int64_t lock_deadline;  /* 0: none */
static _Thread_local int lock_timed_out;     /* the last give-up was at the deadline */
static _Thread_local bool lock_expired;      /* lock_gave_up returned 1 since last asked */

bool lock_wait_expired(void)
{
    bool e = lock_expired;
    lock_expired = false;
    return e;
}

int64_t lock_wait_deadline(int64_t deadline_ns)
{
    int64_t old = lock_deadline;
    lock_deadline = deadline_ns;
    return old;
}

/* Longest a lock wait goes without the GIL before it runs the signal handlers. */
#define LOCK_SLICE_NS (20 * INT64_C(1000000))

/* Whether this thread holds the GIL. Not PyGILState_Check(): with a subinterpreter it answers
 * 1 always, and a wait without the GIL would release a GIL it does not hold (fatal). */
static int holds_gil(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked() != NULL;
#else
    return _PyThreadState_UncheckedGet() != NULL;
#endif
}

/* A signal handler's exception from a wait that cannot give up: set aside and raised by the
 * eval loop right after the call (a pending call). Handlers run on the main thread only. */
static PyObject *deferred_type, *deferred_value, *deferred_tb;

static int raise_deferred(void *Py_UNUSED(arg))
{
    if (deferred_type == NULL)
        return 0;
    PyErr_Restore(deferred_type, deferred_value, deferred_tb);
    deferred_type = deferred_value = deferred_tb = NULL;
    return -1;
}

/* Run the signal handlers where the wait cannot give up, never leaving an exception set. */
static void run_handlers_deferred(void)
{
    if (deferred_type != NULL || PyErr_Occurred() || PyErr_CheckSignals() == 0)
        return;
    PyErr_Fetch(&deferred_type, &deferred_value, &deferred_tb);
    if (Py_AddPendingCall(raise_deferred, NULL) < 0) { /* the queue is full: rare */
        PyErr_Restore(deferred_type, deferred_value, deferred_tb);
        deferred_type = deferred_value = deferred_tb = NULL;
        PyErr_WriteUnraisable(NULL);
    }
}

static int lock_hook(const struct sw_lock_wait *w)
{
    int gil = holds_gil();
    PyThreadState *ts = gil ? PyEval_SaveThread() : NULL;
    int64_t now = sw_time_ns(), end = now + LOCK_SLICE_NS;
    if (lock_deadline != 0 && w->may_give_up && lock_deadline < end)
        end = lock_deadline;
    /* until the word changes (released, or taken by another): 50 us naps, growing to 1 ms
     * while the owner stays (a stopped one may stay for minutes) */
    long nap_ns = 50000;
    while (sw_lock_owner_of(atomic_load_explicit(&w->lock->word, memory_order_relaxed)) ==
               w->owner && now < end) {
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
        if (nap_ns < 1000000)
            nap_ns *= 2;
        now = sw_time_ns();
    }
    if (!gil)
        return 0; /* no GIL: no handler to run, no exception to raise; the core goes on */
    PyEval_RestoreThread(ts);
    if (!w->may_give_up) {
        run_handlers_deferred(); /* the core goes on; a handler's exception comes after it */
        return 0;
    }
    if (PyErr_Occurred() || PyErr_CheckSignals() < 0)
        return 1;
    if (w->stuck) {
        char msg[320];
        /* the owner is alive, so the region may be in use: never advise removing it (the
         * processes would split across two regions, each allowing the whole limit) */
        snprintf(msg, sizeof msg,
                 "a shared region's lock is held by live pid %lu (state %c) for more than "
                 "%g s (%.1f s seen), which is not stopped, so it is not in it: that process "
                 "is hung, or the region is damaged",
                 (unsigned long)(w->owner >> 32), w->owner_state,
                 (double)sw_lock_stuck_ns / 1e9, (double)w->held_ns / 1e9);
        PyErr_SetString(PyExc_OSError, msg);
        return 1;
    }
    if (lock_deadline != 0 && sw_time_ns() >= lock_deadline) {
        lock_timed_out = 1;
        return 1;
    }
    return 0;
}

void lock_wait_install(void)
{
    sw_lock_wait_hook = lock_hook;
}

int lock_gave_up(void)
{
    if (lock_timed_out && !PyErr_Occurred()) {
        lock_timed_out = 0;
        lock_expired = true;
        return 1;
    }
    lock_timed_out = 0;
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_OSError, "gave up waiting for a shared region's lock");
    return -1;
}

int lock_gave_up_error(void)
{
    if (lock_gave_up() >= 0) { /* at a deadline of this thread's: nothing done either */
        (void)lock_wait_expired();
        PyErr_SetString(PyExc_OSError, "gave up waiting for a shared region's lock");
    }
    return -1;
}

void dealloc_wait_begin(struct dealloc_wait *dw)
{
    PyErr_Fetch(&dw->type, &dw->value, &dw->tb);
    dw->deadline = lock_wait_deadline(0); /* an early give-up would leave the count behind */
}

bool dealloc_wait_end(struct dealloc_wait *dw, bool got)
{
    if (!got) {
        if (lock_gave_up() < 0)
            PyErr_WriteUnraisable(NULL);
        else
            (void)lock_wait_expired();
    }
    (void)lock_wait_deadline(dw->deadline);
    PyErr_Restore(dw->type, dw->value, dw->tb);
    return got;
}

/* ---- wait queue ---- */

int waitq_init(struct waitq *q)
{
    q->ok = 0;
    atomic_init(&q->waiters, 0);
    q->generation = 0;
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_mutex_init failed");
        return -1;
    }
    if (sw_platform_cond_init(&q->cv) != 0) {
        pthread_mutex_destroy(&q->mu);
        PyErr_SetString(PyExc_OSError, "pthread_cond_init failed");
        return -1;
    }
    q->ok = 1;
    return 0;
}

void waitq_destroy(struct waitq *q)
{
    if (q->ok) {
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        q->ok = 0;
    }
}

void waitq_notify(struct waitq *q)
{
    if (atomic_load_explicit(&q->waiters, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&q->mu);
        q->generation++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
}

uint64_t waitq_arm(struct waitq *q)
{
    uint64_t gen;
    atomic_fetch_add(&q->waiters, 1);
    pthread_mutex_lock(&q->mu);
    gen = q->generation;
    pthread_mutex_unlock(&q->mu);
    return gen;
}

void waitq_disarm(struct waitq *q)
{
    atomic_fetch_sub(&q->waiters, 1);
}

int waitq_wait(struct waitq *q, uint64_t gen, int64_t until_ns)
{
    int64_t now = sw_time_ns();
    if (until_ns - now > WAIT_SLICE_NS)
        until_ns = now + WAIT_SLICE_NS;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&q->mu);
    while (q->generation == gen) {
        if (sw_platform_cond_timedwait(&q->cv, &q->mu, until_ns) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&q->mu);
    Py_END_ALLOW_THREADS
    waitq_disarm(q);
    return PyErr_CheckSignals() < 0 ? -1 : 0;
}

/* ---- fork ---- */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fork_link registry = {&registry, &registry, NULL, NULL, false, true,
                                     FORK_KIND_DEFAULT, NULL};
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static int handlers_rc = 0;

/* prepare: the registry, then every private object's core lock and wait-queue mutex (the
 * core never takes a wait-queue mutex, nor a wait queue the core lock: no order to break) */
static void fork_prepare(void)
{
    pthread_mutex_lock(&registry_mu);
    for (struct fork_link *l = registry.next; l != &registry; l = l->next) {
        if (atomic_load(&l->shared))
            continue;
        if (l->lock != NULL)
            sw_lock_acquire(l->lock);
        if (l->wq != NULL && l->wq->ok)
            pthread_mutex_lock(&l->wq->mu);
    }
}

static void fork_parent(void)
{
    for (struct fork_link *l = registry.next; l != &registry; l = l->next) {
        if (atomic_load(&l->shared))
            continue;
        if (l->wq != NULL && l->wq->ok)
            pthread_mutex_unlock(&l->wq->mu);
        if (l->lock != NULL)
            sw_lock_release(l->lock);
    }
    pthread_mutex_unlock(&registry_mu);
}

/* child: only the forking thread exists; its waiters are gone with their threads */
static void fork_child(void)
{
    for (struct fork_link *l = registry.next; l != &registry; l = l->next) {
        if (atomic_load(&l->shared))
            continue;
        if (l->wq != NULL && l->wq->ok) {
            atomic_store(&l->wq->waiters, 0);
            pthread_mutex_unlock(&l->wq->mu);
            /* the condition variable may still count the parent's sleepers: a fresh one */
            if (sw_platform_cond_init(&l->wq->cv) != 0)
                pthread_cond_init(&l->wq->cv, NULL);
        }
        if (l->lock != NULL)
            sw_lock_release(l->lock);
        if (l->child != NULL)
            l->child(l);
    }
    pthread_mutex_unlock(&registry_mu);
}

static void install_handlers(void)
{
    handlers_rc = pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void registry_link(struct fork_link *l, sw_lock *lock, struct waitq *wq,
                          void (*child)(struct fork_link *l), bool shared)
{
    l->lock = lock;
    l->wq = wq;
    l->child = child;
    atomic_init(&l->shared, shared);
    pthread_mutex_lock(&registry_mu);
    l->prev = registry.prev;
    l->next = &registry;
    registry.prev->next = l;
    registry.prev = l;
    l->linked = true;
    pthread_mutex_unlock(&registry_mu);
}

int fork_register_child(struct fork_link *l, sw_lock *lock, struct waitq *wq,
                        void (*child)(struct fork_link *l))
{
    pthread_once(&handlers_once, install_handlers);
    if (handlers_rc != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return -1;
    }
    registry_link(l, lock, wq, child, false);
    return 0;
}

void fork_register_shared(struct fork_link *l)
{
    registry_link(l, NULL, NULL, NULL, true);
}

int64_t fork_sum(int64_t (*fn)(const struct fork_link *l, const void *ctx), const void *ctx)
{
    int64_t sum = 0;
    pthread_mutex_lock(&registry_mu);
    for (struct fork_link *l = registry.next; l != &registry; l = l->next)
        sum = sw_sat_add(sum, fn(l, ctx));
    pthread_mutex_unlock(&registry_mu);
    return sum;
}

void fork_unregister(struct fork_link *l)
{
    if (!l->linked)
        return;
    pthread_mutex_lock(&registry_mu);
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
    l->linked = false;
    pthread_mutex_unlock(&registry_mu);
}
