/* args.h - argument helpers shared by every type of the binding. Wrong type: TypeError; out
 * of range: ValueError naming the parameter, the value and what is allowed. */
#ifndef SW_BINDING_ARGS_H
#define SW_BINDING_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "sw_common.h"

#if PY_VERSION_HEX < 0x030A0000
/* Py_NewRef and Py_XNewRef (3.10+) for 3.9 */
static inline PyObject *sw_xnew_ref_(PyObject *o)
{
    Py_XINCREF(o);
    return o;
}
#define Py_NewRef(o) sw_xnew_ref_((PyObject *)(o))
#define Py_XNewRef(o) sw_xnew_ref_((PyObject *)(o))
#endif

static inline const char *type_name_of(PyObject *o)
{
    return Py_TYPE(o)->tp_name;
}

/** An int (not float, not bool) in [lo, hi]. @return 0, or -1 with an exception set */
int as_int64(PyObject *o, const char *name, int64_t lo, int64_t hi, int64_t *out);

/** An int or float (not bool) >= 0, finite, <= hi. @return 0, or -1 with an exception set */
/** An int or float (not bool) as a double; *overflow: an int too large for one (*v unset);
 * wrong_type: the TypeError's format (name, then the type's name). @return 0, or -1 with an
 * exception set */
int number_as_double(PyObject *o, const char *wrong_type, const char *name, double *v,
                     int *overflow);
int as_nonneg_double(PyObject *o, const char *name, double hi, double *out);

/** A bool (NULL: false). @return 0, or -1 with an exception set */
int parse_bool(PyObject *o, const char *name, int *out);

/** timeout: None -> -1 (one decision), else seconds >= 0 -> ns (INT64_MAX for inf). */
int parse_timeout(PyObject *o, int64_t *out);

/** A small hand parser for FASTCALL | KEYWORDS: the first npos of names may be given by
 * position; out: borrowed references (NULL when absent). @return 0, or -1 */
int parse_fast(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               const char *const *names, Py_ssize_t nnames, Py_ssize_t npos, PyObject **out);

/** parse_fast over an args tuple and a kwds dict (or NULL), as tp_new gets them. */
int parse_kwds(const char *fname, PyObject *args, PyObject *kwds, const char *const *names,
               Py_ssize_t nnames, Py_ssize_t npos, PyObject **out);

/** parse_fast, the first nreq parameters required. @return 0, or -1 */
int parse_fast_req(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, const char *const *names, Py_ssize_t nnames,
                   Py_ssize_t npos, Py_ssize_t nreq, PyObject **out);

/** Parse only the keyword `now_ns`. @return 0, or -1 with an exception set */
int parse_now_only(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, int64_t *now);

/** A window's interval_ms and sample_count (NULL: kept). @return 0, or -1 */
int parse_window(PyObject *o_int, PyObject *o_samp, int64_t *interval_ms,
                 uint32_t *sample_count);

/** A core configuration check's rc. @return 0 for SW_OK, else -1 with ValueError (err's) */
int cfg_checked(int rc, const struct sw_cfg_error *err);

/** Turn a core error code into an exception. @return NULL */
PyObject *raise_core_error(int rc);

/** A float as Python prints it (100.0, 0.5). @return new reference */
PyObject *float_repr(double v);

/* now_ns: None -> SW_NOW, else an int >= 0. */
static inline int parse_now(PyObject *o, int64_t *out)
{
    if (o == NULL || o == Py_None) {
        *out = SW_NOW;
        return 0;
    }
    if (PyLong_CheckExact(o)) { /* fast path: a plain int that fits */
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow && v >= 0) {
            *out = (int64_t)v;
            return 0;
        }
        if (v == -1 && PyErr_Occurred())
            return -1;
    }
    return as_int64(o, "now_ns", 0, INT64_MAX, out);
}

/* n: an int >= lo (NULL: 1). */
static inline int parse_n(PyObject *o, int64_t lo, int64_t *out)
{
    if (o == NULL) {
        *out = 1;
        return 0;
    }
    if (PyLong_CheckExact(o)) {
        long v = PyLong_AsLong(o);
        if (v >= lo) {
            *out = (int64_t)v;
            return 0;
        }
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();
    }
    return as_int64(o, "n", lo, INT64_MAX, out);
}

/* A keyword name equals an ASCII parameter name (compact ASCII: by bytes, about 2 ns). */
static inline int key_equals(PyObject *key, const char *name)
{
    if (PyUnicode_Check(key) && PyUnicode_IS_COMPACT_ASCII(key)) {
        size_t len = strlen(name);
        return (size_t)PyUnicode_GET_LENGTH(key) == len &&
               memcmp(PyUnicode_DATA(key), name, len) == 0;
    }
    return PyUnicode_CompareWithASCIIString(key, name) == 0;
}

#endif /* SW_BINDING_ARGS_H */
