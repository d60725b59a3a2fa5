/* entry.h - Entry (entry.c): `with lim.entry(n):`, Limiter's entry (one unit with limiter.c). */
#ifndef SW_BINDING_ENTRY_H
#define SW_BINDING_ENTRY_H

#include "binding.h"

extern PyType_Spec Entry_spec;

/** A new Entry of `lim` for n, waiting up to timeout_ns (-1: no wait) to enter.
 * @return new reference or NULL */
PyObject *entry_new(LimiterObject *lim, int64_t n, int64_t timeout_ns);

#endif /* SW_BINDING_ENTRY_H */
