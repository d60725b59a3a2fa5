/* entry.c - Entry: `with lim.entry(n):` / `async with lim.entry(n):` in C (the hot path), and
 * the entry steps KeyedEntry shares (binding.h).
 *
 * An Entry belongs to one `with` block. Its state moves idle -> entering -> entered ->
 * exited, each step one compare-exchange, so two threads that share one Entry by mistake
 * never take two in-flight counts and an exit never gives back a count twice. An entry
 * holds its Limiter: it is a GC type, so `lim.e = lim.entry()` cycles are collected.
 */
#include "entry.h"
#include "args.h"
#include "limiter.h"

/* Claim an idle entry for one enter. @return 0, or -1 with RuntimeError set */
static inline int entry_claim(EntryObject *self)
{
    return entry_claim_as(&self->state, self->limiter,
                          "an entry can be entered only once: this one has exited; "
                          "make a new one per request with lim.entry()",
                          "an entry can be entered only once: this one is already entered "
                          "(an entry belongs to one `with` block; make one per request with "
                          "lim.entry())");
}

/* End an entered entry: count its outcome and give its in-flight count back — except for an
 * entry of a shared limiter inherited across fork(): the count is the parent's (which exits
 * its own copy), so the child only counts the outcome. The wait for a shared region's lock
 * may give up (a stuck owner, a signal handler's exception: wait.h).
 * @return 0, or SW_EBUSY when it gave up (nothing counted, the count still held) */
static int entry_finish(PyObject *e, int64_t rt, int outcome) /* rt: ns */
{
    EntryObject *self = (EntryObject *)e;
    LimiterObject *lim = self->limiter;
    if (self->hollow)
        return 0; /* shadow: an enforcing limiter would have refused it: nothing to count */
    if (lim->is_shared && self->fork_gen != sw_proc_fork_generation()) {
        if (outcome != SW_OUT_NONE)
            sw_count(limiter_view(lim), outcome == SW_OUT_SUCCESS ? SW_EV_SUCCESS
                                                                  : SW_EV_EXCEPTION,
                     self->n, SW_NOW);
        return 0;
    }
    if (GAVE_UP(sw_exit_rt_or_give_up(limiter_view(lim), self->n, rt, outcome, SW_NOW)))
        return SW_EBUSY;
    limiter_notify(lim);
    return 0;
}

static int Entry_traverse(EntryObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->limiter);
    return 0;
}

static int Entry_clear(EntryObject *self)
{
    /* before letting go of the limiter; a give-up leaves the count held by the limiter
     * object (or given back by the reap at this process's exit) */
    entry_give_back((PyObject *)self, entry_finish);
    Py_CLEAR(self->limiter);
    return 0;
}

static void Entry_dealloc(EntryObject *self)
{
    entry_dealloc_with((PyObject *)self, (inquiry)Entry_clear);
}

static PyObject *Entry_enter(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    if (entry_claim(self) < 0)
        return NULL;
    return entry_enter_with((PyObject *)self, NULL, 0, &self->fork_gen);
}

/* _started(hollow=False) */
static PyObject *Entry_started(EntryObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    self->fork_gen = sw_proc_fork_generation();
    return entry_started((PyObject *)self, args, nargs);
}

static PyObject *Entry_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return entry_exit_with(self, args, nargs, entry_finish);
}

static PyObject *Entry_aenter(EntryObject *self, PyObject *Py_UNUSED(ignored))
{
    /* as __enter__: checked and claimed in one step; the coroutine ends the transition */
    if (entry_claim(self) < 0)
        return NULL;
    return entry_aenter_call((PyObject *)self, &self->state, (PyObject *)self->limiter);
}


static PyObject *Entry_repr(EntryObject *self)
{
    return PyUnicode_FromFormat("<slidewin entry n=%lld %s of %R>", (long long)self->n,
                                entry_state_names[atomic_load(&self->state) & 3],
                                self->limiter ? (PyObject *)self->limiter : Py_None);
}

#if PY_VERSION_HEX < 0x030A0000
/* 3.9 has no Py_TPFLAGS_DISALLOW_INSTANTIATION */
static PyObject *Entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    PyErr_Format(PyExc_TypeError, "cannot create '%.100s' instances; use Limiter.entry()",
                 type->tp_name);
    return NULL;
}
#endif

static PyGetSetDef Entry_getset[] = {
    {"n", entry_get_n, NULL, "The request size.", NULL},
    {"limiter", entry_get_limiter, NULL, "The Limiter.", NULL},
    {"timeout", entry_get_timeout, NULL,
     "The longest wait for admission, s (entry(timeout=)), or None: refused at once.", NULL},
    {NULL}};

static PyMethodDef Entry_methods[] = {
    HIDDEN(__enter__, Entry_enter, METH_NOARGS),
    HIDDEN(__exit__, Entry_exit, METH_FASTCALL),
    HIDDEN(__aenter__, Entry_aenter, METH_NOARGS),
    HIDDEN(__aexit__, entry_aexit, METH_FASTCALL),
    HIDDEN(_started, Entry_started, METH_FASTCALL),
    HIDDEN(_abort, entry_abort, METH_NOARGS),
    {NULL}};

#if PY_VERSION_HEX < 0x030A0000
#define ENTRY_NEW_SLOT {Py_tp_new, Entry_new},
#else
#define ENTRY_NEW_SLOT
#endif

TYPE_SPEC(Entry, "slidewin._core.Entry", EntryObject, Py_TPFLAGS_DISALLOW_INSTANTIATION,
          {Py_tp_doc, "An admission in progress: `with lim.entry(n):` or `async with "
                      "lim.entry(n):`."},
          ENTRY_NEW_SLOT{Py_tp_traverse, Entry_traverse}, {Py_tp_clear, Entry_clear},
          {Py_tp_dealloc, Entry_dealloc}, {Py_tp_methods, Entry_methods},
          {Py_tp_getset, Entry_getset}, {Py_tp_repr, Entry_repr});
