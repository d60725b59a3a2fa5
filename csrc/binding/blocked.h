/* blocked.h - BlockedError (blocked.c). */
#ifndef SW_BINDING_BLOCKED_H
#define SW_BINDING_BLOCKED_H

#include "binding.h"

extern PyType_Spec BlockedError_spec;

#endif /* SW_BINDING_BLOCKED_H */
