/* entry.c - Entry and KeyedEntry: `with lim.entry(n):` / `async with per_key.entry(key):`.
 *
 * An entry belongs to one `with` block. Its state moves idle -> entering -> entered ->
 * exited, each step one compare-exchange, so two threads that share one entry by mistake
 * never take two in-flight counts and an exit never gives back a count twice. An entry
 * holds its limiter: it is a GC type, so `lim.e = lim.entry()` cycles are collected.
 */
#include "entry.h"
#include "limiting_ops.h"

PyObject *entry_make(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    struct limiting_head *h = LIMITING(self);
    PyObject *a[3];
    int64_t n, timeout;
    uint64_t fp;
    if (limiting_parse_acquire(self, "entry", args, nargs, kwnames, a, &fp, &n, &timeout) < 0)
        return NULL;
    AnyEntryObject *e = PyObject_GC_New(
        AnyEntryObject, h->ops->key_fp ? h->st->KeyedEntry_Type : h->st->Entry_Type);
    if (e == NULL)
        return NULL;
    e->owner = Py_NewRef(self);
    e->n = n;
    e->start_ns = 0;
    atomic_init(&e->state, ENTRY_IDLE);
    e->hollow = 0;
    e->timeout_ns = timeout;
    e->key = Py_XNewRef(a[0]);
    e->fp = fp;
    e->fork_gen = 0;
    PyObject_GC_Track(e);
    return (PyObject *)e;
}

/* the owner's finish (the owner is there: only an entered entry is finished). A hollow
 * (shadow) entry holds nothing. An entry of a shared state inherited across fork() only
 * counts its outcome: its count is the parent's, which exits its own copy */
static int entry_finish(PyObject *self, int64_t rt, int outcome)
{
    AnyEntryObject *e = (AnyEntryObject *)self;
    struct limiting_head *h = LIMITING(e->owner);
    if (e->hollow)
        return 0;
    if (h->is_shared && e->fork_gen != sw_proc_fork_generation()) {
        if (outcome != SW_OUT_NONE)
            h->ops->count(limiting_view(e->owner),
                          outcome == SW_OUT_SUCCESS ? SW_EV_SUCCESS : SW_EV_EXCEPTION, e->n);
        return 0;
    }
    return h->ops->entry_finish(self, rt, outcome);
}

static int entry_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(((AnyEntryObject *)self)->owner);
    Py_VISIT(((AnyEntryObject *)self)->key);
    return 0;
}

static int entry_clear(PyObject *self)
{
    AnyEntryObject *e = (AnyEntryObject *)self;
    int expected = ENTRY_ENTERED;
    /* entered, never exited: the count given back (exactly once) before letting go of the
     * owner; a give-up (unraisable) leaves it held by the owner, given back when it goes */
    if (e->owner != NULL &&
        atomic_compare_exchange_strong(&e->state, &expected, ENTRY_EXITED)) {
        struct dealloc_wait dw;
        dealloc_wait_begin(&dw);
        (void)dealloc_wait_end(&dw, entry_finish(self, 0, SW_OUT_NONE) == 0);
    }
    Py_CLEAR(e->owner);
    Py_CLEAR(e->key);
    return 0;
}

static void entry_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    entry_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(tp);
}

/* Claim an idle entry for one enter. @return 0, or -1 with RuntimeError set */
static int entry_claim(AnyEntryObject *e)
{
    int expected = ENTRY_IDLE;
    if (e->owner == NULL) { /* only after the GC broke a cycle */
        PyErr_SetString(PyExc_RuntimeError, "this entry's limiter is gone");
        return -1;
    }
    if (atomic_compare_exchange_strong(&e->state, &expected, ENTRY_ENTERING))
        return 0;
    PyErr_SetString(PyExc_RuntimeError,
                    LIMITING(e->owner)->ops->entry_again[expected == ENTRY_EXITED ? 0 : 1]);
    return -1;
}

