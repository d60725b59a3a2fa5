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

/** An observer's read of a copy of a breaker region's state (read_region): validated (a
 * region is input), its ring repaired in the copy, read at now.
 * @param window receives {"total", "errors", "slow"} over the window (new reference)
 * @param totals receives the lifetime totals, as Breaker.totals() (new reference)
 * @param state receives "closed", "open" or "half_open"
 * @return 0; 1 when the copy is damaged (nothing set); -1 with an exception set */
int breaker_peek(void *copy, size_t size, int64_t interval_ms, uint32_t sample_count,
                 int64_t now_ns, PyObject **window, PyObject **totals, const char **state);

#endif /* SW_BINDING_BREAKER_READ_H */
