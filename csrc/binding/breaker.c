/* breaker.c - the C base of slidewin.Breaker, and the listeners called once the core's lock is
 * released. The entry and the decorator are Python (slidewin/_breaker.py). */
#include "breaker.h"
#include "limiting_ops.h"
#include "args.h"
#include "observe.h"
#include "shared.h"

#include <math.h>
#include <string.h>


/* ---- configuration ---- */

/* The constructor's keywords: the settings (update() takes these), then the layout's. */
enum { BK_ERROR_RATIO, BK_ERROR_COUNT, BK_SLOW_RT, BK_SLOW_RATIO, BK_MIN_REQ, BK_RECOVERY,
       BK_PROBE_TIMEOUT, BK_NSET, BK_SHARED = BK_NSET + 2, BK_NAME, BK_NNAMES };
static const char *const bk_names[BK_NNAMES + 1] = {
    "error_ratio", "error_count", "slow_rt_ms", "slow_ratio", "min_requests", "recovery_s",
    "probe_timeout_s", "interval_ms", "sample_count", "shared", "name", NULL};

/* probe_timeout_s: None, or a number of seconds > 0 (inf, or an int beyond a double: for
 * ever, as None). @return 0, or -1 with TypeError/ValueError naming it */
static int bk_probe_timeout(PyObject *o, double *out)
{
    if (o == Py_None) {
        *out = INFINITY;
        return 0;
    }
    double v;
    int overflow;
    if (number_as_double(o, "%s must be None (wait for ever) or a number of seconds > 0, not "
                         "%.100s", "probe_timeout_s", &v, &overflow) < 0)
        return -1;
    if (overflow) { /* an int beyond a double: its sign decides */
        (void)PyLong_AsLongLongAndOverflow(o, &overflow);
        v = overflow > 0 ? INFINITY : -INFINITY;
    }
    if (!(v > 0.0)) {
        PyErr_Format(PyExc_ValueError, "probe_timeout_s must be None (wait for ever) or a "
                     "number of seconds > 0, got %R", o);
        return -1;
    }
    *out = v;
    return 0;
}

/* Apply the settings given in v (BK_NSET of them, NULL: not given) to cfg and check the whole.
 * @return 0, or -1 with TypeError/ValueError naming the parameter */
static int bk_apply(struct sw_breaker_cfg *cfg, PyObject *const *v, int need_grade)
{
    PyObject *a[BK_NSET];
    for (int i = 0; i < BK_NSET; i++) /* None: not given, for the grade's keywords */
        a[i] = i <= BK_SLOW_RATIO && v[i] == Py_None ? NULL : v[i];
    int given = (a[BK_ERROR_RATIO] != NULL) + (a[BK_ERROR_COUNT] != NULL) +
                (a[BK_SLOW_RT] != NULL);
    if (given > 1 || (need_grade && given == 0)) {
        PyErr_SetString(PyExc_ValueError,
                        "pass exactly one of error_ratio (a ratio in [0, 1]), error_count "
                        "(an int >= 0) or slow_rt_ms (an int >= 0, with slow_ratio)");
        return -1;
    }
    if (a[BK_ERROR_RATIO] != NULL) {
        cfg->grade = SW_BRK_ERROR_RATIO;
        if (as_nonneg_double(a[BK_ERROR_RATIO], "error_ratio", 1.0, &cfg->threshold) < 0)
            return -1;
    } else if (a[BK_ERROR_COUNT] != NULL) {
        int64_t c;
        cfg->grade = SW_BRK_ERROR_COUNT;
        if (as_int64(a[BK_ERROR_COUNT], "error_count", 0, (int64_t)SW_BRK_MAX_COUNT, &c) < 0)
            return -1;
        cfg->threshold = (double)c;
    } else if (a[BK_SLOW_RT] != NULL) {
        if (cfg->grade != SW_BRK_SLOW_RATIO)
            cfg->threshold = 1.0; /* slow_ratio's default */
        cfg->grade = SW_BRK_SLOW_RATIO;
        if (as_int64(a[BK_SLOW_RT], "slow_rt_ms", 0, SW_MAX_INTERVAL_MS, &cfg->slow_rt_ms) < 0)
            return -1;
    }
    double r;
    if (a[BK_SLOW_RATIO] != NULL) {
        if (as_nonneg_double(a[BK_SLOW_RATIO], "slow_ratio", 1.0, &r) < 0)
            return -1;
        if (cfg->grade == SW_BRK_SLOW_RATIO) {
            cfg->threshold = r;
        } else if (r != 1.0) {
            PyErr_SetString(PyExc_ValueError,
                            "slow_ratio applies to a slow-call breaker: pass slow_rt_ms "
                            "with it (error_ratio and error_count take no slow_ratio)");
            return -1;
        }
    }
    if ((a[BK_MIN_REQ] != NULL &&
         as_int64(a[BK_MIN_REQ], "min_requests", 0, INT64_MAX, &cfg->min_requests) < 0) ||
        (a[BK_RECOVERY] != NULL && as_nonneg_double(a[BK_RECOVERY], "recovery_s",
                                                    SW_BRK_MAX_RECOVERY_S,
                                                    &cfg->recovery_s) < 0) ||
        (a[BK_PROBE_TIMEOUT] != NULL &&
         bk_probe_timeout(a[BK_PROBE_TIMEOUT], &cfg->probe_timeout_s) < 0))
        return -1;
    struct sw_cfg_error err;
    return cfg_checked(sw_breaker_check_ex(cfg, &err), &err);
}

