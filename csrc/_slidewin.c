/* _slidewin.c - the CPython binding of the slidewin C core: module `slidewin._core`.
 *
 * One glue file. Heap types, multi-phase init, module state. Hot methods use
 * METH_FASTCALL | METH_KEYWORDS with a small hand parser (PyArg_ParseTupleAndKeywords costs
 * 45-90 ns here). The GIL is kept for O(1) updates and released around every wait.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "sw_limiter.h"
#include "sw_time.h"

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)

/* ------------------------------------------------------------------------------------ */
/* module state                                                                          */

typedef struct {
    PyTypeObject *Metric_Type;
    PyTypeObject *Limiter_Type;
    PyTypeObject *Entry_Type;
    PyTypeObject *Bucket_Type;
    PyTypeObject *Stats_Type;
    PyObject *BlockedError;
    PyObject *default_names; /* tuple of the default event names */
    PyObject *default_map;   /* dict name -> index */
    PyObject *str_aenter;    /* "_aenter" */
    PyObject *str_aexit;     /* "_aexit" */
} module_state;

static struct PyModuleDef slidewin_module;

static module_state *state_of_type(PyTypeObject *tp)
{
    /* instances of Python subclasses: walk up to the extension's own type */
    while (tp != NULL) {
        if (tp->tp_flags & Py_TPFLAGS_HEAPTYPE) {
            PyHeapTypeObject *ht = (PyHeapTypeObject *)tp;
            if (ht->ht_module != NULL && PyModule_GetDef(ht->ht_module) == &slidewin_module)
                return (module_state *)PyModule_GetState(ht->ht_module);
        }
        tp = tp->tp_base;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* argument helpers                                                                      */

static const char *type_name_of(PyObject *o)
{
    return Py_TYPE(o)->tp_name;
}

/* An int (not float, not bool) in [lo, hi]. The message names the parameter, the value and
 * what is allowed. */
static int as_int64(PyObject *o, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        /* a bool is an int to Python, but acquire(True) (threading's blocking=True habit) or
         * now_ns=True are mistakes, not a count of 1 */
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, type_name_of(o));
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > hi) {
        /* on overflow v is -1: decide by the sign of the overflow, not by v */
        int below = overflow < 0 || (overflow == 0 && v < lo);
        if (below && hi == INT64_MAX)
            PyErr_Format(PyExc_ValueError, "%s must be >= %lld, got %R", name, (long long)lo, o);
        else if (!below && lo == INT64_MIN)
            PyErr_Format(PyExc_ValueError, "%s must be <= %lld, got %R", name, (long long)hi, o);
        else
            PyErr_Format(PyExc_ValueError, "%s must be between %lld and %lld, got %R", name,
                         (long long)lo, (long long)hi, o);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* An int or float (not bool) >= 0, finite, <= hi. */
static int as_nonneg_double(PyObject *o, const char *name, double hi, double *out)
{
    if ((!PyLong_Check(o) && !PyFloat_Check(o)) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int or float, not %.100s", name,
                     type_name_of(o));
        return -1;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        v = NAN; /* an int too large for a double: out of range either way */
    }
    if (!isfinite(v) || v < 0 || v > hi) {
        /* (PyErr_Format has no %g: print the bound with Python's own float formatting) */
        char *bound = PyOS_double_to_string(hi, 'r', 0, 0, NULL);
        if (bound == NULL)
            return -1;
        if (hi >= 1e300)
            PyErr_Format(PyExc_ValueError, "%s must be a finite number >= 0, got %R", name, o);
        else
            PyErr_Format(PyExc_ValueError, "%s must be a finite number between 0 and %s, got %R",
                         name, bound, o);
        PyMem_Free(bound);
        return -1;
    }
    *out = v;
    return 0;
}

/* now_ns: None -> SW_NOW, else an int >= 0. */
static inline int parse_now(PyObject *o, int64_t *out)
{
    if (o == NULL || o == Py_None) {
        *out = SW_NOW;
        return 0;
    }
    if (PyLong_CheckExact(o)) { /* fast path: a plain int that fits */
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow && v >= 0) {
            *out = (int64_t)v;
            return 0;
        }
        if (v == -1 && PyErr_Occurred())
            return -1;
    }
    return as_int64(o, "now_ns", 0, INT64_MAX, out);
}

/* n: an int >= lo. */
static inline int parse_n(PyObject *o, int64_t lo, int64_t *out)
{
    if (o == NULL) {
        *out = 1;
        return 0;
    }
    if (PyLong_CheckExact(o)) {
        long v = PyLong_AsLong(o);
        if (v >= lo) {
            *out = (int64_t)v;
            return 0;
        }
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();
    }
    return as_int64(o, "n", lo, INT64_MAX, out);
}

/* A keyword name equals an ASCII parameter name (compact ASCII strings compared by length
 * and bytes, about 2 ns; anything else by the general comparison). */
static inline int key_equals(PyObject *key, const char *name)
{
    if (PyUnicode_Check(key) && PyUnicode_IS_COMPACT_ASCII(key)) {
        size_t len = strlen(name);
        return (size_t)PyUnicode_GET_LENGTH(key) == len &&
               memcmp(PyUnicode_DATA(key), name, len) == 0;
    }
    return PyUnicode_CompareWithASCIIString(key, name) == 0;
}

/* A small hand parser for FASTCALL | KEYWORDS.
 * names: every parameter; the first `npos` may be given by position. `out` receives borrowed
 * references (NULL when absent). */
static int parse_fast(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, const char *const *names, Py_ssize_t nnames,
                      Py_ssize_t npos, PyObject **out)
{
    for (Py_ssize_t i = 0; i < nnames; i++)
        out[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional argument%s (%zd given)",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (kwnames == NULL)
        return 0;
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i;
        for (i = 0; i < nnames; i++)
            if (key_equals(key, names[i]))
                break;
        if (i == nnames) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", fname,
                         key);
            return -1;
        }
        if (out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    return 0;
}

static PyObject *raise_core_error(int rc)
{
    if (rc == SW_ENOMEM)
        return PyErr_NoMemory();
    PyErr_SetString(PyExc_ValueError, sw_strerror(rc));
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* sleeping with the GIL released                                                        */

static void ts_from_ns(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ns / NS_PER_S);
    ts->tv_nsec = (long)(ns % NS_PER_S);
}

/* The kernel wakes a sleeper up to its timer slack (50 us by default) late, later on a busy
 * machine, and a throttle's lone caller that wakes after its slot loses it (no banking, as in
 * Sentinel). Pacing at 10 000 QPS (100 us apart) needs better: the last SPIN_NS of a wait are
 * spun with the GIL released (measured: a lone acquire() loop at 10 000 QPS went from -0.4 ..
 * -4.3% with 80 us to within 0.03% with 200 us). */
#define SPIN_NS (200 * INT64_C(1000))

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Sleep until the monotonic time `deadline_ns`, the GIL released; signal handlers run on
 * EINTR (so Ctrl-C interrupts). @return 0, or -1 with an exception set. */
static int sleep_until(int64_t deadline_ns)
{
    struct timespec ts;
    int64_t coarse_deadline = deadline_ns - SPIN_NS;
    if (sw_time_ns() >= coarse_deadline) {
        Py_BEGIN_ALLOW_THREADS
        while (sw_time_ns() < deadline_ns)
            cpu_relax();
        Py_END_ALLOW_THREADS
        return 0;
    }
    ts_from_ns(coarse_deadline, &ts);
    for (;;) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        Py_END_ALLOW_THREADS
        if (rc == 0)
            return sleep_until(deadline_ns); /* spin the rest */
        if (rc != EINTR) {
            errno = rc;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

/* Sleep out an admitted request's wait: until the decision's time + wait (one clock, no
 * drift from a second read). */
static int sleep_decision(const struct sw_decision *d)
{
    if (d->wait_ns <= 0)
        return 0;
    return sleep_until(sw_sat_add(d->now_ns, d->wait_ns));
}

/* ------------------------------------------------------------------------------------ */
/* BlockedError                                                                          */

typedef struct {
    PyBaseExceptionObject base;
    PyObject *retry_after;
    PyObject *limiter;
} BlockedErrorObject;

static int BlockedError_init(BlockedErrorObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"message", "retry_after", "limiter", NULL};
    PyObject *message = NULL, *retry_after = Py_None, *limiter = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OO:BlockedError", kwlist, &message,
                                     &retry_after, &limiter))
        return -1;
    if (retry_after != Py_None) {
        double v;
        if (as_nonneg_double(retry_after, "retry_after", 1e300, &v) < 0)
            return -1;
    }
    /* BaseException keeps the positional args (for str() and pickling) */
    PyObject *bargs = message ? PyTuple_Pack(1, message) : PyTuple_New(0);
    if (bargs == NULL)
        return -1;
    int rc = ((PyTypeObject *)PyExc_Exception)->tp_init((PyObject *)self, bargs, NULL);
    Py_DECREF(bargs);
    if (rc < 0)
        return -1;
    Py_INCREF(retry_after);
    Py_XSETREF(self->retry_after, retry_after);
    Py_INCREF(limiter);
    Py_XSETREF(self->limiter, limiter);
    return 0;
}

