/* observe.c - seeing it: names and the registry of named objects (slidewin.limiters()),
 * lifetime totals as dicts, and the read-only side for observers: read_region() and
 * list_regions() (the Prometheus collector and `python -m slidewin top` read regions that
 * other processes are busy with, without attaching to them).
 *
 * Observers read only the regions of this process's effective uid (the opened file's owner:
 * another user's file in a shared folder is skipped by list_regions and refused by
 * read_region), each file once (hard links), and never more than the region's own state.
 *
 * read_region() never writes to a region and never takes its lock: it maps the file
 * read-only, copies the header and the object's statistics (the node: windows, in-flight
 * count, totals) into private memory, checks the copy as an attach checks a region, repairs
 * the copy (a copy taken while a writer was inside its critical section may be mid-update:
 * the repair rebuilds the derived fields, as after a takeover), and reads the copy. The totals
 * are whole aligned words (never torn); the window read is a consistent snapshot of a moment
 * give or take the one decision in progress.
 */
#include "binding.h"
#include "args.h"
#include "observe.h"
#include "breaker_read.h"
#include "shared.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    Py_INCREF(o);
    *out = o;
    return 0;
}

static PyObject *name_default(PyObject *o_shared, int mode, const char *path)
{
    if (mode != 2)
        Py_RETURN_NONE;
    if (PyUnicode_Check(o_shared)) {
        const char *s = PyUnicode_AsUTF8(o_shared);
        if (s == NULL)
            return NULL;
        if (strchr(s, '/') == NULL) {
            Py_INCREF(o_shared);
            return o_shared;
        }
    }
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
    /* name -> the weak references of its live objects, oldest first: limiters() shows the
     * newest one alive (a newer one dropped leaves the older one shown, not the name gone) */
    PyObject *refs = PyDict_GetItemWithError(st->registry, name); /* borrowed */
    if (refs == NULL) {
        if (PyErr_Occurred() || (refs = PyList_New(0)) == NULL)
            return -1;
        int rc = PyDict_SetItem(st->registry, name, refs);
        Py_DECREF(refs); /* the dict holds it */
        if (rc < 0)
            return -1;
    } else if (prune_refs(refs) < 0) {
        return -1;
    }
    PyObject *ref = PyWeakref_NewRef(obj, NULL);
    if (ref == NULL)
        return -1;
    int rc = PyList_Append(refs, ref);
    Py_DECREF(ref);
    return rc;
}

/* slidewin._core.limiters() -> dict[str, object]: the live named objects of this process (of
 * a name held by several, the newest); names left without a live object are forgotten */
PyObject *mod_limiters(PyObject *m, PyObject *Py_UNUSED(unused))
{
    module_state *st = (module_state *)PyModule_GetState(m);
    PyObject *out = PyDict_New(), *items = NULL;
    if (out == NULL)
        return NULL;
    items = PyDict_Items(st->registry);
    if (items == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *it = PyList_GET_ITEM(items, i);
        PyObject *name = PyTuple_GET_ITEM(it, 0), *refs = PyTuple_GET_ITEM(it, 1);
        Py_ssize_t n = prune_refs(refs);
        if (n < 0)
            goto fail;
        if (n == 0) {
            if (PyDict_DelItem(st->registry, name) < 0)
                goto fail;
            continue;
        }
        PyObject *obj;
        if (ref_target(PyList_GET_ITEM(refs, n - 1), &obj) < 0)
            goto fail;
        int bad = obj != NULL && PyDict_SetItem(out, name, obj) < 0;
        Py_XDECREF(obj);
        if (bad)
            goto fail;
    }
    Py_DECREF(items);
    return out;
fail:
    Py_XDECREF(items);
    Py_DECREF(out);
    return NULL;
}

/* ---- totals ---------------------------------------------------------------------------- */

PyObject *totals_dict(const struct sw_totals *t)
{
    return Py_BuildValue("{sLsLsLsLsLsLsL}", "pass", (long long)t->pass, "block",
                         (long long)t->block, "exception", (long long)t->exception, "success",
                         (long long)t->success, "occupied_pass", (long long)t->occupied_pass,
                         "rt", (long long)t->rt, "shadow_block", (long long)t->shadow_block);
}

