/* keyed.h - KeyedLimiter (keyed.c, keyed_args.c) and its KeyedEntry's object (entry.c). */
#ifndef SW_BINDING_KEYED_H
#define SW_BINDING_KEYED_H

#include "binding.h"
#include "limiting_ops.h"
#include "sw_keyed.h"

#include <stdatomic.h>

extern PyType_Spec KeyedLimiter_spec;

/** A (KeyedLimiter, key) member: the key's fingerprint in the table, the table's lock order
 * (sw_gmember_order_*), whether it is shared. @param keyed a KeyedLimiter (checked by the
 * caller) @return 0, or -1 with TypeError set (the key) */
int keyed_group_member(PyObject *keyed, PyObject *key, uint64_t *fp, uint64_t order[2],
                       int *shared);
/** End a group entry's hold on a key (sw_keyed_exit_or_give_up), then wake the table's
 * waiters. @return 0, or SW_EBUSY when the wait for a shared table's lock gave up (wait.h:
 * nothing counted, the count still held) */
int keyed_group_exit(PyObject *keyed, uint64_t fp, int64_t n, int64_t rt_ms, int outcome);

/* ---- between keyed.c and keyed_args.c ---- */

/** A key's fingerprint under the table's seed (str, bytes, int). @param exc the exception of
 * a wrong type @param what the parameter named in errors @return 0, or -1 with it set */
int keyed_fp_as(uint64_t seed, PyObject *key, uint64_t *out, PyObject *exc, const char *what);
typedef struct {
    PyObject_HEAD
    LIMITING_HEAD;             /* binding.h; rule and overrides as cfg: written under the
                                  table's lock and cfg_mu, read under either */
    struct sw_kstate *mem;     /* owned table (private), or NULL (shared) */
    _Atomic uint64_t seed;     /* the table's hash seed (st->seed: random, read once) */
    uint32_t max_keys;
    struct sw_krule rule;      /* this process's settings; rule.over points into `over` */
    struct sw_kover *over;     /* PyMem-owned, sorted by fp */
    PyObject *overrides;       /* dict key -> threshold, as given (a private copy) */
    struct sw_kview view;
    struct sw_kheld held;      /* shared: what this object holds in flight per key; view.held */
} KeyedObject;

typedef struct {
    ENTRY_HEAD(KeyedObject, lim) /* binding.h */
} KeyedEntryObject;

/* The view decisions go through (a forked shared table claims its slot first). */
static inline const struct sw_kview *kview(KeyedObject *self)
{
    return limiting_view((PyObject *)self);
}

/** The view a decision on the table goes through (group.c). */
static inline const struct sw_kview *keyed_group_view(PyObject *keyed)
{
    return kview((KeyedObject *)keyed);
}
/** sw_keyed_charge on the table. @return its code */
static inline int keyed_group_charge(PyObject *keyed, uint64_t fp, int64_t n, int64_t now_ns)
{
    return sw_keyed_charge(kview((KeyedObject *)keyed), fp, n, now_ns);
}
/** The table's grade (enum sw_grade, as constructed). */
static inline int keyed_group_grade(PyObject *keyed)
{
    return ((KeyedObject *)keyed)->grade;
}
/** A refusal by a shared table: give back dead processes' counts when due. */
static inline void keyed_group_maybe_reap(PyObject *keyed)
{
    (void)limiting_maybe_reap(keyed);
}

static inline int key_fp(uint64_t seed, PyObject *key, uint64_t *out)
{
    if (key == NULL) {
        PyErr_SetString(PyExc_TypeError, "missing required argument 'key'");
        return -1;
    }
    return keyed_fp_as(seed, key, out, PyExc_TypeError, "key");
}

static inline uint64_t seed_of(KeyedObject *self)
{
    return atomic_load_explicit(&self->seed, memory_order_relaxed);
}

/* Per-key thresholds checked against a configuration, ready to install. */
struct overrides {
    struct sw_kover *arr; /* PyMem-owned, sorted by fp, unique */
    uint32_t n;
    PyObject *copy;       /* the dict as given */
};

/** Check per-key thresholds (a Mapping, or None for none) against cfg. @return 0 (out
 * filled, owning), or -1 with an exception set (ValueError naming the key) */
int keyed_build_overrides(const struct sw_limiter_cfg *cfg, uint64_t seed, PyObject *value,
                          struct overrides *out);
void keyed_overrides_free(struct overrides *ov);

#endif /* SW_BINDING_KEYED_H */