static int BlockedError_traverse(BlockedErrorObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->retry_after);
    Py_VISIT(self->limiter);
    return ((PyTypeObject *)PyExc_Exception)->tp_traverse((PyObject *)self, visit, arg);
}

static int BlockedError_clear(BlockedErrorObject *self)
{
    Py_CLEAR(self->retry_after);
    Py_CLEAR(self->limiter);
    return ((PyTypeObject *)PyExc_Exception)->tp_clear((PyObject *)self);
}

static void BlockedError_dealloc(BlockedErrorObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    BlockedError_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMemberDef BlockedError_members[] = {
    {"retry_after", T_OBJECT, offsetof(BlockedErrorObject, retry_after), READONLY,
     "Seconds after which the same request could be admitted, or None when unknown."},
    {"limiter", T_OBJECT, offsetof(BlockedErrorObject, limiter), READONLY,
     "The Limiter that refused the request (or None)."},
    {NULL}};

static PyType_Slot BlockedError_slots[] = {
    {Py_tp_doc, "BlockedError(message, *, retry_after=None, limiter=None)\n--\n\n"
                "A limiter refused the request. retry_after: seconds after which the same "
                "request could be admitted (None when unknown); limiter: the Limiter."},
    {Py_tp_init, BlockedError_init},
    {Py_tp_traverse, BlockedError_traverse},
    {Py_tp_clear, BlockedError_clear},
    {Py_tp_dealloc, BlockedError_dealloc},
    {Py_tp_members, BlockedError_members},
    {0, NULL}};

static PyType_Spec BlockedError_spec = {
    .name = "slidewin.BlockedError",
    .basicsize = sizeof(BlockedErrorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = BlockedError_slots,
};

/* ------------------------------------------------------------------------------------ */
/* Metric                                                                                */

typedef struct {
    PyObject_HEAD
    struct sw_window win;
    void *mem;          /* owned core state (standalone), or NULL for a limiter's view */
    PyObject *owner;    /* the Limiter whose state this views, or NULL */
    PyObject *names;    /* tuple of event names */
    PyObject *name_map; /* dict name -> index */
    module_state *st;
} MetricObject;

/* standalone layout: a lock, then the ring at offset 8 */
#define METRIC_LEAP_OFFSET 8

static const char *const default_event_names[SW_EV_DEFAULT_COUNT] = {
    "pass", "block", "exception", "success", "rt", "occupied_pass"};

static int metric_event(MetricObject *self, PyObject *o, uint32_t *out)
{
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        int overflow = 0;
        long v = PyLong_AsLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow || v < 0 || v >= (long)self->win.leap->n_events) {
            PyErr_Format(PyExc_ValueError, "event must be an index in 0..%u or a name in %R, got %R",
                         self->win.leap->n_events - 1u, self->names, o);
            return -1;
        }
        *out = (uint32_t)v;
        return 0;
    }
    if (PyUnicode_Check(o)) {
        PyObject *idx = PyDict_GetItemWithError(self->name_map, o);
        if (idx == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "unknown event %R; the events are %R", o,
                             self->names);
            return -1;
        }
        *out = (uint32_t)PyLong_AsLong(idx);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "event must be an int, an Event or a str, not %.100s",
                 type_name_of(o));
    return -1;
}

static PyObject *metric_new_view(module_state *st, PyObject *owner, const struct sw_window *win)
{
    MetricObject *self = PyObject_GC_New(MetricObject, st->Metric_Type);
    if (self == NULL)
        return NULL;
    self->win = *win;
    self->mem = NULL;
    Py_INCREF(owner);
    self->owner = owner;
    Py_INCREF(st->default_names);
    self->names = st->default_names;
    Py_INCREF(st->default_map);
    self->name_map = st->default_map;
    self->st = st;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *Metric_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"interval_ms", "sample_count", "events", NULL};
    PyObject *o_interval = NULL, *o_samples = NULL, *o_events = Py_None;
    PyObject *names = NULL, *map = NULL;
    MetricObject *self = NULL;
    int64_t interval = 1000, samples = 2;
    module_state *st = state_of_type(type);
    if (st == NULL) {
        PyErr_SetString(PyExc_TypeError, "slidewin module state not found");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO$O:Metric", kwlist, &o_interval,
                                     &o_samples, &o_events))
        return NULL;
    if (o_interval && as_int64(o_interval, "interval_ms", 1, SW_MAX_INTERVAL_MS, &interval) < 0)
        return NULL;
    if (o_samples && as_int64(o_samples, "sample_count", 1, SW_MAX_SAMPLES, &samples) < 0)
        return NULL;
    if (interval % samples != 0) {
        PyErr_Format(PyExc_ValueError,
                     "interval_ms (%lld) must be divisible by sample_count (%lld)",
                     (long long)interval, (long long)samples);
        return NULL;
    }
    if (o_events == Py_None) {
        names = st->default_names;
        map = st->default_map;
        Py_INCREF(names);
        Py_INCREF(map);
    } else {
        if (PyUnicode_Check(o_events) || PyBytes_Check(o_events)) {
            PyErr_SetString(PyExc_TypeError,
                            "events must be a sequence of str names, not a single string");
            return NULL;
        }
        if (PyAnySet_Check(o_events)) {
            /* a set has no order: the indexes of its names would be arbitrary */
            PyErr_Format(PyExc_TypeError,
                         "events must be an ordered sequence of str names (a tuple or list), "
                         "not %.100s", type_name_of(o_events));
            return NULL;
        }
        names = PySequence_Tuple(o_events);
        if (names == NULL) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "events must be a sequence of str names, not %.100s",
                             type_name_of(o_events));
            }
            return NULL;
        }
        Py_ssize_t k = PyTuple_GET_SIZE(names);
        if (k < 1 || k > SW_MAX_EVENTS) {
            PyErr_Format(PyExc_ValueError, "events must name 1 to %d events, got %zd",
                         SW_MAX_EVENTS, k);
            goto fail;
        }
        map = PyDict_New();
        if (map == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *nm = PyTuple_GET_ITEM(names, i);
            if (!PyUnicode_Check(nm)) {
                PyErr_Format(PyExc_TypeError, "events must be str names, got %.100s at index %zd",
                             type_name_of(nm), i);
                goto fail;
            }
            if (PyUnicode_GET_LENGTH(nm) == 0) {
                PyErr_Format(PyExc_ValueError, "events: name at index %zd is empty", i);
                goto fail;
            }
            int has = PyDict_Contains(map, nm);
            if (has < 0)
                goto fail;
            if (has) {
                PyErr_Format(PyExc_ValueError, "events: duplicate name %R", nm);
                goto fail;
            }
            PyObject *idx = PyLong_FromSsize_t(i);
            if (idx == NULL || PyDict_SetItem(map, nm, idx) < 0) {
                Py_XDECREF(idx);
                goto fail;
            }
            Py_DECREF(idx);
        }
    }
    struct sw_leap_cfg cfg;
    cfg.interval_ms = interval;
    cfg.sample_count = (uint32_t)samples;
    cfg.n_events = (uint32_t)PyTuple_GET_SIZE(names);
    cfg.has_rt = (names == st->default_names);
    size_t size = sw_leap_size(&cfg);
    if (size == 0) {
        PyErr_SetString(PyExc_ValueError, "invalid Metric configuration");
        goto fail;
    }
    self = (MetricObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto fail;
    self->mem = PyMem_Calloc(1, METRIC_LEAP_OFFSET + size);
    if (self->mem == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    self->win.lock = (sw_lock *)self->mem;
    sw_lock_init(self->win.lock);
    self->win.leap = (struct sw_leap *)(void *)((char *)self->mem + METRIC_LEAP_OFFSET);
    self->win.future = NULL;
    if (sw_leap_init(self->win.leap, &cfg) != SW_OK) {
        PyErr_SetString(PyExc_ValueError, "invalid Metric configuration");
        goto fail;
    }
    self->owner = NULL;
    self->names = names;
    self->name_map = map;
    self->st = st;
    return (PyObject *)self;
fail:
    Py_XDECREF(names);
    Py_XDECREF(map);
    Py_XDECREF(self);
    return NULL;
}

static int Metric_traverse(MetricObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->names);
    Py_VISIT(self->name_map);
    return 0;
}