/* ---- listeners ---- */

/* Queue one call's changes in the order the core numbered them (a change dropped for want of
 * memory is skipped: dq_lost). @return whether this thread tells them (nobody was telling;
 * otherwise the thread telling tells them too, after those made before) */
static int bk_enqueue(BreakerObject *self, const struct sw_brk_changes *chg)
{
    struct bk_pending *node[2] = {NULL, NULL};
    for (uint32_t i = 0; i < chg->n && i < 2; i++) {
        node[i] = PyMem_RawMalloc(sizeof(struct bk_pending));
        if (node[i] != NULL) /* next: set when linked */
            *node[i] = (struct bk_pending){.seq = chg->c[i].seq, .from = chg->c[i].from,
                                           .to = chg->c[i].to, .value = chg->c[i].value};
    }
    sw_lock_acquire(&self->dq_lock);
    for (uint32_t i = 0; i < chg->n && i < 2; i++) {
        if (node[i] == NULL) {
            if (chg->c[i].seq > self->dq_lost)
                self->dq_lost = chg->c[i].seq;
            continue;
        }
        struct bk_pending **at = &self->dq_head; /* nearly always the end of a short list */
        while (*at != NULL && (*at)->seq < node[i]->seq)
            at = &(*at)->next;
        node[i]->next = *at;
        *at = node[i];
    }
    int tell = !self->dq_busy;
    self->dq_busy = 1;
    sw_lock_release(&self->dq_lock);
    return tell;
}

/* The next change to tell, off the queue; NULL, and nobody is telling any more, when the next
 * in order is not queued yet (the thread that made it is between the core's lock and its
 * queueing: it tells it, and those after it). */
static struct bk_pending *bk_next(BreakerObject *self)
{
    sw_lock_acquire(&self->dq_lock);
    struct bk_pending *p = self->dq_head;
    if (p != NULL && p->seq > self->dq_next && self->dq_next <= self->dq_lost)
        self->dq_next = p->seq <= self->dq_lost ? p->seq : self->dq_lost + 1; /* skip lost */
    if (p == NULL || p->seq > self->dq_next) {
        self->dq_busy = 0;
        p = NULL;
    } else {
        self->dq_head = p->next;
        if (p->seq == self->dq_next)
            self->dq_next++;
    }
    sw_lock_release(&self->dq_lock);
    return p;
}

/* Tell the listeners (breaker_tell) one call's changes, the core's lock released, in order:
 * queued, then told by this thread unless another is telling (it tells these too). A failing
 * teller is unraisable, but the first non-Exception (KeyboardInterrupt) is raised once every
 * queued change was told. @return 0, or -1 with it set */
