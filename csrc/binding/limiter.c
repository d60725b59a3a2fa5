/* limiter.c - the C base of slidewin.Limiter: decisions, acquire(), release(), stats(). */
#include "limiter.h"
#include "entry.h"
#include "limiting_ops.h"
#include "adaptive.h"
#include "args.h"
#include "metric.h"
#include "observe.h"
#include "shared.h"
#include "wakers.h"

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

void limiter_notify(LimiterObject *self)
{
    limiting_notify((PyObject *)self, NULL);
}

static const struct limiting_ops limiter_ops;

/* the next lease tag (sw_limiter.h): 1..SW_LEASE_TAG_MAX, one an object, in turn */
static _Atomic uint32_t lease_tags;

static PyObject *Limiter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    struct sw_limiter_cfg cfg;
    PyObject *v[CTOR_N], *name = NULL;
    char path[4096];
    module_state *st = state_for_new(type);
    if (st == NULL || limiter_parse_cfg_as("Limiter", args, kwds, CTOR_MAX_KEYS, &cfg, v) < 0)
        return NULL;
    int name_given;
    int mode = shared_and_name(v[CTOR_SHARED], v[CTOR_NAME], path, sizeof path, &name,
                               &name_given);
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
    PyObject *shared = mode == 0 ? Py_None : shared_canonical(v[CTOR_SHARED], path);
    Py_XINCREF(mode == 0 ? shared : NULL);
    if (limiting_init((PyObject *)self, &limiter_ops, st, &cfg, &self->view, &self->view.my_slot,
                      name, name_given, shared) < 0)
        goto fail;
    self->fork.kind = FORK_KIND_LIMITER;
    int rc;
    if (mode == 0) {
        self->lim = PyMem_Calloc(1, size);
        if (self->lim == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        if ((rc = sw_limiter_init(self->lim, &cfg)) != SW_OK)
            goto fail_rc;
        sw_limiter_view(self->lim, &self->view);
        struct sw_window w;
        sw_limiter_window(self->lim, &w);
        if (fork_register(&self->fork, w.lock, &self->wq) < 0)
            goto fail;
    } else {
        if ((rc = sw_rule_init(&self->rule, &cfg)) != SW_OK)
            goto fail_rc;
        if (region_open(&self->shm, mode, path, &limiter_ops.region, cfg.interval_ms,
                        cfg.sample_count, 0, SW_SHM_MAX_PROCS,
                        sw_lstate_size(cfg.interval_ms, cfg.sample_count), self->name) < 0)
            goto fail;
        self->is_shared = 1;
        self->view.st = self->shm.state;
        self->view.rule = &self->rule;
        self->view.token = SW_LOCK_PROCESS;
        self->view.slots = self->shm.slots;
        self->view.n_slots = self->shm.n_slots;
        self->view.held = &self->held;
        if (limiting_claim((PyObject *)self) < 0)
            goto fail;
        /* restore every invariant the hot path relies on (a region is input), then give back
         * what dead processes left in flight when a reap is due */
        if (GAVE_UP(sw_lstate_check_repair(&self->view))) {
            (void)lock_gave_up();
            /* the slot just claimed holds nothing: free it without the lock that never came */
            atomic_store(&self->view.slots[self->view.my_slot].token, 0);
            self->view.my_slot = -1;
            goto fail;
        }
        (void)limiting_maybe_reap((PyObject *)self);
        /* leases of the head bucket live in the process's slot, each tagged with the object
         * it was granted to (another object may decide with other settings) */
        self->view.lease = atomic_fetch_add(&lease_tags, 1u) % SW_LEASE_TAG_MAX + 1u;
        fork_register_shared(&self->fork); /* found by the others' held_on_region */
    }
    if (registry_add(st, self->name, (PyObject *)self) < 0)
        goto fail;
    return (PyObject *)self;
fail_rc:
    (void)raise_core_error(rc);
fail:
    Py_DECREF(self);
    return NULL;
}

/* What another live object of this process holds on self's region (under its lock). */
static int64_t held_on_region(const struct fork_link *l, const void *ctx)
{
    const LimiterObject *o =
        (const LimiterObject *)limiting_same_region(l, (PyObject *)(uintptr_t)ctx);
    return o != NULL && o->held > 0 ? o->held : 0;
}

static int lim_decide(PyObject *self, uint64_t fp, int64_t n, int64_t now_ns, unsigned flags,
                      struct sw_decision *d)
{
    (void)fp;
    return sw_decide(limiter_view((LimiterObject *)self), n, now_ns, flags, d);
}

LIMITING_VIEW_OPS(lim, sw_lstate_reap, sw_view_lock_or_give_up, sw_view_lock, sw_view_unlock,
                  sw_count_shadow_block, sw_count, sw_totals_read)

