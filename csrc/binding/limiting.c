/* limiting.c - what the limiter types share below their operations table: repr, the
 * BlockedError of a refusal, the Stats of stats(), constructor and update() arguments. */
#include "binding.h"
#include "args.h"
#include "shared.h"

#include <math.h>
#include <string.h>

const char *const behavior_names[4] = {"reject", "warm_up", "throttle", "warm_up_throttle"};

PyObject *get_object_or_none(PyObject *self, void *at)
{
    PyObject *v = *(PyObject **)(void *)((char *)self + (size_t)at);
    if (v == NULL)
        v = Py_None;
    return Py_NewRef(v);
}

int repr_add(PyObject *parts, PyObject *part)
{
    if (part == NULL)
        return -1;
    int rc = PyList_Append(parts, part);
    Py_DECREF(part);
    return rc;
}

int repr_add_float(PyObject *parts, const char *fmt, double v)
{
    PyObject *num = float_repr(v);
    if (num == NULL)
        return -1;
    PyObject *part = PyUnicode_FromFormat(fmt, num);
    Py_DECREF(num);
    return repr_add(parts, part);
}

int repr_settings(PyObject *parts, const struct sw_limiter_cfg *c, int occupy, PyObject *rate)
{
    if (c->grade == SW_GRADE_CONCURRENCY) {
        if (repr_add(parts, PyUnicode_FromFormat("concurrency=%lld", (long long)c->count)) < 0)
            return -1;
    } else {
        /* a rate (rate='100/minute') stands for the qps and the window it set */
        if (rate != NULL ? repr_add(parts, PyUnicode_FromFormat("rate=%R", rate)) < 0
                         : repr_add_float(parts, "qps=%U", c->count) < 0)
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
        if ((rate == NULL || c->grade == SW_GRADE_CONCURRENCY) &&
            repr_add(parts, PyUnicode_FromFormat("interval_ms=%lld", (long long)c->interval_ms)) < 0)
            return -1;
        if (repr_add(parts, PyUnicode_FromFormat("sample_count=%u", c->sample_count)) < 0)
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

void blocked_raise(module_state *st, PyObject *self, PyObject *key, int64_t n,
                   const struct sw_decision *d)
{
    /* never, retry after, no retry known; a format's arguments past its own are ignored */
    static const char *const plain[] = {"%U refused n=%lld: it can never admit this request",
                                        "%U refused n=%lld; retry after %R s",
                                        "%U refused n=%lld"};
    static const char *const keyed[] = {"%U refused key %R n=%lld: it can never admit this "
                                        "request",
                                        "%U refused key %R n=%lld; retry after %R s",
                                        "%U refused key %R n=%lld"};
    PyObject *retry = d->verdict == SW_NEVER || d->retry_ns < 0
                          ? Py_NewRef(Py_None)
                          : PyFloat_FromDouble((double)d->retry_ns / 1e9);
    if (retry == NULL)
        return;
    int which = d->verdict == SW_NEVER ? 0 : retry != Py_None ? 1 : 2;
    PyObject *repr = PyObject_Repr(self), *msg = NULL, *kwnames = NULL, *exc = NULL;
    if (repr != NULL)
        msg = key != NULL ? PyUnicode_FromFormat(keyed[which], repr, key, (long long)n, retry)
                          : PyUnicode_FromFormat(plain[which], repr, (long long)n, retry);
    if (msg != NULL)
        kwnames = Py_BuildValue("(ss)", "retry_after", "limiter");
    if (kwnames != NULL) {
        PyObject *argv[3] = {msg, retry, self};
        exc = PyObject_Vectorcall(st->BlockedError, argv, 1, kwnames);
    }
    if (exc != NULL)
        PyErr_SetObject(st->BlockedError, exc);
    Py_XDECREF(exc);
    Py_XDECREF(kwnames);
    Py_XDECREF(msg);
    Py_XDECREF(repr);
    Py_DECREF(retry);
}

PyObject *stats_new(module_state *st, const struct sw_stats *s, int64_t interval_ms,
                    int64_t evicted)
{
    double sec = (double)interval_ms / 1000.0;
    PyObject *o = PyStructSequence_New(st->Stats_Type);
    if (o == NULL)
        return NULL;
    PyObject *v[10] = {
        PyFloat_FromDouble((double)s->pass / sec),
        PyFloat_FromDouble((double)s->block / sec),
        PyFloat_FromDouble((double)s->success / sec),
        PyFloat_FromDouble((double)s->exception / sec),
        PyFloat_FromDouble(s->success > 0 ? (double)s->rt_sum / (double)s->success : 0.0),
        PyFloat_FromDouble((double)s->min_rt),
        PyLong_FromLongLong(s->in_flight),
        PyLong_FromLongLong(s->waiting),
        PyFloat_FromDouble((double)s->occupied_pass / sec),
        PyLong_FromLongLong(evicted)};
    bool bad = false;
    for (int i = 0; i < 10; i++) { /* set even when NULL: the Stats' dealloc clears them */
        PyStructSequence_SET_ITEM(o, i, v[i]);
        bad |= v[i] == NULL;
    }
    if (bad)
        Py_CLEAR(o);
    return o;
}

/* The settings keywords shared by the constructors and update() (NULL: unchanged).
 * @return 0, or -1 with an exception set */
static int limiter_apply_settings(struct sw_limiter_cfg *cfg, PyObject *o_beh,
                                  PyObject *o_warm, PyObject *o_cold, PyObject *o_queue,
                                  PyObject *o_occ, PyObject *o_shadow)
{
    if (o_beh != NULL) {
        if (!PyUnicode_Check(o_beh)) {
            PyErr_Format(PyExc_TypeError, "behavior must be a str, not %.100s",
                         type_name_of(o_beh));
            return -1;
        }
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (PyUnicode_CompareWithASCIIString(o_beh, behavior_names[i]) == 0)
                found = i;
        if (found < 0) {
            PyErr_Format(PyExc_ValueError,
                         "behavior must be one of 'reject', 'warm_up', 'throttle', "
                         "'warm_up_throttle', got %R", o_beh);
            return -1;
        }
        cfg->behavior = found;
    }
    if (cfg->grade == SW_GRADE_CONCURRENCY && cfg->behavior != SW_REJECT) {
        PyErr_Format(PyExc_ValueError,
                     "behavior='%s' needs qps; a concurrency limiter only rejects "
                     "(behavior='reject')", behavior_names[cfg->behavior]);
        return -1;
    }
    if (o_warm && as_nonneg_double(o_warm, "warm_up_s", 1.0e9, &cfg->warm_up_s) < 0)
        return -1;
    /* any finite number here: the core says what is allowed (> 1), one message for all */
    if (o_cold && as_nonneg_double(o_cold, "cold_factor", INFINITY, &cfg->cold_factor) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "cold_factor must be a number > 1 and at most 1e9, "
                     "got %R", o_cold);
        return -1;
    }
    if (o_queue && as_int64(o_queue, "max_queueing_ms", 0, INT64_C(1) << 40,
                            &cfg->max_queueing_ms) < 0)
        return -1;
    if (o_occ && as_int64(o_occ, "occupy_timeout_ms", 0, INT64_C(1) << 40,
                          &cfg->occupy_timeout_ms) < 0)
        return -1;
    if (o_shadow != NULL) {
        int sh;
        if (parse_bool(o_shadow, "shadow", &sh) < 0)
            return -1;
        cfg->shadow = (uint32_t)sh;
    }
    return 0;
}

/* qps= or concurrency=, as cfg->grade says, into cfg->count. @return 0, or -1 */
static int parse_count(struct sw_limiter_cfg *cfg, PyObject *o)
{
    if (cfg->grade == SW_GRADE_QPS)
        return as_nonneg_double(o, "qps", 9.0e15, &cfg->count);
    int64_t c;
    if (as_int64(o, "concurrency", 0, INT64_C(1) << 53, &c) < 0)
        return -1;
    cfg->count = (double)c;
    return 0;
}

const char *const ctor_names[CTOR_N] = {
    "qps", "concurrency", "behavior", "warm_up_s", "cold_factor", "max_queueing_ms",
    "occupy_timeout_ms", "interval_ms", "sample_count", "shared", "name", "shadow", "max_keys",
    "overrides"};

int limiter_parse_cfg_as(const char *fname, PyObject *args, PyObject *kwds, Py_ssize_t nnames,
                         struct sw_limiter_cfg *cfg, PyObject **v)
{
    if (parse_kwds(fname, args, kwds, ctor_names, nnames, 1, v) < 0)
        return -1;
    PyObject *o_qps = v[0] != NULL ? v[0] : Py_None, *o_conc = v[1] != NULL ? v[1] : Py_None;
    for (int i = CTOR_SHARED; i <= CTOR_NAME; i++)
        if (v[i] == NULL)
            v[i] = Py_None;
    sw_limiter_cfg_default(cfg);
    if (o_qps != Py_None && o_conc != Py_None) {
        PyErr_SetString(PyExc_ValueError,
                        "pass exactly one of qps or concurrency, not both");
        return -1;
    }
    if (o_qps == Py_None && o_conc == Py_None) {
        PyErr_SetString(PyExc_ValueError,
                        "pass exactly one of qps (a rate per second), rate (a string "
                        "such as \"100/minute\") or concurrency (requests in flight)");
        return -1;
    }
    cfg->grade = o_qps != Py_None ? SW_GRADE_QPS : SW_GRADE_CONCURRENCY;
    if (parse_count(cfg, o_qps != Py_None ? o_qps : o_conc) < 0 ||
        limiter_apply_settings(cfg, v[2], v[3], v[4], v[5], v[6], v[11]) < 0 ||
        parse_window(v[7], v[8], &cfg->interval_ms, &cfg->sample_count) < 0)
        return -1;
    /* the combinations (window divisible, a window limit of at least 1, warm-up tokens that
     * fit): one source of truth, the core's own check, which names the parameter */
    struct sw_cfg_error err;
    return cfg_checked(sw_limiter_check_ex(cfg, &err), &err);
}

int update_collect(PyObject *args, PyObject *kwds, const char *const *settings,
                   PyObject **vals, Py_ssize_t n_settings, const char *const *layout,
                   PyObject **layout_key)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "update() takes keyword arguments only");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n_settings; i++)
        vals[i] = NULL;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwds != NULL && PyDict_Next(kwds, &pos, &key, &value)) {
        Py_ssize_t i;
        for (i = 0; i < n_settings; i++)
            if (key_equals(key, settings[i]))
                break;
        if (i < n_settings) {
            vals[i] = value;
            continue;
        }
        for (const char *const *l = layout; *l != NULL; l++)
            if (key_equals(key, *l)) {
                *layout_key = key;
                return 1;
            }
        PyErr_Format(PyExc_TypeError, "update() got an unexpected keyword argument %R", key);
        return -1;
    }
    return 0;
}

