/* limiter.c - the C base of slidewin.Limiter: decisions, acquire(), release(), stats(). */
#include "limiter.h"
#include "adaptive.h"
#include "args.h"
#include "entry.h"
#include "metric.h"
#include "observe.h"
#include "shared.h"
#include "wakers.h"

#include <sched.h>
#include <string.h>

#include <math.h>

static int limiter_parse_cfg(PyObject *args, PyObject *kwds, struct sw_limiter_cfg *cfg,
                             PyObject **o_shared, PyObject **o_name)
{
    return limiter_parse_cfg_as("Limiter", args, kwds, cfg, o_shared, o_name);
}

static int lim_init_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_init(state, lay->interval_ms, lay->sample_count);
}

static sw_lock *lim_state_lock(void *state)
{
    return &((struct sw_lstate *)state)->lock;
}

static int lim_check_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_validate(state, (size_t)lay->state_size, lay->interval_ms,
                              lay->sample_count);
}

/* Claim this process's slot of a shared limiter (reaping dead processes when all are taken).
 * @return 0, or -1 with OSError set */
static int claim_slot(LimiterObject *self)
{
    self->view.my_slot = sw_shm_claim_slot(&self->shm, sw_proc_token());
    if (self->view.my_slot < 0) {
        (void)sw_lstate_reap(&self->view);
        self->view.my_slot = sw_shm_claim_slot(&self->shm, sw_proc_token());
    }
    self->fork_gen = sw_proc_fork_generation();
    if (self->view.my_slot < 0) {
        PyErr_Format(PyExc_OSError, "shared region %R: all %u process slots are taken by live "
                     "processes", self->shared, self->shm.n_slots);
        return -1;
    }
    return 0;
}

/* fork_gen while one thread of a fork() child claims the child's slot */
#define FORK_GEN_CLAIMING UINT64_MAX

void limiter_refork(LimiterObject *self)
{
    uint64_t now = sw_proc_fork_generation();
    for (;;) {
        uint64_t seen = atomic_load_explicit(&self->fork_gen, memory_order_acquire);
        if (seen == now)
            return; /* another thread of this process claimed it */
        if (seen == FORK_GEN_CLAIMING) {
            sched_yield();
            continue;
        }
        if (atomic_compare_exchange_strong(&self->fork_gen, &seen, FORK_GEN_CLAIMING))
            break;
    }
    int32_t slot = sw_shm_claim_slot(&self->shm, sw_proc_token());
    if (slot < 0) {
        (void)sw_lstate_reap(&self->view);
        slot = sw_shm_claim_slot(&self->shm, sw_proc_token());
    }
    /* with no slot left (more than SW_SHM_MAX_PROCS live processes), this process's
     * in-flight counts are not given back should it die: rare, and never an over-admission */
    self->view.my_slot = slot;
    self->held = 0; /* what the object held is the parent's (its copy gives it back) */
    atomic_store_explicit(&self->fork_gen, now, memory_order_release);
}

static struct sw_limiter_cfg limiter_cfg(LimiterObject *self);

void limiter_notify(LimiterObject *self)
{
    if (self->is_shared)
        shared_notify(&self->shm);
    else
        waitq_notify(&self->wq);
    waker_call(self->waker, NULL);
}

