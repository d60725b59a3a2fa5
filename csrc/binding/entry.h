/* entry.h - Entry (entry.c): `with lim.entry(n):`, Limiter's entry (one unit with limiter.c);
 * Limiter.entry() makes one (limiter.c), the module registers its type. */
#ifndef SW_BINDING_ENTRY_H
#define SW_BINDING_ENTRY_H

#include "binding.h"

extern PyType_Spec Entry_spec;

#endif /* SW_BINDING_ENTRY_H */
