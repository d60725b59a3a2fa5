/* limiting_ops.h - the operations table of the limiter types (limiter.c, keyed.c) and what is
 * written once over it and their head (LIMITING_HEAD, binding.h). try_acquire and release()
 * call the core directly in each type; an entry's enter and exit go through the table.
 */
#ifndef SW_BINDING_LIMITING_OPS_H
#define SW_BINDING_LIMITING_OPS_H

#include "binding.h"
#include "shared.h"
#include "sw_group.h"
#include "wakers.h"

/* A shared region's state: the layout's kind and callbacks (sw_shm.h). */
struct region_kind {
    uint32_t kind; /* SW_KIND_* */
    int (*init_state)(void *state, const struct sw_shm_layout *lay);
    int (*check_state)(void *state, const struct sw_shm_layout *lay);
    sw_lock *(*state_lock)(void *state);
};

/** Open (or create) the region of shared= (mode 1 anonymous, 2 a file at path); name: the
 * object's (or NULL). @return 0, or -1 with an exception set */
int region_open(struct sw_shm *shm, int mode, const char *path, const struct region_kind *k,
                int64_t interval_ms, uint32_t sample_count, uint32_t max_keys, uint32_t n_slots,
                size_t state_size, PyObject *name);

/* A limiter type's operations on its state, through its view (the head's viewp). */
struct limiting_ops {
    struct region_kind region;
    /* keyed: the key's fingerprint (NULL: no key). @return 0, or -1 with TypeError set */
    int (*key_fp)(PyObject *self, PyObject *key, uint64_t *fp);
    /* one decision (of key fp). @return the core's code (SW_EBUSY: gave up the lock) */
    int (*decide)(PyObject *self, uint64_t fp, int64_t n, int64_t now_ns, unsigned flags,
                  struct sw_decision *d);
    uint32_t (*reap)(const void *view); /* give back dead processes' counts (the GIL free) */
    /* take the state's lock; may_give_up: false when the wait gave up (wait.h) */
    bool (*lock)(const void *view, bool may_give_up);
    void (*unlock)(const void *view);
    /* count a final refusal of n now: BLOCK, or a shadow rule's would-be refusal */
    void (*count_block)(const void *view, int64_t n, bool shadow);
    /* count n of event ev (the whole state's) now */
    void (*count)(const void *view, uint32_t ev, int64_t n);
    void (*stats)(const void *view, int64_t now_ns, struct sw_stats *out, int64_t *evicted);
    void (*totals)(const void *view, struct sw_totals *out);
    /* shared: does the object hold anything to give back when it goes (NULL: maybe) */
    bool (*holds)(PyObject *self);
    /* shared, the lock held: give back what the object holds. @return how much */
    int64_t (*give_back_locked)(PyObject *self);
    /* shared: forget what the object holds (a fork() child's copy: the parent's) */
    void (*forget_held)(PyObject *self);
    /* free the type's own memory (after the head's) */
    void (*free_own)(PyObject *self);
    /* repr: append the type's own parts after the settings' (NULL: none). @return 0 or -1 */
    int (*repr_own)(PyObject *self, PyObject *parts);
    /* give back n in flight (of key fp) counting nothing, and wake the waiters */
    void (*give_back)(PyObject *self, uint64_t fp, int64_t n);
    /* count n more as admitted (of key fp) now, without a decision. @return the core's code */
    int (*charge)(PyObject *self, uint64_t fp, int64_t n, int64_t now_ns);
    /* end an entered entry: count its outcome (rt: ns), give its count back. @return 0, or
     * SW_EBUSY when the wait for the lock gave up (nothing counted, the count still held) */
    int (*entry_finish)(PyObject *entry, int64_t rt, int outcome);
    const char *entry_again[2]; /* a second enter's messages: it has exited, it is entered */
};

/* A type's pfx_reap, pfx_lock, pfx_unlock, pfx_count_block, pfx_count and pfx_totals over the
 * core's. */