static PyObject *Limiter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    struct sw_limiter_cfg cfg;
    PyObject *o_shared, *o_name, *name = NULL;
    char path[4096];
    module_state *st = state_of_type(type);
    if (st == NULL) {
        PyErr_SetString(PyExc_TypeError, "slidewin module state not found");
        return NULL;
    }
    if (limiter_parse_cfg(args, kwds, &cfg, &o_shared, &o_name) < 0)
        return NULL;
    int name_given;
    int mode = shared_and_name(o_shared, o_name, path, sizeof path, &name, &name_given);
    if (mode < 0)
        return NULL;
    size_t size = sw_limiter_size(&cfg);
    if (size == 0) {
        PyErr_SetString(PyExc_ValueError, "invalid Limiter configuration");
        return NULL;
    }
    LimiterObject *self = (LimiterObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_XDECREF(name);
        return NULL;
    }
    pthread_mutex_init(&self->cfg_mu, NULL);
    self->st = st;
    self->cfg = cfg;
    self->grade = cfg.grade;
    self->interval_ms = cfg.interval_ms;
    self->weakreflist = NULL;
    self->name = name;
    self->name_given = name_given;
    if (mode == 0) {
        self->shared = Py_None;
        Py_INCREF(Py_None);
    } else if ((self->shared = shared_canonical(o_shared, path)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    if (waitq_init(&self->wq) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (mode == 0) {
        self->lim = PyMem_Calloc(1, size);
        if (self->lim == NULL) {
            Py_DECREF(self);
            return PyErr_NoMemory();
        }
        int rc = sw_limiter_init(self->lim, &cfg);
        if (rc != SW_OK) {
            Py_DECREF(self);
            return raise_core_error(rc);
        }
        sw_limiter_view(self->lim, &self->view);
        struct sw_window w;
        sw_limiter_window(self->lim, &w);
        if (fork_register(&self->fork, w.lock, &self->wq) < 0 ||
            registry_add(st, self->name, (PyObject *)self) < 0) {
            Py_DECREF(self);
            return NULL;
        }
        return (PyObject *)self;
    }
    int rc = sw_rule_init(&self->rule, &cfg);
    if (rc != SW_OK) {
        Py_DECREF(self);
        return raise_core_error(rc);
    }
    struct sw_shm_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.kind = SW_KIND_LIMITER;
    lay.interval_ms = cfg.interval_ms;
    lay.sample_count = cfg.sample_count;
    lay.n_slots = SW_SHM_MAX_PROCS;
    lay.state_size = sw_lstate_size(cfg.interval_ms, cfg.sample_count);
    lay.init_state = lim_init_state;
    lay.check_state = lim_check_state;
    lay.state_lock = lim_state_lock;
    lay.name = self->name != NULL ? PyUnicode_AsUTF8(self->name) : NULL;
    if (shared_open(&self->shm, mode, path, &lay) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->is_shared = 1;
    self->view.st = self->shm.state;
    self->view.rule = &self->rule;
    self->view.token = SW_LOCK_PROCESS;
    self->view.slots = self->shm.slots;
    self->view.n_slots = self->shm.n_slots;
    self->held = 0;
    self->view.held = &self->held;
    if (claim_slot(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    /* restore every invariant the hot path relies on (a region is input), then give back
     * what dead processes left in flight when a reap is due */
    if (GAVE_UP(sw_lstate_check_repair(&self->view))) {
        (void)lock_gave_up();
        /* the slot just claimed holds nothing: free it without the lock that never came */
        atomic_store(&self->view.slots[self->view.my_slot].token, 0);
        self->view.my_slot = -1;
        Py_DECREF(self);
        return NULL;
    }
    (void)shared_maybe_reap(self);
    fork_register_shared(&self->fork); /* found by the others' held_on_region */
    if (registry_add(st, self->name, (PyObject *)self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* What another live object of this process holds in the process's slot of self's region (its
 * held is changed under the region's lock, which the caller holds). */
static int64_t held_on_region(const struct fork_link *l, const void *ctx)
{
    const LimiterObject *me = ctx;
    const LimiterObject *o =
        (const LimiterObject *)(const void *)((const char *)l - offsetof(LimiterObject, fork));
    if (l->kind != FORK_KIND_DEFAULT || !atomic_load(&l->shared) || !o->is_shared ||
        me->shm.anonymous ||
        o->shm.anonymous || o->shm.dev != me->shm.dev || o->shm.ino != me->shm.ino ||
        atomic_load_explicit(&o->fork_gen, memory_order_acquire) != sw_proc_fork_generation())
        return 0;
    return o->held > 0 ? o->held : 0;
}

static int Limiter_traverse(LimiterObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void Limiter_dealloc(LimiterObject *self)
{
    PyTypeObject *tp = dealloc_start((PyObject *)self, self->weakreflist);
    fork_unregister(&self->fork);
    waitq_destroy(&self->wq);
    if (self->is_shared) {
        /* the process's slot is shared by all its objects on the region (sw_shm_claim_slot):
         * it stays until the process dies and is reaped; what this object still holds in
         * flight (acquired, never released) is given back now, unless the object is a fork()
         * child's copy that never decided (then it is the parent's) */
        if (self->view.my_slot >= 0 &&
            atomic_load_explicit(&self->fork_gen, memory_order_acquire) ==
                sw_proc_fork_generation()) {
            /* a lock that never comes (a live process that is not in it, stuck) is given
             * up on: the count then stays for the reap (a destructor never blocks forever) */
            struct dealloc_wait dw;
            dealloc_wait_begin(&dw);
            if (dealloc_wait_end(&dw, sw_view_lock_or_give_up(&self->view))) {
                int64_t back = sw_lstate_give_back_locked(&self->view,
                                                          fork_sum(held_on_region, self));
                sw_view_unlock(&self->view);
                if (back > 0)
                    shared_notify(&self->shm);
            }
        }
        sw_shm_close(&self->shm);
        self->is_shared = 0;
    }
    Py_CLEAR(self->shared);
    Py_CLEAR(self->name);
    Py_CLEAR(self->waker);
    pthread_mutex_destroy(&self->cfg_mu);
    PyMem_Free(self->lim);
    self->lim = NULL;
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

void raise_blocked(LimiterObject *self, int64_t n, const struct sw_decision *d)
{
    if (self->is_shared)
        (void)shared_maybe_reap(self); /* a dead process's in-flight counts, for the next */
    blocked_raise(self->st, (PyObject *)self, NULL, n, d);
}

static PyObject *Limiter_try_acquire(LimiterObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"n", "now_ns"};
    PyObject *a[2];
    int64_t n = 1, now = SW_NOW;
    struct sw_decision d;
    if (nargs != 0 || kwnames != NULL) {
        if (parse_fast("try_acquire", args, nargs, kwnames, names, 2, 1, a) < 0 ||
            parse_n(a[0], 1, &n) < 0 || parse_now(a[1], &now) < 0)
            return NULL;
    }
    if (GAVE_UP(sw_decide(limiter_view(self), n, now, SW_F_TRY, &d)) && lock_gave_up() < 0)
        return NULL;
    if (d.verdict == SW_PASS)
        Py_RETURN_TRUE;
    if (self->is_shared && self->grade == SW_GRADE_CONCURRENCY)
        (void)shared_maybe_reap(self); /* a dead process's counts, for the next call */
    Py_RETURN_FALSE;
}



static PyObject *Limiter_reserve(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = {"n", "now_ns", "prioritized"};
    PyObject *a[3];
    int64_t n = 1, now = SW_NOW;
    int prio = 0;
    struct sw_decision d;
    if (nargs != 0 || kwnames != NULL) {
        if (parse_fast("reserve", args, nargs, kwnames, names, 3, 1, a) < 0 ||
            parse_n(a[0], 1, &n) < 0 || parse_now(a[1], &now) < 0 ||
            parse_bool(a[2], "prioritized", &prio) < 0)
            return NULL;
    }
    if (GAVE_UP(sw_decide(limiter_view(self), n, now, prio ? SW_F_PRIORITIZED : 0u, &d)) &&
        lock_gave_up() < 0)
        return NULL;
    if (d.verdict == SW_PASS)
        return PyLong_FromLongLong(d.wait_ns);
    Py_RETURN_NONE;
}

/* _decide(n, flags, now_ns) -> (verdict, wait_ns, retry_ns): the building block of the
 * asyncio helpers. verdict: 0 pass, 1 block, 2 never. */
static PyObject *Limiter_decide(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t n, flags, now;
    struct sw_decision d;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_decide(n, flags, now_ns) takes 3 arguments");
        return NULL;
    }
    if (parse_n(args[0], 1, &n) < 0 || as_int64(args[1], "flags", 0, 63, &flags) < 0 ||
        parse_now(args[2], &now) < 0)
        return NULL;
    if (GAVE_UP(sw_decide(limiter_view(self), n, now, (unsigned)flags, &d)) &&
        lock_gave_up() < 0)
        return NULL;
    /* SHADOWED (3): admitted in shadow mode where an enforcing limiter would have refused */
    return Py_BuildValue("(iLL)", d.shadowed ? 3 : d.verdict, (long long)d.wait_ns,
                         (long long)d.retry_ns);
}

/* _count_block(n, shadow=False): the one BLOCK of a request that retried and finally failed;
 * shadow: a shadow rule's would-be refusal (shadow_block too), after a group's retries. */
static PyObject *Limiter_count_block(LimiterObject *self, PyObject *const *args,
                                     Py_ssize_t nargs)
{
    int64_t n;
    int shadow = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "_count_block(n, shadow=False) takes 1 or 2 arguments");
        return NULL;
    }
    if (parse_n(args[0], 1, &n) < 0 || (nargs == 2 && (shadow = PyObject_IsTrue(args[1])) < 0))
        return NULL;
    if (shadow)
        sw_count_shadow_block(limiter_view(self), n, SW_NOW);
    else
        sw_count(limiter_view(self), SW_EV_BLOCK, n, SW_NOW);
    Py_RETURN_NONE;
}

/* _raise_blocked(n, verdict, retry_ns): raise the BlockedError of a refusal. */
static PyObject *Limiter_raise_blocked(LimiterObject *self, PyObject *const *args,
                                       Py_ssize_t nargs)
{
    int64_t n, verdict, retry;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_raise_blocked(n, verdict, retry_ns) takes 3 arguments");
        return NULL;
    }
    if (parse_n(args[0], 1, &n) < 0 || as_int64(args[1], "verdict", 0, 2, &verdict) < 0 ||
        as_int64(args[2], "retry_ns", -1, INT64_MAX, &retry) < 0)
        return NULL;
    struct sw_decision d = {(int)verdict, 0, 0, retry, 0, 0};
    raise_blocked(self, n, &d);
    return NULL;
}

/* _release_entry(n): give back an entry's in-flight count without counting anything (an
 * asyncio entry cancelled while queued). */
static PyObject *Limiter_release_entry(LimiterObject *self, PyObject *arg)
{
    int64_t n;
    if (parse_n(arg, 1, &n) < 0)
        return NULL;
    sw_exit(limiter_view(self), n, 0, SW_OUT_NONE, SW_NOW);
    limiter_notify(self);
    Py_RETURN_NONE;
}


static uint32_t limiter_reap(const void *view)
{
    return sw_lstate_reap(view);
}

bool shared_maybe_reap(LimiterObject *self)
{
    return self->is_shared && shared_reap_due(&self->shm) &&
           shared_reap(&self->shm, limiter_reap, limiter_view(self));
}

/* acquire_loop's questions to a Limiter */
struct lim_ask {
    LimiterObject *self;
    int64_t n;
    unsigned flags;
};

static void lim_ask_decide(void *ctx, struct sw_decision *d)
{
    struct lim_ask *a = ctx;
    if (GAVE_UP(sw_decide(limiter_view(a->self), a->n, SW_NOW,
                          a->flags | SW_F_NO_BLOCK | SW_F_RETRY, d)))
        (void)lock_gave_up(); /* acquire_loop sees the exception, or the deadline */
}

static bool lim_ask_reap(void *ctx)
{
    return shared_maybe_reap(((struct lim_ask *)ctx)->self);
}

/* acquire(): one decision, or with a timeout the loop of retries (acquire_loop). */
int limiter_acquire_d(LimiterObject *self, int64_t n, int64_t timeout_ns, unsigned flags,
                      bool defer_wait, struct sw_decision *d)
{
    if (timeout_ns < 0) {
        if (GAVE_UP(sw_decide(limiter_view(self), n, SW_NOW, flags | SW_F_RETRY, d)) &&
            lock_gave_up() < 0)
            return -1;
        if (d->verdict != SW_PASS) {
            raise_blocked(self, n, d);
            return -1;
        }
        return defer_wait ? 0 : sleep_decision(d);
    }
    bool conc = self->grade == SW_GRADE_CONCURRENCY;
    struct lim_ask ask = {self, n, flags};
    struct acquire_loop loop = {lim_ask_decide, lim_ask_reap, &ask,
                                conc && !self->is_shared ? &self->wq : NULL,
                                conc && self->is_shared ? &self->shm : NULL, false,
                                defer_wait};
    int rc = acquire_loop(&loop, timeout_ns, d);
    if (rc == 1) {
        if (!loop.lock_expired) /* a lock never taken (a stopped holder): nothing counted */
            sw_count(limiter_view(self), SW_EV_BLOCK, n, SW_NOW);
        raise_blocked(self, n, d);
        return -1;
    }
    return rc;
}

/* @return 0 admitted, -1 with an exception set. */
static int limiter_acquire(LimiterObject *self, int64_t n, int64_t timeout_ns, unsigned flags)
{
    struct sw_decision d;
    return limiter_acquire_d(self, n, timeout_ns, flags, false, &d);
}

static PyObject *Limiter_acquire(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = {"n", "timeout"};
    PyObject *a[2] = {NULL, NULL};
    int64_t n = 1, timeout = -1;
    if (nargs != 0 || kwnames != NULL) {
        if (parse_fast("acquire", args, nargs, kwnames, names, 2, 1, a) < 0 ||
            parse_n(a[0], 1, &n) < 0 || parse_timeout(a[1], &timeout) < 0)
            return NULL;
    }
    if (limiter_acquire(self, n, timeout, 0u) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* charge(n, *, now_ns=None): count n more as admitted now, without a decision (sw_charge). */
static PyObject *Limiter_charge(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"n", "now_ns"};
    PyObject *a[2] = {NULL, NULL};
    int64_t n, now = SW_NOW;
    if (parse_fast("charge", args, nargs, kwnames, names, 2, 1, a) < 0)
        return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "charge() missing required argument 'n'");
        return NULL;
    }
    if (parse_n(a[0], 0, &n) < 0 || parse_now(a[1], &now) < 0)
        return NULL;
    if (sw_charge(limiter_view(self), n, now) == SW_ESTATE) {
        PyErr_Format(PyExc_ValueError, "charge(n=%lld): a concurrency limiter counts requests "
                     "in flight, not amounts; charge a qps limiter", (long long)n);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Limiter_release(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    int64_t n;
    if (parse_n_only("release", args, nargs, kwnames, &n) < 0)
        return NULL;
    int rc = sw_release(limiter_view(self), n);
    if (GAVE_UP(rc)) {
        (void)lock_gave_up_error(); /* the count stays held: the caller may try again */
        return NULL;
    }
    if (rc == SW_ESTATE && limiter_cfg(self).shadow) {
        /* shadow: a would-be refusal held nothing, so its caller's release() has nothing to
         * give back; never raise, give back what is there (at most n) */
        sw_exit(limiter_view(self), n, 0, SW_OUT_NONE, SW_NOW);
        rc = SW_OK;
    }
    if (rc == SW_ESTATE) {
        PyErr_Format(PyExc_ValueError, "release(n=%lld): only %lld in flight", (long long)n,
                     (long long)sw_in_flight(limiter_view(self)));
        return NULL;
    }
    limiter_notify(self);
    Py_RETURN_NONE;
}

static PyObject *Limiter_stats(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    int64_t now;
    static const char *const names[] = {"now_ns"};
    PyObject *a[1] = {NULL};
    if (parse_fast("stats", args, nargs, kwnames, names, 1, 1, a) < 0 || parse_now(a[0], &now) < 0)
        return NULL;
    struct sw_stats s;
    (void)shared_maybe_reap(self);
    sw_stats_read(limiter_view(self), now, &s);
    return stats_new(self->st, &s, self->interval_ms, 0); /* evicted: KeyedLimiter only */
}

static PyObject *Limiter_get_metric(LimiterObject *self, void *Py_UNUSED(c))
{
    struct sw_window w;
    sw_view_window(limiter_view(self), &w); /* a takeover through it repairs the whole state */
    return metric_new_view(self->st, (PyObject *)self, &w);
}

static PyObject *Limiter_get_in_flight(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(sw_in_flight(limiter_view(self)));
}


/* The settings, read under the object's own mutex only (update() writes them under it and
 * the state's lock): never waits for another process. */
static struct sw_limiter_cfg limiter_cfg(LimiterObject *self)
{
    pthread_mutex_lock(&self->cfg_mu);
    struct sw_limiter_cfg cfg = self->cfg;
    pthread_mutex_unlock(&self->cfg_mu);
    return cfg;
}

#define LIMITER_CFG_GETTER(field)                                                              \
    static PyObject *Limiter_get_##field(LimiterObject *self, void *Py_UNUSED(c))              \
    {                                                                                          \
        struct sw_limiter_cfg snap = limiter_cfg(self);                                        \
        return cfg_get_##field((PyObject *)(void *)&snap, (void *)0);                          \
    }
LIMITER_CFG_GETTER(qps)
LIMITER_CFG_GETTER(concurrency)
LIMITER_CFG_GETTER(behavior)
LIMITER_CFG_GETTER(warm_up_s)
LIMITER_CFG_GETTER(cold_factor)
LIMITER_CFG_GETTER(max_queueing_ms)
LIMITER_CFG_GETTER(occupy_timeout_ms)
LIMITER_CFG_GETTER(shadow)
LIMITER_CFG_GETTER(interval_ms)
LIMITER_CFG_GETTER(sample_count)
#undef LIMITER_CFG_GETTER

static PyObject *Limiter_repr(LimiterObject *self)
{
    struct sw_limiter_cfg cfg = limiter_cfg(self);
    PyObject *parts = PyList_New(0);
    if (parts == NULL)
        return NULL;
    if (repr_settings(parts, &cfg, 1) < 0) {
        Py_DECREF(parts);
        return NULL;
    }
    return repr_finish((PyObject *)self, parts, cfg.shadow != 0, self->shared, self->name,
                       self->name_given);
}

static PyObject *Limiter_entry(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    int64_t n = 1, timeout = -1;
    if (nargs != 0 || kwnames != NULL) {
        static const char *const names[] = {"n", "timeout"};
        PyObject *a[2] = {NULL, NULL};
        if (parse_fast("entry", args, nargs, kwnames, names, 2, 1, a) < 0 ||
            parse_n(a[0], 1, &n) < 0 || parse_timeout(a[1], &timeout) < 0)
            return NULL;
    }
    return entry_new(self, n, timeout);
}

/* ---- the asyncio waiter queue's hooks (slidewin/_waiters.py) ---------------------------- */

/* _set_waker(callable or None): called (no argument) by every release while set */
static PyObject *Limiter_set_waker(LimiterObject *self, PyObject *arg)
{
    return waker_set(&self->waker, arg);
}

static PyObject *Limiter_watch(LimiterObject *self, PyObject *arg)
{
    return waker_watch(&self->shm, self->is_shared, arg);
}

static PyObject *Limiter_release_wait(LimiterObject *self, PyObject *const *args,
                                      Py_ssize_t nargs)
{
    return waker_release_wait(&self->shm, self->is_shared, args, nargs);
}

/* _reap() -> bool: give back dead processes' in-flight counts now (shared; False otherwise) */
static PyObject *Limiter_reap(LimiterObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(shared_maybe_reap(self));
}

/* ------------------------------------------------------------------------------------ */
/* benchmark-only module functions (slidewin._core._noop, slidewin._core._try_acquire_nogil) */

PyObject *bench_noop(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    (void)m;
    Py_RETURN_NONE;
}

/* _try_acquire_nogil(lim, n=1, *, now_ns=None): try_acquire with the GIL released around the
 * core call (the GIL study). */
PyObject *bench_try_acquire_nogil(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const char *const names[] = {"lim", "n", "now_ns"};
    PyObject *a[3];
    int64_t n = 1, now = SW_NOW;
    struct sw_decision d;
    module_state *st = (module_state *)PyModule_GetState(m);
    if (parse_fast("_try_acquire_nogil", args, nargs, kwnames, names, 3, 2, a) < 0 ||
        parse_n(a[1], 1, &n) < 0 || parse_now(a[2], &now) < 0)
        return NULL;
    if (a[0] == NULL || !PyObject_TypeCheck(a[0], st->Limiter_Type)) {
        PyErr_Format(PyExc_TypeError, "_try_acquire_nogil() needs a Limiter, not %.100s",
                     a[0] == NULL ? "nothing" : type_name_of(a[0]));
        return NULL;
    }
    LimiterObject *self = (LimiterObject *)a[0];
    const struct sw_view *v = limiter_view(self); /* with the GIL: a fork child's claim */
    Py_BEGIN_ALLOW_THREADS
    sw_decide(v, n, now, SW_F_TRY, &d);
    Py_END_ALLOW_THREADS
    if (d.verdict == SW_PASS)
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyObject *Limiter_totals(LimiterObject *self, PyObject *Py_UNUSED(ignored))
{
    struct sw_totals t;
    sw_totals_read(limiter_view(self), &t);
    return totals_dict(&t);
}

/* update(**settings): change this process's settings in place; the state is kept. */
static PyObject *Limiter_update(LimiterObject *self, PyObject *args, PyObject *kwds)
{
    static const char *const settings[] = {UPDATE_CFG_SETTINGS};
    static const char *const layout[] = {"interval_ms", "sample_count", "shared", "name",
                                         NULL};
    PyObject *v[8];
    const struct sw_view *view = limiter_view(self);
    /* checked against a snapshot (cfg_mu), and installed in one swap under the state's lock
     * (decisions read the rule under it) and cfg_mu unless another update() landed meanwhile
     * (then checked again): no torn read and no lost update, with or without the GIL */
    for (;;) {
        pthread_mutex_lock(&self->cfg_mu);
        struct sw_limiter_cfg cfg = self->cfg;
        uint64_t gen = self->settings_gen;
        pthread_mutex_unlock(&self->cfg_mu);
        if (update_parse("Limiter", args, kwds, settings, v, 8, layout, &cfg) < 0)
            return NULL;
        struct sw_rule rule;
        int rc = sw_rule_init(&rule, &cfg);
        if (rc != SW_OK)
            return raise_core_error(rc);
        /* one swap under the state's lock: a decision sees the old rule or the new one */
        sw_view_lock(view);
        pthread_mutex_lock(&self->cfg_mu); /* always after the state's lock */
        bool same = self->settings_gen == gen;
        if (same) {
            *(struct sw_rule *)view->rule = rule;
            self->cfg = cfg;
            self->settings_gen++;
        }
        pthread_mutex_unlock(&self->cfg_mu);
        sw_view_unlock(view);
        if (same)
            break;
    }
    limiter_notify(self); /* a higher concurrency may admit a waiter now */
    Py_RETURN_NONE;
}

#define CFG CFG_AT(LimiterObject)
static PyGetSetDef Limiter_getset[] = {
    {"metric", (getter)Limiter_get_metric, NULL,
     "This limiter's window as a Metric (a live view).", NULL},
    {"qps", (getter)Limiter_get_qps, NULL, "The rate per second, or None.", CFG},
    {"concurrency", (getter)Limiter_get_concurrency, NULL, "The in-flight limit, or None.", CFG},
    {"behavior", (getter)Limiter_get_behavior, NULL, "The controller.", CFG},
    {"warm_up_s", (getter)Limiter_get_warm_up_s, NULL, "Warm-up period, s.", CFG},
    {"cold_factor", (getter)Limiter_get_cold_factor, NULL, "Warm-up cold factor.", CFG},
    {"max_queueing_ms", (getter)Limiter_get_max_queueing_ms, NULL, "Throttle queue, ms.", CFG},
    {"occupy_timeout_ms", (getter)Limiter_get_occupy_timeout_ms, NULL,
     "Longest wait of a prioritized borrow, ms.", CFG},
    {"interval_ms", (getter)Limiter_get_interval_ms, NULL, "The window, ms.", CFG},
    {"sample_count", (getter)Limiter_get_sample_count, NULL, "Buckets in the window.", CFG},
    {"in_flight", (getter)Limiter_get_in_flight, NULL, "Requests in flight now.", NULL},
    {"shared", get_object_or_none, NULL,
     "How it was opened: None (private), True (anonymous), or the region's name or path.",
     (void *)offsetof(LimiterObject, shared)},
    {"name", get_object_or_none, NULL,
     "The name (name=, else the shared region's name), or None.",
     (void *)offsetof(LimiterObject, name)},
    {"shadow", (getter)Limiter_get_shadow, NULL,
     "Shadow mode: decides and counts, admits everything.", CFG},
    {NULL}};
#undef CFG

static PyMethodDef Limiter_methods[] = {
    {"totals", (PyCFunction)Limiter_totals, METH_NOARGS,
     "totals()\n--\n\nLifetime totals since creation (monotonic, never reset): a dict with "
     "pass, block, exception, success, occupied_pass, rt (ms) and shadow_block (shadow "
     "decisions an enforcing limiter would have refused, a part of block)."},
    {"update", (PyCFunction)(void (*)(void))Limiter_update, METH_VARARGS | METH_KEYWORDS,
     "update(**settings)\n--\n\nChange the settings in place (qps, concurrency, behavior, "
     "warm_up_s, cold_factor, max_queueing_ms, occupy_timeout_ms, shadow); the windows, the "
     "throttle's queue and the warm-up tokens are kept. Shared: this process's settings."},
    {"try_acquire", (PyCFunction)(void (*)(void))Limiter_try_acquire, FASTKW,
     "try_acquire(n=1, *, now_ns=None)\n--\n\n"
     "Admit now or refuse; never waits. Counts PASS or BLOCK."},
    {"reserve", (PyCFunction)(void (*)(void))Limiter_reserve, FASTKW,
     "reserve(n=1, *, now_ns=None, prioritized=False)\n--\n\n"
     "Admission that may need a wait: the wait in ns (0 = go now), or None when blocked."},
    {"acquire", (PyCFunction)(void (*)(void))Limiter_acquire, FASTKW,
     "acquire(n=1, *, timeout=None)\n--\n\n"
     "Admit, sleeping (GIL released) for a throttle's wait; raise BlockedError on refusal. "
     "With a timeout, retry until admitted or timeout seconds have passed."},
    {"release", (PyCFunction)(void (*)(void))Limiter_release, FASTKW,
     "release(n=1)\n--\n\nGive back n in flight."},
    {"charge", (PyCFunction)(void (*)(void))Limiter_charge, FASTKW,
     "charge(n, *, now_ns=None)\n--\n\nCount n more as admitted now, without a decision: "
     "what a request used beyond what it was admitted for (tokens known after the reply). "
     "PASS (n) in the current bucket, seen by later decisions until it slides out; a "
     "throttle's queue moves by the cost of n. Never refuses, never gives back."},
    {"entry", (PyCFunction)(void (*)(void))Limiter_entry, FASTKW,
     "entry(n=1, *, timeout=None)\n--\n\nA context manager: acquire (as acquire(n, "
     "timeout=timeout): with a timeout, wait up to that many seconds for admission); on exit "
     "record SUCCESS or EXCEPTION, RT, and release."},
    {"stats", (PyCFunction)(void (*)(void))Limiter_stats, FASTKW,
     "stats(now_ns=None)\n--\n\nThe window's statistics as a Stats."},
    {"_decide", (PyCFunction)(void (*)(void))Limiter_decide, METH_FASTCALL, NULL},
    {"_count_block", (PyCFunction)(void (*)(void))Limiter_count_block, METH_FASTCALL, NULL},
    {"_raise_blocked", (PyCFunction)(void (*)(void))Limiter_raise_blocked, METH_FASTCALL, NULL},
    {"_release_entry", (PyCFunction)Limiter_release_entry, METH_O, NULL},
    {"_set_waker", (PyCFunction)Limiter_set_waker, METH_O, NULL},
    {"_watch", (PyCFunction)Limiter_watch, METH_O, NULL},
    {"_release_wait", (PyCFunction)(void (*)(void))Limiter_release_wait, METH_FASTCALL, NULL},
    {"_reap", (PyCFunction)Limiter_reap, METH_NOARGS, NULL},
    ADAPTIVE_METHODS
    {NULL}};

static PyMemberDef Limiter_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(LimiterObject, weakreflist), READONLY, NULL},
    {NULL}};

static PyType_Slot Limiter_slots[] = {
    {Py_tp_doc, "The C base of slidewin.Limiter."},
    {Py_tp_new, Limiter_new},
    {Py_tp_traverse, Limiter_traverse},
    {Py_tp_dealloc, Limiter_dealloc},
    {Py_tp_repr, Limiter_repr},
    {Py_tp_methods, Limiter_methods},
    {Py_tp_getset, Limiter_getset},
    {Py_tp_members, Limiter_members},
    {0, NULL}};

PyType_Spec Limiter_spec = {
    .name = "slidewin._core.Limiter",
    .basicsize = sizeof(LimiterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Limiter_slots,
};
