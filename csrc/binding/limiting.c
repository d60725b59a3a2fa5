/* limiting.c - what the two limiter types share (Limiter: limiter.c, KeyedLimiter: keyed.c):
 * the properties of their settings, their repr, the BlockedError of a refusal, the Stats of
 * stats(), and the acquire() loop with a timeout. None of it is on a decision's hot path.
 */
#include "binding.h"
#include "args.h"
#include "shared.h"

const char *const behavior_names[4] = {"reject", "warm_up", "throttle", "warm_up_throttle"};

/* ---- properties ------------------------------------------------------------------------ */

static const struct sw_limiter_cfg *cfg_at(PyObject *self, void *at)
{
    return (const struct sw_limiter_cfg *)(const void *)((const char *)self + (size_t)at);
}

PyObject *cfg_get_qps(PyObject *self, void *at)
{
    const struct sw_limiter_cfg *c = cfg_at(self, at);
    if (c->grade != SW_GRADE_QPS)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(c->count);
}

PyObject *cfg_get_concurrency(PyObject *self, void *at)
{
    const struct sw_limiter_cfg *c = cfg_at(self, at);
    if (c->grade != SW_GRADE_CONCURRENCY)
        Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)c->count);
}

PyObject *cfg_get_behavior(PyObject *self, void *at)
{
    return PyUnicode_FromString(behavior_names[cfg_at(self, at)->behavior]);
}

/* the plain ones: one field, one conversion */
#define CFG_GETTER(field, convert)                                                             \
    PyObject *cfg_get_##field(PyObject *self, void *at)                                        \
    {                                                                                          \
        return convert(cfg_at(self, at)->field);                                               \
    }
CFG_GETTER(warm_up_s, PyFloat_FromDouble)
CFG_GETTER(cold_factor, PyFloat_FromDouble)
CFG_GETTER(max_queueing_ms, PyLong_FromLongLong)
CFG_GETTER(occupy_timeout_ms, PyLong_FromLongLong)
CFG_GETTER(interval_ms, PyLong_FromLongLong)
CFG_GETTER(sample_count, PyLong_FromUnsignedLong)
#undef CFG_GETTER

PyObject *cfg_get_shadow(PyObject *self, void *at)
{
    return PyBool_FromLong(cfg_at(self, at)->shadow != 0);
}

PyObject *get_object_or_none(PyObject *self, void *at)
{
    PyObject *v = *(PyObject **)(void *)((char *)self + (size_t)at);
    if (v == NULL)
        v = Py_None;
    Py_INCREF(v);
    return v;
}

/* ---- repr ------------------------------------------------------------------------------ */

int repr_add(PyObject *parts, PyObject *part)
{
    if (part == NULL)
        return -1;
    int rc = PyList_Append(parts, part);
    Py_DECREF(part);
    return rc;
}

/* Append "<fmt with the float's repr>" (fmt takes one %U). @return 0, or -1 */
static int repr_add_float(PyObject *parts, const char *fmt, double v)
{
    PyObject *num = float_repr(v);
    if (num == NULL)
        return -1;
    PyObject *part = PyUnicode_FromFormat(fmt, num);
    Py_DECREF(num);
    return repr_add(parts, part);
}

int repr_settings(PyObject *parts, const struct sw_limiter_cfg *c, int occupy)
{
    if (c->grade == SW_GRADE_CONCURRENCY) {
        if (repr_add(parts, PyUnicode_FromFormat("concurrency=%lld", (long long)c->count)) < 0)
            return -1;
    } else {
        if (repr_add_float(parts, "qps=%U", c->count) < 0)
            return -1;
        if (c->behavior != SW_REJECT &&
            repr_add(parts, PyUnicode_FromFormat("behavior='%s'", behavior_names[c->behavior])) < 0)
            return -1;
        if ((c->behavior == SW_WARM_UP || c->behavior == SW_WARM_UP_THROTTLE) &&
            (repr_add_float(parts, "warm_up_s=%U", c->warm_up_s) < 0 ||
             repr_add_float(parts, "cold_factor=%U", c->cold_factor) < 0))
            return -1;
        if ((c->behavior == SW_THROTTLE || c->behavior == SW_WARM_UP_THROTTLE) &&
            repr_add(parts, PyUnicode_FromFormat("max_queueing_ms=%lld",
                                                 (long long)c->max_queueing_ms)) < 0)
            return -1;
        if (occupy && c->behavior == SW_REJECT && c->occupy_timeout_ms != 500 &&
            repr_add(parts, PyUnicode_FromFormat("occupy_timeout_ms=%lld",
                                                 (long long)c->occupy_timeout_ms)) < 0)
            return -1;
    }
    if (c->interval_ms != 1000 || c->sample_count != 2) {
        if (repr_add(parts, PyUnicode_FromFormat("interval_ms=%lld", (long long)c->interval_ms)) < 0 ||
            repr_add(parts, PyUnicode_FromFormat("sample_count=%u", c->sample_count)) < 0)
            return -1;
    }
    return 0;
}