#define LIMITING_VIEW_OPS(pfx, core_reap, core_lock_or_give_up, core_lock, core_unlock,         \
                          core_count_shadow_block, core_count, core_totals)                     \
    static uint32_t pfx##_reap(const void *view)                                                \
    {                                                                                           \
        return core_reap(view);                                                                 \
    }                                                                                           \
    static bool pfx##_lock(const void *view, bool may_give_up)                                  \
    {                                                                                           \
        if (may_give_up)                                                                        \
            return core_lock_or_give_up(view);                                                  \
        core_lock(view);                                                                        \
        return true;                                                                            \
    }                                                                                           \
    static void pfx##_unlock(const void *view)                                                  \
    {                                                                                           \
        core_unlock(view);                                                                      \
    }                                                                                           \
    static void pfx##_count_block(const void *view, int64_t n, bool shadow)                     \
    {                                                                                           \
        if (shadow)                                                                             \
            core_count_shadow_block(view, n, SW_NOW);                                           \
        else                                                                                    \
            core_count(view, SW_EV_BLOCK, n, SW_NOW);                                           \
    }                                                                                           \
    static void pfx##_count(const void *view, uint32_t ev, int64_t n)                           \
    {                                                                                           \
        core_count(view, ev, n, SW_NOW);                                                        \
    }                                                                                           \
    static void pfx##_totals(const void *view, struct sw_totals *out)                           \
    {                                                                                           \
        core_totals(view, out);                                                                 \
    }

/** The head's fields every constructor sets first (name and shared stolen). @return 0, or -1
 * with an exception set (the caller DECREFs) */
int limiting_init(PyObject *self, const struct limiting_ops *ops, module_state *st,
                  const struct sw_limiter_cfg *cfg, void *view, int32_t *my_slot,
                  PyObject *name, int name_given, PyObject *shared);

/** Claim this process's slot of a shared state (reaping dead processes when all are taken).
 * @return 0, or -1 with OSError set (all taken by live processes) */
int limiting_claim(PyObject *self);
/** Claim it again in a fork() child (one thread claims, the others wait). */
void limiting_refork(PyObject *self);
/** The view (a forked shared object claims its own slot first). */
static inline void *limiting_view(PyObject *self)
{
    struct limiting_head *h = LIMITING(self);
    if (h->is_shared &&
        atomic_load_explicit(&h->fork_gen, memory_order_acquire) != sw_proc_fork_generation())
        limiting_refork(self);
    return h->viewp;
}

/** A release: wake the threads (shared: the processes) waiting for one, and the asyncio
 * waiter queue with arg (a key's fingerprint, or NULL/None: any). */
static inline void limiting_notify(PyObject *self, PyObject *arg)
{
    struct limiting_head *h = LIMITING(self);
    if (h->is_shared)
        shared_notify(&h->shm);
    else
        waitq_notify(&h->wq);
    PyObject *w = waker_get(self, &h->waker);
    if (w != NULL) {
        waker_call(w, arg);
        Py_DECREF(w);
    }
}

/** Shared: give back dead processes' counts when a reap is due. @return whether any */
bool limiting_maybe_reap(PyObject *self);
/** The other live object of this process on self's region behind fork link l, or NULL
 * (give_back_locked's fork_sum callbacks: what the others hold stays). */
const LimitingObject *limiting_same_region(const struct fork_link *l, PyObject *self);

/** tp_dealloc of a limiter type. */
void limiting_dealloc(PyObject *self);


/** acquire() of n (of key fp; NULL and 0 for a Limiter): timeout_ns < 0, one decision; else
 * retries until the timeout, refused at the end with one BLOCK counted (unless a lock never
 * came). A refusal raises BlockedError. defer_wait: the admitted wait is left in *d, not slept.
 * @return 0 admitted, -1 with an exception set */
int limiting_acquire(PyObject *self, PyObject *key, uint64_t fp, int64_t n, int64_t timeout_ns,
                     unsigned flags, bool defer_wait, struct sw_decision *d);

/** A snapshot of the settings under cfg_mu (never the state's lock). */
void limiting_settings(PyObject *self, struct sw_limiter_cfg *cfg, uint64_t *gen);
/** Install settings checked against the snapshot of generation gen, in one swap under the
 * state's lock (decisions read them under it) and cfg_mu: apply(self, arg) (the type's rule),
 * cfg (unless NULL), *rate (unless rate is NULL); unless another change came in since.
 * @return 0 installed, 1 changed meanwhile (nothing done) */
int limiting_install(PyObject *self, uint64_t gen, const struct sw_limiter_cfg *cfg,
                     void (*apply)(PyObject *self, void *arg), void *arg, PyObject **rate);

/** Which members of all_of() lock first (sw_gmember_order_*: private, or by region). */
void limiting_group_order(PyObject *self, struct sw_gmember *m);

