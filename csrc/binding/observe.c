/* observe.c - names and the registry of named objects, totals as dicts, and read_region() /
 * list_regions() for observers. Observers read only this effective uid's regions, each file
 * once (hard links); read_region() never writes a region nor takes its lock: the core reads a
 * checked, repaired copy (sw_region_read, sw_observe.h) and this file makes the dict. */
#include "binding.h"
#include "args.h"
#include "observe.h"
#include "shared.h"
#include "sw_observe.h"

#include <string.h>

#define NAME_MAX_CHARS 200

/* ---- names ----------------------------------------------------------------------------- */

static int name_parse(PyObject *o, PyObject **out)
{
    *out = NULL;
    if (o == NULL || o == Py_None)
        return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "name must be a str or None, not %.100s",
                     type_name_of(o));
        return -1;
    }
    Py_ssize_t len = PyUnicode_GET_LENGTH(o);
    if (len < 1 || len > NAME_MAX_CHARS) {
        PyErr_Format(PyExc_ValueError, "name must be a str of 1 to %d characters, got %R",
                     NAME_MAX_CHARS, o);
        return -1;
    }
    if (PyUnicode_AsUTF8(o) == NULL) { /* lone surrogates: not storable in a region */
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "name must be encodable as UTF-8, got %R", o);
        return -1;
    }
    *out = Py_NewRef(o);
    return 0;
}

static PyObject *name_default(PyObject *o_shared, int mode, const char *path)
{
    if (mode != 2)
        Py_RETURN_NONE;
    if (strchr(PyUnicode_AsUTF8(o_shared), '/') == NULL) /* a name (its UTF-8 made already) */
        return Py_NewRef(o_shared);
    const char *base = strrchr(path, '/');
    return PyUnicode_DecodeFSDefault(base != NULL ? base + 1 : path);
}

int shared_and_name(PyObject *o_shared, PyObject *o_name, char *path, size_t cap,
                    PyObject **name, int *name_given)
{
    *name = NULL;
    int mode = shared_resolve(o_shared, path, cap);
    if (mode < 0 || name_parse(o_name, name) < 0)
        return -1;
    *name_given = *name != NULL;
    if (*name == NULL && (*name = name_default(o_shared, mode, path)) == NULL)
        return -1;
    if (*name == Py_None)
        Py_CLEAR(*name);
    return mode;
}

/* A weak reference's object (a new reference), NULL when it is dead, -1 on error. */
static int ref_target(PyObject *ref, PyObject **obj)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyWeakref_GetRef(ref, obj) < 0 ? -1 : 0;
#else
    PyObject *o = PyWeakref_GetObject(ref); /* borrowed; Py_None when dead */
    if (o == NULL)
        return -1;
    *obj = o == Py_None ? NULL : o;
    Py_XINCREF(*obj);
    return 0;
#endif
}

/* Drop the dead references of a name's list. @return its length after, -1 on error */
static Py_ssize_t prune_refs(PyObject *refs)
{
    for (Py_ssize_t i = PyList_GET_SIZE(refs) - 1; i >= 0; i--) {
        PyObject *obj;
        if (ref_target(PyList_GET_ITEM(refs, i), &obj) < 0)
            return -1;
        if (obj == NULL && PyList_SetSlice(refs, i, i + 1, NULL) < 0)
            return -1;
        Py_XDECREF(obj);
    }
    return PyList_GET_SIZE(refs);
}

int registry_add(module_state *st, PyObject *name, PyObject *obj)
{
    if (name == NULL || name == Py_None)
        return 0;
    /* name -> weak references, oldest first: a newer object dropped shows the older one */
    PyObject *fresh = PyList_New(0), *ref = NULL;
    PyObject *refs = fresh != NULL ? PyDict_SetDefault(st->registry, name, fresh) : NULL;
    Py_XDECREF(fresh); /* refs: borrowed from the registry */
    int rc = refs == NULL || prune_refs(refs) < 0 || (ref = PyWeakref_NewRef(obj, NULL)) == NULL
                 ? -1
                 : PyList_Append(refs, ref);
    Py_XDECREF(ref);
    return rc;
}