static void lim_stats(const void *view, int64_t now_ns, struct sw_stats *out, int64_t *evicted)
{
    sw_stats_read(view, now_ns, out);
    *evicted = 0; /* KeyedLimiter only */
}

static int64_t lim_give_back_locked(PyObject *self)
{
    return sw_lstate_give_back_locked(&((LimiterObject *)self)->view,
                                      fork_sum(held_on_region, self));
}

static void lim_forget_held(PyObject *self)
{
    ((LimiterObject *)self)->held = 0;
}

static void lim_give_back(PyObject *self, uint64_t fp, int64_t n)
{
    (void)fp;
    sw_exit(limiter_view((LimiterObject *)self), n, 0, SW_OUT_NONE, SW_NOW);
    limiter_notify((LimiterObject *)self);
}

static int lim_charge(PyObject *self, uint64_t fp, int64_t n, int64_t now_ns)
{
    (void)fp;
    return sw_charge(limiter_view((LimiterObject *)self), n, now_ns);
}

/* End an entered entry: count its outcome and give its count back. @return 0, or SW_EBUSY
 * (the lock gave up) */
static int lim_entry_finish(PyObject *entry, int64_t rt, int outcome)
{
    EntryObject *e = (EntryObject *)entry;
    LimiterObject *lim = e->limiter;
    if (GAVE_UP(sw_exit_rt_or_give_up(limiter_view(lim), e->n, rt, outcome, SW_NOW)))
        return SW_EBUSY;
    limiter_notify(lim);
    return 0;
}

static void lim_free_own(PyObject *self)
{
    PyMem_Free(((LimiterObject *)self)->lim);
    ((LimiterObject *)self)->lim = NULL;
}

_Static_assert(offsetof(LimiterObject, head) == offsetof(LimitingObject, head), "head first");
static const struct limiting_ops limiter_ops = {
    {SW_KIND_LIMITER, lim_init_state, lim_check_state, lim_state_lock},
    NULL, lim_decide, lim_reap, lim_lock, lim_unlock, lim_count_block, lim_count, lim_stats,
    lim_totals,
    NULL, lim_give_back_locked, lim_forget_held, lim_free_own, NULL, lim_give_back, lim_charge,
    lim_entry_finish,
    {"an entry can be entered only once: this one has exited; make a new one per request with "
     "lim.entry()",
     "an entry can be entered only once: this one is already entered (an entry belongs to one "
     "`with` block; make one per request with lim.entry())"},
};

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
        (void)limiting_maybe_reap((PyObject *)self); /* a dead process's counts, next call */
    Py_RETURN_FALSE;
}

/* _refund(n, now_ns=None): give back the throttle slot of n not used (sw_refund). */
static PyObject *Limiter_refund(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    int64_t n, now;
    static const char *const names[] = {"n", "now_ns"};
    PyObject *a[2];
    if (parse_fast_req("_refund", args, nargs, kwnames, names, 2, 1, 1, a) < 0 ||
        parse_n(a[0], 0, &n) < 0 || parse_now(a[1], &now) < 0)
        return NULL;
    (void)sw_refund(limiter_view(self), n, now);
    Py_RETURN_NONE;
}

