/* entry.c - Entry: `with lim.entry(n):` / `async with lim.entry(n):` in C (the hot path).
 *
 * An Entry belongs to one `with` block. Its state moves idle -> entering -> entered ->
 * exited, each step one compare-exchange, so two threads that share one Entry by mistake
 * never take two in-flight counts and an exit never gives back a count twice. An entry
 * holds its Limiter: it is a GC type, so `lim.e = lim.entry()` cycles are collected.
 */
#include "binding.h"
#include "args.h"

static const char *const state_names[] = {"new", "entering", "entered", "exited"};

PyObject *entry_new(LimiterObject *lim, int64_t n)
{
    EntryObject *e = PyObject_GC_New(EntryObject, lim->st->Entry_Type);
    if (e == NULL)
        return NULL;
    Py_INCREF(lim);
    e->limiter = lim;
    e->n = n;
    e->start_ns = 0;
    e->hollow = 0;
    atomic_init(&e->state, ENTRY_IDLE);
    PyObject_GC_Track(e);
    return (PyObject *)e;
}

/* Claim an idle entry for one enter. @return 0, or -1 with RuntimeError set */
static int entry_claim(EntryObject *self)
{
    int expected = ENTRY_IDLE;
    if (self->limiter == NULL) { /* only after the GC broke a cycle */
        PyErr_SetString(PyExc_RuntimeError, "this entry's limiter is gone");
        return -1;
    }
    if (atomic_compare_exchange_strong(&self->state, &expected, ENTRY_ENTERING))
        return 0;
    if (expected == ENTRY_EXITED)
        PyErr_SetString(PyExc_RuntimeError,
                        "an entry can be entered only once: this one has exited; "
                        "make a new one per request with lim.entry()");
    else
        PyErr_SetString(PyExc_RuntimeError,
                        "an entry can be entered only once: this one is already entered "
                        "(an entry belongs to one `with` block; make one per request with "
                        "lim.entry())");
    return -1;
}

/* End an entered entry: count its outcome and give its in-flight count back — except for an
 * entry of a shared limiter inherited across fork(): the count is the parent's (which exits
 * its own copy), so the child only counts the outcome. */
static void entry_finish(EntryObject *self, int64_t rt, int outcome)
{
    LimiterObject *lim = self->limiter;
    if (self->hollow)
        return; /* shadow: an enforcing limiter would have refused it: nothing to count */
    if (lim->is_shared && self->fork_gen != sw_proc_fork_generation()) {
        if (outcome != SW_OUT_NONE)
            sw_count(limiter_view(lim), outcome == SW_OUT_SUCCESS ? SW_EV_SUCCESS
                                                                  : SW_EV_EXCEPTION,
                     self->n, SW_NOW);
        return;
    }
    sw_exit(limiter_view(lim), self->n, rt, outcome, SW_NOW);
    limiter_notify(lim);
}

/* If entered, give the in-flight count back without counting anything (exactly once). */
static void entry_give_back(EntryObject *self)
{
    int expected = ENTRY_ENTERED;
    if (self->limiter != NULL &&
        atomic_compare_exchange_strong(&self->state, &expected, ENTRY_EXITED))
        entry_finish(self, 0, SW_OUT_NONE);
}

static int Entry_traverse(EntryObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->limiter);
    return 0;
}

static int Entry_clear(EntryObject *self)
{
    entry_give_back(self); /* before letting go of the limiter */
    Py_CLEAR(self->limiter);
    return 0;
}

static void Entry_dealloc(EntryObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Entry_clear(self); /* entered and never exited: give the in-flight count back */
    PyObject_GC_Del(self);
    Py_DECREF(tp);
}

static PyObject *Entry_enter(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    if (entry_claim(self) < 0)
        return NULL;
    LimiterObject *lim = self->limiter;
    struct sw_decision d;
    sw_decide(limiter_view(lim), self->n, SW_NOW, SW_F_ENTRY | SW_F_RETRY, &d);
    if (d.verdict != SW_PASS) {
        atomic_store(&self->state, ENTRY_IDLE); /* refused: may be tried again */
        raise_blocked(lim, self->n, &d);
        return NULL;
    }
    self->hollow = d.shadowed;
    if (d.wait_ns > 0 && sleep_decision(&d) < 0) {
        /* interrupted while queued: the request never ran */
        sw_exit(limiter_view(lim), self->n, 0, SW_OUT_NONE, SW_NOW);
        atomic_store(&self->state, ENTRY_EXITED);
        limiter_notify(lim);
        return NULL;
    }
    self->start_ns = sw_time_ns();
    self->fork_gen = sw_proc_fork_generation();
    atomic_store(&self->state, ENTRY_ENTERED);
    Py_INCREF(self);
    return (PyObject *)self;
}