/* update(qps=) or update(concurrency=): a new count, for a limit of that grade only */
static int update_count(const char *tname, struct sw_limiter_cfg *cfg, int grade, PyObject *o)
{
    const char *name = grade == SW_GRADE_QPS ? "qps" : "concurrency";
    if (cfg->grade != grade) {
        PyErr_Format(PyExc_ValueError, "update(%s=%R): this %s limits %s; a limit cannot change "
                     "between qps and concurrency (what is in flight would not be accounted "
                     "for): make a new %s", name, o, tname,
                     grade == SW_GRADE_QPS ? "concurrency" : "qps", tname);
        return -1;
    }
    return parse_count(cfg, o);
}

int update_parse(const char *tname, PyObject *args, PyObject *kwds, const char *const *settings,
                 PyObject **vals, Py_ssize_t n_settings, const char *const *layout,
                 struct sw_limiter_cfg *cfg, PyObject ***rate, PyObject **slot)
{
    PyObject *key;
    int rc = update_collect(args, kwds, settings, vals, n_settings, layout, &key);
    if (rc > 0)
        PyErr_Format(PyExc_ValueError, "update(): %U cannot change: it is the layout of the "
                     "%s's state (and of its shared region); make a new %s to change it", key,
                     tname, tname);
    if (rc != 0)
        return -1;
    /* the grade kept; NULL: unchanged */
    if ((vals[0] != NULL && update_count(tname, cfg, SW_GRADE_QPS, vals[0]) < 0) ||
        (vals[1] != NULL && update_count(tname, cfg, SW_GRADE_CONCURRENCY, vals[1]) < 0) ||
        limiter_apply_settings(cfg, vals[2], vals[3], vals[4], vals[5], vals[6], vals[7]) < 0)
        return -1;
    struct sw_cfg_error err;
    PyObject *o_rate = vals[n_settings - 1];
    *rate = NULL;
    *slot = NULL;
    if (cfg_checked(sw_limiter_check_ex(cfg, &err), &err) < 0)
        return -1;
    if (o_rate != NULL && o_rate != Py_None && !PyUnicode_CheckExact(o_rate)) {
        PyErr_Format(PyExc_TypeError, "_rate must be a str or None, not %.100s",
                     type_name_of(o_rate));
        return -1;
    }
    if (o_rate != NULL || vals[0] != NULL || vals[1] != NULL) {
        *slot = o_rate != Py_None ? o_rate : NULL;
        *rate = slot;
    }
    return 0;
}

const char *const entry_state_names[4] = {"new", "entering", "entered", "exited"};
