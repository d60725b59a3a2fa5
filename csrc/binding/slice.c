/* slice.c - _core._LeaseSlice(refill, slow): a leased slice's permits, decided on in C.
 *
 * take(n=1, *, now_ns=None): with no now_ns, while CLOCK_MONOTONIC is before `end` and n
 * permits are left, takes them (True); the take that crosses below `low` calls refill() once
 * (its exception unraisable). Otherwise returns slow(n, now_ns). The permits change only in
 * one step each (add, debit, drain): a free-threaded build does each, and take's
 * check-and-decrement, in a critical section on the object. */
#include "slice.h"

#include <time.h>

typedef struct {
    PyObject_HEAD
    PyObject *refill; /* first, as SliceRefs */
    PyObject *slow;
    int64_t left;  /* permits in hand */
    int64_t end;   /* the slice is valid before this, ns on CLOCK_MONOTONIC (0: not here) */
    int64_t low;   /* the low-water mark: crossing it calls refill() */
    int64_t calls; /* decisions made here since the last harvest() */
    int64_t taken; /* permits taken here since the last harvest() */
} LeaseSlice;

/* What both types (LeaseSlice, KeyedSlices) begin with: their two references. */
typedef struct {
    PyObject_HEAD
    PyObject *ref[2];
} SliceRefs;

#ifdef Py_GIL_DISABLED
#define SLICE_LOCK(o) Py_BEGIN_CRITICAL_SECTION(o)
#define SLICE_UNLOCK() Py_END_CRITICAL_SECTION()
#else
#define SLICE_LOCK(o) {
#define SLICE_UNLOCK() }
#endif

static int64_t mono_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return INT64_MAX; /* no clock: never valid here (the slow path decides) */
    return (int64_t)ts.tv_sec * INT64_C(1000000000) + (int64_t)ts.tv_nsec;
}

/* A new object of tp holding ref0 (stolen; NULL: the error of making it) and ref1 */
static PyObject *refs_new(PyTypeObject *tp, PyObject *ref0, PyObject *ref1)
{
    SliceRefs *self = NULL;
    if (ref0 != NULL)
        self = (SliceRefs *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0);
    if (self == NULL) {
        Py_XDECREF(ref0);
        return NULL;
    }
    self->ref[0] = ref0;
    self->ref[1] = Py_NewRef(ref1);
    return (PyObject *)self;
}

static PyObject *slice_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"refill", "slow", NULL};
    PyObject *refill, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:_LeaseSlice", kws, &refill, &slow))
        return NULL;
    if (!PyCallable_Check(refill) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "_LeaseSlice: refill and slow must be callable");
        return NULL;
    }
    return refs_new(tp, Py_NewRef(refill), slow);
}

static int slice_traverse(PyObject *o, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(o));
    Py_VISIT(((SliceRefs *)o)->ref[0]);
    Py_VISIT(((SliceRefs *)o)->ref[1]);
    return 0;
}

static int slice_clear(PyObject *o)
{
    Py_CLEAR(((SliceRefs *)o)->ref[0]);
    Py_CLEAR(((SliceRefs *)o)->ref[1]);
    return 0;
}

static void slice_dealloc(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    slice_clear(o);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(o);
    Py_DECREF(tp);
}

/* now_ns as slidewin.redis checks it: an int (not a bool), 0 to 2**62 - 1 */
static int slice_now(PyObject *o)
{
    if (PyBool_Check(o) || !PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "now_ns must be an int (ns since the epoch), not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || (overflow == 0 && v < 0)) {
        PyErr_Format(PyExc_ValueError, "now_ns must be >= 0, got %R", o);
        return -1;
    }
    if (overflow > 0 || v >= (INT64_C(1) << 62)) {
        PyErr_Format(PyExc_ValueError, "now_ns must be below 2**62, got %R", o);
        return -1;
    }
    return 0;
}

