/* keyed.c - the C base of slidewin.KeyedLimiter: one limit per key in a bounded table. Keys
 * are hashed (keyed_args.c) before the table's lock is taken. */
#include "keyed.h"
#include "entry.h"
#include "limiting_ops.h"
#include "args.h"
#include "observe.h"
#include "shared.h"
#include "wakers.h"

#include "sw_group.h"

#include <sys/mman.h>

#define DEFAULT_MAX_KEYS 65536

/* A release of key fp (has_fp 0: of any key): waiting threads and tasks are woken. */
static void keyed_notify(KeyedObject *self, int has_fp, uint64_t fp)
{
    PyObject *arg = NULL;
    PyObject *w = waker_get((PyObject *)self, &self->waker);
    if (w != NULL) {
        arg = has_fp ? PyLong_FromUnsignedLongLong(fp) : NULL;
        if (arg == NULL) {
            if (has_fp) /* no memory for the int: wake every key's queue instead */
                PyErr_WriteUnraisable(w);
            arg = Py_NewRef(Py_None);
        }
        Py_DECREF(w);
    }
    limiting_notify((PyObject *)self, arg);
    Py_XDECREF(arg);
}

/* The overrides dict (a new reference) under cfg_mu; with cfg, the same snapshot's settings */
static PyObject *overrides_get(KeyedObject *self, struct sw_limiter_cfg *cfg, uint64_t *gen)
{
    pthread_mutex_lock(&self->cfg_mu);
    PyObject *over = self->overrides;
    Py_XINCREF(over);
    if (cfg != NULL) {
        *cfg = self->cfg;
        *gen = self->settings_gen;
    }
    pthread_mutex_unlock(&self->cfg_mu);
    return over;
}
/* update()'s swap under both locks: the rule's base (when given), the overrides (the old
 * ones handed back, freed after the unlock) */
struct keyed_install {
    const struct sw_krule *rule; /* or NULL: kept */
    struct overrides *ov;        /* in: the new ones; out: the old ones */
};

static void keyed_apply(PyObject *obj, void *arg)
{
    KeyedObject *self = (KeyedObject *)obj;
    struct keyed_install *in = arg;
    struct overrides old = {self->over, 0, self->overrides};
    if (in->rule != NULL)
        self->rule.base = in->rule->base;
    self->over = in->ov->arr;
    self->rule.over = in->ov->n > 0 ? in->ov->arr : NULL;
    self->rule.n_over = in->ov->n;
    self->overrides = in->ov->copy;
    *in->ov = old;
}

/* limiting_install of the rule (when given), the overrides (owned: what they replace is
 * freed after the unlock), cfg and rate. @return 0 installed, 1 changed meanwhile */
static int install_settings(KeyedObject *self, const struct sw_krule *rule,
                            const struct sw_limiter_cfg *cfg, struct overrides *ov,
                            uint64_t gen, PyObject **rate)
{
    struct keyed_install in = {rule, ov};
    int rc = limiting_install((PyObject *)self, gen, cfg, keyed_apply, &in, rate);
    keyed_overrides_free(ov); /* the replaced ones, or (changed meanwhile) the new ones */
    return rc;
}

/* Check and install per-key thresholds (also the setter: del is None). @return 0, or -1 */
static int set_overrides(KeyedObject *self, PyObject *value, void *Py_UNUSED(c))
{
    for (;;) {
        struct sw_limiter_cfg cfg;
        uint64_t gen;
        struct overrides ov;
        limiting_settings((PyObject *)self, &cfg, &gen);
        if (keyed_build_overrides(&cfg, seed_of(self), value, &ov) < 0)
            return -1;
        if (install_settings(self, NULL, NULL, &ov, gen, NULL) == 0)
            return 0;
    }
}

/* Warm-up is not per key. @return 0, or -1 with ValueError set */
static int keyed_check_behavior(const struct sw_limiter_cfg *cfg)
{
    if (cfg->behavior != SW_WARM_UP && cfg->behavior != SW_WARM_UP_THROTTLE)
        return 0;
    PyErr_Format(PyExc_ValueError, "behavior='%s' is not supported per key: a KeyedLimiter "
                 "uses 'reject' or 'throttle' (with qps), or concurrency",
                 behavior_names[cfg->behavior]);
    return -1;
}

static const struct limiting_ops keyed_ops;