PyObject *repr_finish(PyObject *self, PyObject *parts, int shadow, PyObject *shared,
                      PyObject *name, int name_given)
{
    PyObject *sep = NULL, *p = NULL, *res = NULL;
    if ((shadow && repr_add(parts, PyUnicode_FromString("shadow=True")) < 0) ||
        (shared != NULL && shared != Py_None &&
         repr_add(parts, PyUnicode_FromFormat("shared=%R", shared)) < 0) ||
        (name != NULL && name_given && repr_add(parts, PyUnicode_FromFormat("name=%R", name)) < 0))
        goto done;
    sep = PyUnicode_FromString(", ");
    if (sep == NULL)
        goto done;
    p = PyUnicode_Join(sep, parts);
    if (p == NULL)
        goto done;
    const char *tname = Py_TYPE(self)->tp_name, *dot = strrchr(tname, '.');
    res = PyUnicode_FromFormat("%s(%U)", dot ? dot + 1 : tname, p);
done:
    Py_XDECREF(p);
    Py_XDECREF(sep);
    Py_DECREF(parts);
    return res;
}

/* ---- refusals and statistics ----------------------------------------------------------- */

void blocked_raise(module_state *st, PyObject *self, PyObject *key, int64_t n,
                   const struct sw_decision *d)
{
    PyObject *retry;
    if (d->verdict == SW_NEVER || d->retry_ns < 0) {
        retry = Py_None;
        Py_INCREF(retry);
    } else {
        retry = PyFloat_FromDouble((double)d->retry_ns / 1e9);
        if (retry == NULL)
            return;
    }
    /* never, retry after, no retry known; a format's arguments past its own are ignored */
    static const char *const plain[] = {"%U refused n=%lld: it can never admit this request",
                                        "%U refused n=%lld; retry after %R s",
                                        "%U refused n=%lld"};
    static const char *const keyed[] = {"%U refused key %R n=%lld: it can never admit this "
                                        "request",
                                        "%U refused key %R n=%lld; retry after %R s",
                                        "%U refused key %R n=%lld"};
    int which = d->verdict == SW_NEVER ? 0 : retry != Py_None ? 1 : 2;
    PyObject *repr = PyObject_Repr(self), *msg = NULL;
    if (repr != NULL) {
        msg = key != NULL ? PyUnicode_FromFormat(keyed[which], repr, key, (long long)n, retry)
                          : PyUnicode_FromFormat(plain[which], repr, (long long)n, retry);
        Py_DECREF(repr);
    }
    if (msg == NULL) {
        Py_DECREF(retry);
        return;
    }
    PyObject *args = PyTuple_Pack(1, msg);
    PyObject *kw = Py_BuildValue("{sOsO}", "retry_after", retry, "limiter", self);
    Py_DECREF(msg);
    Py_DECREF(retry);
    if (args == NULL || kw == NULL) {
        Py_XDECREF(args);
        Py_XDECREF(kw);
        return;
    }
    PyObject *exc = PyObject_Call(st->BlockedError, args, kw);
    Py_DECREF(args);
    Py_DECREF(kw);
    if (exc == NULL)
        return;
    PyErr_SetObject(st->BlockedError, exc);
    Py_DECREF(exc);
}

