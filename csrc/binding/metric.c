/* metric.c - Metric: sliding-window statistics (standalone, or a view of a Limiter's). */
#include "metric.h"
#include "args.h"
#include "observe.h"
#include "shared.h"

#include <string.h>

/* A field of the window's configuration, in either mode. */
#define M_CFG(self, f) ((self)->ev != NULL ? (self)->ev->f : (self)->win.leap->f)

static int metric_event(MetricObject *self, PyObject *o, uint32_t *out)
{
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        int overflow = 0;
        long v = PyLong_AsLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow || v < 0 || v >= (long)M_CFG(self, n_events)) {
            PyErr_Format(PyExc_ValueError, "event must be an index in 0..%u or a name in %R, got %R",
                         M_CFG(self, n_events) - 1u, self->names, o);
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

PyObject *metric_new_view(module_state *st, PyObject *owner, const struct sw_window *win)
{
    /* zeroed: no state, region or fork link of its own (the owner's), ev NULL (a limiter's
     * statistics: always under its lock) */
    MetricObject *self = (MetricObject *)st->Metric_Type->tp_alloc(st->Metric_Type, 0);
    if (self == NULL)
        return NULL;
    LimiterObject *lim = (LimiterObject *)owner;
    self->win = *win;
    self->shared = Py_NewRef(lim->shared != NULL ? lim->shared : Py_None);
    self->name = Py_XNewRef(lim->name); /* not registered: the owner is */
    self->owner = Py_NewRef(owner);
    self->names = Py_NewRef(st->default_names);
    self->name_map = Py_NewRef(st->default_map);
    self->st = st;
    return (PyObject *)self;
}

/* A Metric's state of either mode, private or in a fresh region, initialised. @return SW_* */
static int metric_mem_init(struct sw_metric_mem *mem, const struct sw_leap_cfg *cfg,
                           bool eventual)
{
    sw_lock_init(&mem->lock);
    if (eventual)
        return sw_evleap_init((struct sw_evleap *)(void *)mem->leap, cfg);
    return sw_leap_init((struct sw_leap *)(void *)mem->leap, cfg);
}

static int metric_init_state(void *state, const struct sw_shm_layout *lay)
{
    return metric_mem_init(state, lay->arg, lay->consistency == SW_CONSISTENCY_EVENTUAL);
}

static sw_lock *metric_state_lock(void *state)
{
    return &((struct sw_metric_mem *)state)->lock;
}

static int metric_check_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_metric_mem_check(state, lay->arg, lay->consistency == SW_CONSISTENCY_EVENTUAL);
}

/* self->mem, private (mode 0) or in a region (names: its own events, NULL for the defaults),
 * and the window over it: the ring, no future, no hooks. @return 0, or -1 */
static int metric_open(MetricObject *self, int mode, const char *path, struct sw_leap_cfg *cfg,
                       PyObject *names, bool eventual)
{
    char events[SW_SHM_EVENTS_BYTES];
    size_t used = 0;
    struct sw_shm_layout lay = {
        .kind = SW_KIND_METRIC, .interval_ms = cfg->interval_ms,
        .sample_count = cfg->sample_count, .state_size = sw_metric_mem_size(cfg, eventual),
        .consistency = eventual ? SW_CONSISTENCY_EVENTUAL : SW_CONSISTENCY_STRONG,
        .init_state = metric_init_state, .check_state = metric_check_state,
        .state_lock = metric_state_lock, .arg = cfg,
        .name = self->name != NULL ? PyUnicode_AsUTF8(self->name) : NULL};
    for (Py_ssize_t i = 0; mode != 0 && names != NULL && i < PyTuple_GET_SIZE(names); i++) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, i), &len);
        if (s == NULL)
            return -1;
        if (used + (size_t)len + 1 > sizeof events) {
            PyErr_Format(PyExc_ValueError, "events: the names of a shared Metric must "
                         "fit in %u bytes (UTF-8, one NUL each)", SW_SHM_EVENTS_BYTES);
            return -1;
        }
        memcpy(events + used, s, (size_t)len + 1);
        used += (size_t)len + 1;
        lay.n_events = cfg->n_events;
        lay.events = events;
        lay.events_len = (uint32_t)used;
    }
    if (mode != 0) {
        if (shared_open(&self->shm, mode, path, &lay) < 0)
            return -1;
        self->mem = self->shm.state;
    } else if ((self->mem = PyMem_Calloc(1, lay.state_size)) == NULL) {
        PyErr_NoMemory();
        return -1;
    } else if (metric_mem_init(self->mem, cfg, eventual) != SW_OK) {
        PyErr_SetString(PyExc_ValueError, "invalid Metric configuration");
        return -1;
    }
    self->win = (struct sw_window){
        .lock = &self->mem->lock,
        .leap = eventual ? NULL : (struct sw_leap *)(void *)self->mem->leap,
        .token = mode == 0 ? SW_LOCK_PRIVATE : SW_LOCK_PROCESS};
    self->ev = eventual ? (struct sw_evleap *)(void *)self->mem->leap : NULL;
    if (mode == 0)
        return fork_register(&self->fork, self->win.lock, NULL);
    /* eventual: no lock and no repair, every value the ring holds is checked where it is
     * used; strong: restore every invariant the hot path relies on (a region is input) */
    if (!eventual && GAVE_UP(sw_window_check_repair(&self->win))) /* the hook releases the GIL */
        return lock_gave_up() < 0 ? -1 : 0;
    return 0;
}