/* ---- read_region ----------------------------------------------------------------------- */

static const char *const kind_names[] = {"", "metric", "limiter", "keyed", "breaker"};

/* A read-only snapshot of a region: the header and the statistics, copied. */
struct peek {
    struct sw_shm_header hdr;
    unsigned char *copy;   /* the state's first `copied` bytes (limiter, Metric) or the node
                              (keyed) */
    size_t copied;
    bool hot_ok;           /* limiter: the copy's hot[] goes with its heads (sw_lstate_copy) */
    uint32_t waiters;
    struct sw_kstate khdr; /* keyed: the table's header */
};

static int peek_fail(const char *msg, const char *path)
{
    PyErr_Format(PyExc_ValueError, "%s: %s", path, msg);
    return -1;
}

/* Read exactly len bytes at off (a file that shrinks under us gives a short read, never a
 * SIGBUS as a mapping would). @return 0, or -1 on a short read or an error */
static int pread_all(int fd, void *buf, size_t len, off_t off)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t got = pread(fd, p, len, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        len -= (size_t)got;
        off += got;
    }
    return 0;
}

struct pread_at {
    int fd;
    off_t base;
};

static int pread_cb(void *ctx, size_t off, size_t len, void *dst)
{
    const struct pread_at *at = ctx;
    return pread_all(at->fd, dst, len, at->base + (off_t)off);
}

/* Read path (pread, never mapped: it may shrink or change under us), check it and copy what
 * the read needs. @return 0, or -1 with an exception set (ValueError for anything that is
 * not a good region, OSError otherwise) */