PyObject *stats_new(module_state *st, const struct sw_stats *s, int64_t interval_ms,
                    int64_t evicted)
{
    double sec = (double)interval_ms / 1000.0;
    PyObject *o = PyStructSequence_New(st->Stats_Type);
    if (o == NULL)
        return NULL;
    PyObject *v[10];
    v[0] = PyFloat_FromDouble((double)s->pass / sec);
    v[1] = PyFloat_FromDouble((double)s->block / sec);
    v[2] = PyFloat_FromDouble((double)s->success / sec);
    v[3] = PyFloat_FromDouble((double)s->exception / sec);
    v[4] = PyFloat_FromDouble(s->success > 0 ? (double)s->rt_sum / (double)s->success : 0.0);
    v[5] = PyFloat_FromDouble((double)s->min_rt);
    v[6] = PyLong_FromLongLong(s->in_flight);
    v[7] = PyLong_FromLongLong(s->waiting);
    v[8] = PyFloat_FromDouble((double)s->occupied_pass / sec);
    v[9] = PyLong_FromLongLong(evicted);
    for (int i = 0; i < 10; i++) {
        if (v[i] == NULL) {
            for (int j = 0; j < 10; j++)
                Py_XDECREF(v[j]);
            Py_DECREF(o);
            return NULL;
        }
    }
    for (int i = 0; i < 10; i++)
        PyStructSequence_SET_ITEM(o, i, v[i]);
    return o;
}

/* ---- acquire() with a timeout ---------------------------------------------------------- */

static int acquire_loop_in(struct acquire_loop *l, int64_t deadline, struct sw_decision *d);

int acquire_loop(struct acquire_loop *l, int64_t timeout_ns, struct sw_decision *d)
{
    int64_t deadline = sw_sat_add(sw_time_ns(), timeout_ns);
    l->lock_expired = false;
    /* a wait for another process's lock (a stopped holder) ends at the deadline too */
    int64_t outer = lock_wait_deadline(deadline);
    int rc = acquire_loop_in(l, deadline, d);
    lock_wait_deadline(outer);
    return rc;
}

static int acquire_loop_in(struct acquire_loop *l, int64_t deadline, struct sw_decision *d)
{
    struct waitq *wq = l->wq;
    struct sw_shm *shm = l->shm;
    for (;;) {
        /* every step runs the signal handlers: Ctrl-C is seen whatever the behaviour */
        if (PyErr_CheckSignals() < 0)
            return -1;
        uint64_t gen = wq ? waitq_arm(wq) : 0;
        uint32_t seq = 0;
        if (shm) {
            /* a waiter in any process: a release there bumps release_seq and wakes us */
            atomic_fetch_add(&shm->hdr->waiters, 1u);
            seq = atomic_load(&shm->hdr->release_seq);
        }
        l->decide(l->ctx, d);
        if (d->verdict != SW_PASS && shm && !PyErr_Occurred() && sw_time_ns() < deadline &&
            l->reap(l->ctx))
            l->decide(l->ctx, d);
        if (PyErr_Occurred()) { /* a signal handler's exception while waiting for a lock */
            if (wq)
                waitq_disarm(wq);
            if (shm)
                atomic_fetch_sub(&shm->hdr->waiters, 1u);
            return -1;
        }
        if (d->verdict == SW_PASS) {
            if (wq)
                waitq_disarm(wq);
            if (shm)
                atomic_fetch_sub(&shm->hdr->waiters, 1u);
            return l->defer_wait ? 0 : sleep_decision(d);
        }
        int64_t now = sw_time_ns();
        if (d->verdict == SW_NEVER || now >= deadline) {
            l->lock_expired = d->verdict != SW_NEVER && lock_wait_expired();
            if (wq)
                waitq_disarm(wq);
            if (shm)
                atomic_fetch_sub(&shm->hdr->waiters, 1u);
            return 1;
        }
        if (wq) {
            /* until a release (or the deadline), one slice at most */
            if (waitq_wait(wq, gen, deadline) < 0)
                return -1;
        } else if (shm) {
            int rc = shared_wait(shm, seq, deadline);
            atomic_fetch_sub(&shm->hdr->waiters, 1u);
            if (rc < 0)
                return -1;
        } else {
            /* retry_after known (reject, throttle), else poll at 1 ms; a poll never spins */
            int64_t step = d->retry_ns > 0 ? d->retry_ns : NS_PER_MS;
            int64_t until = sw_sat_add(now, step);
            if (until > deadline)
                until = deadline;
            if (sleep_until(until, false) < 0)
                return -1;
        }
    }
}
