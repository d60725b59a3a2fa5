/* limiting_ops.c - what the limiter types do alike, written once over the head and the
 * operations table (limiting_ops.h). */
#include "limiting_ops.h"
#include "args.h"
#include "observe.h"
#include "shared.h"
#include "wakers.h"

#include <sched.h>

int region_open(struct sw_shm *shm, int mode, const char *path, const struct region_kind *k,
                int64_t interval_ms, uint32_t sample_count, uint32_t max_keys, uint32_t n_slots,
                size_t state_size, PyObject *name)
{
    struct sw_shm_layout lay = {
        .kind = k->kind, .interval_ms = interval_ms, .sample_count = sample_count,
        .max_keys = max_keys, .n_slots = n_slots, .state_size = state_size,
        .init_state = k->init_state, .check_state = k->check_state, .state_lock = k->state_lock,
        .name = name != NULL ? PyUnicode_AsUTF8(name) : NULL};
    return shared_open(shm, mode, path, &lay);
}

int limiting_init(PyObject *self, const struct limiting_ops *ops, module_state *st,
                  const struct sw_limiter_cfg *cfg, void *view, int32_t *my_slot,
                  PyObject *name, int name_given, PyObject *shared)
{
    struct limiting_head *h = LIMITING(self);
    /* ops first: the dealloc of a half-made object needs it */
    *h = (struct limiting_head){.ops = ops, .st = st, .cfg = *cfg, .grade = cfg->grade,
                                .interval_ms = cfg->interval_ms, .viewp = view,
                                .my_slot = my_slot, .shared = shared, .name = name,
                                .name_given = name_given};
    pthread_mutex_init(&h->cfg_mu, NULL);
    if (shared == NULL)
        return -1;
    return waitq_init(&h->wq);
}

/* fork_gen while one thread of a fork() child claims the child's slot */
#define FORK_GEN_CLAIMING UINT64_MAX

/* Claim the process's slot, reaping when all are taken. @return the slot, or -1 */
static int32_t claim(struct limiting_head *h)
{
    int32_t slot = sw_shm_claim_slot(&h->shm, sw_proc_token());
    if (slot < 0) {
        (void)h->ops->reap(h->viewp);
        slot = sw_shm_claim_slot(&h->shm, sw_proc_token());
    }
    return slot;
}

int limiting_claim(PyObject *self)
{
    struct limiting_head *h = LIMITING(self);
    *h->my_slot = claim(h);
    atomic_store(&h->fork_gen, sw_proc_fork_generation());
    if (*h->my_slot < 0) {
        PyErr_Format(PyExc_OSError, "shared region %R: all %u process slots are taken by live "
                     "processes", h->shared, h->shm.n_slots);
        return -1;
    }
    return 0;
}

void limiting_refork(PyObject *self)
{
    struct limiting_head *h = LIMITING(self);
    uint64_t now = sw_proc_fork_generation();
    for (;;) {
        uint64_t seen = atomic_load_explicit(&h->fork_gen, memory_order_acquire);
        if (seen == now)
            return; /* another thread of this process claimed it */
        if (seen == FORK_GEN_CLAIMING) {
            sched_yield();
            continue;
        }
        if (atomic_compare_exchange_strong(&h->fork_gen, &seen, FORK_GEN_CLAIMING))
            break;
    }
    /* with no slot left (more than SW_SHM_MAX_PROCS live processes), this process's
     * in-flight counts are not given back should it die: rare, and never an over-admission */
    *h->my_slot = claim(h);
    /* what the object held is the parent's (its copy gives it back); no other object reads
     * it before fork_gen is now */
    h->ops->forget_held(self);
    atomic_store_explicit(&h->fork_gen, now, memory_order_release);
}

bool limiting_maybe_reap(PyObject *self)
{
    struct limiting_head *h = LIMITING(self);
    return h->is_shared && shared_reap_due(&h->shm) &&
           shared_reap(&h->shm, h->ops->reap, limiting_view(self));
}

