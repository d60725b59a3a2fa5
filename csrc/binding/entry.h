/* entry.h - Entry and KeyedEntry (entry.c): made by entry() of the limiter types, their
 * steps through the operations table (limiting_ops.h); the module registers the types. */
#ifndef SW_BINDING_ENTRY_H
#define SW_BINDING_ENTRY_H

#include "binding.h"

extern PyType_Spec Entry_spec;
extern PyType_Spec KeyedEntry_spec;
/* entry([key,] n=1, *, timeout=None): the method of both limiter types */
PyObject *entry_make(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

#endif /* SW_BINDING_ENTRY_H */