/* consistency=: "strong" (false; not given too), "eventual" (true). @return 0, or -1 */
static int parse_consistency(PyObject *o, bool *eventual)
{
    *eventual = o != NULL && PyUnicode_Check(o) &&
                PyUnicode_CompareWithASCIIString(o, "eventual") == 0;
    if (o == NULL || *eventual)
        return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "consistency must be a str, \"strong\" or \"eventual\", not %.100s",
                     type_name_of(o));
        return -1;
    }
    if (PyUnicode_CompareWithASCIIString(o, "strong") != 0) {
        PyErr_Format(PyExc_ValueError,
                     "consistency must be \"strong\" (the default: every add and read "
                     "under the lock) or \"eventual\" (adds with no lock), got %R", o);
        return -1;
    }
    return 0;
}

/* events=: a tuple of 1 to SW_MAX_EVENTS distinct non-empty str, and the map name -> index.
 * @return 0 (new references), or -1 with an exception set (nothing to release) */
static int parse_events(PyObject *o, PyObject **names, PyObject **map)
{
    *map = NULL;
    if (PyUnicode_Check(o) || PyBytes_Check(o)) {
        PyErr_SetString(PyExc_TypeError,
                        "events must be a sequence of str names, not a single string");
        return -1;
    }
    if (PyAnySet_Check(o)) {
        /* a set has no order: the indexes of its names would be arbitrary */
        PyErr_Format(PyExc_TypeError, "events must be an ordered sequence of str names (a tuple "
                     "or list), not %.100s", type_name_of(o));
        return -1;
    }
    if ((*names = PySequence_Tuple(o)) == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "events must be a sequence of str names, not %.100s",
                         type_name_of(o));
        }
        return -1;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(*names);
    if (k < 1 || k > SW_MAX_EVENTS) {
        PyErr_Format(PyExc_ValueError, "events must name 1 to %d events, got %zd",
                     SW_MAX_EVENTS, k);
        goto fail;
    }
    if ((*map = PyDict_New()) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *nm = PyTuple_GET_ITEM(*names, i), *idx = NULL, *got;
        if (!PyUnicode_Check(nm))
            PyErr_Format(PyExc_TypeError, "events must be str names, got %.100s at index %zd",
                         type_name_of(nm), i);
        else if (PyUnicode_GET_LENGTH(nm) == 0)
            PyErr_Format(PyExc_ValueError, "events: name at index %zd is empty", i);
        else if ((idx = PyLong_FromSsize_t(i)) != NULL &&
                 (got = PyDict_SetDefault(*map, nm, idx)) != NULL && got != idx)
            PyErr_Format(PyExc_ValueError, "events: duplicate name %R", nm);
        Py_XDECREF(idx);
        if (PyErr_Occurred())
            goto fail;
    }
    return 0;
fail:
    Py_CLEAR(*names);
    Py_CLEAR(*map);
    return -1;
}