/* take's C path: 1 when it took n permits, else 0 */
static int slice_fast(LeaseSlice *self, int64_t n)
{
    int ok = 0, crossed = 0;
    int64_t t = mono_ns();
    SLICE_LOCK(self);
    if (self->left >= n && t < self->end) {
        int64_t before = self->left;
        self->left -= n;
        self->calls++;
        self->taken += n;
        ok = 1;
        crossed = before >= self->low && self->left < self->low;
    }
    SLICE_UNLOCK();
    if (ok && crossed) {
        PyObject *r = PyObject_CallNoArgs(self->refill);
        if (r == NULL)
            PyErr_WriteUnraisable(self->refill);
        Py_XDECREF(r);
    }
    return ok;
}

/* take's Python path: fn([key,] n, now_ns) (key NULL: none; n_obj NULL: n made an int) */
static PyObject *call_slow(PyObject *fn, PyObject *key, PyObject *n_obj, int64_t n,
                           PyObject *now_obj)
{
    PyObject *nn = n_obj != NULL ? Py_NewRef(n_obj) : PyLong_FromLongLong(n);
    if (nn == NULL)
        return NULL;
    PyObject *cargs[3] = {key, nn, now_obj != NULL ? now_obj : Py_None};
    PyObject *r = key != NULL ? PyObject_Vectorcall(fn, cargs, 3, NULL)
                              : PyObject_Vectorcall(fn, cargs + 1, 2, NULL);
    Py_DECREF(nn);
    return r;
}

/* try_acquire's ([key,] n=1, *, now_ns=None), the key where `key` is not NULL; *now NULL
 * for None. @return 0, or -1 with an exception set */
static int take_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     PyObject **key, PyObject **n_obj, int64_t *n, PyObject **now)
{
    Py_ssize_t pos = key != NULL ? 2 : 1, i = 0;
    PyObject **slot[2] = {key != NULL ? key : n_obj, n_obj};
    *n_obj = *now = NULL;
    if (key != NULL)
        *key = NULL;
    if (nargs > pos) {
        PyErr_Format(PyExc_TypeError, "try_acquire() takes at most %zd positional argument%s "
                                      "(%zd given)", pos, pos > 1 ? "s" : "", nargs);
        return -1;
    }
    for (i = 0; i < nargs; i++)
        *slot[i] = args[i];
    Py_ssize_t nk = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    for (i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), **to = NULL;
        if (PyUnicode_CompareWithASCIIString(k, "now_ns") == 0)
            to = now;
        else if (PyUnicode_CompareWithASCIIString(k, "n") == 0)
            to = n_obj;
        else if (key != NULL && PyUnicode_CompareWithASCIIString(k, "key") == 0)
            to = key;
        if (to == NULL || *to != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "try_acquire() got an unexpected or repeated keyword argument %R", k);
            return -1;
        }
        *to = args[nargs + i];
    }
    if (key != NULL && *key == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "try_acquire() missing 1 required positional argument: 'key'");
        return -1;
    }
    *n = 1;
    if (*n_obj != NULL && as_int64(*n_obj, "n", 1, INT64_MAX, n) < 0)
        return -1;
    if (*now == Py_None)
        *now = NULL;
    return *now != NULL && slice_now(*now) < 0 ? -1 : 0;
}

static PyObject *slice_take(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    LeaseSlice *self = (LeaseSlice *)o;
    PyObject *n_obj, *now_obj;
    int64_t n;
    if (take_args(args, nargs, kwnames, NULL, &n_obj, &n, &now_obj) < 0)
        return NULL;
    if (now_obj == NULL && slice_fast(self, n))
        Py_RETURN_TRUE;
    return call_slow(self->slow, NULL, n_obj, n, now_obj);
}

static PyObject *slice_add(PyObject *o, PyObject *const *args, Py_ssize_t nargs)
{
    LeaseSlice *self = (LeaseSlice *)o;
    long long k, end, low;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "add(k, end, low): 3 arguments");
        return NULL;
    }
    k = PyLong_AsLongLong(args[0]);
    end = PyLong_AsLongLong(args[1]);
    low = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (k < 0) {
        PyErr_SetString(PyExc_ValueError, "add: k must be >= 0");
        return NULL;
    }
    SLICE_LOCK(o);
    self->left = self->left > INT64_MAX - k ? INT64_MAX : self->left + k;
    self->end = end;
    self->low = low;
    SLICE_UNLOCK();
    Py_RETURN_NONE;
}