/* __enter__: admitted as acquire(n, timeout=) would, its wait slept here */
static PyObject *entry_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    AnyEntryObject *e = (AnyEntryObject *)self;
    struct sw_decision d;
    if (entry_claim(e) < 0)
        return NULL;
    if (limiting_acquire(e->owner, e->key, e->fp, e->n, e->timeout_ns, SW_F_ENTRY, true,
                         &d) < 0) {
        atomic_store(&e->state, ENTRY_IDLE); /* refused: may be tried again */
        return NULL;
    }
    e->hollow = d.shadowed;
    if (d.wait_ns > 0 && sleep_decision(&d) < 0) {
        /* interrupted while queued: the request never ran */
        LIMITING(e->owner)->ops->give_back(e->owner, e->fp, e->n);
        atomic_store(&e->state, ENTRY_EXITED);
        return NULL;
    }
    e->start_ns = sw_time_ns();
    e->fork_gen = sw_proc_fork_generation();
    atomic_store(&e->state, ENTRY_ENTERED);
    return Py_NewRef(self);
}

/* __exit__(et, ...): entered -> exited, the outcome counted, the count given back. A give-up
 * of the lock leaves the entry entered, holding its count: the exit may be retried. */
static PyObject *entry_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    AnyEntryObject *e = (AnyEntryObject *)self;
    int expected = ENTRY_ENTERED;
    if (!atomic_compare_exchange_strong(&e->state, &expected, ENTRY_EXITED)) {
        PyErr_Format(PyExc_RuntimeError, "exit of an entry that is not entered (it is %s)",
                     entry_state_names[expected & 3]);
        return NULL;
    }
    PyObject *et = nargs > 0 ? args[0] : Py_None;
    int64_t rt = 0;
    int outcome = SW_OUT_NONE;
    if (et == Py_None) {
        int64_t el = sw_time_ns() - e->start_ns;
        rt = el > 0 ? el : 0;
        outcome = SW_OUT_SUCCESS;
    } else if (PyType_Check(et) &&
               PyType_IsSubtype((PyTypeObject *)et, (PyTypeObject *)PyExc_Exception)) {
        outcome = SW_OUT_EXCEPTION;
    }
    if (entry_finish(self, rt, outcome) == 0)
        Py_RETURN_FALSE;
    atomic_store(&e->state, ENTRY_ENTERED);
    (void)lock_gave_up_error();
    return NULL;
}

/* the Python layer's registered aenter (exit 0) or aexit (exit 1), or NULL with RuntimeError
 * set when slidewin's Python layer has not registered them */
static PyObject *entry_layer_fn(PyObject *self, int exit)
{
    module_state *st = (module_state *)PyType_GetModuleState(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    PyObject *fn = exit ? st->aexit : st->aenter;
    if (fn == NULL)
        PyErr_SetString(PyExc_RuntimeError,
                        "async with an entry needs slidewin's Python layer (import slidewin)");
    return fn;
}

/* __aenter__: claimed here; the registered aenter(owner, self) is the coroutine that ends the
 * transition (back to idle when it cannot be made) */
static PyObject *entry_aenter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    AnyEntryObject *e = (AnyEntryObject *)self;
    if (entry_claim(e) < 0)
        return NULL;
    PyObject *fn = entry_layer_fn(self, 0);
    PyObject *r = fn == NULL ? NULL : PyObject_CallFunctionObjArgs(fn, e->owner, self, NULL);
    if (r == NULL)
        atomic_store(&e->state, ENTRY_IDLE);
    return r;
}

/* __aexit__(et, ...): the registered aexit(owner, self, et) */
static PyObject *entry_aexit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *et = nargs > 0 ? args[0] : Py_None, *owner = ((AnyEntryObject *)self)->owner;
    if (owner == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this entry's limiter is gone");
        return NULL;
    }
    PyObject *fn = entry_layer_fn(self, 1);
    if (fn == NULL)
        return NULL;
    return PyObject_CallFunctionObjArgs(fn, owner, self, et, NULL);
}

/* _started(hollow=False): an asyncio acquisition succeeded (holding in flight, or, hollow, a
 * shadow admission holding nothing): entering -> entered */