static int Metric_clear(MetricObject *self)
{
    Py_CLEAR(self->names);
    Py_CLEAR(self->name_map);
    /* the owner keeps the viewed memory alive: cleared only in dealloc */
    return 0;
}

static void Metric_dealloc(MetricObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Metric_clear(self);
    Py_CLEAR(self->owner);
    if (self->mem != NULL)
        PyMem_Free(self->mem);
    self->mem = NULL;
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Metric_add(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = {"event", "n", "now_ns"};
    PyObject *a[3];
    uint32_t ev;
    int64_t n, now;
    if (kwnames == NULL && nargs >= 1 && nargs <= 2) {
        a[0] = args[0];
        a[1] = nargs > 1 ? args[1] : NULL;
        a[2] = NULL;
    } else if (parse_fast("add", args, nargs, kwnames, names, 3, 2, a) < 0) {
        return NULL;
    }
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "add() missing required argument 'event'");
        return NULL;
    }
    if (metric_event(self, a[0], &ev) < 0 || parse_n(a[1], 0, &n) < 0 || parse_now(a[2], &now) < 0)
        return NULL;
    int rc = sw_window_add(&self->win, ev, n, now);
    if (rc != SW_OK)
        return raise_core_error(rc);
    Py_RETURN_NONE;
}

static PyObject *metric_no_rt(MetricObject *self, const char *what)
{
    PyErr_Format(PyExc_ValueError,
                 "%s: this Metric has user-defined events %R and no RT counters", what,
                 self->names);
    return NULL;
}

static PyObject *Metric_add_rt(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"rt_ms", "now_ns"};
    PyObject *a[2];
    int64_t rt, now;
    if (parse_fast("add_rt", args, nargs, kwnames, names, 2, 1, a) < 0)
        return NULL;
    if (!self->win.leap->has_rt)
        return metric_no_rt(self, "add_rt");
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "add_rt() missing required argument 'rt_ms'");
        return NULL;
    }
    if (as_int64(a[0], "rt_ms", 0, INT64_MAX, &rt) < 0 || parse_now(a[1], &now) < 0)
        return NULL;
    int rc = sw_window_add_rt(&self->win, rt, now);
    if (rc != SW_OK)
        return raise_core_error(rc);
    Py_RETURN_NONE;
}

/* read(event, *, now_ns=None) */
static int metric_read(MetricObject *self, const char *fname, int which, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames, int64_t *out)
{
    static const char *const names[] = {"event", "now_ns"};
    PyObject *a[2];
    uint32_t ev;
    int64_t now;
    if (kwnames == NULL && nargs == 1) {
        a[0] = args[0];
        a[1] = NULL;
    } else if (parse_fast(fname, args, nargs, kwnames, names, 2, 1, a) < 0) {
        return -1;
    }
    if (a[0] == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'event'", fname);
        return -1;
    }
    if (metric_event(self, a[0], &ev) < 0 || parse_now(a[1], &now) < 0)
        return -1;
    int rc = sw_window_read(&self->win, which, ev, now, out);
    if (rc != SW_OK) {
        raise_core_error(rc);
        return -1;
    }
    return 0;
}

static PyObject *Metric_sum(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    int64_t v;
    if (metric_read(self, "sum", SW_READ_SUM, args, nargs, kwnames, &v) < 0)
        return NULL;
    return PyLong_FromLongLong(v);
}

static PyObject *Metric_rate(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    int64_t v;
    if (metric_read(self, "rate", SW_READ_SUM, args, nargs, kwnames, &v) < 0)
        return NULL;
    return PyFloat_FromDouble((double)v / ((double)self->win.leap->interval_ms / 1000.0));
}

static PyObject *Metric_current(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    int64_t v;
    if (metric_read(self, "current", SW_READ_CURRENT, args, nargs, kwnames, &v) < 0)
        return NULL;
    return PyLong_FromLongLong(v);
}

static PyObject *Metric_previous(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    int64_t v;
    if (metric_read(self, "previous", SW_READ_PREVIOUS, args, nargs, kwnames, &v) < 0)
        return NULL;
    return PyLong_FromLongLong(v);
}

/* parse only `now_ns` (keyword, or one positional when allow_pos) */
static int parse_now_only(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, int64_t *now)
{
    static const char *const names[] = {"now_ns"};
    PyObject *a[1];
    if (nargs == 0 && kwnames == NULL) {
        *now = SW_NOW;
        return 0;
    }
    if (parse_fast(fname, args, nargs, kwnames, names, 1, 0, a) < 0)
        return -1;
    return parse_now(a[0], now);
}

static PyObject *Metric_min_rt(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    int64_t now, m;
    if (parse_now_only("min_rt", args, nargs, kwnames, &now) < 0)
        return NULL;
    if (!self->win.leap->has_rt)
        return metric_no_rt(self, "min_rt");
    sw_window_rt(&self->win, now, &m, NULL, NULL);
    return PyLong_FromLongLong(m);
}

static PyObject *Metric_avg_rt(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    int64_t now, rt, ok;
    if (parse_now_only("avg_rt", args, nargs, kwnames, &now) < 0)
        return NULL;
    if (!self->win.leap->has_rt)
        return metric_no_rt(self, "avg_rt");
    sw_window_rt(&self->win, now, NULL, &rt, &ok);
    return PyFloat_FromDouble(ok > 0 ? (double)rt / (double)ok : 0.0);
}

static PyObject *Metric_buckets(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    int64_t now;
    if (parse_now_only("buckets", args, nargs, kwnames, &now) < 0)
        return NULL;
    const struct sw_leap *l = self->win.leap;
    size_t words = (size_t)l->sample_count * l->stride;
    int64_t *buf = PyMem_Malloc(words * sizeof(int64_t));
    if (buf == NULL)
        return PyErr_NoMemory();
    uint32_t nb = sw_window_buckets(&self->win, now, buf);
    PyObject *list = PyList_New((Py_ssize_t)nb);
    if (list == NULL)
        goto fail;
    for (uint32_t i = 0; i < nb; i++) {
        const int64_t *b = buf + (size_t)i * l->stride;
        PyObject *counts = PyTuple_New((Py_ssize_t)l->n_events);
        if (counts == NULL)
            goto fail;
        for (uint32_t e = 0; e < l->n_events; e++) {
            PyObject *c = PyLong_FromLongLong(b[SW_SLOT_COUNTS + e]);
            if (c == NULL) {
                Py_DECREF(counts);
                goto fail;
            }
            PyTuple_SET_ITEM(counts, e, c);
        }
        PyObject *bucket = PyStructSequence_New(self->st->Bucket_Type);
        PyObject *start = PyLong_FromLongLong(b[SW_SLOT_START]);
        PyObject *mrt = PyLong_FromLongLong(b[SW_SLOT_MIN_RT]);
        if (bucket == NULL || start == NULL || mrt == NULL) {
            Py_XDECREF(bucket);
            Py_XDECREF(start);
            Py_XDECREF(mrt);
            Py_DECREF(counts);
            goto fail;
        }
        PyStructSequence_SET_ITEM(bucket, 0, start);
        PyStructSequence_SET_ITEM(bucket, 1, counts);
        PyStructSequence_SET_ITEM(bucket, 2, mrt);
        PyList_SET_ITEM(list, i, bucket);
    }
    PyMem_Free(buf);
    return list;
fail:
    PyMem_Free(buf);
    Py_XDECREF(list);
    return NULL;
}

static PyObject *Metric_reset(MetricObject *self, PyObject *Py_UNUSED(ignored))
{
    sw_window_reset(&self->win);
    Py_RETURN_NONE;
}

static PyObject *noop(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    (void)self;
    Py_RETURN_NONE;
}