static int peek_region(const char *path, struct peek *pk)
{
    struct sw_shm_error err;
    size_t size = 0;
    int rc = -1;
    memset(pk, 0, sizeof *pk);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ELOOP) {
            peek_fail("a symbolic link, not a slidewin region", path);
            return -1;
        }
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        peek_fail("not a regular file, not a slidewin region", path);
        goto done;
    }
    /* only this user's regions (the opened file's owner, not the path's: no race): another
     * user's file in a shared folder such as /dev/shm is not ours to report */
    if (sb.st_uid != geteuid()) {
        char msg[600];
        snprintf(msg, sizeof msg, "%.400s belongs to uid %lu, not to this process's uid %lu: "
                 "observers read only the regions of their own user", path,
                 (unsigned long)sb.st_uid, (unsigned long)geteuid());
        PyObject *args = Py_BuildValue("(is)", EACCES, msg);
        if (args != NULL) {
            PyErr_SetObject(PyExc_PermissionError, args);
            Py_DECREF(args);
        }
        goto done;
    }
    if ((uint64_t)sb.st_size < sizeof(struct sw_shm_header) || sb.st_size > (off_t)1 << 42) {
        peek_fail("not a slidewin shared region (its size)", path);
        goto done;
    }
    size = (size_t)sb.st_size;
    /* everything below reads copies: the file may change under us */
    if (pread_all(fd, &pk->hdr, sizeof pk->hdr, 0) != 0) {
        peek_fail("truncated while being read", path);
        goto done;
    }
    if (sw_shm_check_header(&pk->hdr, size, path, &err) != SW_OK) {
        PyErr_SetString(PyExc_ValueError, err.msg);
        goto done;
    }
    struct sw_shm_header *h = &pk->hdr;
    pk->waiters = atomic_load_explicit(&h->waiters, memory_order_relaxed);
    off_t state_off = (off_t)h->off_state;
    if (h->kind == SW_KIND_LIMITER) {
        size_t need = sw_lstate_size(h->interval_ms, h->sample_count);
        if (need == 0 || need != h->state_size || h->max_keys != 0 || h->n_events != 0) {
            peek_fail("a damaged limiter region (its layout)", path);
            goto done;
        }
        pk->copied = need;
    } else if (h->kind == SW_KIND_BREAKER) {
        size_t need = sw_bstate_size(h->interval_ms, h->sample_count);
        if (need == 0 || need != h->state_size || h->max_keys != 0 || h->n_events != 0) {
            peek_fail("a damaged Breaker region (its layout)", path);
            goto done;
        }
        pk->copied = need;
    } else if (h->kind == SW_KIND_KEYED) {
        size_t total = sw_keyed_size(h->interval_ms, h->sample_count, h->max_keys, true);
        if (total == 0 || total != h->state_size) {
            peek_fail("a damaged KeyedLimiter region (its layout)", path);
            goto done;
        }
        if (pread_all(fd, &pk->khdr, sizeof pk->khdr, state_off) != 0) {
            peek_fail("truncated while being read", path);
            goto done;
        }
        if (sw_keyed_validate_header(&pk->khdr, total, h->interval_ms, h->sample_count,
                                     h->max_keys, true) != SW_OK) {
            peek_fail("a damaged KeyedLimiter region (its table)", path);
            goto done;
        }
        size_t nsz = sw_keyed_node_size(h->interval_ms, h->sample_count);
        if (nsz == 0 || pk->khdr.off_node > total || nsz > total - pk->khdr.off_node) {
            peek_fail("a damaged KeyedLimiter region (its node)", path);
            goto done;
        }
        state_off += (off_t)pk->khdr.off_node;
        pk->copied = nsz;
    } else {
        struct sw_leap_cfg cfg = {h->interval_ms, h->sample_count,
                                  h->n_events ? h->n_events : SW_EV_DEFAULT_COUNT,
                                  h->n_events == 0};
        bool eventual = h->consistency == SW_CONSISTENCY_EVENTUAL;
        size_t lsz = sw_leap_check(&cfg) != SW_OK ? 0
                     : eventual                   ? sw_evleap_size(&cfg)
                                                  : sw_leap_size(&cfg);
        if (lsz == 0 || sizeof(struct metric_mem) + lsz != h->state_size) {
            peek_fail("a damaged Metric region (its layout)", path);
            goto done;
        }
        pk->copied = (size_t)h->state_size;
    }
    pk->copy = PyMem_RawMalloc(pk->copied);
    if (pk->copy == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (h->kind == SW_KIND_LIMITER) {
        /* copied while no other process moves a head bucket (see sw_lstate_copy) */
        struct pread_at at = {fd, state_off};
        if (sw_lstate_copy((struct sw_lstate *)(void *)pk->copy, pk->copied, pread_cb, &at,
                           16u, &pk->hot_ok) != 0) {
            peek_fail("truncated while being read", path);
            goto done;
        }
    } else if (pread_all(fd, pk->copy, pk->copied, state_off) != 0) {
        peek_fail("truncated while being read", path);
        goto done;
    }
    rc = 0;
done:
    close(fd);
    if (rc < 0) {
        PyMem_RawFree(pk->copy);
        pk->copy = NULL;
    }
    return rc;
}

/* Check and repair the copy; fill the statistics. @return 0, or -1 with ValueError */
static int peek_node_stats(struct peek *pk, const char *path, int64_t now, struct sw_stats *s,
                           struct sw_totals *t, long long *adaptive_limit)
{
    const struct sw_shm_header *h = &pk->hdr;
    struct sw_node *node;
    if (h->kind == SW_KIND_LIMITER) {
        struct sw_lstate *st = (struct sw_lstate *)(void *)pk->copy;
        if (sw_lstate_validate(st, pk->copied, h->interval_ms, h->sample_count) != SW_OK)
            return peek_fail("a damaged limiter region (its state)", path);
        node = sw_lstate_node(st);
        sw_node_repair(node);
        sw_lstate_settle_copy(st, pk->hot_ok); /* the counts on the lock's line, into the node */
    } else {
        node = (struct sw_node *)(void *)pk->copy;
        if (sw_keyed_node_validate(node, h->interval_ms, h->sample_count) != SW_OK)
            return peek_fail("a damaged KeyedLimiter region (its statistics)", path);
    }
    sw_node_repair(node);
    sw_node_stats(node, now, s);
    sw_node_totals(node, t);
    /* an AdaptiveLimiter's learned limit (sw_adapt.h), once one has decided on the region;
     * input like the rest: a value outside [1, SW_ADAPT_MAX_LIMIT] is left out */
    *adaptive_limit = -1;
    if (h->kind == SW_KIND_LIMITER && (node->adapt.flags & SW_ADAPT_PHASE) != SW_ADAPT_FRESH) {
        float l = node->adapt.limit;
        if (l >= 1.0f && l <= (float)SW_ADAPT_MAX_LIMIT)
            *adaptive_limit = (long long)l;
    }
    return 0;
}

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