static PyObject *entry_started(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    AnyEntryObject *e = (AnyEntryObject *)self;
    int expected = ENTRY_ENTERING;
    e->fork_gen = sw_proc_fork_generation();
    e->hollow = nargs > 0 && PyObject_IsTrue(args[0]) == 1;
    e->start_ns = sw_time_ns();
    if (!atomic_compare_exchange_strong(&e->state, &expected, ENTRY_ENTERED)) {
        PyErr_Format(PyExc_RuntimeError, "_started() of an entry that is %s, not entering",
                     entry_state_names[expected & 3]);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _abort(): an asyncio acquisition failed (holding nothing): entering -> idle */
static PyObject *entry_abort(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    int expected = ENTRY_ENTERING;
    atomic_compare_exchange_strong(&((AnyEntryObject *)self)->state, &expected, ENTRY_IDLE);
    Py_RETURN_NONE;
}

static PyMethodDef entry_methods[] = {
    HIDDEN(__enter__, entry_enter, METH_NOARGS),
    HIDDEN(__exit__, entry_exit, METH_FASTCALL),
    HIDDEN(__aenter__, entry_aenter, METH_NOARGS),
    HIDDEN(__aexit__, entry_aexit, METH_FASTCALL),
    HIDDEN(_started, entry_started, METH_FASTCALL),
    HIDDEN(_abort, entry_abort, METH_NOARGS),
    {NULL}};

static PyObject *entry_get_n(PyObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong(((AnyEntryObject *)self)->n);
}

static PyObject *entry_get_timeout(PyObject *self, void *Py_UNUSED(c))
{
    int64_t t = ((AnyEntryObject *)self)->timeout_ns;
    if (t < 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble((double)t / 1e9);
}

static PyObject *entry_get_limiter(PyObject *self, void *Py_UNUSED(c))
{
    PyObject *owner = ((AnyEntryObject *)self)->owner;
    return Py_NewRef(owner != NULL ? owner : Py_None); /* None after the GC broke a cycle */
}

#define ENTRY_GETSET(of, timeout_doc)                                                          \
    {"n", entry_get_n, NULL, "The request size.", NULL},                                       \
        {"limiter", entry_get_limiter, NULL, "The " of ".", NULL},                             \
        {"timeout", entry_get_timeout, NULL, "The longest wait for admission, s (" timeout_doc \
         "), or None: refused at once.", NULL}

static PyGetSetDef Entry_getset[] = {ENTRY_GETSET("Limiter", "entry(timeout=)"), {NULL}};

static PyGetSetDef KEntry_getset[] = {
    {"key", get_object_or_none, NULL, "The key.", (void *)offsetof(AnyEntryObject, key)},
    ENTRY_GETSET("KeyedLimiter", "entry(key, timeout=)"),
    {NULL}};

static PyObject *entry_repr(PyObject *self)
{
    AnyEntryObject *e = (AnyEntryObject *)self;
    const char *state = entry_state_names[atomic_load(&e->state) & 3];
    PyObject *owner = e->owner != NULL ? e->owner : Py_None;
    if (Py_TYPE(self)->tp_getset == Entry_getset)
        return PyUnicode_FromFormat("<slidewin entry n=%lld %s of %R>", (long long)e->n, state,
                                    owner);
    return PyUnicode_FromFormat("<slidewin keyed entry key=%R n=%lld %s of %R>",
                                e->key != NULL ? e->key : Py_None, (long long)e->n, state, owner);
}

#if PY_VERSION_HEX < 0x030A0000
/* 3.9 has no Py_TPFLAGS_DISALLOW_INSTANTIATION: an entry type refuses construction itself */
static PyObject *entry_refuse_new(PyTypeObject *type, PyObject *Py_UNUSED(args),
                                  PyObject *Py_UNUSED(kwds))
{
    PyErr_Format(PyExc_TypeError, "cannot create '%.100s' instances; use the limiter's entry()",
                 type->tp_name);
    return NULL;
}
#define ENTRY_NEW_SLOT {Py_tp_new, entry_refuse_new},
#else
#define ENTRY_NEW_SLOT
#endif
#define ENTRY_SLOTS(getset)                                                                    \
    ENTRY_NEW_SLOT{Py_tp_traverse, entry_traverse}, {Py_tp_clear, entry_clear},                \
        {Py_tp_dealloc, entry_dealloc}, {Py_tp_methods, entry_methods},                        \
        {Py_tp_getset, getset}, {Py_tp_repr, entry_repr}

TYPE_SPEC(Entry, "slidewin._core.Entry", AnyEntryObject, Py_TPFLAGS_DISALLOW_INSTANTIATION,
          {Py_tp_doc, "An admission in progress: `with lim.entry(n):` or `async with "
                      "lim.entry(n):`."},
          ENTRY_SLOTS(Entry_getset));

TYPE_SPEC(KeyedEntry, "slidewin._core.KeyedEntry", AnyEntryObject,
          Py_TPFLAGS_DISALLOW_INSTANTIATION,
          {Py_tp_doc, "A keyed admission in progress: `with per_key.entry(key):` (or async "
                      "with)."},
          ENTRY_SLOTS(KEntry_getset));
