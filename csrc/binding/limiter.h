/* limiter.h - Limiter (limiter.c): what its entry (entry.c), the module and its users call. */
#ifndef SW_BINDING_LIMITER_H
#define SW_BINDING_LIMITER_H

#include "binding.h"
#include "limiting_ops.h"

extern PyType_Spec Limiter_spec;

/** The view every decision goes through (a forked shared limiter claims its own slot). */
static inline const struct sw_view *limiter_view(LimiterObject *self)
{
    return limiting_view((PyObject *)self);
}

/** Wake threads (and, when shared, processes) waiting for a release. */
void limiter_notify(LimiterObject *self);

/* module-level private functions (benchmarks) */
PyObject *bench_noop(PyObject *m, PyObject *unused);
PyObject *bench_try_acquire_nogil(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames);

#endif /* SW_BINDING_LIMITER_H */