/* A large table is read at random: transparent huge pages spare a TLB miss per decision
 * (measured at 1,000,000 keys: about 2.5x a private decision, not 6x). */
static void keyed_huge_pages(void *mem, size_t size)
{
#ifdef MADV_HUGEPAGE
    if (size >= ((size_t)8 << 20)) {
        uintptr_t lo = ((uintptr_t)mem + ((uintptr_t)2 << 20) - 1) & ~(((uintptr_t)2 << 20) - 1);
        uintptr_t hi = ((uintptr_t)mem + size) & ~(((uintptr_t)2 << 20) - 1);
        if (hi > lo)
            (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#else
    (void)mem;
    (void)size;
#endif
}

/* A private table of size bytes, and self's view of it. @return 0, or -1 */
static int keyed_open_private(KeyedObject *self, const struct sw_limiter_cfg *cfg, size_t size)
{
    self->mem = PyMem_RawCalloc(1, size);
    if (self->mem == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    keyed_huge_pages(self->mem, size);
    int rc = sw_keyed_init(self->mem, cfg->interval_ms, cfg->sample_count, self->max_keys, false);
    if (rc != SW_OK) {
        raise_core_error(rc);
        return -1;
    }
    self->view.st = self->mem;
    atomic_store_explicit(&self->seed, self->mem->seed, memory_order_relaxed);
    self->view.rule = &self->rule;
    self->view.token = SW_LOCK_PRIVATE;
    self->view.my_slot = -1; /* slots NULL: tp_alloc zeroed them */
    return fork_register(&self->fork, &self->mem->lock, &self->wq);
}

/* The shared region (created or attached as mode says), self's view of it and its slot.
 * @return 0, or -1 with an exception set */
static int keyed_open_shared(KeyedObject *self, const struct sw_limiter_cfg *cfg, int mode,
                             const char *path, size_t size)
{
    if (region_open(&self->shm, mode, path, &keyed_ops.region, cfg->interval_ms,
                    cfg->sample_count, self->max_keys, SW_SHM_MAX_PROCS, size, self->name) < 0)
        return -1;
    self->is_shared = 1;
    self->view.st = self->shm.state;
    /* the creator's seed, checked (never 0) by sw_keyed_region_check; it never changes after */
    atomic_store_explicit(&self->seed, self->view.st->seed, memory_order_relaxed);
    self->view.rule = &self->rule;
    self->view.token = SW_LOCK_PROCESS;
    self->view.slots = self->shm.slots;
    self->view.n_slots = self->shm.n_slots;
    self->view.held = &self->held;
    if (limiting_claim((PyObject *)self) < 0)
        return -1;
    self->shm.hdr->next_reap_ms = 0;
    (void)limiting_maybe_reap((PyObject *)self);
    fork_register_shared(&self->fork); /* found by the others' keyed_others */
    return 0;
}

static PyObject *Keyed_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    struct sw_limiter_cfg cfg;
    PyObject *v[CTOR_N], *name = NULL;
    char path[4096];
    module_state *st = state_for_new(type);
    if (st == NULL ||
        limiter_parse_cfg_as("KeyedLimiter", args, kwds, CTOR_N, &cfg, v) < 0 ||
        keyed_check_behavior(&cfg) < 0)
        return NULL;
    PyObject *o_max = v[CTOR_MAX_KEYS], *o_over = v[CTOR_OVERRIDES];
    int64_t max_keys = DEFAULT_MAX_KEYS;
    if (o_max != NULL && o_max != Py_None &&
        as_int64(o_max, "max_keys", 1, (int64_t)SW_KEYED_MAX_KEYS, &max_keys) < 0)
        return NULL;
    int name_given;
    int mode = shared_and_name(v[CTOR_SHARED], v[CTOR_NAME], path, sizeof path, &name,
                               &name_given);
    if (mode < 0)
        goto fail0;
    size_t size = sw_keyed_size(cfg.interval_ms, cfg.sample_count, (uint32_t)max_keys,
                                mode != 0);
    if (size == 0) {
        PyErr_Format(PyExc_ValueError, "max_keys=%lld with sample_count=%u needs a table above "
                     "1 TiB; use fewer keys or fewer buckets", (long long)max_keys,
                     cfg.sample_count);
        goto fail0;
    }
    KeyedObject *self = (KeyedObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto fail0;
    self->max_keys = (uint32_t)max_keys;
    PyObject *shared = Py_NewRef(mode == 0 ? Py_None : v[CTOR_SHARED]);
    int init = limiting_init((PyObject *)self, &keyed_ops, st, &cfg, &self->view,
                             &self->view.my_slot, name, name_given, shared);
    self->fork.kind = FORK_KIND_KEYED;
    if (init < 0)
        goto fail;
    int rc = sw_krule_init(&self->rule, &cfg);
    if (rc != SW_OK) {
        raise_core_error(rc);
        goto fail;
    }
    /* the overrides checked before a region is created or attached (their fingerprints
     * need the table's seed: built again below) */
    struct overrides ov0;
    if (keyed_build_overrides(&cfg, 1, o_over, &ov0) < 0)
        goto fail;
    keyed_overrides_free(&ov0);
    if ((mode == 0 ? keyed_open_private(self, &cfg, size)
                   : keyed_open_shared(self, &cfg, mode, path, size)) < 0 ||
        set_overrides(self, o_over, NULL) < 0 || registry_add(st, self->name, (PyObject *)self) < 0)
        goto fail;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
fail0:
    Py_XDECREF(name);
    return NULL;
}

/* What the other live objects of this process hold of a key on self's region (under the
 * table's lock, which the caller holds). */
struct keyed_of_key {
    const KeyedObject *me;
    uint64_t fp;
};

static int64_t held_of_key(const struct fork_link *l, const void *ctx)
{
    const struct keyed_of_key *k = ctx;
    const KeyedObject *o =
        (const KeyedObject *)limiting_same_region(l, (PyObject *)(uintptr_t)k->me);
    return o != NULL ? sw_kheld_get(&o->held, k->fp) : 0;
}

static int64_t keyed_others(uint64_t fp, void *ctx)
{
    struct keyed_of_key k = {ctx, fp};
    return fork_sum(held_of_key, &k);
}

static int keyed_key_fp(PyObject *self, PyObject *key, uint64_t *fp)
{
    return key_fp(seed_of((KeyedObject *)self), key, fp);
}

/* no borrowing per key: prioritized is ignored */
static int keyed_decide(PyObject *self, uint64_t fp, int64_t n, int64_t now_ns, unsigned flags,
                        struct sw_decision *d)
{
    return sw_keyed_decide(kview((KeyedObject *)self), fp, n, now_ns, flags & ~SW_F_PRIORITIZED,
                           d);
}

LIMITING_VIEW_OPS(keyed, sw_keyed_reap, sw_keyed_lock_or_give_up, sw_keyed_lock, sw_keyed_unlock,
                  sw_keyed_count_shadow_block, sw_keyed_count, sw_keyed_totals)

static void keyed_stats(const void *view, int64_t now_ns, struct sw_stats *out,
                        int64_t *evicted)
{
    int64_t keys;
    sw_keyed_stats(view, now_ns, out, evicted, &keys);
    out->waiting = 0; /* no throttle queue and no borrowing per key */
    out->occupied_pass = 0;
}

static bool keyed_holds(PyObject *self)
{
    return ((KeyedObject *)self)->held.n > 0;
}

static int64_t keyed_give_back_locked(PyObject *self)
{
    return sw_keyed_give_back_locked(&((KeyedObject *)self)->view, keyed_others, self);
}

static void keyed_forget_held(PyObject *self)
{
    sw_kheld_clear(&((KeyedObject *)self)->held);
}

static void keyed_give_back(PyObject *self, uint64_t fp, int64_t n)
{
    sw_keyed_exit(kview((KeyedObject *)self), fp, n, 0, SW_OUT_NONE, SW_NOW);
    keyed_notify((KeyedObject *)self, 1, fp);
}

static int keyed_entry_finish(PyObject *e, int64_t rt, int outcome)
{
    KeyedEntryObject *self = (KeyedEntryObject *)e;
    return keyed_group_exit((PyObject *)self->lim, self->fp, self->n, rt / NS_PER_MS, outcome);
}

static void keyed_free_own(PyObject *obj)
{
    KeyedObject *self = (KeyedObject *)obj;
    Py_CLEAR(self->overrides);
    PyMem_Free(self->over);
    self->over = NULL;
    PyMem_RawFree(self->mem);
    self->mem = NULL;
}

/* repr's own parts: max_keys (when not the default), the overrides (when any) */
static int keyed_repr_own(PyObject *obj, PyObject *parts)
{
    KeyedObject *self = (KeyedObject *)obj;
    PyObject *over = overrides_get(self, NULL, NULL);
    int rc = 0;
    if ((self->max_keys != DEFAULT_MAX_KEYS &&
         repr_add(parts, PyUnicode_FromFormat("max_keys=%u", self->max_keys)) < 0) ||
        (over != NULL && PyDict_GET_SIZE(over) > 0 &&
         repr_add(parts, PyUnicode_FromFormat("overrides=%R", over)) < 0))
        rc = -1;
    Py_XDECREF(over);
    return rc;
}

_Static_assert(offsetof(KeyedObject, head) == offsetof(LimitingObject, head), "head first");
static const struct limiting_ops keyed_ops = {
    {SW_KIND_KEYED, sw_keyed_region_init, sw_keyed_region_check, sw_keyed_region_lock},
    keyed_key_fp, keyed_decide, keyed_reap, keyed_lock, keyed_unlock, keyed_count_block,
    keyed_count, keyed_stats, keyed_totals,
    keyed_holds, keyed_give_back_locked, keyed_forget_held, keyed_free_own, keyed_repr_own,
    keyed_give_back, keyed_group_charge, keyed_entry_finish,
    {"an entry can be entered only once: this one has exited; make a new one per request with "
     "per_key.entry(key)",
     "an entry can be entered only once: this one is already entered"},
};

/* ---- what a group (group.c, slidewin.all_of) needs of a KeyedLimiter --------------------- */

int keyed_group_member(PyObject *keyed, PyObject *key, uint64_t *fp, uint64_t order[2],
                       int *shared)
{
    KeyedObject *self = (KeyedObject *)keyed;
    if (key_fp(seed_of(self), key, fp) < 0)
        return -1;
    struct sw_gmember m;
    m.kind = SW_GM_KEYED;
    m.kv = &self->view;
    limiting_group_order(keyed, &m);
    order[0] = m.order[0];
    order[1] = m.order[1];
    *shared = self->is_shared;
    return 0;
}

int keyed_group_exit(PyObject *keyed, uint64_t fp, int64_t n, int64_t rt_ms, int outcome)
{
    KeyedObject *self = (KeyedObject *)keyed;
    if (GAVE_UP(sw_keyed_exit_or_give_up(kview(self), fp, n, rt_ms, outcome, SW_NOW)))
        return SW_EBUSY;
    keyed_notify(self, 1, fp);
    return 0;
}

static PyObject *Keyed_try_acquire(KeyedObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const names[] = {"key", "n", "now_ns"};
    PyObject *a[3];
    int64_t n = 1, now = SW_NOW;
    uint64_t fp;
    struct sw_decision d;
    if (nargs == 1 && kwnames == NULL) {
        a[0] = args[0];
    } else if (parse_fast("try_acquire", args, nargs, kwnames, names, 3, 2, a) < 0 ||
               parse_n(a[1], 1, &n) < 0 || parse_now(a[2], &now) < 0) {
        return NULL;
    }
    if (key_fp(seed_of(self), a[0], &fp) < 0)
        return NULL;
    if (GAVE_UP(sw_keyed_decide(kview(self), fp, n, now, SW_F_TRY, &d)) && lock_gave_up() < 0)
        return NULL;
    if (d.verdict == SW_PASS)
        Py_RETURN_TRUE;
    if (self->is_shared && self->grade == SW_GRADE_CONCURRENCY)
        (void)limiting_maybe_reap((PyObject *)self);
    Py_RETURN_FALSE;
}

static PyObject *Keyed_release(KeyedObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"key", "n"};
    PyObject *a[2];
    int64_t n;
    uint64_t fp;
    if (parse_fast("release", args, nargs, kwnames, names, 2, 2, a) < 0 ||
        parse_n(a[1], 1, &n) < 0 || key_fp(seed_of(self), a[0], &fp) < 0)
        return NULL;
    int rc = sw_keyed_release(kview(self), fp, n);
    if (GAVE_UP(rc)) {
        (void)lock_gave_up_error(); /* the count stays held: the caller may try again */
        return NULL;
    }
    struct sw_limiter_cfg cfg;
    if (rc == SW_ESTATE)
        limiting_settings((PyObject *)self, &cfg, NULL);
    if (rc == SW_ESTATE && cfg.shadow) {
        sw_keyed_exit(kview(self), fp, n, 0, SW_OUT_NONE, SW_NOW); /* as Limiter.release */
        rc = SW_OK;
    }
    if (rc == SW_ESTATE) {
        PyErr_Format(PyExc_ValueError, "release(%R, n=%lld): only %lld in flight for this key",
                     a[0], (long long)n, (long long)sw_keyed_in_flight(kview(self), fp));
        return NULL;
    }
    keyed_notify(self, 1, fp);
    Py_RETURN_NONE;
}

static PyObject *Keyed_in_flight(KeyedObject *self, PyObject *key)
{
    uint64_t fp;
    if (key_fp(seed_of(self), key, &fp) < 0)
        return NULL;
    return PyLong_FromLongLong(sw_keyed_in_flight(kview(self), fp));
}

static Py_ssize_t Keyed_len(KeyedObject *self)
{
    return (Py_ssize_t)sw_keyed_len(kview(self));
}

/* _fingerprint(key, seed=None): the key's fingerprint under seed (default: the table's);
 * tests only (an attacker's computation, the seeds of two tables). */
static PyObject *Keyed_fingerprint(KeyedObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t fp, seed = seed_of(self);
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "_fingerprint(key, seed=None) takes 1 or 2 arguments");
        return NULL;
    }
    if (nargs == 2 && args[1] != Py_None) {
        seed = PyLong_AsUnsignedLongLong(args[1]);
        if (seed == (uint64_t)-1 && PyErr_Occurred())
            return NULL;
    }
    if (key_fp(seed, args[0], &fp) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(fp);
}

/* _set_seed(seed): give an empty private table another seed (tests only: a table whose seed
 * an attacker knows). Not with decisions running in other threads. */
static PyObject *Keyed_set_seed(KeyedObject *self, PyObject *arg)
{
    uint64_t seed = PyLong_AsUnsignedLongLong(arg);
    if (seed == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    if (self->is_shared) {
        PyErr_SetString(PyExc_ValueError, "_set_seed: a shared table keeps its creator's seed");
        return NULL;
    }
    PyObject *cur = overrides_get(self, NULL, NULL);
    int has_over = cur != NULL && PyDict_GET_SIZE(cur) > 0;
    Py_XDECREF(cur);
    if (has_over) {
        PyErr_SetString(PyExc_ValueError, "_set_seed: the table has overrides (their "
                        "fingerprints use the seed)");
        return NULL;
    }
    int rc = sw_keyed_set_seed(kview(self), seed);
    if (rc == SW_EINVAL) {
        PyErr_SetString(PyExc_ValueError, "_set_seed: the seed must not be 0");
        return NULL;
    }
    if (rc != SW_OK) {
        PyErr_SetString(PyExc_ValueError, "_set_seed: the table is not empty");
        return NULL;
    }
    atomic_store_explicit(&self->seed, seed, memory_order_relaxed);
    Py_RETURN_NONE;
}

static PyObject *Keyed_get_overrides(KeyedObject *self, void *Py_UNUSED(c))
{
    PyObject *over = overrides_get(self, NULL, NULL), *copy;
    copy = PyDict_Copy(over);
    Py_DECREF(over);
    return copy;
}

static PyObject *Keyed_update(KeyedObject *self, PyObject *args, PyObject *kwds)
{
    static const char *const settings[] = {UPDATE_CFG_SETTINGS, "overrides", "_rate"};
    static const char *const layout[] = {"interval_ms", "sample_count", "shared", "max_keys",
                                         "name", NULL};
    PyObject *v[10], **rate = NULL, *slot;
    /* as Limiter.update: checked against a snapshot, installed unless it changed meanwhile */
    for (;;) {
        struct sw_limiter_cfg cfg;
        uint64_t gen;
        PyObject *cur = overrides_get(self, &cfg, &gen);
        if (update_parse("KeyedLimiter", args, kwds, settings, v, 10, layout, &cfg, &rate,
                         &slot) < 0 ||
            keyed_check_behavior(&cfg) < 0) {
            Py_XDECREF(cur);
            return NULL;
        }
        struct sw_krule rule;
        int rc = sw_krule_init(&rule, &cfg);
        if (rc != SW_OK) {
            Py_XDECREF(cur);
            return raise_core_error(rc);
        }
        struct overrides ov;
        /* the overrides given, or the current ones checked again against the new settings */
        rc = keyed_build_overrides(&cfg, seed_of(self), v[8] != NULL ? v[8] : cur, &ov);
        Py_XDECREF(cur);
        if (rc < 0)
            return NULL;
        if (install_settings(self, &rule, &cfg, &ov, gen, rate) == 0)
            break;
    }
    keyed_notify(self, 0, 0);
    Py_RETURN_NONE;
}

static PyGetSetDef Keyed_getset[] = {
    {"overrides", (getter)Keyed_get_overrides, (setter)set_overrides,
     "Per-key thresholds (a copy): assign a dict key -> qps (or concurrency) to change them.",
     NULL},
    {"qps", cfg_get_qps, NULL, "The rate per second of each key, or None.", NULL},
    {"concurrency", cfg_get_concurrency, NULL, "The in-flight limit of each key, or None.", NULL},
    {"behavior", cfg_get_behavior, NULL, "The controller of each key.", NULL},
    LIMITING_GETSET,
    {NULL}};

static PyMethodDef Keyed_methods[] = {
    METHOD(totals, limiting_totals, METH_NOARGS, "()", "Lifetime totals of the whole table since creation (monotonic, never reset): a dict with pass, block, exception, success, occupied_pass, rt (ms) and shadow_block (shadow decisions an enforcing limiter would have refused, a part of block)."),
    METHOD(update, Keyed_update, METH_VARARGS | METH_KEYWORDS, "(**settings)", "Change the settings in place (qps, concurrency, behavior, max_queueing_ms, overrides, shadow, ...); the table and every key's state are kept. Shared: this process's settings."),
    METHOD(try_acquire, Keyed_try_acquire, FASTKW, "(key, n=1, *, now_ns=None)", "Admit now or refuse, under this key's own limit; never waits."),
    METHOD(reserve, limiting_reserve, FASTKW, "(key, n=1, *, now_ns=None)", "Admission that may need a wait: the wait in ns (0 = go now), or None when blocked."),
    METHOD(acquire, limiting_acquire_m, FASTKW, "(key, n=1, *, timeout=None)", "Admit, sleeping (GIL released) for a throttle's wait; raise BlockedError on refusal."),
    METHOD(release, Keyed_release, FASTKW, "(key, n=1)", "Give back n in flight of this key."),
    METHOD(charge, limiting_charge, FASTKW, "(key, n, *, now_ns=None)", "Count n more as admitted for key now, without a decision (as Limiter.charge)."),
    METHOD(entry, entry_make, FASTKW, "(key, n=1, *, timeout=None)", "A context manager: acquire for key; on exit record SUCCESS or EXCEPTION, RT, and release. With timeout (s), wait up to that long for admission (woken by releases), as acquire(key, n, timeout=) does."),
    METHOD(in_flight, Keyed_in_flight, METH_O, "(key)", "Requests of this key in flight now."),
    METHOD(stats, limiting_stats, FASTKW, "(now_ns=None)", "The statistics of all keys together (a Stats; .evicted: keys evicted so far)."),
    HIDDEN(_fingerprint, Keyed_fingerprint, METH_FASTCALL),
    HIDDEN(_set_seed, Keyed_set_seed, METH_O),
    LIMITING_METHODS,
    {NULL}};

static PyMemberDef Keyed_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(KeyedObject, weakreflist), READONLY, NULL},
    {"max_keys", T_UINT, offsetof(KeyedObject, max_keys), READONLY,
     "Keys the table holds at most."},
    {NULL}};

TYPE_SPEC(KeyedLimiter, "slidewin._core.KeyedLimiter", KeyedObject, Py_TPFLAGS_BASETYPE,
          {Py_tp_doc, "The C base of slidewin.KeyedLimiter."}, {Py_tp_new, Keyed_new},
          {Py_tp_traverse, traverse_type}, {Py_tp_dealloc, limiting_dealloc},
          {Py_tp_repr, limiting_repr}, TYPE_TABLES(Keyed), {Py_sq_length, Keyed_len},
          {Py_mp_length, Keyed_len});