static int bk_fire(BreakerObject *self, const struct sw_brk_changes *chg)
{
    if (!bk_enqueue(self, chg))
        return 0;
    PyObject *et, *ev, *tb, *kt = NULL, *kv = NULL, *ktb = NULL;
    module_state *st = state_of_type(Py_TYPE(self));
    PyObject *tell = st == NULL ? NULL : st->breaker_tell; /* NULL: no layer, no listeners */
    PyErr_Fetch(&et, &ev, &tb);
    struct bk_pending *c;
    while ((c = bk_next(self)) != NULL) {
        PyObject *r = tell == NULL ? Py_NewRef(Py_None)
                      : PyObject_CallFunction(tell, "OssN", (PyObject *)self,
                                              breaker_state_names[c->from % 3u],
                                              breaker_state_names[c->to % 3u],
                                              isnan(c->value) ? Py_NewRef(Py_None)
                                                              : PyFloat_FromDouble(c->value));
        PyMem_RawFree(c);
        if (r == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception) && kt == NULL)
                PyErr_Fetch(&kt, &kv, &ktb);
            else
                PyErr_WriteUnraisable((PyObject *)self);
        }
        Py_XDECREF(r);
    }
    PyErr_Restore(et, ev, tb);
    if (kt == NULL)
        return 0;
    PyErr_Restore(kt, kv, ktb); /* in place of (and releasing) the one restored */
    return -1;
}

/* The queue's initial state (a new object; the child of fork(), whose queued changes are
 * the parent's to tell, and whose lock a thread of the parent may have held). */
static void bk_queue_reset(BreakerObject *self)
{
    sw_lock_force_release(&self->dq_lock);
    self->dq_head = NULL; /* the child leaks the parent's few nodes: no free() here */
    self->dq_next = self->seq + 1;
    self->dq_lost = 0;
    self->dq_busy = 0;
}

/* A wait for the state's lock gave up (OSError, or a signal handler's exception). */
static PyObject *bk_gave_up(void)
{
    (void)lock_gave_up_error();
    return NULL;
}

/* Fire the changes; a KeyboardInterrupt from a listener ends the calling function (NULL) */
#define FIRE(self, chg)                                                                        \
    do {                                                                                       \
        if (__builtin_expect((chg).n != 0, 0) && bk_fire((self), &(chg)) < 0)                 \
            return NULL;                                                                       \
    } while (0)

/* ---- shared regions ---- */

static int bk_init_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_bstate_init(state, lay->interval_ms, lay->sample_count);
}

static int bk_check_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_bstate_validate(state, (size_t)lay->state_size, lay->interval_ms,
                              lay->sample_count);
}

static sw_lock *bk_state_lock(void *state)
{
    return &((struct sw_bstate *)state)->lock;
}

static const struct region_kind breaker_region = {SW_KIND_BREAKER, bk_init_state,
                                                   bk_check_state, bk_state_lock};

/* In the child of fork() (its only thread; the lock was just reset): a private breaker's
 * probe, whose outcome a parent's thread would report, is given back: the child's next caller
 * probes. The changes queued for the listeners are the parent's to tell. */
static void bk_fork_child(struct fork_link *l)
{
    BreakerObject *self = (BreakerObject *)(void *)((char *)l - offsetof(BreakerObject, fork));
    struct sw_brk_changes chg;
    if (!self->is_shared) {
        uint64_t w = atomic_load_explicit(&self->view.st->word, memory_order_relaxed);
        if ((w & 3u) == SW_BRK_HALF_OPEN)
            (void)sw_breaker_cancel(&self->view, w, SW_NOW, &chg); /* told to nobody */
    }
    bk_queue_reset(self);
}

/* ---- the type ---- */

