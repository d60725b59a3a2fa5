/* breaker.h - the C base of slidewin.Breaker (breaker.c): a circuit breaker over the core's
 * sw_breaker, private or in a shared region. */
#ifndef SW_BINDING_BREAKER_H
#define SW_BINDING_BREAKER_H

#include "binding.h"
#include "sw_breaker.h"

/* A change waiting to be told to the listeners (the delivery queue, in seq order). */
struct bk_pending {
    struct bk_pending *next;
    uint64_t seq;
    uint32_t from, to;
    double value;
};

typedef struct {
    PyObject_HEAD
    struct sw_breaker *br;     /* owned core state (private), or NULL (shared) */
    struct sw_bview view;      /* how every call reaches the state */
    struct sw_brule rule;      /* this process's settings when shared (private: br->rule) */
    /* the settings for repr and properties: written under the state's lock and cfg_mu (taken
     * after it), read under cfg_mu only, which nobody holds while waiting for anything (a
     * peer holding the region's lock never blocks a getter, nor a getter an update()) */
    struct sw_breaker_cfg cfg;
    uint64_t settings_gen;     /* bumped by every update(), under both */
    pthread_mutex_t cfg_mu;
    /* the listeners, told in the order of the changes: the core numbers this object's
     * changes (seq, under its lock); each call queues its own, and whichever thread finds
     * nobody telling tells every queued change in seq order (dq_next: the next to tell) */
    uint64_t seq;              /* the view's count of changes (view.seq points here) */
    sw_lock dq_lock;           /* a private lock over the queue fields below (O(1) holds) */
    struct bk_pending *dq_head;
    uint64_t dq_next;
    uint64_t dq_lost;          /* the highest seq dropped for want of memory (skipped) */
    int dq_busy;               /* a thread is telling */
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