static PyObject *Metric_repr(MetricObject *self)
{
    const struct sw_leap *l = self->win.leap;
    if (self->names == self->st->default_names)
        return PyUnicode_FromFormat("Metric(interval_ms=%lld, sample_count=%u)",
                                    (long long)l->interval_ms, l->sample_count);
    return PyUnicode_FromFormat("Metric(interval_ms=%lld, sample_count=%u, events=%R)",
                                (long long)l->interval_ms, l->sample_count, self->names);
}

static PyObject *Metric_get_interval(MetricObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(self->win.leap->interval_ms);
}
static PyObject *Metric_get_samples(MetricObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromUnsignedLong(self->win.leap->sample_count);
}
static PyObject *Metric_get_window(MetricObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(self->win.leap->window_ms);
}
static PyObject *Metric_get_events(MetricObject *self, void *Py_UNUSED(c))
{
    Py_INCREF(self->names);
    return self->names;
}

static PyGetSetDef Metric_getset[] = {
    {"interval_ms", (getter)Metric_get_interval, NULL, "The window length in ms.", NULL},
    {"sample_count", (getter)Metric_get_samples, NULL, "The number of buckets.", NULL},
    {"window_ms", (getter)Metric_get_window, NULL, "One bucket's length in ms.", NULL},
    {"events", (getter)Metric_get_events, NULL, "The event names, by index.", NULL},
    {NULL}};

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
static PyMethodDef Metric_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Metric_add, FASTKW,
     "add(event, n=1, *, now_ns=None)\n--\n\nCount n of event in the bucket of now."},
    {"add_rt", (PyCFunction)(void (*)(void))Metric_add_rt, FASTKW,
     "add_rt(rt_ms, *, now_ns=None)\n--\n\nAdd a response time: RT sum and the bucket's min RT."},
    {"sum", (PyCFunction)(void (*)(void))Metric_sum, FASTKW,
     "sum(event, *, now_ns=None)\n--\n\nSum of event over the window's valid buckets."},
    {"rate", (PyCFunction)(void (*)(void))Metric_rate, FASTKW,
     "rate(event, *, now_ns=None)\n--\n\nsum / (interval_ms / 1000): per second."},
    {"current", (PyCFunction)(void (*)(void))Metric_current, FASTKW,
     "current(event, *, now_ns=None)\n--\n\nCount of event in the bucket containing now."},
    {"previous", (PyCFunction)(void (*)(void))Metric_previous, FASTKW,
     "previous(event, *, now_ns=None)\n--\n\nCount of event in the bucket just before, else 0."},
    {"min_rt", (PyCFunction)(void (*)(void))Metric_min_rt, FASTKW,
     "min_rt(*, now_ns=None)\n--\n\nMinimum RT in ms over the window (5000 when empty, >= 1)."},
    {"avg_rt", (PyCFunction)(void (*)(void))Metric_avg_rt, FASTKW,
     "avg_rt(*, now_ns=None)\n--\n\nRT sum / success over the window, 0.0 without success."},
    {"buckets", (PyCFunction)(void (*)(void))Metric_buckets, FASTKW,
     "buckets(*, now_ns=None)\n--\n\nThe window's buckets, oldest first (dense)."},
    {"reset", (PyCFunction)Metric_reset, METH_NOARGS,
     "reset()\n--\n\nForget everything, including the newest time seen."},
    {"_noop", (PyCFunction)noop, METH_NOARGS, "Do nothing (a benchmark floor)."},
    {NULL}};

static PyType_Slot Metric_slots[] = {
    {Py_tp_doc, "Metric(interval_ms=1000, sample_count=2, *, events=None)\n--\n\n"
                "Sliding-window statistics: a ring of sample_count buckets over interval_ms."},
    {Py_tp_new, Metric_new},
    {Py_tp_traverse, Metric_traverse},
    {Py_tp_clear, Metric_clear},
    {Py_tp_dealloc, Metric_dealloc},
    {Py_tp_repr, Metric_repr},
    {Py_tp_methods, Metric_methods},
    {Py_tp_getset, Metric_getset},
    {0, NULL}};

static PyType_Spec Metric_spec = {
    .name = "slidewin.Metric",
    .basicsize = sizeof(MetricObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = Metric_slots,
};

/* ------------------------------------------------------------------------------------ */
/* Limiter                                                                               */

typedef struct {
    PyObject_HEAD
    struct sw_limiter *lim;    /* owned core state */
    module_state *st;
    struct sw_limiter_cfg cfg; /* for repr and properties */
    /* waiting for release() (concurrency acquire with a timeout) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int waiters;
    uint64_t generation;       /* bumped under mu by every release */
    int sync_ok;
    PyObject *weakreflist;
} LimiterObject;

static const char *const behavior_names[] = {"reject", "warm_up", "throttle",
                                             "warm_up_throttle"};

static PyObject *Limiter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"qps", "concurrency", "behavior", "warm_up_s", "cold_factor",
                             "max_queueing_ms", "occupy_timeout_ms", "interval_ms",
                             "sample_count", NULL};
    PyObject *o_qps = Py_None, *o_conc = Py_None, *o_beh = NULL, *o_warm = NULL,
             *o_cold = NULL, *o_queue = NULL, *o_occ = NULL, *o_int = NULL, *o_samp = NULL;
    module_state *st = state_of_type(type);
    if (st == NULL) {
        PyErr_SetString(PyExc_TypeError, "slidewin module state not found");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOOOOOOO:Limiter", kwlist, &o_qps,
                                     &o_conc, &o_beh, &o_warm, &o_cold, &o_queue, &o_occ,
                                     &o_int, &o_samp))
        return NULL;
    struct sw_limiter_cfg cfg;
    sw_limiter_cfg_default(&cfg);
    if (o_qps != Py_None && o_conc != Py_None) {
        PyErr_SetString(PyExc_ValueError,
                        "pass exactly one of qps or concurrency, not both");
        return NULL;
    }
    if (o_qps == Py_None && o_conc == Py_None) {
        PyErr_SetString(PyExc_ValueError,
                        "pass exactly one of qps (a rate per second) or concurrency "
                        "(requests in flight)");
        return NULL;
    }
    if (o_qps != Py_None) {
        cfg.grade = SW_GRADE_QPS;
        if (as_nonneg_double(o_qps, "qps", 9.0e15, &cfg.count) < 0)
            return NULL;
    } else {
        int64_t c;
        cfg.grade = SW_GRADE_CONCURRENCY;
        if (as_int64(o_conc, "concurrency", 0, INT64_C(1) << 53, &c) < 0)
            return NULL;
        cfg.count = (double)c;
    }
    if (o_beh != NULL) {
        if (!PyUnicode_Check(o_beh)) {
            PyErr_Format(PyExc_TypeError, "behavior must be a str, not %.100s",
                         type_name_of(o_beh));
            return NULL;
        }
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (PyUnicode_CompareWithASCIIString(o_beh, behavior_names[i]) == 0)
                found = i;
        if (found < 0) {
            PyErr_Format(PyExc_ValueError,
                         "behavior must be one of 'reject', 'warm_up', 'throttle', "
                         "'warm_up_throttle', got %R", o_beh);
            return NULL;
        }
        cfg.behavior = found;
    }
    if (cfg.grade == SW_GRADE_CONCURRENCY && cfg.behavior != SW_REJECT) {
        PyErr_Format(PyExc_ValueError,
                     "behavior=%R needs qps; a concurrency limiter only rejects "
                     "(behavior='reject')", o_beh);
        return NULL;
    }
    if (o_warm && as_nonneg_double(o_warm, "warm_up_s", 1.0e9, &cfg.warm_up_s) < 0)
        return NULL;
    if (o_cold) {
        if (as_nonneg_double(o_cold, "cold_factor", 1.0e9, &cfg.cold_factor) < 0)
            return NULL;
        if (!(cfg.cold_factor > 1.0)) {
            PyErr_Format(PyExc_ValueError, "cold_factor must be > 1, got %R", o_cold);
            return NULL;
        }
    }
    if (cfg.count * cfg.warm_up_s * 2.0 > 9.0e18) {
        PyErr_SetString(PyExc_ValueError,
                        "qps * warm_up_s is too large (must be below 4.5e18 tokens)");
        return NULL;
    }
    if (o_queue && as_int64(o_queue, "max_queueing_ms", 0, INT64_C(1) << 40,
                            &cfg.max_queueing_ms) < 0)
        return NULL;
    if (o_occ && as_int64(o_occ, "occupy_timeout_ms", 0, INT64_C(1) << 40,
                          &cfg.occupy_timeout_ms) < 0)
        return NULL;
    int64_t samples = cfg.sample_count;
    if (o_int && as_int64(o_int, "interval_ms", 1, SW_MAX_INTERVAL_MS, &cfg.interval_ms) < 0)
        return NULL;
    if (o_samp && as_int64(o_samp, "sample_count", 1, SW_MAX_SAMPLES, &samples) < 0)
        return NULL;
    cfg.sample_count = (uint32_t)samples;
    if (cfg.interval_ms % samples != 0) {
        PyErr_Format(PyExc_ValueError,
                     "interval_ms (%lld) must be divisible by sample_count (%lld)",
                     (long long)cfg.interval_ms, (long long)samples);
        return NULL;
    }
    if (cfg.grade == SW_GRADE_QPS &&
        (cfg.behavior == SW_REJECT || cfg.behavior == SW_WARM_UP)) {
        double l = cfg.count * (double)cfg.interval_ms / 1000.0;
        if (l > 0 && l < 1) {
            PyObject *lo = PyFloat_FromDouble(l);
            if (lo == NULL)
                return NULL;
            PyErr_Format(PyExc_ValueError,
                         "qps=%R with interval_ms=%lld allows %R requests per window, which "
                         "admits nothing; use behavior='throttle' to pace slow rates, or a "
                         "longer interval_ms (at least %lld)",
                         o_qps, (long long)cfg.interval_ms, lo,
                         (long long)ceil(1000.0 / cfg.count));
            Py_DECREF(lo);
            return NULL;
        }
    }
    if (sw_warmup_check(cfg.count, cfg.warm_up_s, cfg.cold_factor) != SW_OK) {
        /* validated whatever the behavior (API: validated, then ignored) */
        PyErr_Format(PyExc_ValueError,
                     "qps, warm_up_s and cold_factor give warm-up token counts beyond 9e18 "
                     "(about qps * warm_up_s / (cold_factor - 1)); use a smaller warm_up_s or "
                     "a larger cold_factor");
        return NULL;
    }
    size_t size = sw_limiter_size(&cfg);
    if (size == 0) {
        PyErr_SetString(PyExc_ValueError, "invalid Limiter configuration");
        return NULL;
    }
    LimiterObject *self = (LimiterObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->st = st;
    self->cfg = cfg;
    atomic_init(&self->waiters, 0);
    self->generation = 0;
    self->weakreflist = NULL;
    self->sync_ok = 0;
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
    pthread_condattr_t ca;
    if (pthread_mutex_init(&self->mu, NULL) != 0) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_OSError, "pthread_mutex_init failed");
        return NULL;
    }
    if (pthread_condattr_init(&ca) != 0 ||
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&self->cv, &ca) != 0) {
        pthread_mutex_destroy(&self->mu);
        Py_DECREF(self);
        PyErr_SetString(PyExc_OSError, "pthread_cond_init failed");
        return NULL;
    }
    pthread_condattr_destroy(&ca);
    self->sync_ok = 1;
    return (PyObject *)self;
}