static PyObject *Breaker_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *a[BK_NNAMES], *name = NULL;
    char path[4096];
    module_state *st = state_for_new(type);
    struct sw_breaker_cfg cfg;
    sw_breaker_cfg_default(&cfg);
    if (st == NULL || parse_kwds("Breaker", args, kwds, bk_names, BK_NNAMES, 0, a) < 0 ||
        parse_window(a[BK_NSET], a[BK_NSET + 1], &cfg.interval_ms, &cfg.sample_count) < 0 ||
        bk_apply(&cfg, a, 1) < 0)
        return NULL;
    int name_given;
    int mode = shared_and_name(a[BK_SHARED], a[BK_NAME], path, sizeof path, &name, &name_given);
    if (mode < 0)
        return NULL;
    BreakerObject *self = (BreakerObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_XDECREF(name);
        return NULL;
    }
    pthread_mutex_init(&self->cfg_mu, NULL);
    self->cfg = cfg; /* the rest zeroed by tp_alloc */
    sw_lock_init(&self->dq_lock);
    bk_queue_reset(self);
    self->name = name;
    self->name_given = name_given;
    self->shared = mode == 0 ? Py_NewRef(Py_None) : shared_canonical(a[BK_SHARED], path);
    if (self->shared == NULL)
        goto fail;
    int rc;
    if (mode == 0) {
        size_t size = sw_breaker_size(&cfg);
        self->br = size ? PyMem_Calloc(1, size) : NULL;
        if (self->br == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        if ((rc = sw_breaker_init(self->br, &cfg)) != SW_OK)
            goto fail_rc;
        sw_breaker_view(self->br, &self->view);
        self->view.seq = &self->seq;
    } else {
        if ((rc = sw_brule_init(&self->rule, &cfg)) != SW_OK)
            goto fail_rc;
        if (region_open(&self->shm, mode, path, &breaker_region, cfg.interval_ms,
                        cfg.sample_count, 0, 0,
                        sw_bstate_size(cfg.interval_ms, cfg.sample_count), self->name) < 0)
            goto fail;
        self->is_shared = 1;
        self->view = (struct sw_bview){.st = self->shm.state, .rule = &self->rule,
                                       .token = SW_LOCK_PROCESS, .seq = &self->seq};
        /* a region is input: restore what a process killed inside may have left */
        if (GAVE_UP(sw_bstate_check_repair(&self->view))) {
            (void)bk_gave_up();
            goto fail;
        }
    }
    /* shared: no private lock to reset, but the queue (not a shared link: the limiters'
     * fork_sum reads those as limiters) */
    if (fork_register_child(&self->fork, self->is_shared ? NULL : &self->br->st.lock, NULL,
                            bk_fork_child) < 0 ||
        registry_add(st, self->name, (PyObject *)self) < 0)
        goto fail;
    return (PyObject *)self;
fail_rc:
    (void)raise_core_error(rc);
fail:
    Py_DECREF(self);
    return NULL;
}

static void Breaker_dealloc(BreakerObject *self)
{
    PyTypeObject *tp = dealloc_start((PyObject *)self, self->weakreflist);
    fork_unregister(&self->fork);
    if (self->is_shared)
        sw_shm_close(&self->shm);
    Py_CLEAR(self->shared);
    Py_CLEAR(self->name);
    pthread_mutex_destroy(&self->cfg_mu);
    while (self->dq_head != NULL) { /* only a change skipped past (want of memory) */
        struct bk_pending *c = self->dq_head;
        self->dq_head = c->next;
        PyMem_RawFree(c);
    }
    PyMem_Free(self->br);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* ---- the hot pair ---- */

/* try_pass() and _pass() (admit: the core's call), the changes told. A listener's exception
 * (KeyboardInterrupt) ends the call, which never runs: a probe is given back as by a cancel,
 * the listener's exception raised. @return whether admitted (*ticket), or -1 */
static inline int bk_admit(BreakerObject *self, const char *fname,
                           int (*admit)(const struct sw_bview *, int64_t, uint64_t *,
                                        struct sw_brk_changes *),
                           PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                           uint64_t *ticket)
{
    int64_t now = SW_NOW;
    struct sw_brk_changes chg;
    if ((nargs != 0 || kwnames != NULL) && parse_now_only(fname, args, nargs, kwnames, &now) < 0)
        return -1;
    int ok = admit(&self->view, now, ticket, &chg);
    if (GAVE_UP(ok)) {
        (void)bk_gave_up();
        return -1;
    }
    if (__builtin_expect(chg.n == 0, 1) || bk_fire(self, &chg) == 0)
        return ok != 0;
    if (ok) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (GAVE_UP(sw_breaker_cancel(&self->view, *ticket, SW_NOW, &chg)))
            (void)lock_gave_up_error(); /* a stuck holder: the probe stays, as after a cancel */
        else if (chg.n != 0)
            (void)bk_fire(self, &chg);
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    return -1;
}

static PyObject *Breaker_try_pass(BreakerObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    uint64_t ticket;
    int ok = bk_admit(self, "try_pass", sw_breaker_try_pass, args, nargs, kwnames, &ticket);
    return ok < 0 ? NULL : Py_NewRef(ok ? Py_True : Py_False);
}

/* rt_ms: an int or float >= 0 (the fast path: a plain float or int) */
static inline int parse_rt(PyObject *o, double *rt)
{
    if (PyFloat_CheckExact(o)) {
        *rt = PyFloat_AS_DOUBLE(o);
        if (*rt >= 0.0 && isfinite(*rt))
            return 0;
    } else if (PyLong_CheckExact(o)) {
        long v = PyLong_AsLong(o);
        if (v >= 0) {
            *rt = (double)v;
            return 0;
        }
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();
    }
    return as_nonneg_double(o, "rt_ms", 1e300, rt);
}

/* A recording's end: the core's code rc as an exception, or the changes told. */
static PyObject *bk_recorded(BreakerObject *self, int rc, struct sw_brk_changes *chg)
{
    if (GAVE_UP(rc))
        return bk_gave_up();
    if (rc != SW_OK)
        return raise_core_error(rc);
    FIRE(self, *chg);
    Py_RETURN_NONE;
}

static PyObject *Breaker_record(BreakerObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"rt_ms", "error", "now_ns"};
    PyObject *a[3] = {NULL, NULL, NULL};
    int64_t now = SW_NOW;
    int error = 0;
    double rt;
    struct sw_brk_changes chg;
    if (nargs == 1 && kwnames == NULL)
        a[0] = args[0];
    else if (parse_fast_req("record", args, nargs, kwnames, names, 3, 1, 1, a) < 0)
        return NULL;
    if (parse_rt(a[0], &rt) < 0 || (a[1] != NULL && parse_bool(a[1], "error", &error) < 0) ||
        parse_now(a[2], &now) < 0)
        return NULL;
    int rc = sw_breaker_record(&self->view, rt, error != 0, SW_BRK_ANY, now, &chg);
    return bk_recorded(self, rc, &chg);
}