/* Slots and methods alike in both types */
PyObject *limiting_repr(PyObject *self);
/* _decide([key,] n, flags, now_ns) -> (verdict, wait_ns, retry_ns): the asyncio helpers' */
PyObject *limiting_decide_m(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* _raise_blocked([key,] n, verdict, retry_ns) */
PyObject *limiting_raise_blocked_m(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *limiting_totals(PyObject *self, PyObject *unused);       /* totals() */
/* acquire([key,] n=1, *, timeout=None) */
PyObject *limiting_acquire_m(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
/* reserve([key,] n=1, *, now_ns=None[, prioritized=False]) */
PyObject *limiting_reserve(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
/* charge([key,] n, *, now_ns=None) */
PyObject *limiting_charge(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
/* acquire()'s and entry()'s arguments ([key,] n=1, *, timeout=None): a[0] the key (NULL when
 * not keyed), *fp its fingerprint, n, the timeout (ns, -1: none). @return 0, or -1 */
int limiting_parse_acquire(PyObject *self, const char *fname, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames, PyObject **a, uint64_t *fp,
                           int64_t *n, int64_t *timeout);
/* _release_entry([key,] n): give back an entry's count, counting nothing (asyncio cancel) */
PyObject *limiting_release_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *limiting_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames);                      /* stats(now_ns=None) */
PyObject *limiting_count_block(PyObject *self, PyObject *const *args,
                               Py_ssize_t nargs);                 /* _count_block(n, shadow) */
PyObject *limiting_reap_m(PyObject *self, PyObject *unused);       /* _reap() */
PyObject *limiting_set_waker(PyObject *self, PyObject *arg);       /* _set_waker(f) */
PyObject *limiting_watch(PyObject *self, PyObject *arg);           /* _watch(f) */
PyObject *limiting_release_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* Properties of the settings, read from a snapshot */
PyObject *cfg_get_qps(PyObject *self, void *unused);         /* None unless a qps limit */
PyObject *cfg_get_concurrency(PyObject *self, void *unused); /* None unless concurrency */
PyObject *cfg_get_behavior(PyObject *self, void *unused);
PyObject *cfg_get_warm_up_s(PyObject *self, void *unused);
PyObject *cfg_get_cold_factor(PyObject *self, void *unused);
PyObject *cfg_get_max_queueing_ms(PyObject *self, void *unused);
PyObject *cfg_get_occupy_timeout_ms(PyObject *self, void *unused);
PyObject *cfg_get_interval_ms(PyObject *self, void *unused);
PyObject *cfg_get_sample_count(PyObject *self, void *unused);
PyObject *cfg_get_shadow(PyObject *self, void *unused);
/* _rate: the rate string repr shows in place of qps=, or None */
PyObject *limiting_get_rate(PyObject *self, void *unused);
int limiting_set_rate(PyObject *self, PyObject *value, void *unused);

/* The entries of the getset and method tables alike in both types */
#define LIMITING_GETSET                                                                        \
    {"max_queueing_ms", cfg_get_max_queueing_ms, NULL, "Throttle queue, ms.", NULL},           \
        {"interval_ms", cfg_get_interval_ms, NULL, "The window, ms.", NULL},                   \
        {"sample_count", cfg_get_sample_count, NULL, "Buckets in the window.", NULL},          \
        {"shadow", cfg_get_shadow, NULL, "Shadow mode: decides and counts, admits everything.", \
         NULL},                                                                                \
        {"shared", get_object_or_none, NULL, "How it was opened: None (private), True "        \
         "(anonymous), or the region's name or path.", (void *)offsetof(LimitingObject, shared)}, \
        {"name", get_object_or_none, NULL, "The name (name=, else the shared region's name), " \
         "or None.", (void *)offsetof(LimitingObject, name)},                                  \
        {"_rate", limiting_get_rate, limiting_set_rate, NULL, NULL}
#define LIMITING_METHODS                                                                       \
    HIDDEN(_decide, limiting_decide_m, METH_FASTCALL),                                         \
        HIDDEN(_count_block, limiting_count_block, METH_FASTCALL),                             \
        HIDDEN(_raise_blocked, limiting_raise_blocked_m, METH_FASTCALL),                       \
        HIDDEN(_set_waker, limiting_set_waker, METH_O),                                        \
        HIDDEN(_watch, limiting_watch, METH_O),                                                \
        HIDDEN(_release_wait, limiting_release_wait, METH_FASTCALL),                           \
        HIDDEN(_reap, limiting_reap_m, METH_NOARGS),                                           \
        HIDDEN(_release_entry, limiting_release_entry, METH_FASTCALL)

#endif /* SW_BINDING_LIMITING_OPS_H */
