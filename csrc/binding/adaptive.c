/* adaptive.c - the methods that make a Limiter adaptive (adaptive.h). */
#include "adaptive.h"
#include "args.h"
#include "limiter.h"

PyObject *limiter_adapt(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t algo, lo, hi, init, cpu;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_adapt() takes 5 arguments");
        return NULL;
    }
    if (as_int64(args[0], "algorithm", 1, 2, &algo) < 0 ||
        as_int64(args[1], "min_limit", 1, SW_ADAPT_MAX_LIMIT, &lo) < 0 ||
        as_int64(args[2], "max_limit", 1, SW_ADAPT_MAX_LIMIT, &hi) < 0 ||
        as_int64(args[3], "initial_limit", 1, SW_ADAPT_MAX_LIMIT, &init) < 0 ||
        as_int64(args[4], "cpu_threshold", -1, 1000, &cpu) < 0)
        return NULL;
    if (self->grade != SW_GRADE_CONCURRENCY) {
        PyErr_SetString(PyExc_ValueError, "only a concurrency limiter can be adaptive");
        return NULL;
    }
    struct sw_adapt_cfg a = {(uint32_t)algo, (uint32_t)lo, (uint32_t)hi, (uint32_t)init,
                             (int32_t)cpu, 0};
    const struct sw_view *view = limiter_view(self);
    sw_view_lock(view);
    pthread_mutex_lock(&self->cfg_mu);
    struct sw_rule rule = *view->rule;
    const char *param = NULL;
    int rc = sw_rule_set_adapt(&rule, &a, &param);
    if (rc == SW_OK) {
        *(struct sw_rule *)view->rule = rule;
        self->cfg.grade = SW_GRADE_CONCURRENCY;
        self->cfg.count = rule.count;
        self->settings_gen++;
    }
    pthread_mutex_unlock(&self->cfg_mu);
    sw_view_unlock(view);
    if (rc != SW_OK) {
        PyErr_Format(PyExc_ValueError, "%s is out of range (min_limit <= initial_limit <= "
                     "max_limit, all in [1, %u]; cpu_threshold in [0, 1])",
                     param ? param : "a setting", (unsigned)SW_ADAPT_MAX_LIMIT);
        return NULL;
    }
    limiter_notify(self); /* a higher limit may admit a waiter now */
    Py_RETURN_NONE;
}

PyObject *limiter_adaptive_limit(LimiterObject *self, PyObject *arg)
{
    int64_t now;
    if (parse_now(arg, &now) < 0)
        return NULL;
    int64_t l = sw_adapt_limit_now(limiter_view(self), now);
    if (l < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(l);
}

PyObject *limiter_exit_rt(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t n, rt, now;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_exit_rt(n, rt_ns, now_ns) takes 3 arguments");
        return NULL;
    }
    if (parse_n(args[0], 1, &n) < 0 || as_int64(args[1], "rt_ns", 0, INT64_MAX, &rt) < 0 ||
        parse_now(args[2], &now) < 0)
        return NULL;
    int64_t held = sw_in_flight(limiter_view(self));
    if (held < n) {
        PyErr_Format(PyExc_ValueError, "release(n=%lld): only %lld in flight", (long long)n,
                     (long long)held);
        return NULL;
    }
    sw_exit_rt(limiter_view(self), n, rt, SW_OUT_SUCCESS, now);
    limiter_notify(self);
    Py_RETURN_NONE;
}

PyObject *limiter_set_cpu(LimiterObject *self, PyObject *arg)
{
    int64_t permille;
    if (as_int64(arg, "permille", 0, 1000, &permille) < 0)
        return NULL;
    sw_view_set_cpu(limiter_view(self), permille);
    Py_RETURN_NONE;
}