const LimitingObject *limiting_same_region(const struct fork_link *l, PyObject *self)
{
    const struct limiting_head *me = LIMITING(self);
    const LimitingObject *o =
        (const LimitingObject *)(const void *)((const char *)l - offsetof(LimitingObject, fork));
    if (l->kind != me->fork.kind || !atomic_load(&l->shared) || o->ops != me->ops ||
        !o->is_shared || me->shm.anonymous ||
        o->shm.anonymous || o->shm.dev != me->shm.dev || o->shm.ino != me->shm.ino ||
        atomic_load_explicit(&o->fork_gen, memory_order_acquire) != sw_proc_fork_generation())
        return NULL;
    return o;
}

void limiting_dealloc(PyObject *self)
{
    struct limiting_head *h = LIMITING(self);
    PyTypeObject *tp = dealloc_start(self, h->weakreflist);
    fork_unregister(&h->fork);
    waitq_destroy(&h->wq);
    if (h->is_shared) {
        /* the process's slot (shared by its objects) stays until the process is reaped; what
         * this object holds in flight is given back now, unless it is a fork() child's copy
         * that never decided (then it is the parent's) */
        if (*h->my_slot >= 0 && (h->ops->holds == NULL || h->ops->holds(self)) &&
            atomic_load_explicit(&h->fork_gen, memory_order_acquire) ==
                sw_proc_fork_generation()) {
            /* a lock that never comes is given up on: the count stays for the reap */
            struct dealloc_wait dw;
            dealloc_wait_begin(&dw);
            if (dealloc_wait_end(&dw, h->ops->lock(h->viewp, true))) {
                int64_t back = h->ops->give_back_locked(self);
                h->ops->unlock(h->viewp);
                if (back > 0)
                    shared_notify(&h->shm);
            }
        }
        h->ops->forget_held(self);
        sw_shm_close(&h->shm);
        h->is_shared = 0;
    }
    Py_CLEAR(h->shared);
    Py_CLEAR(h->name);
    Py_CLEAR(h->waker);
    Py_CLEAR(h->rate);
    pthread_mutex_destroy(&h->cfg_mu);
    if (h->ops != NULL)
        h->ops->free_own(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* BlockedError for the refusal of n (of key, or NULL), a reap first when shared */
static void raise_blocked(PyObject *self, PyObject *key, int64_t n, const struct sw_decision *d)
{
    (void)limiting_maybe_reap(self); /* a dead process's in-flight counts, for the next */
    blocked_raise(LIMITING(self)->st, self, key, n, d);
}

static void decide_no_block(PyObject *self, uint64_t fp, int64_t n, unsigned flags,
                            struct sw_decision *d)
{
    if (GAVE_UP(LIMITING(self)->ops->decide(self, fp, n, SW_NOW,
                                            flags | SW_F_NO_BLOCK | SW_F_RETRY, d)))
        (void)lock_gave_up(); /* seen by acquire_loop: the exception, or the deadline */
}

/* acquire(timeout=): on refusal sleep until retry_after (a concurrency limit: a release, in
 * any process when shared) within the timeout. *lock_expired: another process's lock never
 * came. @return 0 admitted, 1 refused (nothing counted or raised), or -1 with an exception */
static int acquire_loop(PyObject *self, uint64_t fp, int64_t n, unsigned flags,
                        int64_t timeout_ns, bool defer_wait, bool *lock_expired,
                        struct sw_decision *d)
{
    struct limiting_head *h = LIMITING(self);
    bool conc = h->grade == SW_GRADE_CONCURRENCY;
    struct waitq *wq = conc && !h->is_shared ? &h->wq : NULL;
    struct sw_shm *shm = conc && h->is_shared ? &h->shm : NULL;
    int64_t deadline = sw_sat_add(sw_time_ns(), timeout_ns);
    *lock_expired = false;
    /* a wait for another process's lock (a stopped holder) ends at the deadline too */
    int64_t outer = lock_wait_deadline(deadline);
    int rc = -1;
    for (;;) {
        /* every step runs the signal handlers: Ctrl-C is seen whatever the behaviour */
        if (PyErr_CheckSignals() < 0)
            break;
        uint64_t gen = wq ? waitq_arm(wq) : 0;
        uint32_t seq = 0;
        if (shm) {
            /* a waiter in any process: a release there bumps release_seq and wakes us */
            atomic_fetch_add(&shm->hdr->waiters, 1u);
            seq = atomic_load(&shm->hdr->release_seq);
        }
        decide_no_block(self, fp, n, flags, d);
        if (d->verdict != SW_PASS && shm && !PyErr_Occurred() && sw_time_ns() < deadline &&
            limiting_maybe_reap(self))
            decide_no_block(self, fp, n, flags, d);
        int64_t now = sw_time_ns();
        /* stop on a signal handler's exception while waiting for a lock, an admission, a
         * final refusal, or (about to sleep) a running event loop */
        if (PyErr_Occurred())
            rc = -1;
        else if (d->verdict == SW_PASS)
            rc = 0;
        else if (d->verdict == SW_NEVER || now >= deadline)
            rc = 1;
        else if (refuse_in_event_loop() < 0)
            rc = -1;
        else
            rc = 2;
        if (rc != 2) {
            if (wq)
                waitq_disarm(wq);
            if (shm)
                atomic_fetch_sub(&shm->hdr->waiters, 1u);
            *lock_expired = rc == 1 && d->verdict != SW_NEVER && lock_wait_expired();
            break;
        }
        rc = -1; /* should the sleep fail */
        if (wq) {
            /* until a release (or the deadline), one slice at most */
            if (waitq_wait(wq, gen, deadline) < 0)
                break;
        } else if (shm) {
            int w = shared_wait(shm, seq, deadline);
            atomic_fetch_sub(&shm->hdr->waiters, 1u);
            if (w < 0)
                break;
        } else {
            /* retry_after known (reject, throttle), else poll at 1 ms; a poll never spins */
            int64_t until = sw_sat_add(now, d->retry_ns > 0 ? d->retry_ns : NS_PER_MS);
            if (sleep_until(until < deadline ? until : deadline, false) < 0)
                break;
        }
    }
    lock_wait_deadline(outer);
    if (rc == 0 && !defer_wait)
        rc = sleep_decision(d);
    return rc;
}

int limiting_acquire(PyObject *self, PyObject *key, uint64_t fp, int64_t n, int64_t timeout_ns,
                     unsigned flags, bool defer_wait, struct sw_decision *d)
{
    struct limiting_head *h = LIMITING(self);
    if (timeout_ns < 0) {
        if (GAVE_UP(h->ops->decide(self, fp, n, SW_NOW, flags | SW_F_RETRY, d)) &&
            lock_gave_up() < 0)
            return -1;
        if (d->verdict != SW_PASS) {
            raise_blocked(self, key, n, d);
            return -1;
        }
        return defer_wait ? 0 : sleep_decision(d);
    }
    bool lock_expired;
    int rc = acquire_loop(self, fp, n, flags, timeout_ns, defer_wait, &lock_expired, d);
    if (rc == 1) {
        if (!lock_expired) /* a lock never taken (a stopped holder): nothing counted */
            h->ops->count_block(limiting_view(self), n, false);
        raise_blocked(self, key, n, d);
        return -1;
    }
    return rc;
}

void limiting_settings(PyObject *self, struct sw_limiter_cfg *cfg, uint64_t *gen)
{
    struct limiting_head *h = LIMITING(self);
    pthread_mutex_lock(&h->cfg_mu);
    *cfg = h->cfg;
    if (gen != NULL)
        *gen = h->settings_gen;
    pthread_mutex_unlock(&h->cfg_mu);
}

int limiting_install(PyObject *self, uint64_t gen, const struct sw_limiter_cfg *cfg,
                     void (*apply)(PyObject *self, void *arg), void *arg, PyObject **rate)
{
    struct limiting_head *h = LIMITING(self);
    void *view = limiting_view(self);
    PyObject *old = NULL;
    (void)h->ops->lock(view, false);
    pthread_mutex_lock(&h->cfg_mu); /* always after the state's lock */
    bool same = h->settings_gen == gen;
    if (same) {
        if (apply != NULL)
            apply(self, arg);
        if (cfg != NULL)
            h->cfg = *cfg;
        if (rate != NULL) {
            old = h->rate;
            h->rate = Py_XNewRef(*rate);
        }
        h->settings_gen++;
    }
    pthread_mutex_unlock(&h->cfg_mu);
    h->ops->unlock(view);
    Py_XDECREF(old);
    return same ? 0 : 1;
}

void limiting_group_order(PyObject *self, struct sw_gmember *m)
{
    struct limiting_head *h = LIMITING(self);
    if (!h->is_shared)
        sw_gmember_order_private(m);
    else if (h->shm.anonymous)
        sw_gmember_order_shared(m, 0, (uint64_t)(uintptr_t)h->shm.base);
    else
        sw_gmember_order_shared(m, h->shm.dev, h->shm.ino);
}

PyObject *limiting_repr(PyObject *self)
{
    struct limiting_head *h = LIMITING(self);
    struct sw_limiter_cfg cfg;
    pthread_mutex_lock(&h->cfg_mu);
    cfg = h->cfg;
    PyObject *rate = Py_XNewRef(h->rate);
    pthread_mutex_unlock(&h->cfg_mu);
    PyObject *parts = PyList_New(0);
    /* occupy_timeout_ms: a Limiter's (no borrowing per key) */
    if (parts == NULL || repr_settings(parts, &cfg, h->ops->key_fp == NULL, rate) < 0 ||
        (h->ops->repr_own != NULL && h->ops->repr_own(self, parts) < 0)) {
        Py_XDECREF(parts);
        Py_XDECREF(rate);
        return NULL;
    }
    Py_XDECREF(rate);
    return repr_finish(self, parts, cfg.shadow != 0, h->shared, h->name, h->name_given);
}

PyObject *limiting_get_rate(PyObject *self, void *Py_UNUSED(c))
{
    struct limiting_head *h = LIMITING(self);
    pthread_mutex_lock(&h->cfg_mu);
    PyObject *rate = Py_XNewRef(h->rate);
    pthread_mutex_unlock(&h->cfg_mu);
    return rate != NULL ? rate : Py_NewRef(Py_None);
}

int limiting_set_rate(PyObject *self, PyObject *value, void *Py_UNUSED(c))
{
    if (value == NULL || (value != Py_None && !PyUnicode_CheckExact(value))) {
        PyErr_SetString(PyExc_TypeError, "_rate must be a str or None");
        return -1;
    }
    struct limiting_head *h = LIMITING(self);
    PyObject *rate = value == Py_None ? NULL : Py_NewRef(value);
    pthread_mutex_lock(&h->cfg_mu);
    PyObject *old = h->rate;
    h->rate = rate;
    pthread_mutex_unlock(&h->cfg_mu);
    Py_XDECREF(old);
    return 0;
}

/* A private method name(sig)'s nargs: want, after the key of a keyed type (*k: 1 then, else
 * 0). @return 0, or -1 with TypeError set */
static int private_args(PyObject *self, const char *name, const char *sig, Py_ssize_t nargs,
                        Py_ssize_t want, Py_ssize_t *k)
{
    *k = LIMITING(self)->ops->key_fp != NULL;
    if (nargs == want + *k)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s(%s%s) takes %zd argument%s", name, *k ? "key, " : "", sig,
                 want + *k, want + *k == 1 ? "" : "s");
    return -1;
}

PyObject *limiting_decide_m(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const struct limiting_ops *ops = LIMITING(self)->ops;
    Py_ssize_t k; /* the key first */
    int64_t n, flags, now;
    uint64_t fp = 0;
    struct sw_decision d;
    if (private_args(self, "_decide", "n, flags, now_ns", nargs, 3, &k) < 0 ||
        (k && ops->key_fp(self, args[0], &fp) < 0) || parse_n(args[k], 1, &n) < 0 ||
        as_int64(args[k + 1], "flags", 0, 63, &flags) < 0 || parse_now(args[k + 2], &now) < 0)
        return NULL;
    if (GAVE_UP(ops->decide(self, fp, n, now, (unsigned)flags, &d)) && lock_gave_up() < 0)
        return NULL;
    /* SHADOWED (3): admitted in shadow mode where an enforcing limiter would have refused */
    return Py_BuildValue("(iLL)", d.shadowed ? 3 : d.verdict, (long long)d.wait_ns,
                         (long long)d.retry_ns);
}

PyObject *limiting_raise_blocked_m(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t k; /* the key first */
    int64_t n, verdict, retry;
    if (private_args(self, "_raise_blocked", "n, verdict, retry_ns", nargs, 3, &k) < 0 ||
        parse_n(args[k], 1, &n) < 0 || as_int64(args[k + 1], "verdict", 0, 2, &verdict) < 0 ||
        as_int64(args[k + 2], "retry_ns", -1, INT64_MAX, &retry) < 0)
        return NULL;
    struct sw_decision d = {(int)verdict, 0, 0, retry, 0, 0};
    raise_blocked(self, k ? args[0] : NULL, n, &d);
    return NULL;
}

static const char *const key_n_names[] = {"key", "n", "timeout"};

int limiting_parse_acquire(PyObject *self, const char *fname, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames, PyObject **a, uint64_t *fp,
                           int64_t *n, int64_t *timeout)
{
    const struct limiting_ops *ops = LIMITING(self)->ops;
    Py_ssize_t k = ops->key_fp != NULL; /* the key first */
    *n = 1;
    *timeout = -1;
    *fp = 0;
    a[0] = NULL;
    if (!k && nargs == 0 && kwnames == NULL)
        return 0;
    if (parse_fast(fname, args, nargs, kwnames, key_n_names + 1 - k, 2 + k, 1 + k, a) < 0 ||
        parse_n(a[k], 1, n) < 0)
        return -1;
    if ((k && ops->key_fp(self, a[0], fp) < 0) ||
        (a[k + 1] != NULL && parse_timeout(a[k + 1], timeout) < 0))
        return -1;
    if (!k)
        a[0] = NULL; /* n, parsed: a[0] is the key or NULL */
    return 0;
}

PyObject *limiting_acquire_m(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *a[3];
    int64_t n, timeout;
    uint64_t fp;
    struct sw_decision d;
    if (limiting_parse_acquire(self, "acquire", args, nargs, kwnames, a, &fp, &n, &timeout) < 0 ||
        limiting_acquire(self, a[0], fp, n, timeout, 0u, false, &d) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *limiting_charge(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = {"key", "n", "now_ns"};
    const struct limiting_ops *ops = LIMITING(self)->ops;
    Py_ssize_t k = ops->key_fp != NULL; /* the key first */
    PyObject *a[3];
    int64_t n, now;
    uint64_t fp = 0;
    if (parse_fast_req("charge", args, nargs, kwnames, names + 1 - k, 2 + k, 1 + k, 1 + k, a) < 0 ||
        parse_n(a[k], 0, &n) < 0 || parse_now(a[k + 1], &now) < 0 ||
        (k && ops->key_fp(self, a[0], &fp) < 0))
        return NULL;
    if (ops->charge(self, fp, n, now) != SW_ESTATE)
        Py_RETURN_NONE;
    if (k)
        PyErr_Format(PyExc_ValueError, "charge(%R, n=%lld): a concurrency limiter counts "
                     "requests in flight, not amounts; charge a qps limiter", a[0], (long long)n);
    else
        PyErr_Format(PyExc_ValueError, "charge(n=%lld): a concurrency limiter counts requests "
                     "in flight, not amounts; charge a qps limiter", (long long)n);
    return NULL;
}

PyObject *limiting_reserve(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"key", "n", "now_ns", "prioritized"};
    const struct limiting_ops *ops = LIMITING(self)->ops;
    Py_ssize_t k = ops->key_fp != NULL; /* the key first; prioritized: a Limiter's */
    PyObject *a[3];
    int64_t n, now;
    uint64_t fp = 0;
    int prio = 0;
    struct sw_decision d;
    if (parse_fast("reserve", args, nargs, kwnames, names + 1 - k, 3, 1 + k, a) < 0 ||
        parse_n(a[k], 1, &n) < 0 || parse_now(a[k + 1], &now) < 0 ||
        (!k && parse_bool(a[2], "prioritized", &prio) < 0) ||
        (k && ops->key_fp(self, a[0], &fp) < 0))
        return NULL;
    if (GAVE_UP(ops->decide(self, fp, n, now, prio ? SW_F_PRIORITIZED : 0u, &d)) &&
        lock_gave_up() < 0)
        return NULL;
    if (d.verdict == SW_PASS)
        return PyLong_FromLongLong(d.wait_ns);
    Py_RETURN_NONE;
}

PyObject *limiting_release_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const struct limiting_ops *ops = LIMITING(self)->ops;
    Py_ssize_t k; /* the key first */
    int64_t n;
    uint64_t fp = 0;
    if (private_args(self, "_release_entry", "n", nargs, 1, &k) < 0 ||
        (k && ops->key_fp(self, args[0], &fp) < 0) || parse_n(args[k], 1, &n) < 0)
        return NULL;
    ops->give_back(self, fp, n);
    Py_RETURN_NONE;
}

PyObject *limiting_totals(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    struct sw_totals t;
    LIMITING(self)->ops->totals(limiting_view(self), &t);
    return totals_dict(&t);
}

PyObject *limiting_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    struct limiting_head *h = LIMITING(self);
    int64_t now, evicted = 0;
    static const char *const names[] = {"now_ns"};
    PyObject *a[1] = {NULL};
    if (parse_fast("stats", args, nargs, kwnames, names, 1, 1, a) < 0 || parse_now(a[0], &now) < 0)
        return NULL;
    struct sw_stats s;
    (void)limiting_maybe_reap(self);
    h->ops->stats(limiting_view(self), now, &s, &evicted);
    return stats_new(h->st, &s, h->interval_ms, evicted);
}