static PyObject *Metric_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static const char *const kwnames[] = {"interval_ms", "sample_count", "events", "shared",
                                          "name", "consistency"};
    PyObject *a[6], *name = NULL, *names, *map;
    bool eventual;
    char path[4096];
    int mode, name_given;
    int64_t interval = 1000;
    uint32_t samples = 2;
    module_state *st = state_for_new(type);
    if (st == NULL || parse_kwds("Metric", args, kwds, kwnames, 6, 2, a) < 0 ||
        parse_consistency(a[5], &eventual) < 0 ||
        (mode = shared_and_name(a[3], a[4], path, sizeof path, &name, &name_given)) < 0)
        return NULL;
    if (parse_window(a[0], a[1], &interval, &samples) < 0)
        goto fail_name;
    if (interval % (int64_t)samples != 0) {
        PyErr_Format(PyExc_ValueError,
                     "interval_ms (%lld) must be divisible by sample_count (%lld)",
                     (long long)interval, (long long)samples);
        goto fail_name;
    }
    if (a[2] == NULL || a[2] == Py_None) {
        names = Py_NewRef(st->default_names);
        map = Py_NewRef(st->default_map);
    } else if (parse_events(a[2], &names, &map) < 0) {
        goto fail_name;
    }
    bool own_events = names != st->default_names;
    struct sw_leap_cfg cfg = {interval, samples, (uint32_t)PyTuple_GET_SIZE(names),
                              !own_events};
    MetricObject *self = NULL;
    if (sw_metric_mem_size(&cfg, eventual) == 0)
        PyErr_SetString(PyExc_ValueError, "invalid Metric configuration");
    else
        self = (MetricObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(names);
        Py_DECREF(map);
        goto fail_name;
    }
    self->name = name;
    self->name_given = name_given;
    self->names = names; /* owned by self from here: its dealloc releases them */
    self->name_map = map;
    self->st = st;
    self->shared = mode == 0 ? Py_NewRef(Py_None) : shared_canonical(a[3], path);
    if (self->shared == NULL ||
        metric_open(self, mode, path, &cfg, own_events ? names : NULL, eventual) < 0 ||
        registry_add(st, self->name, (PyObject *)self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
fail_name:
    Py_XDECREF(name);
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
    PyTypeObject *tp = dealloc_start((PyObject *)self, self->weakreflist);
    Metric_clear(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->name);
    fork_unregister(&self->fork);
    if (self->shm.base != NULL)
        sw_shm_close(&self->shm); /* the region's memory, not ours to free */
    else
        PyMem_Free(self->mem);
    Py_CLEAR(self->shared);
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
    } else if (parse_fast_req("add", args, nargs, kwnames, names, 3, 2, 1, a) < 0) {
        return NULL;
    }
    if (metric_event(self, a[0], &ev) < 0 || parse_n(a[1], 0, &n) < 0 || parse_now(a[2], &now) < 0)
        return NULL;
    int rc = self->ev != NULL ? sw_evleap_add(self->ev, ev, n, now)
                              : sw_window_add(&self->win, ev, n, now);
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
    if (parse_fast_req("add_rt", args, nargs, kwnames, names, 2, 1, 1, a) < 0)
        return NULL;
    if (!M_CFG(self, has_rt))
        return metric_no_rt(self, "add_rt");
    if (as_int64(a[0], "rt_ms", 0, INT64_MAX, &rt) < 0 || parse_now(a[1], &now) < 0)
        return NULL;
    int rc = self->ev != NULL ? sw_evleap_add_rt(self->ev, rt, now)
                              : sw_window_add_rt(&self->win, rt, now);
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
    } else if (parse_fast_req(fname, args, nargs, kwnames, names, 2, 1, 1, a) < 0) {
        return -1;
    }
    if (metric_event(self, a[0], &ev) < 0 || parse_now(a[1], &now) < 0)
        return -1;
    int rc = self->ev != NULL ? sw_evleap_read(self->ev, which, ev, now, out)
                              : sw_window_read(&self->win, which, ev, now, out);
    if (rc != SW_OK) {
        raise_core_error(rc);
        return -1;
    }
    return 0;
}

