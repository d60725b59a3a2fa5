/* wakers.c - the asyncio waiter queues' hooks, for every limiter type (see wakers.h). */
#include "wakers.h"
#include "args.h"

#include <stdatomic.h>

#include "sw_common.h"
#include "sw_time.h"

/* The GIL, or from 3.13 the object's critical section, keeps a release from taking a
 * reference to a waker that another thread's _set_waker is dropping. */
#if PY_VERSION_HEX < 0x030D0000
#define Py_BEGIN_CRITICAL_SECTION(op) { (void)(op);
#define Py_END_CRITICAL_SECTION() }
#endif

PyObject *waker_set(PyObject *owner, PyObject **slot, PyObject *arg)
{
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "_set_waker: a callable or None");
        return NULL;
    }
    PyObject *old, *w = arg == Py_None ? NULL : Py_NewRef(arg);
    (void)owner; /* unused where the critical section is a no-op (a build with the GIL) */
    Py_BEGIN_CRITICAL_SECTION(owner);
    old = *slot;
    *slot = w;
    Py_END_CRITICAL_SECTION();
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

PyObject *waker_get(PyObject *owner, PyObject **slot)
{
    PyObject *w;
    (void)owner;
    Py_BEGIN_CRITICAL_SECTION(owner);
    w = *slot;
    Py_XINCREF(w);
    Py_END_CRITICAL_SECTION();
    return w;
}

void waker_call(PyObject *waker, PyObject *arg)
{
    if (waker == NULL)
        return;
    /* the queue wakes its first task (its own lock, posted to the task's loop) */
    PyObject *et, *ev, *tb, *r;
    Py_INCREF(waker);
    PyErr_Fetch(&et, &ev, &tb);
    r = arg == NULL ? PyObject_CallNoArgs(waker) : PyObject_CallOneArg(waker, arg);
    if (r == NULL)
        PyErr_WriteUnraisable(waker);
    Py_XDECREF(r);
    PyErr_Restore(et, ev, tb);
    Py_DECREF(waker);
}

PyObject *waker_watch(struct sw_shm *shm, int is_shared, PyObject *arg)
{
    long delta = PyLong_AsLong(arg);
    if (delta == -1 && PyErr_Occurred())
        return NULL;
    if (!is_shared || (delta != 1 && delta != -1)) {
        PyErr_SetString(PyExc_ValueError, "_watch(+1 or -1) of a shared limiter");
        return NULL;
    }
    atomic_fetch_add(&shm->hdr->waiters, (uint32_t)delta); /* -1: modulo 2^32 */
    return PyLong_FromUnsignedLong(atomic_load(&shm->hdr->release_seq));
}

PyObject *waker_release_wait(struct sw_shm *shm, int is_shared, PyObject *const *args,
                             Py_ssize_t nargs)
{
    int64_t seq, timeout;
    if (nargs != 2 || !is_shared) {
        PyErr_SetString(PyExc_TypeError, "_release_wait(seq, timeout_ns) of a shared limiter");
        return NULL;
    }
    if (as_int64(args[0], "seq", 0, UINT32_MAX, &seq) < 0 ||
        as_int64(args[1], "timeout_ns", 0, INT64_MAX, &timeout) < 0)
        return NULL;
    _Atomic uint32_t *word = &shm->hdr->release_seq;
    uint32_t cur;
    Py_BEGIN_ALLOW_THREADS
    int64_t end = sw_sat_add(sw_time_ns(), timeout);
    for (;;) {
        cur = atomic_load(word);
        int64_t left = end - sw_time_ns();
        if (cur != (uint32_t)seq || left <= 0)
            break;
        (void)sw_futex_wait(word, (uint32_t)seq, left);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLong(cur);
}