/* limiters(): names left without a live object are forgotten */
PyObject *mod_limiters(PyObject *m, PyObject *Py_UNUSED(unused))
{
    module_state *st = (module_state *)PyModule_GetState(m);
    PyObject *out = PyDict_New(), *items = out != NULL ? PyDict_Items(st->registry) : NULL;
    if (items == NULL)
        Py_CLEAR(out);
    for (Py_ssize_t i = 0; out != NULL && i < PyList_GET_SIZE(items); i++) {
        PyObject *name = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 0), *obj = NULL;
        PyObject *refs = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 1);
        Py_ssize_t n = prune_refs(refs); /* the newest live object of the name, if any */
        if (n < 0 || (n == 0 ? PyDict_DelItem(st->registry, name) < 0
                             : ref_target(PyList_GET_ITEM(refs, n - 1), &obj) < 0 ||
                                   (obj != NULL && PyDict_SetItem(out, name, obj) < 0)))
            Py_CLEAR(out);
        Py_XDECREF(obj);
    }
    Py_XDECREF(items);
    return out;
}

/* ---- totals ---------------------------------------------------------------------------- */

PyObject *totals_dict(const struct sw_totals *t)
{
    return Py_BuildValue("{sLsLsLsLsLsLsL}", "pass", (long long)t->pass, "block",
                         (long long)t->block, "exception", (long long)t->exception, "success",
                         (long long)t->success, "occupied_pass", (long long)t->occupied_pass,
                         "rt", (long long)t->rt, "shadow_block", (long long)t->shadow_block);
}

const char *const breaker_state_names[3] = {"closed", "open", "half_open"};

PyObject *breaker_totals_dict(const struct sw_brk_totals *tp)
{
    const struct sw_brk_totals t = *tp;
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsLsL}", "total", (long long)t.t[SW_BRK_T_TOTAL],
                         "errors", (long long)t.t[SW_BRK_T_ERRORS], "slow",
                         (long long)t.t[SW_BRK_T_SLOW], "refused",
                         (long long)t.t[SW_BRK_T_REFUSED], "probes",
                         (long long)t.t[SW_BRK_T_PROBES], "cancelled",
                         (long long)t.t[SW_BRK_T_CANCELLED], "probes_timed_out",
                         (long long)t.t[SW_BRK_T_PROBE_TIMEOUTS], "timed_out",
                         (long long)t.t[SW_BRK_T_TIMED_OUT], "opened",
                         (long long)t.transitions[SW_BRK_OPEN], "half_opened",
                         (long long)t.transitions[SW_BRK_HALF_OPEN], "closed",
                         (long long)t.transitions[SW_BRK_CLOSED]);
}

/* ---- read_region ----------------------------------------------------------------------- */

static const char *const kind_names[] = {"", "metric", "limiter", "keyed", "breaker"};