static PyObject *Breaker_cancel(BreakerObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    int64_t now = SW_NOW; /* the probe timeout: a probe silent past it is not cancelled */
    struct sw_brk_changes chg;
    if (parse_now_only("cancel", args, nargs, kwnames, &now) < 0)
        return NULL;
    if (GAVE_UP(sw_breaker_cancel(&self->view, SW_BRK_ANY, now, &chg)))
        return bk_gave_up();
    FIRE(self, chg);
    Py_RETURN_NONE;
}

/* ---- what an entry uses: tickets ---- */

static PyObject *Breaker_pass_ticket(BreakerObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    uint64_t ticket;
    int ok = bk_admit(self, "_pass", sw_breaker_pass_ticket, args, nargs, kwnames, &ticket);
    if (ok <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_None);
    return PyLong_FromUnsignedLongLong(ticket);
}

/* A ticket call's (ticket, <nfixed - 1 more>, now_ns=None): the ticket and now_ns parsed.
 * @return 0, or -1 with TypeError set (usage) */
static int parse_ticket_call(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t nfixed,
                             const char *usage, uint64_t *ticket, int64_t *now)
{
    if (nargs < nfixed || nargs > nfixed + 1) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (!PyLong_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "ticket must be an int, not %.100s",
                     type_name_of(args[0]));
        return -1;
    }
    *ticket = PyLong_AsUnsignedLongLong(args[0]);
    if (*ticket == (uint64_t)-1 && PyErr_Occurred())
        return -1;
    return nargs > nfixed ? parse_now(args[nfixed], now) : 0;
}

/* _record(ticket, rt_ms, error, now_ns=None), or (timeout) _record_timeout(ticket, rt_ms,
 * now_ns=None): the ticket's call ran past call_timeout_s */
static PyObject *bk_record_ticket(BreakerObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  bool timeout)
{
    uint64_t ticket;
    double rt;
    int64_t now = SW_NOW;
    int error = 1;
    struct sw_brk_changes chg;
    if (parse_ticket_call(args, nargs, timeout ? 2 : 3,
                          timeout ? "_record_timeout(ticket, rt_ms, now_ns=None)"
                                  : "_record(ticket, rt_ms, error, now_ns=None)",
                          &ticket, &now) < 0 ||
        parse_rt(args[1], &rt) < 0 || (!timeout && (error = PyObject_IsTrue(args[2])) < 0))
        return NULL;
    int rc = timeout ? sw_breaker_record_timeout(&self->view, rt, ticket, now, &chg)
                     : sw_breaker_record(&self->view, rt, error != 0, ticket, now, &chg);
    return bk_recorded(self, rc, &chg);
}

