/* entry.c - Entry: `with lim.entry(n):` / `async with lim.entry(n):` (its steps: limiting_ops.c).
 *
 * An Entry belongs to one `with` block. Its state moves idle -> entering -> entered ->
 * exited, each step one compare-exchange, so two threads that share one Entry by mistake
 * never take two in-flight counts and an exit never gives back a count twice. An entry
 * holds its Limiter: it is a GC type, so `lim.e = lim.entry()` cycles are collected.
 */
#include "entry.h"
#include "args.h"
#include "limiter.h"

static PyObject *Entry_repr(EntryObject *self)
{
    return PyUnicode_FromFormat("<slidewin entry n=%lld %s of %R>", (long long)self->n,
                                entry_state_names[atomic_load(&self->state) & 3],
                                self->limiter ? (PyObject *)self->limiter : Py_None);
}

static PyGetSetDef Entry_getset[] = {
    {"n", entry_get_n, NULL, "The request size.", NULL},
    {"limiter", entry_get_limiter, NULL, "The Limiter.", NULL},
    {"timeout", entry_get_timeout, NULL,
     "The longest wait for admission, s (entry(timeout=)), or None: refused at once.", NULL},
    {NULL}};

TYPE_SPEC(Entry, "slidewin._core.Entry", EntryObject, Py_TPFLAGS_DISALLOW_INSTANTIATION,
          {Py_tp_doc, "An admission in progress: `with lim.entry(n):` or `async with "
                      "lim.entry(n):`."},
          ENTRY_NEW_SLOT{Py_tp_traverse, entry_traverse}, {Py_tp_clear, entry_clear},
          {Py_tp_dealloc, entry_dealloc}, {Py_tp_methods, entry_methods},
          {Py_tp_getset, Entry_getset}, {Py_tp_repr, Entry_repr});