static PyObject *slice_debit(PyObject *o, PyObject *arg)
{
    LeaseSlice *self = (LeaseSlice *)o;
    int64_t n;
    if (as_int64(arg, "n", 1, INT64_MAX, &n) < 0)
        return NULL;
    int ok = 0;
    SLICE_LOCK(o);
    if (self->left >= n) {
        self->left -= n;
        ok = 1;
    }
    SLICE_UNLOCK();
    return PyBool_FromLong(ok);
}

static PyObject *slice_drain(PyObject *o, PyObject *Py_UNUSED(a))
{
    LeaseSlice *self = (LeaseSlice *)o;
    int64_t left;
    SLICE_LOCK(o);
    left = self->left;
    self->left = 0;
    self->end = 0;
    SLICE_UNLOCK();
    return PyLong_FromLongLong(left);
}

static PyObject *slice_harvest(PyObject *o, PyObject *Py_UNUSED(a))
{
    LeaseSlice *self = (LeaseSlice *)o;
    int64_t calls, taken;
    SLICE_LOCK(o);
    calls = self->calls;
    taken = self->taken;
    self->calls = 0;
    self->taken = 0;
    SLICE_UNLOCK();
    return Py_BuildValue("(LL)", (long long)calls, (long long)taken);
}

static PyMethodDef slice_methods[] = {
    METHOD(take, slice_take, FASTKW, "(n=1, *, now_ns=None)", "The decision: n permits from the slice while it is valid (True), else slow(n, now_ns)."),
    METHOD(add, slice_add, METH_FASTCALL, "(k, end, low)", "k permits more; the slice valid before end (CLOCK_MONOTONIC ns, 0: never here); refill() when the permits cross below low."),
    METHOD(debit, slice_debit, METH_O, "(n)", "Take n permits if there are (True), whatever the clock; no refill."),
    METHOD(drain, slice_drain, METH_NOARGS, "()", "The permits left; none left after, the slice not valid here."),
    METHOD(harvest, slice_harvest, METH_NOARGS, "()", "(decisions, permits) taken by take() since the last harvest()."),
    {NULL}};

static PyObject *slice_get(PyObject *o, void *which)
{
    LeaseSlice *self = (LeaseSlice *)o;
    int64_t v;
    SLICE_LOCK(o);
    v = which == (void *)0 ? self->left : which == (void *)1 ? self->end : self->low;
    SLICE_UNLOCK();
    return PyLong_FromLongLong(v);
}

static PyGetSetDef slice_getset[] = {
    {"left", slice_get, NULL, "permits in hand", (void *)0},
    {"end", slice_get, NULL, "valid before this, CLOCK_MONOTONIC ns (0: not here)", (void *)1},
    {"low", slice_get, NULL, "the low-water mark", (void *)2},
    {NULL}};

TYPE_SPEC(LeaseSlice, "slidewin._core._LeaseSlice", LeaseSlice, 0,
          {Py_tp_doc, "_LeaseSlice(refill, slow)\n--\n\nA slice leased from Redis "
                      "(slidewin.redis lease=True), decided on in C."},
          {Py_tp_new, slice_new}, {Py_tp_dealloc, slice_dealloc},
          {Py_tp_traverse, slice_traverse}, {Py_tp_clear, slice_clear},
          {Py_tp_methods, slice_methods}, {Py_tp_getset, slice_getset});

/* _core._KeyedSlices(slow): a keyed limiter's slices by key. take(key, n=1, *, now_ns=None):
 * a key of exactly str, bytes or int is looked up as it is; its slice's take in C, else that
 * slice's slow(n, now_ns); a key with no slice here (or of a subclass) goes to
 * slow(key, n, now_ns), which leases and registers it with set(). Other keys: TypeError. */
typedef struct {
    PyObject_HEAD
    PyObject *slices; /* dict: key -> _LeaseSlice; first, as SliceRefs */
    PyObject *slow;
} KeyedSlices;

static PyObject *keyed_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"slow", NULL};
    PyObject *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:_KeyedSlices", kws, &slow))
        return NULL;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "_KeyedSlices: slow must be callable");
        return NULL;
    }
    return refs_new(tp, PyDict_New(), slow);
}