#define BK_RECORD(fn, timeout)                                                                 \
    static PyObject *fn(BreakerObject *self, PyObject *const *args, Py_ssize_t nargs)          \
    {                                                                                          \
        return bk_record_ticket(self, args, nargs, timeout);                                   \
    }
BK_RECORD(Breaker_record_ticket, false)
BK_RECORD(Breaker_record_timeout, true)

/* _cancel(ticket, now_ns=None) -> whether the probe was cancelled */
static PyObject *Breaker_cancel_ticket(BreakerObject *self, PyObject *const *args,
                                       Py_ssize_t nargs)
{
    uint64_t ticket;
    int64_t now = SW_NOW;
    struct sw_brk_changes chg;
    if (parse_ticket_call(args, nargs, 1, "_cancel(ticket, now_ns=None)", &ticket, &now) < 0)
        return NULL;
    int done = sw_breaker_cancel(&self->view, ticket, now, &chg);
    if (GAVE_UP(done))
        return bk_gave_up();
    FIRE(self, chg);
    return Py_NewRef(done ? Py_True : Py_False);
}

/* ---- reading ---- */

/* A retry time in ns as seconds, None when there is none (< 0). @return a new reference */
static PyObject *bk_seconds(int64_t ns)
{
    return ns < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble((double)ns / 1e9);
}

static PyObject *Breaker_retry_after(BreakerObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    int64_t now, ns;
    if (parse_now_only("retry_after", args, nargs, kwnames, &now) < 0)
        return NULL;
    if (GAVE_UP(sw_breaker_retry_ns(&self->view, now, &ns)))
        return bk_gave_up();
    return bk_seconds(ns);
}

static PyObject *Breaker_stats(BreakerObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"now_ns"};
    PyObject *a[1];
    int64_t now = SW_NOW;
    if ((nargs != 0 || kwnames != NULL) &&
        (parse_fast("stats", args, nargs, kwnames, names, 1, 1, a) < 0 ||
         parse_now(a[0], &now) < 0))
        return NULL;
    struct sw_brk_stats s;
    if (GAVE_UP(sw_breaker_stats(&self->view, now, &s)))
        return bk_gave_up();
    return Py_BuildValue("{sLsLsLsssN}", "total", (long long)s.total, "errors",
                         (long long)s.errors, "slow", (long long)s.slow, "state",
                         breaker_state_names[s.state % 3], "retry_after", bk_seconds(s.retry_ns));
}

static PyObject *Breaker_totals(BreakerObject *self, PyObject *Py_UNUSED(ignored))
{
    struct sw_brk_totals t;
    if (GAVE_UP(sw_breaker_totals(&self->view, &t)))
        return bk_gave_up();
    return breaker_totals_dict(&t);
}

static struct sw_breaker_cfg bk_cfg(BreakerObject *self)
{
    pthread_mutex_lock(&self->cfg_mu);
    struct sw_breaker_cfg c = self->cfg;
    pthread_mutex_unlock(&self->cfg_mu);
    return c;
}

/* A property: a setting (which: its index in bk_names), the window's layout or the state. */
static PyObject *Breaker_get(BreakerObject *self, void *which)
{
    int w = (int)(intptr_t)which;
    if (w == BK_NNAMES)
        return PyUnicode_FromString(breaker_state_names[sw_breaker_state(&self->view) % 3]);
    struct sw_breaker_cfg c = bk_cfg(self);
    if ((w == BK_ERROR_RATIO && c.grade != SW_BRK_ERROR_RATIO) ||
        (w == BK_ERROR_COUNT && c.grade != SW_BRK_ERROR_COUNT) ||
        (w == BK_SLOW_RT && c.grade != SW_BRK_SLOW_RATIO) ||
        (w == BK_PROBE_TIMEOUT && isinf(c.probe_timeout_s)))
        Py_RETURN_NONE;
    switch (w) {
    case BK_ERROR_RATIO:
        return PyFloat_FromDouble(c.threshold);
    case BK_ERROR_COUNT:
        return PyLong_FromLongLong((long long)c.threshold);
    case BK_SLOW_RT:
        return PyLong_FromLongLong(c.slow_rt_ms);
    case BK_SLOW_RATIO:
        return PyFloat_FromDouble(c.grade == SW_BRK_SLOW_RATIO ? c.threshold : 1.0);
    case BK_MIN_REQ:
        return PyLong_FromLongLong(c.min_requests);
    case BK_RECOVERY:
        return PyFloat_FromDouble(c.recovery_s);
    case BK_PROBE_TIMEOUT:
        return PyFloat_FromDouble(c.probe_timeout_s);
    case BK_NSET: /* interval_ms */
        return PyLong_FromLongLong(c.interval_ms);
    default:
        return PyLong_FromUnsignedLong(c.sample_count);
    }
}