static PyObject *region_name(const struct sw_shm_header *h, const char *path)
{
    size_t nl = strnlen(h->name, sizeof h->name);
    if (nl > 0) {
        PyObject *o = PyUnicode_DecodeUTF8(h->name, (Py_ssize_t)nl, "replace");
        if (o != NULL || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return o;
        PyErr_Clear();
    }
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    if (strncmp(base, "slidewin-", 9) == 0 && base[9] != '\0')
        base += 9;
    return PyUnicode_DecodeFSDefault(base);
}

/* d[key] = v (v: a new reference or NULL, released either way). @return 0, or -1 */
static int set_new(PyObject *d, const char *key, PyObject *v)
{
    int rc = v == NULL ? -1 : PyDict_SetItemString(d, key, v);
    Py_XDECREF(v);
    return rc;
}

/* A Metric region's window: each event's sum by name, and min_rt for the default events.
 * @return a new dict, or NULL */
static PyObject *metric_window(const struct sw_region_read *r)
{
    PyObject *window = PyDict_New();
    for (uint32_t e = 0; window != NULL && e < r->n_events; e++) {
        size_t len = 0;
        const char *nm = r->hdr.n_events == 0 ? default_event_names[e]
                                              : sw_region_event_name(r, e, &len);
        PyObject *k = r->hdr.n_events == 0 ? PyUnicode_FromString(nm)
                                           : PyUnicode_DecodeUTF8(nm, (Py_ssize_t)len, "replace");
        PyObject *v = PyLong_FromLongLong(r->sums[e]);
        int bad = k == NULL || v == NULL || PyDict_SetItem(window, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad)
            Py_CLEAR(window);
    }
    if (window != NULL && r->hdr.n_events == 0 &&
        set_new(window, "min_rt", PyLong_FromLongLong(r->min_rt)) < 0)
        Py_CLEAR(window);
    return window;
}

/* read_region()'s path= (a name, str or os.PathLike), resolved into path. @return 0, or -1 */
static int region_path(PyObject *o, char *path, size_t cap)
{
    PyObject *fs = NULL;
    if (!PyUnicode_FSDecoder(o, &fs)) /* a str as it is */
        return -1;
    int mode = shared_resolve(fs, path, cap);
    Py_DECREF(fs);
    if (mode < 0)
        return -1;
    if (mode != 2) {
        PyErr_SetString(PyExc_TypeError, "read_region() takes a region's name or path (str)");
        return -1;
    }
    return 0;
}

PyObject *mod_read_region(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = {"path", "now_ns"};
    PyObject *a[2], *window, *totals;
    char path[4096];
    int64_t now;
    const char *bstate = NULL;
    struct sw_region_read r;
    struct sw_shm_error err;
    if (parse_fast_req("read_region", args, nargs, kwnames, names, 2, 1, 1, a) < 0 ||
        parse_now(a[1], &now) < 0 || region_path(a[0], path, sizeof path) < 0)
        return NULL;
    int rc = sw_region_read(path, now, &r, &err);
    if (rc != SW_OK)
        return shared_error(rc, &err, path);
    const struct sw_stats *st = &r.stats;
    if (r.hdr.kind == SW_KIND_BREAKER) {
        window = Py_BuildValue("{sLsLsL}", "total", (long long)r.brk_window[SW_BRK_EV_TOTAL],
                               "errors", (long long)r.brk_window[SW_BRK_EV_ERRORS], "slow",
                               (long long)r.brk_window[SW_BRK_EV_SLOW]);
        totals = breaker_totals_dict(&r.brk_totals);
        bstate = breaker_state_names[r.brk_state];
    } else if (r.hdr.kind == SW_KIND_METRIC) {
        window = metric_window(&r);
        totals = Py_NewRef(Py_None);
    } else {
        window = Py_BuildValue("{sLsLsLsLsLsLsLsL}", "pass", (long long)st->pass, "block",
                               (long long)st->block, "success", (long long)st->success,
                               "exception", (long long)st->exception, "rt",
                               (long long)st->rt_sum, "occupied_pass",
                               (long long)st->occupied_pass, "min_rt", (long long)st->min_rt,
                               "waiting", (long long)st->waiting);
        totals = totals_dict(&r.totals);
    }
    if (window == NULL || totals == NULL) {
        Py_XDECREF(window);
        Py_XDECREF(totals);
        return NULL;
    }
    const struct sw_shm_header *h = &r.hdr;
    PyObject *out = Py_BuildValue(
        "{sssNsNsIsLsIsIsNsNsLsIsLsL}", "kind", kind_names[h->kind], "name", region_name(h, path),
        "path", PyUnicode_DecodeFSDefault(path), "version", h->version, "interval_ms",
        (long long)h->interval_ms, "sample_count", h->sample_count, "max_keys", h->max_keys,
        "totals", totals, "window", window, "in_flight", (long long)r.stats.in_flight,
        "waiters", r.waiters, "now_ns", (long long)r.now_ns, "created_unix_ns",
        (long long)h->created_unix_ns);
    if (out == NULL)
        return NULL;
    if ((r.adaptive_limit >= 0 &&
         set_new(out, "adaptive_limit", PyLong_FromLongLong(r.adaptive_limit)) < 0) ||
        (bstate != NULL && set_new(out, "state", PyUnicode_FromString(bstate)) < 0) ||
        (h->kind == SW_KIND_KEYED &&
         (set_new(out, "keys", PyLong_FromLongLong(r.keys)) < 0 ||
          set_new(out, "evicted", PyLong_FromLongLong(r.evicted)) < 0)))
        Py_CLEAR(out);
    return out;
}

/* list_regions(folder=None): a file with several names (hard links) once, by its first name */
PyObject *mod_list_regions(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"folder"};
    PyObject *a[1] = {NULL};
    if (parse_fast("list_regions", args, nargs, kwnames, names, 1, 1, a) < 0)
        return NULL;
    PyObject *fs = NULL;
    char dir[4096];
    if (a[0] != NULL && a[0] != Py_None && !PyUnicode_FSConverter(a[0], &fs))
        return NULL;
    int w = snprintf(dir, sizeof dir, "%s", fs != NULL ? PyBytes_AS_STRING(fs) : shared_dir());
    Py_XDECREF(fs);
    if (w < 0 || (size_t)w >= sizeof dir) {
        PyErr_SetString(PyExc_ValueError, "list_regions: the folder's path is too long");
        return NULL;
    }
    char **paths;
    size_t n;
    struct sw_shm_error err;
    int rc = sw_region_list(dir, &paths, &n, &err);
    if (rc != SW_OK)
        return shared_error(rc, &err, dir);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t k = 0; out != NULL && k < n; k++) {
        PyObject *p = PyUnicode_DecodeFSDefault(paths[k]);
        if (p == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)k, p);
    }
    sw_region_list_free(paths, n);
    if (out != NULL && PyList_Sort(out) < 0)
        Py_CLEAR(out);
    return out;
}