/* the key's slice (a new reference), or NULL (none; an error set if the lookup failed) */
static LeaseSlice *keyed_get(KeyedSlices *self, PyObject *key)
{
    PyObject *v;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyDict_GetItemRef(self->slices, key, &v) <= 0)
        return NULL;
#else
    v = PyDict_GetItemWithError(self->slices, key);
    if (v == NULL)
        return NULL;
    Py_INCREF(v);
#endif
    return (LeaseSlice *)v;
}

static PyObject *keyed_take(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    KeyedSlices *self = (KeyedSlices *)o;
    PyObject *key, *n_obj, *now_obj;
    int64_t n;
    if (take_args(args, nargs, kwnames, &key, &n_obj, &n, &now_obj) < 0)
        return NULL;
    int exact = PyUnicode_CheckExact(key) || PyBytes_CheckExact(key) || PyLong_CheckExact(key);
    if (!exact && !PyUnicode_Check(key) && !PyBytes_Check(key)
        && (!PyLong_Check(key) || PyBool_Check(key))) {
        PyErr_Format(PyExc_TypeError, "a key must be str, bytes or int, not %.100s",
                     Py_TYPE(key)->tp_name);
        return NULL;
    }
    if (exact) {
        LeaseSlice *sl = keyed_get(self, key);
        if (sl != NULL) {
            PyObject *r = now_obj == NULL && slice_fast(sl, n)
                              ? Py_NewRef(Py_True)
                              : call_slow(sl->slow, NULL, n_obj, n, now_obj);
            Py_DECREF(sl);
            return r;
        }
        if (PyErr_Occurred())
            return NULL;
    }
    return call_slow(self->slow, key, n_obj, n, now_obj);
}

static PyObject *keyed_set(PyObject *o, PyObject *const *args, Py_ssize_t nargs)
{
    KeyedSlices *self = (KeyedSlices *)o;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set(key, slice): 2 arguments");
        return NULL;
    }
    if (PyType_GetSlot(Py_TYPE(args[1]), Py_tp_new) != (void *)slice_new) {
        PyErr_Format(PyExc_TypeError, "set: slice must be a _LeaseSlice, not %.100s",
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    if (PyDict_SetItem(self->slices, args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *keyed_pop(PyObject *o, PyObject *key)
{
    KeyedSlices *self = (KeyedSlices *)o;
    int r = PyDict_Contains(self->slices, key);
    if (r < 0 || (r == 1 && PyDict_DelItem(self->slices, key) < 0))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *keyed_clear_all(PyObject *o, PyObject *Py_UNUSED(a))
{
    PyDict_Clear(((KeyedSlices *)o)->slices);
    Py_RETURN_NONE;
}

static Py_ssize_t keyed_len(PyObject *o)
{
    return PyDict_Size(((KeyedSlices *)o)->slices);
}

static PyMethodDef keyed_methods[] = {
    METHOD(take, keyed_take, FASTKW, "(key, n=1, *, now_ns=None)", "The decision: n permits from the key's slice while it is valid (True), else the slice's slow(n, now_ns), else slow(key, n, now_ns)."),
    METHOD(set, keyed_set, METH_FASTCALL, "(key, slice)", "The key's slice from now on."),
    METHOD(pop, keyed_pop, METH_O, "(key)", "Forget the key's slice (if any)."),
    METHOD(clear, keyed_clear_all, METH_NOARGS, "()", "Forget every slice."),
    {NULL}};

TYPE_SPEC(KeyedSlices, "slidewin._core._KeyedSlices", KeyedSlices, 0,
          {Py_tp_doc, "_KeyedSlices(slow)\n--\n\nA keyed limiter's slices leased from Redis "
                      "(slidewin.redis lease=True), by key, decided on in C."},
          {Py_tp_new, keyed_new}, {Py_tp_dealloc, slice_dealloc},
          {Py_tp_traverse, slice_traverse}, {Py_tp_clear, slice_clear},
          {Py_tp_methods, keyed_methods}, {Py_mp_length, keyed_len});
