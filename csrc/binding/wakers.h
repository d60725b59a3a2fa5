/* wakers.h - the asyncio waiter queues' hooks (slidewin/_waiters.py), for every limiter type:
 * a waker called by releases (private), a region's release sequence to sleep on (shared). */
#ifndef SW_BINDING_WAKERS_H
#define SW_BINDING_WAKERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sw_shm.h"

/** _set_waker(callable or None): store it in *slot, owner's field (a new reference; the old one
 * dropped), under owner's critical section. */
PyObject *waker_set(PyObject *owner, PyObject **slot, PyObject *arg);
/** A new reference to the waker in *slot, owner's field, or NULL: read under owner's critical
 * section, so that a concurrent waker_set cannot free it first (free-threaded builds). */
PyObject *waker_get(PyObject *owner, PyObject **slot);

/** Call the waker, if any, with `arg` (NULL: none). Its exception is unraisable, never the
 * release's failure; an exception already set is kept. */
void waker_call(PyObject *waker, PyObject *arg);

/** _watch(delta): count (+1) or uncount (-1) a watcher of the region's releases, so that every
 * release in any process bumps the release sequence; the sequence now. */
PyObject *waker_watch(struct sw_shm *shm, int is_shared, PyObject *arg);

/** _release_wait(seq, timeout_ns) -> seq: sleep, the GIL released, until the region's release
 * sequence differs from seq or timeout_ns has passed; the sequence then. */
PyObject *waker_release_wait(struct sw_shm *shm, int is_shared, PyObject *const *args,
                             Py_ssize_t nargs);

#endif