/* read_region(path, *, now_ns=None) -> dict */
PyObject *mod_read_region(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = {"path", "now_ns"};
    PyObject *a[2] = {NULL, NULL};
    char path[4096];
    int64_t now;
    if (parse_fast("read_region", args, nargs, kwnames, names, 2, 1, a) < 0 ||
        parse_now(a[1], &now) < 0)
        return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "read_region() missing required argument 'path'");
        return NULL;
    }
    PyObject *fs = NULL;
    if (!PyUnicode_Check(a[0])) {
        if (!PyUnicode_FSDecoder(a[0], &fs))
            return NULL;
    } else {
        fs = a[0];
        Py_INCREF(fs);
    }
    int mode = shared_resolve(fs, path, sizeof path);
    Py_DECREF(fs);
    if (mode < 0)
        return NULL;
    if (mode != 2) {
        PyErr_SetString(PyExc_TypeError, "read_region() takes a region's name or path (str)");
        return NULL;
    }
    struct peek pk;
    if (peek_region(path, &pk) < 0)
        return NULL;
    if (now == SW_NOW)
        now = sw_time_coarse_ns();
    const struct sw_shm_header *h = &pk.hdr;
    PyObject *out = NULL, *window = NULL, *totals = Py_None, *name = NULL, *file = NULL;
    Py_INCREF(Py_None);
    long long in_flight = 0, keys = -1, evicted = -1, adaptive_limit = -1;
    const char *bstate = NULL;
    if (h->kind == SW_KIND_BREAKER) {
        PyObject *bt = NULL;
        int brc = breaker_peek(pk.copy, pk.copied, h->interval_ms, h->sample_count, now,
                               &window, &bt, &bstate);
        if (brc > 0)
            peek_fail("a damaged Breaker region (its state)", path);
        if (brc != 0)
            goto fail;
        Py_SETREF(totals, bt);
    } else if (h->kind == SW_KIND_METRIC) {
        struct metric_mem *mem = (struct metric_mem *)(void *)pk.copy;
        struct sw_leap *l = (struct sw_leap *)(void *)mem->leap;
        struct sw_evleap *evl = (struct sw_evleap *)(void *)mem->leap;
        struct sw_leap_cfg ecfg = {h->interval_ms, h->sample_count,
                                   h->n_events ? h->n_events : SW_EV_DEFAULT_COUNT,
                                   h->n_events == 0};
        bool eventual = h->consistency == SW_CONSISTENCY_EVENTUAL;
        if (eventual ? !sw_evleap_layout_ok(evl, &ecfg) :
            l->interval_ms != h->interval_ms || l->sample_count != h->sample_count ||
            l->n_events != (h->n_events ? h->n_events : SW_EV_DEFAULT_COUNT) ||
            l->has_rt != (h->n_events == 0) || l->window_ms != h->interval_ms / h->sample_count ||
            l->stride != SW_SLOT_COUNTS + l->n_events || !sw_leap_indices_ok(l)) {
            peek_fail("a damaged Metric region (its window)", path);
            goto fail;
        }
        int64_t t = 0;
        if (!eventual) {
            sw_leap_repair(l);
            t = sw_leap_clamp(l, sw_ms_of_ns(now));
        }
        window = PyDict_New();
        if (window == NULL)
            goto fail;
        const char *ev = h->events;
        uint32_t off = 0;
        for (uint32_t e = 0; e < ecfg.n_events; e++) {
            PyObject *k;
            if (h->n_events == 0) {
                k = PyUnicode_FromString(default_event_names[e]);
            } else {
                size_t len = off < h->events_len ? strnlen(ev + off, h->events_len - off) : 0;
                k = PyUnicode_DecodeUTF8(ev + off, (Py_ssize_t)len, "replace");
                off += (uint32_t)len + 1u;
            }
            int64_t sum = 0;
            if (eventual)
                (void)sw_evleap_read(evl, SW_READ_SUM, e, now, &sum);
            else
                sum = sw_leap_sum(l, NULL, e, t);
            PyObject *v = PyLong_FromLongLong(sum);
            int bad = k == NULL || v == NULL || PyDict_SetItem(window, k, v) < 0;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (bad)
                goto fail;
        }
        if (h->n_events == 0) {
            int64_t m = SW_MIN_RT_INIT;
            if (eventual)
                (void)sw_evleap_rt(evl, now, &m, NULL, NULL);
            else
                m = sw_leap_min_rt(l, NULL, t);
            PyObject *v = PyLong_FromLongLong(m);
            if (v == NULL || PyDict_SetItemString(window, "min_rt", v) < 0) {
                Py_XDECREF(v);
                goto fail;
            }
            Py_DECREF(v);
        }
    } else {
        struct sw_stats s;
        struct sw_totals tt;
        if (peek_node_stats(&pk, path, now, &s, &tt, &adaptive_limit) < 0)
            goto fail;
        Py_SETREF(totals, totals_dict(&tt));
        if (totals == NULL)
            goto fail;
        window = Py_BuildValue("{sLsLsLsLsLsLsLsL}", "pass", (long long)s.pass, "block",
                               (long long)s.block, "success", (long long)s.success, "exception",
                               (long long)s.exception, "rt", (long long)s.rt_sum,
                               "occupied_pass", (long long)s.occupied_pass, "min_rt",
                               (long long)s.min_rt, "waiting", (long long)s.waiting);
        if (window == NULL)
            goto fail;
        in_flight = s.in_flight;
        if (h->kind == SW_KIND_KEYED) {
            keys = pk.khdr.n_live;
            evicted = pk.khdr.evicted < 0 ? 0 : pk.khdr.evicted;
        }
    }
    name = region_name(h, path);
    file = PyUnicode_DecodeFSDefault(path);
    if (name == NULL || file == NULL)
        goto fail;
    out = Py_BuildValue("{sssOsOsIsLsIsIsOsOsLsIsLsL}", "kind", kind_names[h->kind], "name",
                        name, "path", file, "version", h->version, "interval_ms",
                        (long long)h->interval_ms, "sample_count", h->sample_count, "max_keys",
                        h->max_keys, "totals", totals, "window", window, "in_flight",
                        in_flight, "waiters", pk.waiters, "now_ns", (long long)now,
                        "created_unix_ns", (long long)h->created_unix_ns);
    if (out == NULL)
        goto fail;
    if (adaptive_limit >= 0) {
        PyObject *v = PyLong_FromLongLong(adaptive_limit);
        int bad = v == NULL || PyDict_SetItemString(out, "adaptive_limit", v) < 0;
        Py_XDECREF(v);
        if (bad)
            goto fail;
    }
    if (bstate != NULL) {
        PyObject *sv = PyUnicode_FromString(bstate);
        int bad = sv == NULL || PyDict_SetItemString(out, "state", sv) < 0;
        Py_XDECREF(sv);
        if (bad)
            goto fail;
    }
    if (h->kind == SW_KIND_KEYED) {
        PyObject *k = PyLong_FromLongLong(keys), *e = PyLong_FromLongLong(evicted);
        int bad = k == NULL || e == NULL || PyDict_SetItemString(out, "keys", k) < 0 ||
                  PyDict_SetItemString(out, "evicted", e) < 0;
        Py_XDECREF(k);
        Py_XDECREF(e);
        if (bad)
            goto fail;
    }
    Py_DECREF(name);
    Py_DECREF(file);
    Py_DECREF(window);
    Py_DECREF(totals);
    PyMem_RawFree(pk.copy);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(name);
    Py_XDECREF(file);
    Py_XDECREF(window);
    Py_XDECREF(totals);
    PyMem_RawFree(pk.copy);
    return NULL;
}

