/* metric.h - Metric (metric.c): its spec and its views of limiters' windows. */
#ifndef SW_BINDING_METRIC_H
#define SW_BINDING_METRIC_H

#include "binding.h"

extern PyType_Spec Metric_spec;

/** A Metric viewing a limiter's window; keeps `owner` alive. @return new reference */
PyObject *metric_new_view(module_state *st, PyObject *owner, const struct sw_window *win);

#endif /* SW_BINDING_METRIC_H */