/* min_rt() (avg false) or avg_rt() (true): the window's RT at now_ns */
static PyObject *metric_rt(MetricObject *self, const char *fname, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames, bool avg)
{
    int64_t now, min_rt, rt, ok;
    if (parse_now_only(fname, args, nargs, kwnames, &now) < 0)
        return NULL;
    if (!M_CFG(self, has_rt))
        return metric_no_rt(self, fname);
    if (self->ev != NULL)
        sw_evleap_rt(self->ev, now, &min_rt, &rt, &ok);
    else
        sw_window_rt(&self->win, now, &min_rt, &rt, &ok);
    if (!avg)
        return PyLong_FromLongLong(min_rt);
    return PyFloat_FromDouble(ok > 0 ? (double)rt / (double)ok : 0.0);
}

/* The read methods: sum(), current(), previous() (one event's count), rate() (its sum a
 * second), min_rt(), avg_rt(): `expr` makes the result of `v` */
#define METRIC_READ(fn, fname, which, expr)                                                    \
    static PyObject *fn(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,           \
                        PyObject *kwnames)                                                     \
    {                                                                                          \
        int64_t v;                                                                             \
        return metric_read(self, fname, which, args, nargs, kwnames, &v) < 0 ? NULL : (expr);  \
    }
METRIC_READ(Metric_sum, "sum", SW_READ_SUM, PyLong_FromLongLong(v))
METRIC_READ(Metric_current, "current", SW_READ_CURRENT, PyLong_FromLongLong(v))
METRIC_READ(Metric_previous, "previous", SW_READ_PREVIOUS, PyLong_FromLongLong(v))
METRIC_READ(Metric_rate, "rate", SW_READ_SUM,
            PyFloat_FromDouble((double)v / ((double)M_CFG(self, interval_ms) / 1000.0)))
#define METRIC_RT(fn, fname, avg)                                                              \
    static PyObject *fn(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,           \
                        PyObject *kwnames)                                                     \
    {                                                                                          \
        return metric_rt(self, fname, args, nargs, kwnames, avg);                              \
    }
METRIC_RT(Metric_min_rt, "min_rt", false)
METRIC_RT(Metric_avg_rt, "avg_rt", true)

static PyObject *Metric_buckets(MetricObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    int64_t now;
    if (parse_now_only("buckets", args, nargs, kwnames, &now) < 0)
        return NULL;
    uint32_t n_events = M_CFG(self, n_events), stride = SW_SLOT_COUNTS + n_events;
    size_t words = (size_t)M_CFG(self, sample_count) * stride;
    int64_t *buf = PyMem_Malloc(words * sizeof(int64_t));
    if (buf == NULL)
        return PyErr_NoMemory();
    uint32_t nb = self->ev != NULL ? sw_evleap_buckets(self->ev, now, buf)
                                   : sw_window_buckets(&self->win, now, buf);
    PyObject *list = PyList_New((Py_ssize_t)nb);
    for (uint32_t i = 0; list != NULL && i < nb; i++) { /* a NULL item goes with the list */
        const int64_t *b = buf + (size_t)i * stride;
        PyObject *counts = PyTuple_New((Py_ssize_t)n_events), *bucket = NULL, *c;
        for (uint32_t e = 0; counts != NULL && e < n_events; e++) {
            if ((c = PyLong_FromLongLong(b[SW_SLOT_COUNTS + e])) == NULL)
                Py_CLEAR(counts);
            else
                PyTuple_SET_ITEM(counts, e, c);
        }
        if (counts != NULL)
            bucket = PyObject_CallFunction((PyObject *)self->st->Bucket_Type, "((LNL))",
                                           (long long)b[SW_SLOT_START], counts,
                                           (long long)b[SW_SLOT_MIN_RT]);
        if (bucket == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, bucket);
    }
    PyMem_Free(buf);
    return list;
}

static PyObject *Metric_reset(MetricObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->ev != NULL)
        sw_evleap_reset(self->ev);
    else
        sw_window_reset(&self->win);
    Py_RETURN_NONE;
}

