/* keyed_args.c - a KeyedLimiter's keys hashed into fingerprints, and its overrides= checked
 * and sorted for the table. */
#include "keyed.h"
#include "args.h"

#include <stdlib.h>

/* hash keys at least this long with the GIL released (xxhash's binding uses 64 KiB) */
#define HASH_NOGIL_BYTES 65536

static uint64_t hash_bytes(uint64_t seed, int tag, const char *s, Py_ssize_t len)
{
    uint64_t h;
    if (len >= HASH_NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        h = sw_keyed_hash(seed, tag, s, (size_t)len);
        Py_END_ALLOW_THREADS
        return h;
    }
    return sw_keyed_hash(seed, tag, s, (size_t)len);
}

/* str: its UTF-8 (lone surrogates kept); bytes: its bytes; int: 8 little-endian bytes when
 * it fits in int64, else its hex digits; each under its own tag: "1", b"1" and 1 differ. */
int keyed_fp_as(uint64_t seed, PyObject *key, uint64_t *out, PyObject *exc,
                const char *what)
{
    if (PyUnicode_Check(key)) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(key, &len);
        if (s != NULL) {
            *out = hash_bytes(seed, SW_KEY_STR, s, len);
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        PyObject *b = PyUnicode_AsEncodedString(key, "utf-8", "surrogatepass");
        if (b == NULL)
            return -1;
        *out = hash_bytes(seed, SW_KEY_STR, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
        Py_DECREF(b);
        return 0;
    }
    if (PyBytes_Check(key)) {
        *out = hash_bytes(seed, SW_KEY_BYTES, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        return 0;
    }
    if (PyLong_Check(key) && !PyBool_Check(key)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (!overflow) {
            unsigned char b[8];
            uint64_t u = (uint64_t)v;
            for (int i = 0; i < 8; i++)
                b[i] = (unsigned char)(u >> (8 * i));
            *out = sw_keyed_hash(seed, SW_KEY_INT, b, 8);
            return 0;
        }
        PyObject *h = PyNumber_ToBase(key, 16);
        if (h == NULL)
            return -1;
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(h, &len);
        if (s == NULL) {
            Py_DECREF(h);
            return -1;
        }
        *out = hash_bytes(seed, SW_KEY_BIGINT, s, len);
        Py_DECREF(h);
        return 0;
    }
    PyErr_Format(exc, "%s must be a str, bytes or int, not %.100s", what, type_name_of(key));
    return -1;
}

static int cmp_over(const void *a, const void *b)
{
    uint64_t x = ((const struct sw_kover *)a)->fp, y = ((const struct sw_kover *)b)->fp;
    return x < y ? -1 : x > y;
}

/* overrides.items() (*items: a new list, or NULL for None). @return 0, or -1 */
static int overrides_items(PyObject *value, PyObject **items)
{
    *items = NULL;
    if (value == NULL || value == Py_None)
        return 0;
    if (!PyDict_Check(value) && !PyObject_HasAttrString(value, "items")) {
        PyErr_Format(PyExc_TypeError, "overrides must be a dict of key -> threshold, not "
                     "%.100s", type_name_of(value));
        return -1;
    }
    *items = PyMapping_Items(value);
    return *items == NULL ? -1 : 0;
}

/* Key k's threshold t checked against cfg. @return 0 (*v), or -1 with ValueError set */
static int override_threshold(const struct sw_limiter_cfg *cfg, PyObject *k, PyObject *t,
                              double *v)
{
    bool conc = cfg->grade == SW_GRADE_CONCURRENCY;
    bool ok = (PyLong_Check(t) || (!conc && PyFloat_Check(t))) && !PyBool_Check(t);
    *v = ok ? PyFloat_AsDouble(t) : -1;
    if (*v == -1.0 && PyErr_Occurred())
        PyErr_Clear(); /* too large: refused below */
    struct sw_limiter_cfg c = *cfg;
    c.count = *v;
    struct sw_cfg_error err;
    if (ok && *v >= 0 && sw_limiter_check_ex(&c, &err) == SW_OK)
        return 0;
    const char *why = ok ? "out of range" : "not a number";
    if (ok && *v >= 0)
        PyErr_Format(PyExc_ValueError, "overrides[%R]: threshold %R is %s: %s", k, t, why,
                     err.msg);
    else
        PyErr_Format(PyExc_ValueError, "overrides[%R]: threshold %R is %s: %s must be %s, got %R",
                     k, t, why, conc ? "concurrency" : "qps",
                     conc ? "an int in [0, 2**53]" : "a finite number in [0, 9e15]", t);
    return -1;
}

/* One item of overrides.items() into *o, also kept in copy. @return 0, or -1 */
static int override_entry(const struct sw_limiter_cfg *cfg, uint64_t seed, PyObject *it,
                          struct sw_kover *o, PyObject *copy)
{
    if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 2) {
        PyErr_SetString(PyExc_TypeError, "overrides: items() must give (key, threshold) pairs");
        return -1;
    }
    PyObject *k = PyTuple_GET_ITEM(it, 0), *t = PyTuple_GET_ITEM(it, 1);
    if (keyed_fp_as(seed, k, &o->fp, PyExc_ValueError, "an overrides key") < 0) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "overrides: key %R must be a str, bytes or int, "
                         "not %.100s", k, type_name_of(k));
        }
        return -1;
    }
    double v;
    if (override_threshold(cfg, k, t, &v) < 0)
        return -1;
    o->count = v;
    o->limit = cfg->grade == SW_GRADE_CONCURRENCY
                   ? v
                   : (cfg->interval_ms == 1000 ? v : v * ((double)cfg->interval_ms / 1000.0));
    return PyDict_SetItem(copy, k, t);
}

/* Sort n overrides by fingerprint; equal ones (a collision): the last wins. @return how many
 * are left */
static uint32_t overrides_sort(struct sw_kover *arr, Py_ssize_t n)
{
    if (n > 1)
        qsort(arr, (size_t)n, sizeof *arr, cmp_over);
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (m > 0 && arr[m - 1].fp == arr[i].fp)
            arr[m - 1] = arr[i];
        else
            arr[m++] = arr[i];
    }
    return (uint32_t)m;
}

int keyed_build_overrides(const struct sw_limiter_cfg *cfg, uint64_t seed, PyObject *value,
                           struct overrides *out)
{
    PyObject *copy = PyDict_New(), *items = NULL;
    struct sw_kover *arr = NULL;
    if (copy == NULL)
        return -1;
    if (overrides_items(value, &items) < 0)
        goto fail;
    Py_ssize_t n = items != NULL ? PyList_GET_SIZE(items) : 0;
    if (n > (Py_ssize_t)SW_KEYED_MAX_KEYS) {
        PyErr_Format(PyExc_ValueError, "overrides: at most %u keys, got %zd",
                     (unsigned)SW_KEYED_MAX_KEYS, n);
        goto fail;
    }
    if (n > 0) {
        arr = PyMem_Calloc((size_t)n, sizeof *arr);
        if (arr == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (override_entry(cfg, seed, PyList_GET_ITEM(items, i), &arr[i], copy) < 0)
            goto fail;
    out->arr = arr;
    out->n = overrides_sort(arr, n);
    out->copy = copy;
    Py_XDECREF(items);
    return 0;
fail:
    PyMem_Free(arr);
    Py_XDECREF(items);
    Py_DECREF(copy);
    return -1;
}

void keyed_overrides_free(struct overrides *ov)
{
    PyMem_Free(ov->arr);
    Py_CLEAR(ov->copy);
}
