/* breaker.h - the C base of slidewin.Breaker (breaker.c): a circuit breaker over the core's
 * sw_breaker, private or in a shared region. */
#ifndef SW_BINDING_BREAKER_H
#define SW_BINDING_BREAKER_H

#include "binding.h"
#include "sw_breaker.h"

typedef struct {
    PyObject_HEAD
    struct sw_breaker *br;     /* owned core state (private), or NULL (shared) */
    struct sw_bview view;      /* how every call reaches the state */
    struct sw_brule rule;      /* this process's settings when shared (private: br->rule) */
    struct sw_breaker_cfg cfg; /* the settings for repr and properties, under cfg_mu */
    pthread_mutex_t cfg_mu;
    struct fork_link fork;     /* the private lock, reset across fork() */
    struct sw_shm shm;         /* shared=: the region (base NULL when private) */
    int is_shared;
    PyObject *shared;          /* None, True, or the name or path it was opened with */
    PyObject *name;            /* name= (or the region's), or NULL */
    int name_given;
    PyObject *weakreflist;
} BreakerObject;

extern PyType_Spec Breaker_spec;

#endif /* SW_BINDING_BREAKER_H */