/* _count_block(n, shadow=False): the one BLOCK of a request that retried and finally failed
 * (shadow: a shadow rule's would-be refusal) */
PyObject *limiting_count_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const struct limiting_ops *ops = LIMITING(self)->ops;
    int64_t n;
    int shadow = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "_count_block(n, shadow=False) takes 1 or 2 arguments");
        return NULL;
    }
    if (parse_n(args[0], 1, &n) < 0 || (nargs == 2 && (shadow = PyObject_IsTrue(args[1])) < 0))
        return NULL;
    ops->count_block(limiting_view(self), n, shadow);
    Py_RETURN_NONE;
}

/* _reap() -> bool: give back dead processes' in-flight counts now (shared; False otherwise) */
PyObject *limiting_reap_m(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(limiting_maybe_reap(self));
}

PyObject *limiting_set_waker(PyObject *self, PyObject *arg)
{
    return waker_set(self, &LIMITING(self)->waker, arg);
}

PyObject *limiting_watch(PyObject *self, PyObject *arg)
{
    struct limiting_head *h = LIMITING(self);
    return waker_watch(&h->shm, h->is_shared, arg);
}

PyObject *limiting_release_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct limiting_head *h = LIMITING(self);
    return waker_release_wait(&h->shm, h->is_shared, args, nargs);
}