static PyObject *Breaker_update(BreakerObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *a[BK_NSET], *key;
    int collected = update_collect(args, kwds, bk_names, a, BK_NSET, bk_names + BK_NSET, &key);
    if (collected > 0)
        PyErr_Format(PyExc_ValueError, "update() cannot change %U: the window's layout, "
                     "shared and name are fixed when the Breaker is made", key);
    if (collected != 0)
        return NULL;
    /* checked against a snapshot (cfg_mu), installed under the state's lock then cfg_mu (no
     * mutex held while waiting for the state's lock, which releases the GIL) unless another
     * update() landed meanwhile (then checked again): a getter never waits for a peer's lock,
     * an update() never for a getter's GIL, no update is lost */
    for (;;) {
        pthread_mutex_lock(&self->cfg_mu);
        struct sw_breaker_cfg c = self->cfg;
        uint64_t gen = self->settings_gen;
        pthread_mutex_unlock(&self->cfg_mu);
        if (bk_apply(&c, a, 0) < 0)
            return NULL;
        struct sw_brule rule;
        int rc = sw_brule_init(&rule, &c);
        if (rc != SW_OK)
            return raise_core_error(rc);
        if (GAVE_UP(sw_bview_lock(&self->view)))
            return bk_gave_up();
        pthread_mutex_lock(&self->cfg_mu); /* always after the state's lock */
        int same = self->settings_gen == gen;
        if (same) {
            /* a new recovery_s moves the next probe of an open breaker at once */
            sw_bview_swap_rule_locked(&self->view,
                                      self->is_shared ? &self->rule : &self->br->rule, &rule);
            self->cfg = c;
            self->settings_gen++;
        }
        pthread_mutex_unlock(&self->cfg_mu);
        sw_bview_unlock(&self->view);
        if (same)
            break;
    }
    Py_RETURN_NONE;
}

static PyObject *Breaker_repr(BreakerObject *self)
{
    struct sw_breaker_cfg c = bk_cfg(self);
    PyObject *parts = PyList_New(0);
    if (parts == NULL)
        return NULL;
    /* the threshold, then each setting that is not the default (repr_add*: 0 or -1) */
    int bad;
    if (c.grade == SW_BRK_ERROR_RATIO)
        bad = repr_add_float(parts, "error_ratio=%U", c.threshold);
    else if (c.grade == SW_BRK_ERROR_COUNT)
        bad = repr_add(parts, PyUnicode_FromFormat("error_count=%lld", (long long)c.threshold));
    else
        bad = repr_add(parts, PyUnicode_FromFormat("slow_rt_ms=%lld", (long long)c.slow_rt_ms)) ||
              (c.threshold != 1.0 && repr_add_float(parts, "slow_ratio=%U", c.threshold));
    bad = bad ||
          (c.min_requests != 5 &&
           repr_add(parts, PyUnicode_FromFormat("min_requests=%lld", (long long)c.min_requests))) ||
          (c.recovery_s != 10.0 && repr_add_float(parts, "recovery_s=%U", c.recovery_s)) ||
          (isinf(c.probe_timeout_s)
               ? repr_add(parts, PyUnicode_FromString("probe_timeout_s=None"))
               : c.probe_timeout_s != 60.0 &&
                     repr_add_float(parts, "probe_timeout_s=%U", c.probe_timeout_s)) ||
          ((c.interval_ms != 1000 || c.sample_count != 1) &&
           repr_add(parts, PyUnicode_FromFormat("interval_ms=%lld, sample_count=%lu",
                                                (long long)c.interval_ms,
                                                (unsigned long)c.sample_count)));
    if (bad) {
        Py_DECREF(parts);
        return NULL;
    }
    return repr_finish((PyObject *)self, parts, 0, self->shared, self->name, self->name_given);
}

