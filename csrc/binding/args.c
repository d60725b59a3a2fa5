/* args.c - argument helpers shared by every type of the binding. */
#include "args.h"

#include <math.h>

int as_int64(PyObject *o, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        /* a bool is an int to Python, but acquire(True) (threading's blocking=True habit) or
         * now_ns=True are mistakes, not a count of 1 */
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, type_name_of(o));
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > hi) {
        /* on overflow v is -1: decide by the sign of the overflow, not by v */
        int below = overflow < 0 || (overflow == 0 && v < lo);
        if (below && hi == INT64_MAX)
            PyErr_Format(PyExc_ValueError, "%s must be >= %lld, got %R", name, (long long)lo, o);
        else if (!below && lo == INT64_MIN)
            PyErr_Format(PyExc_ValueError, "%s must be <= %lld, got %R", name, (long long)hi, o);
        else
            PyErr_Format(PyExc_ValueError, "%s must be between %lld and %lld, got %R", name,
                         (long long)lo, (long long)hi, o);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int number_as_double(PyObject *o, const char *wrong_type, const char *name, double *v,
                     int *overflow)
{
    *overflow = 0;
    if ((!PyLong_Check(o) && !PyFloat_Check(o)) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, wrong_type, name, type_name_of(o));
        return -1;
    }
    *v = PyFloat_AsDouble(o);
    if (*v == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        *overflow = 1;
    }
    return 0;
}

int as_nonneg_double(PyObject *o, const char *name, double hi, double *out)
{
    double v;
    int overflow;
    if (number_as_double(o, "%s must be an int or float, not %.100s", name, &v, &overflow) < 0)
        return -1;
    if (overflow)
        v = NAN; /* an int too large for a double: out of range either way */
    if (!isfinite(v) || v < 0 || v > hi) {
        /* (PyErr_Format has no %g: print the bound with Python's own float formatting) */
        char *bound = PyOS_double_to_string(hi, 'r', 0, 0, NULL);
        if (bound == NULL)
            return -1;
        if (hi >= 1e300)
            PyErr_Format(PyExc_ValueError, "%s must be a finite number >= 0, got %R", name, o);
        else
            PyErr_Format(PyExc_ValueError, "%s must be a finite number between 0 and %s, got %R",
                         name, bound, o);
        PyMem_Free(bound);
        return -1;
    }
    *out = v;
    return 0;
}

/* One keyword argument into out (the slot of its name). @return 0, or -1 with TypeError set */
static int put_keyword(const char *fname, PyObject *key, PyObject *value,
                       const char *const *names, Py_ssize_t nnames, PyObject **out)
{
    Py_ssize_t i;
    for (i = 0; i < nnames; i++)
        if (key_equals(key, names[i]))
            break;
    if (i == nnames) {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", fname, key);
        return -1;
    }
    if (out[i] != NULL) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                     names[i]);
        return -1;
    }
    out[i] = value;
    return 0;
}

int parse_fast(const char *fname, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames, const char *const *names, Py_ssize_t nnames,
               Py_ssize_t npos, PyObject **out)
{
    for (Py_ssize_t i = 0; i < nnames; i++)
        out[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional argument%s (%zd given)",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++)
        if (put_keyword(fname, PyTuple_GET_ITEM(kwnames, k), args[nargs + k], names, nnames,
                        out) < 0)
            return -1;
    return 0;
}

int parse_kwds(const char *fname, PyObject *args, PyObject *kwds, const char *const *names,
               Py_ssize_t nnames, Py_ssize_t npos, PyObject **out)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    if (parse_fast(fname, ((PyTupleObject *)args)->ob_item, PyTuple_GET_SIZE(args), NULL, names,
                   nnames, npos, out) < 0)
        return -1;
    while (kwds != NULL && PyDict_Next(kwds, &pos, &key, &value))
        if (put_keyword(fname, key, value, names, nnames, out) < 0)
            return -1;
    return 0;
}

int parse_fast_req(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, const char *const *names, Py_ssize_t nnames,
                   Py_ssize_t npos, Py_ssize_t nreq, PyObject **out)
{
    if (parse_fast(fname, args, nargs, kwnames, names, nnames, npos, out) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < nreq; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

PyObject *raise_core_error(int rc)
{
    if (rc == SW_ENOMEM)
        return PyErr_NoMemory();
    PyErr_SetString(PyExc_ValueError, sw_strerror(rc));
    return NULL;
}

int parse_bool(PyObject *o, const char *name, int *out)
{
    if (o == NULL) {
        *out = 0;
        return 0;
    }
    if (!PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bool, not %.100s", name, type_name_of(o));
        return -1;
    }
    *out = o == Py_True;
    return 0;
}

int parse_timeout(PyObject *o, int64_t *out)
{
    if (o == NULL || o == Py_None) {
        *out = -1;
        return 0;
    }
    double v;
    int overflow;
    if (number_as_double(o, "%s must be None or a number of seconds, not %.100s", "timeout", &v,
                         &overflow) < 0)
        return -1;
    if (overflow) { /* an int too large for a double: its sign decides */
        (void)PyLong_AsLongLongAndOverflow(o, &overflow);
        v = overflow > 0 ? INFINITY : -1.0;
    }
    if (isnan(v) || v < 0) {
        PyErr_Format(PyExc_ValueError, "timeout must be None or >= 0 seconds, got %R", o);
        return -1;
    }
    *out = v >= 9.0e9 ? INT64_MAX : (int64_t)(v * 1e9);
    return 0;
}

int parse_now_only(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, int64_t *now)
{
    static const char *const names[] = {"now_ns"};
    PyObject *a[1];
    if (nargs == 0 && kwnames == NULL) {
        *now = SW_NOW;
        return 0;
    }
    if (parse_fast(fname, args, nargs, kwnames, names, 1, 0, a) < 0)
        return -1;
    return parse_now(a[0], now);
}

PyObject *float_repr(double v)
{
    PyObject *f = PyFloat_FromDouble(v);
    if (f == NULL)
        return NULL;
    PyObject *r = PyObject_Repr(f);
    Py_DECREF(f);
    return r;
}

int parse_window(PyObject *o_int, PyObject *o_samp, int64_t *interval_ms,
                 uint32_t *sample_count)
{
    int64_t samples = *sample_count;
    if ((o_int && as_int64(o_int, "interval_ms", 1, SW_MAX_INTERVAL_MS, interval_ms) < 0) ||
        (o_samp && as_int64(o_samp, "sample_count", 1, SW_MAX_SAMPLES, &samples) < 0))
        return -1;
    *sample_count = (uint32_t)samples;
    return 0;
}

int cfg_checked(int rc, const struct sw_cfg_error *err)
{
    if (rc == SW_OK)
        return 0;
    PyErr_SetString(PyExc_ValueError, err->msg);
    return -1;
}