static int Limiter_traverse(LimiterObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void Limiter_dealloc(LimiterObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->sync_ok) {
        pthread_cond_destroy(&self->cv);
        pthread_mutex_destroy(&self->mu);
    }
    PyMem_Free(self->lim);
    self->lim = NULL;
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Wake threads waiting in acquire() for a release. */
static void limiter_notify(LimiterObject *self)
{
    if (atomic_load_explicit(&self->waiters, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&self->mu);
        self->generation++;
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
}

static PyObject *retry_after_obj(int64_t retry_ns)
{
    if (retry_ns < 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble((double)retry_ns / 1e9);
}

static void raise_blocked(LimiterObject *self, int64_t n, const struct sw_decision *d)
{
    module_state *st = self->st;
    PyObject *retry = retry_after_obj(d->verdict == SW_NEVER ? -1 : d->retry_ns);
    if (retry == NULL)
        return;
    PyObject *repr = PyObject_Repr((PyObject *)self);
    if (repr == NULL) {
        Py_DECREF(retry);
        return;
    }
    PyObject *msg;
    if (d->verdict == SW_NEVER)
        msg = PyUnicode_FromFormat("%U refused n=%lld: it can never admit this request",
                                   repr, (long long)n);
    else if (retry != Py_None)
        msg = PyUnicode_FromFormat("%U refused n=%lld; retry after %R s", repr,
                                   (long long)n, retry);
    else
        msg = PyUnicode_FromFormat("%U refused n=%lld", repr, (long long)n);
    Py_DECREF(repr);
    if (msg == NULL) {
        Py_DECREF(retry);
        return;
    }
    PyObject *args = PyTuple_Pack(1, msg);
    PyObject *kw = Py_BuildValue("{sOsO}", "retry_after", retry, "limiter", (PyObject *)self);
    Py_DECREF(msg);
    Py_DECREF(retry);
    if (args == NULL || kw == NULL) {
        Py_XDECREF(args);
        Py_XDECREF(kw);
        return;
    }
    PyObject *exc = PyObject_Call(st->BlockedError, args, kw);
    Py_DECREF(args);
    Py_DECREF(kw);
    if (exc == NULL)
        return;
    PyErr_SetObject(st->BlockedError, exc);
    Py_DECREF(exc);
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
    sw_limiter_decide(self->lim, n, now, SW_F_TRY, &d);
    if (d.verdict == SW_PASS)
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* The same decision with the GIL released around the core call (the GIL study). */
static PyObject *Limiter_try_acquire_nogil(LimiterObject *self, PyObject *const *args,
                                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"n", "now_ns"};
    PyObject *a[2];
    int64_t n = 1, now = SW_NOW;
    struct sw_decision d;
    if (nargs != 0 || kwnames != NULL) {
        if (parse_fast("_try_acquire_nogil", args, nargs, kwnames, names, 2, 1, a) < 0 ||
            parse_n(a[0], 1, &n) < 0 || parse_now(a[1], &now) < 0)
            return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    sw_limiter_decide(self->lim, n, now, SW_F_TRY, &d);
    Py_END_ALLOW_THREADS
    if (d.verdict == SW_PASS)
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static int parse_bool(PyObject *o, const char *name, int *out)
{
    if (o == NULL) {
        *out = 0;
        return 0;
    }
    if (!PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bool, not %.100s", name, type_name_of(o));
        return -1;
    }
    *out = o == Py_True;
    return 0;
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
    sw_limiter_decide(self->lim, n, now, prio ? SW_F_PRIORITIZED : 0u, &d);
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
    if (parse_n(args[0], 1, &n) < 0 || as_int64(args[1], "flags", 0, 31, &flags) < 0 ||
        parse_now(args[2], &now) < 0)
        return NULL;
    sw_limiter_decide(self->lim, n, now, (unsigned)flags, &d);
    return Py_BuildValue("(iLL)", d.verdict, (long long)d.wait_ns, (long long)d.retry_ns);
}

/* _count_block(n): the one BLOCK of a request that retried and finally failed. */
static PyObject *Limiter_count_block(LimiterObject *self, PyObject *arg)
{
    int64_t n;
    if (parse_n(arg, 1, &n) < 0)
        return NULL;
    sw_limiter_count(self->lim, SW_EV_BLOCK, n, SW_NOW);
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
    struct sw_decision d = {(int)verdict, 0, 0, retry};
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
    sw_limiter_exit(self->lim, n, 0, SW_OUT_NONE, SW_NOW);
    limiter_notify(self);
    Py_RETURN_NONE;
}

/* timeout: None -> -1 (one decision), else seconds >= 0 -> ns (INT64_MAX for inf). */
static int parse_timeout(PyObject *o, int64_t *out)
{
    if (o == NULL || o == Py_None) {
        *out = -1;
        return 0;
    }
    if ((!PyLong_Check(o) && !PyFloat_Check(o)) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "timeout must be None or a number of seconds, not %.100s",
                     type_name_of(o));
        return -1;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        v = -1.0;
        if (PyLong_Check(o)) {
            PyObject *zero = PyLong_FromLong(0);
            if (zero == NULL)
                return -1;
            int pos = PyObject_RichCompareBool(o, zero, Py_GT);
            Py_DECREF(zero);
            if (pos < 0)
                return -1;
            v = pos ? INFINITY : -1.0;
        }
    }
    if (isnan(v) || v < 0) {
        PyErr_Format(PyExc_ValueError, "timeout must be None or >= 0 seconds, got %R", o);
        return -1;
    }
    *out = v >= 9.0e9 ? INT64_MAX : (int64_t)(v * 1e9);
    return 0;
}

/* The loop of acquire(): decide; on refusal sleep until retry_after (or a release) within the
 * timeout; the admitted request's own wait is always honoured.
 * @return 0 admitted, -1 with an exception set. */
static int limiter_acquire(LimiterObject *self, int64_t n, int64_t timeout_ns, unsigned flags)
{
    struct sw_decision d;
    if (timeout_ns < 0) {
        sw_limiter_decide(self->lim, n, SW_NOW, flags | SW_F_RETRY, &d);
        if (d.verdict != SW_PASS) {
            raise_blocked(self, n, &d);
            return -1;
        }
        return sleep_decision(&d);
    }
    int64_t deadline = sw_sat_add(sw_time_ns(), timeout_ns);
    bool conc = self->cfg.grade == SW_GRADE_CONCURRENCY;
    for (;;) {
        uint64_t gen = 0;
        if (conc) {
            atomic_fetch_add(&self->waiters, 1);
            pthread_mutex_lock(&self->mu);
            gen = self->generation;
            pthread_mutex_unlock(&self->mu);
        }
        sw_limiter_decide(self->lim, n, SW_NOW, flags | SW_F_NO_BLOCK | SW_F_RETRY, &d);
        if (d.verdict == SW_PASS) {
            if (conc)
                atomic_fetch_sub(&self->waiters, 1);
            return sleep_decision(&d);
        }
        int64_t now = sw_time_ns();
        if (d.verdict == SW_NEVER || now >= deadline) {
            if (conc)
                atomic_fetch_sub(&self->waiters, 1);
            sw_limiter_count(self->lim, SW_EV_BLOCK, n, SW_NOW);
            raise_blocked(self, n, &d);
            return -1;
        }
        if (conc) {
            /* sleep until a release (or the deadline), in slices so signals are seen */
            int64_t until = deadline - now > 100 * NS_PER_MS ? now + 100 * NS_PER_MS : deadline;
            struct timespec ts;
            ts_from_ns(until, &ts);
            Py_BEGIN_ALLOW_THREADS
            pthread_mutex_lock(&self->mu);
            while (self->generation == gen) {
                if (pthread_cond_timedwait(&self->cv, &self->mu, &ts) == ETIMEDOUT)
                    break;
            }
            pthread_mutex_unlock(&self->mu);
            Py_END_ALLOW_THREADS
            atomic_fetch_sub(&self->waiters, 1);
            if (PyErr_CheckSignals() < 0)
                return -1;
        } else {
            /* retry_after known (reject, throttle), else poll at 1 ms */
            int64_t step = d.retry_ns > 0 ? d.retry_ns : NS_PER_MS;
            int64_t until = sw_sat_add(now, step);
            if (until > deadline)
                until = deadline;
            if (sleep_until(until) < 0)
                return -1;
        }
    }
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

static PyObject *Limiter_release(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = {"n"};
    PyObject *a[1] = {NULL};
    int64_t n = 1;
    if (nargs != 0 || kwnames != NULL) {
        if (parse_fast("release", args, nargs, kwnames, names, 1, 1, a) < 0 ||
            parse_n(a[0], 1, &n) < 0)
            return NULL;
    }
    int rc = sw_limiter_release(self->lim, n);
    if (rc == SW_ESTATE) {
        PyErr_Format(PyExc_ValueError, "release(n=%lld): only %lld in flight", (long long)n,
                     (long long)sw_limiter_in_flight(self->lim));
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
    sw_limiter_stats(self->lim, now, &s);
    double sec = (double)self->cfg.interval_ms / 1000.0;
    PyObject *o = PyStructSequence_New(self->st->Stats_Type);
    if (o == NULL)
        return NULL;
    PyObject *v[9];
    v[0] = PyFloat_FromDouble((double)s.pass / sec);
    v[1] = PyFloat_FromDouble((double)s.block / sec);
    v[2] = PyFloat_FromDouble((double)s.success / sec);
    v[3] = PyFloat_FromDouble((double)s.exception / sec);
    v[4] = PyFloat_FromDouble(s.success > 0 ? (double)s.rt_sum / (double)s.success : 0.0);
    v[5] = PyFloat_FromDouble((double)s.min_rt);
    v[6] = PyLong_FromLongLong(s.in_flight);
    v[7] = PyLong_FromLongLong(s.waiting);
    v[8] = PyFloat_FromDouble((double)s.occupied_pass / sec);
    for (int i = 0; i < 9; i++) {
        if (v[i] == NULL) {
            for (int j = 0; j < 9; j++)
                Py_XDECREF(v[j]);
            Py_DECREF(o);
            return NULL;
        }
    }
    for (int i = 0; i < 9; i++)
        PyStructSequence_SET_ITEM(o, i, v[i]);
    return o;
}

static PyObject *Limiter_get_metric(LimiterObject *self, void *Py_UNUSED(c))
{
    struct sw_window w;
    sw_limiter_window(self->lim, &w);
    return metric_new_view(self->st, (PyObject *)self, &w);
}

static PyObject *Limiter_get_qps(LimiterObject *self, void *Py_UNUSED(c))
{
    if (self->cfg.grade != SW_GRADE_QPS)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(self->cfg.count);
}
static PyObject *Limiter_get_concurrency(LimiterObject *self, void *Py_UNUSED(c))
{
    if (self->cfg.grade != SW_GRADE_CONCURRENCY)
        Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)self->cfg.count);
}
static PyObject *Limiter_get_behavior(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(behavior_names[self->cfg.behavior]);
}
static PyObject *Limiter_get_warm_up_s(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyFloat_FromDouble(self->cfg.warm_up_s);
}
static PyObject *Limiter_get_cold_factor(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyFloat_FromDouble(self->cfg.cold_factor);
}
static PyObject *Limiter_get_max_queueing_ms(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(self->cfg.max_queueing_ms);
}
static PyObject *Limiter_get_occupy_timeout_ms(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(self->cfg.occupy_timeout_ms);
}
static PyObject *Limiter_get_interval_ms(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(self->cfg.interval_ms);
}
static PyObject *Limiter_get_sample_count(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromUnsignedLong(self->cfg.sample_count);
}
static PyObject *Limiter_get_in_flight(LimiterObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(sw_limiter_in_flight(self->lim));
}

/* a number as Python prints it: 100.0, 0.5 */
static PyObject *float_repr(double v)
{
    PyObject *f = PyFloat_FromDouble(v);
    if (f == NULL)
        return NULL;
    PyObject *r = PyObject_Repr(f);
    Py_DECREF(f);
    return r;
}

static PyObject *Limiter_repr(LimiterObject *self)
{
    const struct sw_limiter_cfg *c = &self->cfg;
    PyObject *parts = PyList_New(0), *p = NULL, *res = NULL, *sep = NULL, *num = NULL;
    if (parts == NULL)
        return NULL;
#define ADD_PART(expr)                                                                         \
    do {                                                                                       \
        p = (expr);                                                                            \
        if (p == NULL || PyList_Append(parts, p) < 0)                                          \
            goto done;                                                                         \
        Py_CLEAR(p);                                                                           \
    } while (0)
    if (c->grade == SW_GRADE_CONCURRENCY) {
        ADD_PART(PyUnicode_FromFormat("concurrency=%lld", (long long)c->count));
    } else {
        num = float_repr(c->count);
        if (num == NULL)
            goto done;
        ADD_PART(PyUnicode_FromFormat("qps=%U", num));
        Py_CLEAR(num);
        if (c->behavior != SW_REJECT)
            ADD_PART(PyUnicode_FromFormat("behavior='%s'", behavior_names[c->behavior]));
        if (c->behavior == SW_WARM_UP || c->behavior == SW_WARM_UP_THROTTLE) {
            num = float_repr(c->warm_up_s);
            if (num == NULL)
                goto done;
            ADD_PART(PyUnicode_FromFormat("warm_up_s=%U", num));
            Py_CLEAR(num);
            num = float_repr(c->cold_factor);
            if (num == NULL)
                goto done;
            ADD_PART(PyUnicode_FromFormat("cold_factor=%U", num));
            Py_CLEAR(num);
        }
        if (c->behavior == SW_THROTTLE || c->behavior == SW_WARM_UP_THROTTLE)
            ADD_PART(PyUnicode_FromFormat("max_queueing_ms=%lld", (long long)c->max_queueing_ms));
        if (c->behavior == SW_REJECT && c->occupy_timeout_ms != 500)
            ADD_PART(PyUnicode_FromFormat("occupy_timeout_ms=%lld",
                                          (long long)c->occupy_timeout_ms));
    }
    if (c->interval_ms != 1000 || c->sample_count != 2) {
        ADD_PART(PyUnicode_FromFormat("interval_ms=%lld", (long long)c->interval_ms));
        ADD_PART(PyUnicode_FromFormat("sample_count=%u", c->sample_count));
    }
    sep = PyUnicode_FromString(", ");
    if (sep == NULL)
        goto done;
    p = PyUnicode_Join(sep, parts);
    if (p == NULL)
        goto done;
    const char *tname = Py_TYPE(self)->tp_name, *dot = strrchr(tname, '.');
    res = PyUnicode_FromFormat("%s(%U)", dot ? dot + 1 : tname, p);
#undef ADD_PART
done:
    Py_XDECREF(p);
    Py_XDECREF(num);
    Py_XDECREF(sep);
    Py_DECREF(parts);
    return res;
}

/* ------------------------------------------------------------------------------------ */
/* Entry: `with lim.entry(n):` in C (the hot path)                                        */

typedef struct {
    PyObject_HEAD
    LimiterObject *limiter;
    int64_t n;
    int64_t start_ns;
    int state; /* 0 new, 1 entered, 2 exited */
} EntryObject;

static PyObject *Limiter_entry(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"n"};
    PyObject *a[1] = {NULL};
    int64_t n = 1;
    if (nargs != 0 || kwnames != NULL) {
        if (parse_fast("entry", args, nargs, kwnames, names, 1, 1, a) < 0 || parse_n(a[0], 1, &n) < 0)
            return NULL;
    }
    EntryObject *e = PyObject_New(EntryObject, self->st->Entry_Type);
    if (e == NULL)
        return NULL;
    Py_INCREF(self);
    e->limiter = self;
    e->n = n;
    e->start_ns = 0;
    e->state = 0;
    return (PyObject *)e;
}

static void Entry_dealloc(EntryObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->state == 1) { /* entered and never exited: give the in-flight count back */
        sw_limiter_exit(self->limiter->lim, self->n, 0, SW_OUT_NONE, SW_NOW);
        limiter_notify(self->limiter);
    }
    Py_CLEAR(self->limiter);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *Entry_enter(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->state != 0) {
        PyErr_SetString(PyExc_RuntimeError, "an entry can be entered only once");
        return NULL;
    }
    LimiterObject *lim = self->limiter;
    struct sw_decision d;
    sw_limiter_decide(lim->lim, self->n, SW_NOW, SW_F_ENTRY | SW_F_RETRY, &d);
    if (d.verdict != SW_PASS) {
        raise_blocked(lim, self->n, &d);
        return NULL;
    }
    self->state = 1;
    if (d.wait_ns > 0 && sleep_decision(&d) < 0) {
        /* interrupted while queued: the request never ran */
        sw_limiter_exit(lim->lim, self->n, 0, SW_OUT_NONE, SW_NOW);
        self->state = 2;
        limiter_notify(lim);
        return NULL;
    }
    self->start_ns = sw_time_ns();
    Py_INCREF(self);
    return (PyObject *)self;
}

/* mark entered after an asyncio acquisition (holding in flight) */
static PyObject *Entry_started(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    self->state = 1;
    self->start_ns = sw_time_ns();
    Py_RETURN_NONE;
}

static PyObject *Entry_exit(EntryObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->state != 1) {
        PyErr_SetString(PyExc_RuntimeError, "exit of an entry that is not entered");
        return NULL;
    }
    PyObject *et = nargs > 0 ? args[0] : Py_None;
    int outcome;
    int64_t rt = 0;
    if (et == Py_None) {
        outcome = SW_OUT_SUCCESS;
        int64_t el = sw_time_ns() - self->start_ns;
        rt = el > 0 ? el / NS_PER_MS : 0;
    } else if (PyType_Check(et) &&
               PyType_IsSubtype((PyTypeObject *)et, (PyTypeObject *)PyExc_Exception)) {
        outcome = SW_OUT_EXCEPTION;
    } else {
        outcome = SW_OUT_NONE;
    }
    self->state = 2;
    sw_limiter_exit(self->limiter->lim, self->n, rt, outcome, SW_NOW);
    limiter_notify(self->limiter);
    Py_RETURN_FALSE;
}

static PyObject *Entry_aenter(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    /* as __enter__: a second enter would take a second in-flight count that one exit never
     * gives back */
    if (self->state != 0) {
        PyErr_SetString(PyExc_RuntimeError, "an entry can be entered only once");
        return NULL;
    }
    return PyObject_CallMethodObjArgs((PyObject *)self->limiter, self->limiter->st->str_aenter,
                                      (PyObject *)self, NULL);
}

static PyObject *Entry_aexit(EntryObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *et = nargs > 0 ? args[0] : Py_None;
    return PyObject_CallMethodObjArgs((PyObject *)self->limiter, self->limiter->st->str_aexit,
                                      (PyObject *)self, et, NULL);
}

static PyObject *Entry_get_n(EntryObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(self->n);
}
static PyObject *Entry_get_limiter(EntryObject *self, void *Py_UNUSED(c))
{
    Py_INCREF(self->limiter);
    return (PyObject *)self->limiter;
}

static PyObject *Entry_repr(EntryObject *self)
{
    static const char *const st[] = {"new", "entered", "exited"};
    return PyUnicode_FromFormat("<slidewin entry n=%lld %s of %R>", (long long)self->n,
                                st[self->state], (PyObject *)self->limiter);
}

static PyGetSetDef Entry_getset[] = {
    {"n", (getter)Entry_get_n, NULL, "The request size.", NULL},
    {"limiter", (getter)Entry_get_limiter, NULL, "The Limiter.", NULL},
    {NULL}};

static PyMethodDef Entry_methods[] = {
    {"__enter__", (PyCFunction)Entry_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Entry_exit, METH_FASTCALL, NULL},
    {"__aenter__", (PyCFunction)Entry_aenter, METH_NOARGS, NULL},
    {"__aexit__", (PyCFunction)(void (*)(void))Entry_aexit, METH_FASTCALL, NULL},
    {"_started", (PyCFunction)Entry_started, METH_NOARGS, NULL},
    {NULL}};

static PyType_Slot Entry_slots[] = {
    {Py_tp_doc, "An admission in progress: `with lim.entry(n):` or `async with lim.entry(n):`."},
    {Py_tp_dealloc, Entry_dealloc},
    {Py_tp_methods, Entry_methods},
    {Py_tp_getset, Entry_getset},
    {Py_tp_repr, Entry_repr},
    {0, NULL}};

static PyType_Spec Entry_spec = {
    .name = "slidewin._core.Entry",
    .basicsize = sizeof(EntryObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Entry_slots,
};

static PyGetSetDef Limiter_getset[] = {
    {"metric", (getter)Limiter_get_metric, NULL,
     "This limiter's window as a Metric (a live view).", NULL},
    {"qps", (getter)Limiter_get_qps, NULL, "The rate per second, or None.", NULL},
    {"concurrency", (getter)Limiter_get_concurrency, NULL, "The in-flight limit, or None.", NULL},
    {"behavior", (getter)Limiter_get_behavior, NULL, "The controller.", NULL},
    {"warm_up_s", (getter)Limiter_get_warm_up_s, NULL, "Warm-up period, s.", NULL},
    {"cold_factor", (getter)Limiter_get_cold_factor, NULL, "Warm-up cold factor.", NULL},
    {"max_queueing_ms", (getter)Limiter_get_max_queueing_ms, NULL, "Throttle queue, ms.", NULL},
    {"occupy_timeout_ms", (getter)Limiter_get_occupy_timeout_ms, NULL,
     "Longest wait of a prioritized borrow, ms.", NULL},
    {"interval_ms", (getter)Limiter_get_interval_ms, NULL, "The window, ms.", NULL},
    {"sample_count", (getter)Limiter_get_sample_count, NULL, "Buckets in the window.", NULL},
    {"in_flight", (getter)Limiter_get_in_flight, NULL, "Requests in flight now.", NULL},
    {NULL}};

static PyMethodDef Limiter_methods[] = {
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
    {"entry", (PyCFunction)(void (*)(void))Limiter_entry, FASTKW,
     "entry(n=1)\n--\n\nA context manager: acquire; on exit record SUCCESS or EXCEPTION, RT, "
     "and release."},
    {"stats", (PyCFunction)(void (*)(void))Limiter_stats, FASTKW,
     "stats(now_ns=None)\n--\n\nThe window's statistics as a Stats."},
    {"_decide", (PyCFunction)(void (*)(void))Limiter_decide, METH_FASTCALL, NULL},
    {"_count_block", (PyCFunction)Limiter_count_block, METH_O, NULL},
    {"_raise_blocked", (PyCFunction)(void (*)(void))Limiter_raise_blocked, METH_FASTCALL, NULL},
    {"_release_entry", (PyCFunction)Limiter_release_entry, METH_O, NULL},
    {"_try_acquire_nogil", (PyCFunction)(void (*)(void))Limiter_try_acquire_nogil, FASTKW,
     "try_acquire with the GIL released around the core call (the GIL study)."},
    {"_noop", (PyCFunction)noop, METH_NOARGS, "Do nothing (a benchmark floor)."},
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

static PyType_Spec Limiter_spec = {
    .name = "slidewin._core.Limiter",
    .basicsize = sizeof(LimiterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Limiter_slots,
};

/* ------------------------------------------------------------------------------------ */
/* struct sequences                                                                      */

static PyStructSequence_Field Bucket_fields[] = {
    {"start_ms", "the bucket's start, ms on the monotonic clock"},
    {"counts", "a tuple of counts indexed by event"},
    {"min_rt", "the bucket's minimum RT, ms (5000 when none)"},
    {NULL, NULL}};
static PyStructSequence_Desc Bucket_desc = {"slidewin.Bucket", "One bucket of a Metric window.",
                                            Bucket_fields, 3};

static PyStructSequence_Field Stats_fields[] = {
    {"pass_qps", "passes per second over the window"},
    {"block_qps", "blocks per second over the window"},
    {"success_qps", "successes per second over the window"},
    {"exception_qps", "exceptions per second over the window"},
    {"avg_rt_ms", "RT sum / success over the window (0.0 without success)"},
    {"min_rt_ms", "minimum RT over the window (5000.0 when none)"},
    {"concurrency", "requests in flight"},
    {"waiting", "passes granted ahead (prioritized), not yet current"},
    {"occupied_qps", "prioritized passes borrowed from the next window, per second"},
    {NULL, NULL}};
static PyStructSequence_Desc Stats_desc = {"slidewin.Stats", "A Limiter's window statistics.",
                                           Stats_fields, 9};

/* ------------------------------------------------------------------------------------ */
/* module                                                                                */

static PyObject *mod_clock_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLongLong(sw_time_ns());
}
static PyObject *mod_coarse_clock_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLongLong(sw_time_coarse_ns());
}
static PyObject *mod_coarse_resolution_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLongLong(sw_time_coarse_resolution_ns());
}

static PyMethodDef module_methods[] = {
    {"clock_ns", mod_clock_ns, METH_NOARGS,
     "clock_ns()\n--\n\nCLOCK_MONOTONIC in ns (the clock of pacing and RT)."},
    {"coarse_clock_ns", mod_coarse_clock_ns, METH_NOARGS,
     "coarse_clock_ns()\n--\n\nCLOCK_MONOTONIC_COARSE in ns (the clock of window math)."},
    {"coarse_resolution_ns", mod_coarse_resolution_ns, METH_NOARGS,
     "coarse_resolution_ns()\n--\n\nResolution of the coarse clock in ns."},
    {NULL}};

static int module_exec(PyObject *m)
{
    module_state *st = (module_state *)PyModule_GetState(m);
    st->Metric_Type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Metric_spec, NULL);
    if (st->Metric_Type == NULL || PyModule_AddType(m, st->Metric_Type) < 0)
        return -1;
    st->Limiter_Type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Limiter_spec, NULL);
    if (st->Limiter_Type == NULL || PyModule_AddType(m, st->Limiter_Type) < 0)
        return -1;
    st->Entry_Type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Entry_spec, NULL);
    if (st->Entry_Type == NULL || PyModule_AddType(m, st->Entry_Type) < 0)
        return -1;
    /* bases as a tuple: a bare type is accepted only since 3.10 (3.9: "bases is not a
     * tuple") */
    PyObject *bases = PyTuple_Pack(1, PyExc_Exception);
    if (bases == NULL)
        return -1;
    st->BlockedError = PyType_FromModuleAndSpec(m, &BlockedError_spec, bases);
    Py_DECREF(bases);
    if (st->BlockedError == NULL ||
        PyModule_AddType(m, (PyTypeObject *)st->BlockedError) < 0)
        return -1;
    st->Bucket_Type = PyStructSequence_NewType(&Bucket_desc);
    if (st->Bucket_Type == NULL || PyModule_AddType(m, st->Bucket_Type) < 0)
        return -1;
    st->Stats_Type = PyStructSequence_NewType(&Stats_desc);
    if (st->Stats_Type == NULL || PyModule_AddType(m, st->Stats_Type) < 0)
        return -1;
    st->default_names = PyTuple_New(SW_EV_DEFAULT_COUNT);
    st->default_map = PyDict_New();
    if (st->default_names == NULL || st->default_map == NULL)
        return -1;
    for (int i = 0; i < SW_EV_DEFAULT_COUNT; i++) {
        PyObject *nm = PyUnicode_InternFromString(default_event_names[i]);
        PyObject *idx = PyLong_FromLong(i);
        if (nm == NULL || idx == NULL || PyDict_SetItem(st->default_map, nm, idx) < 0) {
            Py_XDECREF(nm);
            Py_XDECREF(idx);
            return -1;
        }
        Py_DECREF(idx);
        PyTuple_SET_ITEM(st->default_names, i, nm);
    }
    st->str_aenter = PyUnicode_InternFromString("_aenter");
    st->str_aexit = PyUnicode_InternFromString("_aexit");
    if (st->str_aenter == NULL || st->str_aexit == NULL)
        return -1;
    Py_INCREF(st->default_names);
    if (PyModule_AddObject(m, "EVENT_NAMES", st->default_names) < 0) {
        Py_DECREF(st->default_names);
        return -1;
    }
    if (PyModule_AddIntConstant(m, "F_TRY", SW_F_TRY) < 0 ||
        PyModule_AddIntConstant(m, "F_PRIORITIZED", SW_F_PRIORITIZED) < 0 ||
        PyModule_AddIntConstant(m, "F_NO_BLOCK", SW_F_NO_BLOCK) < 0 ||
        PyModule_AddIntConstant(m, "F_ENTRY", SW_F_ENTRY) < 0 ||
        PyModule_AddIntConstant(m, "F_RETRY", SW_F_RETRY) < 0 ||
        PyModule_AddIntConstant(m, "PASS", SW_PASS) < 0 ||
        PyModule_AddIntConstant(m, "BLOCK", SW_BLOCK) < 0 ||
        PyModule_AddIntConstant(m, "NEVER", SW_NEVER) < 0 ||
        PyModule_AddIntConstant(m, "MAX_EVENTS", SW_MAX_EVENTS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_SAMPLES", SW_MAX_SAMPLES) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = (module_state *)PyModule_GetState(m);
    Py_VISIT(st->Metric_Type);
    Py_VISIT(st->Limiter_Type);
    Py_VISIT(st->Entry_Type);
    Py_VISIT(st->Bucket_Type);
    Py_VISIT(st->Stats_Type);
    Py_VISIT(st->BlockedError);
    Py_VISIT(st->default_names);
    Py_VISIT(st->default_map);
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = (module_state *)PyModule_GetState(m);
    Py_CLEAR(st->Metric_Type);
    Py_CLEAR(st->Limiter_Type);
    Py_CLEAR(st->Entry_Type);
    Py_CLEAR(st->Bucket_Type);
    Py_CLEAR(st->Stats_Type);
    Py_CLEAR(st->BlockedError);
    Py_CLEAR(st->default_names);
    Py_CLEAR(st->default_map);
    Py_CLEAR(st->str_aenter);
    Py_CLEAR(st->str_aexit);
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}};

static struct PyModuleDef slidewin_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "slidewin._core",
    .m_doc = "The C core of slidewin: sliding-window statistics and flow control.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&slidewin_module);
}
