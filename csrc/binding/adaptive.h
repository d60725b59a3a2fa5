/* adaptive.h - the methods that make a Limiter adaptive (slidewin.AdaptiveLimiter over the
 * core's sw_adapt.h). Above limiter.c's type, below nothing else. */
#ifndef SW_BINDING_ADAPTIVE_H
#define SW_BINDING_ADAPTIVE_H

#include "binding.h"

/** _adapt(algorithm, min_limit, max_limit, initial_limit, cpu_permille): make this
 * concurrency Limiter adaptive (algorithm 1 "bbr", 2 "gradient"; cpu_permille -1: none). */
PyObject *limiter_adapt(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs);
/** _adaptive_limit(now_ns): the limit in force, or None when not adaptive. */
PyObject *limiter_adaptive_limit(LimiterObject *self, PyObject *arg);
/** _exit_rt(n, rt_ns, now_ns): a completion of n after rt_ns (SUCCESS + RT), n given back. */
PyObject *limiter_exit_rt(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs);
/** _set_cpu(permille): the CPU use bbr's trigger compares. */
PyObject *limiter_set_cpu(LimiterObject *self, PyObject *arg);

#define ADAPTIVE_METHODS                                                                    \
    {"_adapt", (PyCFunction)(void (*)(void))limiter_adapt, METH_FASTCALL, NULL},            \
    {"_adaptive_limit", (PyCFunction)limiter_adaptive_limit, METH_O, NULL},                 \
    {"_exit_rt", (PyCFunction)(void (*)(void))limiter_exit_rt, METH_FASTCALL, NULL},        \
    {"_set_cpu", (PyCFunction)limiter_set_cpu, METH_O, NULL},

#endif /* SW_BINDING_ADAPTIVE_H */