static PyObject *Metric_repr(MetricObject *self)
{
    PyObject *r = PyUnicode_FromFormat("Metric(interval_ms=%lld, sample_count=%u",
                                       (long long)M_CFG(self, interval_ms),
                                       M_CFG(self, sample_count));
    if (r != NULL && self->names != self->st->default_names)
        PyUnicode_AppendAndDel(&r, PyUnicode_FromFormat(", events=%R", self->names));
    if (r != NULL && self->shared != NULL && self->shared != Py_None)
        PyUnicode_AppendAndDel(&r, PyUnicode_FromFormat(", shared=%R", self->shared));
    if (r != NULL && self->name != NULL && self->name_given)
        PyUnicode_AppendAndDel(&r, PyUnicode_FromFormat(", name=%R", self->name));
    if (r != NULL && self->ev != NULL)
        PyUnicode_AppendAndDel(&r, PyUnicode_FromString(", consistency='eventual'"));
    if (r != NULL)
        PyUnicode_AppendAndDel(&r, PyUnicode_FromString(")"));
    return r;
}

static PyObject *Metric_get(MetricObject *self, void *which)
{
    switch ((int)(intptr_t)which) {
    case 0:
        return PyLong_FromLongLong(M_CFG(self, interval_ms));
    case 1:
        return PyLong_FromUnsignedLong(M_CFG(self, sample_count));
    case 2:
        return PyLong_FromLongLong(M_CFG(self, window_ms));
    default:
        return PyUnicode_FromString(self->ev != NULL ? "eventual" : "strong");
    }
}

static PyGetSetDef Metric_getset[] = {
    {"interval_ms", (getter)Metric_get, NULL, "The window length in ms.", (void *)0},
    {"sample_count", (getter)Metric_get, NULL, "The number of buckets.", (void *)1},
    {"window_ms", (getter)Metric_get, NULL, "One bucket's length in ms.", (void *)2},
    {"events", get_object_or_none, NULL, "The event names, by index.",
     (void *)offsetof(MetricObject, names)},
    {"shared", get_object_or_none, NULL,
     "How it was opened: None (private), True (anonymous), or the region's name or path.",
     (void *)offsetof(MetricObject, shared)},
    {"name", get_object_or_none, NULL,
     "The name (name=, else the shared region's name), or None.",
     (void *)offsetof(MetricObject, name)},
    {"consistency", (getter)Metric_get, NULL,
     "\"strong\" (adds and reads under the lock) or \"eventual\" (adds with no lock).",
     (void *)3},
    {NULL}};

WEAKREF_MEMBERS(Metric, MetricObject);

static PyMethodDef Metric_methods[] = {
    METHOD(add, Metric_add, FASTKW, "(event, n=1, *, now_ns=None)", "Count n of event in the bucket of now."),
    METHOD(add_rt, Metric_add_rt, FASTKW, "(rt_ms, *, now_ns=None)", "Add a response time: RT sum and the bucket's min RT."),
    METHOD(sum, Metric_sum, FASTKW, "(event, *, now_ns=None)", "Sum of event over the window's valid buckets."),
    METHOD(rate, Metric_rate, FASTKW, "(event, *, now_ns=None)", "sum / (interval_ms / 1000): per second."),
    METHOD(current, Metric_current, FASTKW, "(event, *, now_ns=None)", "Count of event in the bucket containing now."),
    METHOD(previous, Metric_previous, FASTKW, "(event, *, now_ns=None)", "Count of event in the bucket just before, else 0."),
    METHOD(min_rt, Metric_min_rt, FASTKW, "(*, now_ns=None)", "Minimum RT in ms over the window (5000 when empty, >= 1)."),
    METHOD(avg_rt, Metric_avg_rt, FASTKW, "(*, now_ns=None)", "RT sum / success over the window, 0.0 without success."),
    METHOD(buckets, Metric_buckets, FASTKW, "(*, now_ns=None)", "The window's buckets, oldest first (dense)."),
    METHOD(reset, Metric_reset, METH_NOARGS, "()", "Forget everything, including the newest time seen."),
    {NULL}};

TYPE_SPEC(Metric, "slidewin.Metric", MetricObject, 0,
          {Py_tp_doc, "Metric(interval_ms=1000, sample_count=2, *, events=None, shared=None, "
                      "name=None, consistency='strong')\n--\n\n"
                      "Sliding-window statistics: a ring of sample_count buckets over "
                      "interval_ms."},
          {Py_tp_new, Metric_new}, {Py_tp_traverse, Metric_traverse},
          {Py_tp_clear, Metric_clear}, {Py_tp_dealloc, Metric_dealloc},
          {Py_tp_repr, Metric_repr}, TYPE_TABLES(Metric));