/* _started(hollow=False): an asyncio acquisition succeeded (holding in flight, or, hollow,
 * a shadow admission that holds nothing): entering -> entered */
static PyObject *Entry_started(EntryObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int expected = ENTRY_ENTERING;
    self->hollow = nargs > 0 && PyObject_IsTrue(args[0]) == 1;
    self->start_ns = sw_time_ns();
    self->fork_gen = sw_proc_fork_generation();
    if (!atomic_compare_exchange_strong(&self->state, &expected, ENTRY_ENTERED)) {
        PyErr_Format(PyExc_RuntimeError, "_started() of an entry that is %s, not entering",
                     state_names[expected & 3]);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _abort(): an asyncio acquisition failed (holding nothing): entering -> idle */
static PyObject *Entry_abort(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    int expected = ENTRY_ENTERING;
    atomic_compare_exchange_strong(&self->state, &expected, ENTRY_IDLE);
    Py_RETURN_NONE;
}

static PyObject *Entry_exit(EntryObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int expected = ENTRY_ENTERED;
    if (!atomic_compare_exchange_strong(&self->state, &expected, ENTRY_EXITED)) {
        PyErr_Format(PyExc_RuntimeError, "exit of an entry that is not entered (it is %s)",
                     state_names[expected & 3]);
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
    entry_finish(self, rt, outcome);
    Py_RETURN_FALSE;
}

static PyObject *Entry_aenter(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    /* as __enter__: checked and claimed in one step; the coroutine ends the transition */
    if (entry_claim(self) < 0)
        return NULL;
    PyObject *r = PyObject_CallMethodObjArgs((PyObject *)self->limiter,
                                             self->limiter->st->str_aenter, (PyObject *)self,
                                             NULL);
    if (r == NULL)
        atomic_store(&self->state, ENTRY_IDLE);
    return r;
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
    if (self->limiter == NULL)
        Py_RETURN_NONE; /* only after the GC broke a cycle */
    Py_INCREF(self->limiter);
    return (PyObject *)self->limiter;
}

static PyObject *Entry_repr(EntryObject *self)
{
    return PyUnicode_FromFormat("<slidewin entry n=%lld %s of %R>", (long long)self->n,
                                state_names[atomic_load(&self->state) & 3],
                                self->limiter ? (PyObject *)self->limiter : Py_None);
}

#if PY_VERSION_HEX < 0x030A0000
/* 3.9 has no Py_TPFLAGS_DISALLOW_INSTANTIATION */
static PyObject *Entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyErr_Format(PyExc_TypeError, "cannot create '%.100s' instances; use Limiter.entry()",
                 type->tp_name);
    return NULL;
}
#endif

static PyGetSetDef Entry_getset[] = {
    {"n", (getter)Entry_get_n, NULL, "The request size.", NULL},
    {"limiter", (getter)Entry_get_limiter, NULL, "The Limiter.", NULL},
    {NULL}};

static PyMethodDef Entry_methods[] = {
    {"__enter__", (PyCFunction)Entry_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Entry_exit, METH_FASTCALL, NULL},
    {"__aenter__", (PyCFunction)Entry_aenter, METH_NOARGS, NULL},
    {"__aexit__", (PyCFunction)(void (*)(void))Entry_aexit, METH_FASTCALL, NULL},
    {"_started", (PyCFunction)(void (*)(void))Entry_started, METH_FASTCALL, NULL},
    {"_abort", (PyCFunction)Entry_abort, METH_NOARGS, NULL},
    {NULL}};

static PyType_Slot Entry_slots[] = {
    {Py_tp_doc, "An admission in progress: `with lim.entry(n):` or `async with lim.entry(n):`."},
#if PY_VERSION_HEX < 0x030A0000
    {Py_tp_new, Entry_new},
#endif
    {Py_tp_traverse, Entry_traverse},
    {Py_tp_clear, Entry_clear},
    {Py_tp_dealloc, Entry_dealloc},
    {Py_tp_methods, Entry_methods},
    {Py_tp_getset, Entry_getset},
    {Py_tp_repr, Entry_repr},
    {0, NULL}};

#ifndef Py_TPFLAGS_DISALLOW_INSTANTIATION
#define Py_TPFLAGS_DISALLOW_INSTANTIATION 0
#endif

PyType_Spec Entry_spec = {
    .name = "slidewin._core.Entry",
    .basicsize = sizeof(EntryObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Entry_slots,
};