static PyObject *Limiter_release(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = {"n"};
    PyObject *a[1];
    int64_t n;
    if (parse_fast("release", args, nargs, kwnames, names, 1, 1, a) < 0 ||
        parse_n(a[0], 1, &n) < 0)
        return NULL;
    int rc = sw_release(limiter_view(self), n);
    if (GAVE_UP(rc)) {
        (void)lock_gave_up_error(); /* the count stays held: the caller may try again */
        return NULL;
    }
    struct sw_limiter_cfg cfg;
    if (rc == SW_ESTATE)
        limiting_settings((PyObject *)self, &cfg, NULL);
    if (rc == SW_ESTATE && cfg.shadow) {
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

/* ---- benchmark-only module functions ---- */

PyObject *bench_noop(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    (void)m;
    Py_RETURN_NONE;
}

/* _try_acquire_nogil(lim, n=1, *, now_ns=None): try_acquire with the GIL released. */
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

/* update()'s swap of the view's rule, under the state's lock */
static void lim_apply_rule(PyObject *self, void *rule)
{
    struct sw_view *v = &((LimiterObject *)self)->view;
    sw_view_store_rule(v, (struct sw_rule *)(uintptr_t)v->rule, rule);
}

static PyObject *Limiter_update(LimiterObject *self, PyObject *args, PyObject *kwds)
{
    static const char *const settings[] = {UPDATE_CFG_SETTINGS, "_rate"};
    static const char *const layout[] = {"interval_ms", "sample_count", "shared", "name",
                                         NULL};
    PyObject *v[9], **rate, *slot;
    /* checked against a snapshot, installed unless another update() landed meanwhile (then
     * checked again): no torn read and no lost update, with or without the GIL */
    for (;;) {
        struct sw_limiter_cfg cfg;
        uint64_t gen;
        limiting_settings((PyObject *)self, &cfg, &gen);
        if (update_parse("Limiter", args, kwds, settings, v, 9, layout, &cfg, &rate, &slot) < 0)
            return NULL;
        struct sw_rule rule;
        int rc = sw_rule_init(&rule, &cfg);
        if (rc != SW_OK)
            return raise_core_error(rc);
        if (limiting_install((PyObject *)self, gen, &cfg, lim_apply_rule, &rule, rate) == 0)
            break;
    }
    limiter_notify(self); /* a higher concurrency may admit a waiter now */
    Py_RETURN_NONE;
}

static PyGetSetDef Limiter_getset[] = {
    {"metric", (getter)Limiter_get_metric, NULL,
     "This limiter's window as a Metric (a live view).", NULL},
    {"qps", cfg_get_qps, NULL, "The rate per second, or None.", NULL},
    {"concurrency", cfg_get_concurrency, NULL, "The in-flight limit, or None.", NULL},
    {"behavior", cfg_get_behavior, NULL, "The controller.", NULL},
    {"warm_up_s", cfg_get_warm_up_s, NULL, "Warm-up period, s.", NULL},
    {"cold_factor", cfg_get_cold_factor, NULL, "Warm-up cold factor.", NULL},
    {"occupy_timeout_ms", cfg_get_occupy_timeout_ms, NULL,
     "Longest wait of a prioritized borrow, ms.", NULL},
    {"in_flight", (getter)Limiter_get_in_flight, NULL, "Requests in flight now.", NULL},
    LIMITING_GETSET,
    {NULL}};

static PyMethodDef Limiter_methods[] = {
    METHOD(totals, limiting_totals, METH_NOARGS, "()", "Lifetime totals since creation (monotonic, never reset): a dict with pass, block, exception, success, occupied_pass, rt (ms) and shadow_block (shadow decisions an enforcing limiter would have refused, a part of block)."),
    METHOD(update, Limiter_update, METH_VARARGS | METH_KEYWORDS, "(**settings)", "Change the settings in place (qps, concurrency, behavior, warm_up_s, cold_factor, max_queueing_ms, occupy_timeout_ms, shadow); the windows, the throttle's queue and the warm-up tokens are kept. Shared: this process's settings."),
    METHOD(try_acquire, Limiter_try_acquire, FASTKW, "(n=1, *, now_ns=None)", "Admit now or refuse; never waits. Counts PASS or BLOCK."),
    METHOD(reserve, limiting_reserve, FASTKW, "(n=1, *, now_ns=None, prioritized=False)", "Admission that may need a wait: the wait in ns (0 = go now), or None when blocked."),
    METHOD(acquire, limiting_acquire_m, FASTKW, "(n=1, *, timeout=None)", "Admit, sleeping (GIL released) for a throttle's wait; raise BlockedError on refusal. With a timeout, retry until admitted or timeout seconds have passed."),
    METHOD(release, Limiter_release, FASTKW, "(n=1)", "Give back n in flight."),
    METHOD(_refund, Limiter_refund, FASTKW, "(n, now_ns=None)", "Give back a throttle's slot of n not used: its queue moves back by the cost of n, never before now. Counts nothing."),
    METHOD(charge, limiting_charge, FASTKW, "(n, *, now_ns=None)", "Count n more as admitted now, without a decision: what a request used beyond what it was admitted for (tokens known after the reply). PASS (n) in the current bucket, seen by later decisions until it slides out; a throttle's queue moves by the cost of n. Never refuses, never gives back."),
    METHOD(entry, entry_make, FASTKW, "(n=1, *, timeout=None)", "A context manager: acquire (as acquire(n, timeout=timeout): with a timeout, wait up to that many seconds for admission); on exit record SUCCESS or EXCEPTION, RT, and release."),
    METHOD(stats, limiting_stats, FASTKW, "(now_ns=None)", "The window's statistics as a Stats."),
    LIMITING_METHODS,
    ADAPTIVE_METHODS
    {NULL}};

WEAKREF_MEMBERS(Limiter, LimiterObject);

TYPE_SPEC(Limiter, "slidewin._core.Limiter", LimiterObject, Py_TPFLAGS_BASETYPE,
          {Py_tp_doc, "The C base of slidewin.Limiter."}, {Py_tp_new, Limiter_new},
          {Py_tp_traverse, traverse_type}, {Py_tp_dealloc, limiting_dealloc},
          {Py_tp_repr, limiting_repr}, TYPE_TABLES(Limiter));
