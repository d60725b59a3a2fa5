/* slice.h - _core._LeaseSlice: the permits of a slice leased from Redis (slidewin.redis
 * lease=True), decided on in C. */
#ifndef SW_BINDING_SLICE_H
#define SW_BINDING_SLICE_H
#include "binding.h"

extern PyType_Spec LeaseSlice_spec;
extern PyType_Spec KeyedSlices_spec;

#endif
