/* breaker_read.h - what is read of a breaker's state (breaker_read.c): by the Breaker type
 * and by the observers, which know no type. */
#ifndef SW_BINDING_BREAKER_READ_H
#define SW_BINDING_BREAKER_READ_H

#include "binding.h"
#include "sw_breaker.h"

/** The state names, by enum sw_brk_state. */
extern const char *const breaker_state_names[3];

/** Lifetime totals as Breaker.totals() gives them. @return a new dict, or NULL */
PyObject *breaker_totals_dict(const struct sw_brk_totals *t);

#endif /* SW_BINDING_BREAKER_READ_H */