/* A region file found by list_regions: its identity and one of its names. */
struct seen {
    dev_t dev;
    ino_t ino;
    char *path;
};

/* By file, then name: the names of one file next to each other, the first one first. */
static int seen_cmp(const void *pa, const void *pb)
{
    const struct seen *a = pa, *b = pb;
    if (a->dev != b->dev)
        return a->dev < b->dev ? -1 : 1;
    if (a->ino != b->ino)
        return a->ino < b->ino ? -1 : 1;
    return strcmp(a->path, b->path);
}

static void seen_free(struct seen *seen, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(seen[k].path);
    PyMem_RawFree(seen);
}

/* list_regions(folder=None) -> list[str]: the region files `slidewin-*` of a folder
 * (SLIDEWIN_SHM_DIR or /dev/shm) whose header is a current slidewin region's, owned by this
 * process's effective uid; a file with several names (hard links) once, by its first name */
PyObject *mod_list_regions(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"folder"};
    PyObject *a[1] = {NULL};
    if (parse_fast("list_regions", args, nargs, kwnames, names, 1, 1, a) < 0)
        return NULL;
    PyObject *fs = NULL;
    char dir[4096];
    if (a[0] == NULL || a[0] == Py_None) {
        const char *d = getenv("SLIDEWIN_SHM_DIR");
        snprintf(dir, sizeof dir, "%s", (d != NULL && d[0] != '\0') ? d : sw_platform_shm_dir());
    } else {
        if (!PyUnicode_FSConverter(a[0], &fs))
            return NULL;
        if ((size_t)PyBytes_GET_SIZE(fs) >= sizeof dir) {
            Py_DECREF(fs);
            PyErr_SetString(PyExc_ValueError, "list_regions: the folder's path is too long");
            return NULL;
        }
        snprintf(dir, sizeof dir, "%s", PyBytes_AS_STRING(fs));
        Py_DECREF(fs);
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    DIR *dp = opendir(dir);
    if (dp == NULL) {
        Py_DECREF(out);
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, dir);
        return NULL;
    }
    struct seen *seen = NULL;
    size_t n_seen = 0, cap_seen = 0;
    uid_t me = geteuid();
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        if (strncmp(de->d_name, "slidewin-", 9) != 0 || de->d_name[9] == '\0')
            continue;
        char path[4096 + 256];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
        if (fd < 0)
            continue;
        struct stat sb;
        struct sw_shm_header hdr;
        struct sw_shm_error err;
        bool ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == me &&
                  (uint64_t)sb.st_size >= sizeof hdr &&
                  pread(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr &&
                  sw_shm_check_header(&hdr, (size_t)sb.st_size, path, &err) == SW_OK;
        close(fd);
        if (!ok)
            continue;
        if (n_seen == cap_seen) {
            size_t nc = cap_seen ? 2 * cap_seen : 16;
            struct seen *ns = PyMem_RawRealloc(seen, nc * sizeof *seen);
            if (ns == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            seen = ns;
            cap_seen = nc;
        }
        seen[n_seen].dev = sb.st_dev;
        seen[n_seen].ino = sb.st_ino;
        seen[n_seen].path = strdup(path);
        if (seen[n_seen].path == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        n_seen++;
    }
    closedir(dp);
    dp = NULL;
    if (n_seen > 0)
        qsort(seen, n_seen, sizeof *seen, seen_cmp);
    for (size_t k = 0; k < n_seen; k++) {
        if (k > 0 && seen[k].dev == seen[k - 1].dev && seen[k].ino == seen[k - 1].ino)
            continue; /* another name of the same file */
        PyObject *p = PyUnicode_DecodeFSDefault(seen[k].path);
        if (p == NULL || PyList_Append(out, p) < 0) {
            Py_XDECREF(p);
            goto fail;
        }
        Py_DECREF(p);
    }
    seen_free(seen, n_seen);
    if (PyList_Sort(out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
fail:
    if (dp != NULL)
        closedir(dp);
    seen_free(seen, n_seen);
    Py_DECREF(out);
    return NULL;
}
