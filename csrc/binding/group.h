/* group.h - slidewin.all_of: the C base of a group (group.c), one all-or-nothing decision over
 * several limiters and keys (sw_group.h); what it needs of a KeyedLimiter is in keyed.h. */
#ifndef SW_BINDING_GROUP_H
#define SW_BINDING_GROUP_H

#include "binding.h"
#include "sw_group.h"

extern PyType_Spec Group_spec;

#endif /* SW_BINDING_GROUP_H */