/* ---- properties: the settings, from a snapshot (limiting_settings) ---- */

#define CFG_GETTER(field, value)                                                               \
    PyObject *cfg_get_##field(PyObject *self, void *Py_UNUSED(c))                              \
    {                                                                                          \
        struct sw_limiter_cfg cfg;                                                             \
        limiting_settings(self, &cfg, NULL);                                                   \
        return value;                                                                          \
    }
CFG_GETTER(qps, cfg.grade != SW_GRADE_QPS ? Py_NewRef(Py_None) : PyFloat_FromDouble(cfg.count))
CFG_GETTER(concurrency, cfg.grade != SW_GRADE_CONCURRENCY
                            ? Py_NewRef(Py_None)
                            : PyLong_FromLongLong((long long)cfg.count))
CFG_GETTER(behavior, PyUnicode_FromString(behavior_names[cfg.behavior]))
CFG_GETTER(warm_up_s, PyFloat_FromDouble(cfg.warm_up_s))
CFG_GETTER(cold_factor, PyFloat_FromDouble(cfg.cold_factor))
CFG_GETTER(max_queueing_ms, PyLong_FromLongLong(cfg.max_queueing_ms))
CFG_GETTER(occupy_timeout_ms, PyLong_FromLongLong(cfg.occupy_timeout_ms))
CFG_GETTER(interval_ms, PyLong_FromLongLong(cfg.interval_ms))
CFG_GETTER(sample_count, PyLong_FromUnsignedLong(cfg.sample_count))
CFG_GETTER(shadow, PyBool_FromLong(cfg.shadow != 0))
#undef CFG_GETTER