static PyMethodDef Breaker_methods[] = {
    METHOD(try_pass, Breaker_try_pass, FASTKW, "(*, now_ns=None)", "Whether a call may run now: always when closed; when open, no until recovery_s has passed, then yes for exactly one caller (the probe, half-open); no while half-open."),
    METHOD(record, Breaker_record, FASTKW, "(rt_ms, *, error=False, now_ns=None)", "The outcome of an admitted call: counted in the window; it may open the breaker (closed), or close or reopen it (the probe's outcome, half-open)."),
    METHOD(cancel, Breaker_cancel, FASTKW, "(*, now_ns=None)", "An admitted call that did not run: a probe that try_pass() let through (never an entry's) is given back, the breaker reopens with the retry time unchanged (the next caller probes at once); a probe silent past probe_timeout_s has already failed, and its cancel changes nothing."),
    METHOD(retry_after, Breaker_retry_after, FASTKW, "(*, now_ns=None)", "Seconds until a probe may pass: None when closed; recovery_s when half-open (a probe is out)."),
    METHOD(stats, Breaker_stats, FASTKW, "(now_ns=None)", "The window: a dict of total, errors, slow, state and retry_after."),
    METHOD(totals, Breaker_totals, METH_NOARGS, "()", "Lifetime totals since creation: a dict of total, errors, slow, refused, probes, cancelled, and the transitions opened, half_opened, closed."),
    METHOD(update, Breaker_update, METH_VARARGS | METH_KEYWORDS, "(**settings)", "Change the settings in place (error_ratio, error_count, slow_rt_ms, slow_ratio, min_requests, recovery_s, probe_timeout_s); the state and window are kept; a new recovery_s moves the next probe of an open breaker at once to when it opened + recovery_s."),
    METHOD(_pass, Breaker_pass_ticket, FASTKW, "(now_ns=None)", "Admission with a ticket (int), or None."),
    METHOD(_record, Breaker_record_ticket, METH_FASTCALL, "(ticket, rt_ms, error, now_ns=None)", "The outcome of the ticket's call."),
    METHOD(_record_timeout, Breaker_record_timeout, METH_FASTCALL, "(ticket, rt_ms, now_ns=None)", "The ticket's call ran past call_timeout_s: a failure (slow, for the slow grade)."),
    METHOD(_cancel, Breaker_cancel_ticket, METH_FASTCALL, "(ticket, now_ns=None)", "The ticket's call did not run. Whether it was the probe."),
    {NULL}};

#define BK_GET(name, which, doc) {name, (getter)Breaker_get, NULL, doc, (void *)(which)}
static PyGetSetDef Breaker_getset[] = {
    BK_GET("state", BK_NNAMES, "'closed', 'open' or 'half_open'."),
    BK_GET("error_ratio", BK_ERROR_RATIO, "The error ratio threshold, or None."),
    BK_GET("error_count", BK_ERROR_COUNT, "The error count threshold, or None."),
    BK_GET("slow_rt_ms", BK_SLOW_RT, "The slow-call RT (ms), or None."),
    BK_GET("slow_ratio", BK_SLOW_RATIO, "The slow-call ratio threshold."),
    BK_GET("min_requests", BK_MIN_REQ, "Calls in the window below which it never opens."),
    BK_GET("recovery_s", BK_RECOVERY, "Seconds open before a probe may pass."),
    BK_GET("probe_timeout_s", BK_PROBE_TIMEOUT,
           "Seconds a probe may stay silent before it counts as failed, or None (for ever)."),
    BK_GET("interval_ms", BK_NSET, "The window's length (ms)."),
    BK_GET("sample_count", BK_NSET + 1, "Buckets in the window."),
    {"shared", (getter)get_object_or_none, NULL,
     "None (private), True (anonymous) or the region's name or path.",
     (void *)offsetof(BreakerObject, shared)},
    {"name", (getter)get_object_or_none, NULL, "The name (name=, or the region's), or None.",
     (void *)offsetof(BreakerObject, name)},
    {NULL}};

WEAKREF_MEMBERS(Breaker, BreakerObject);

TYPE_SPEC(Breaker, "slidewin._core.Breaker", BreakerObject, Py_TPFLAGS_BASETYPE,
          {Py_tp_doc, "The C base of slidewin.Breaker."}, {Py_tp_new, Breaker_new},
          {Py_tp_traverse, traverse_type}, {Py_tp_dealloc, Breaker_dealloc},
          {Py_tp_repr, Breaker_repr}, TYPE_TABLES(Breaker));
