/* keyed.h - KeyedLimiter and KeyedEntry (keyed.c). */
#ifndef SW_BINDING_KEYED_H
#define SW_BINDING_KEYED_H

#include "binding.h"

extern PyType_Spec KeyedLimiter_spec;
extern PyType_Spec KeyedEntry_spec;

#endif /* SW_BINDING_KEYED_H */
