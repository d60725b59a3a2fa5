/* binding.h - shared declarations of the CPython binding (module `slidewin._core`).
 *
 * Layering (.ci/layers.py): this header declares only what binding.c and limiting.c define;
 * a type's own functions and spec go in the type's header (module.c registers the types).
 */
#ifndef SW_BINDING_H
#define SW_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sw_evleap.h"
#include "sw_keyed.h"
#include "sw_limiter.h"
#include "sw_observe.h"
#include "sw_proc.h"
#include "sw_shm.h"
#include "sw_time.h"
#include "args.h" /* and Py_NewRef on 3.9 */
#include "wait.h"

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)

/* A method table's row, its docstring in the form inspect.signature reads; HIDDEN: no doc. */
#define METHOD(name, fn, flags, sig, doc)                                                      \
    {#name, (PyCFunction)(void (*)(void))(fn), flags, #name sig "\n--\n\n" doc}
#define HIDDEN(name, fn, flags) {#name, (PyCFunction)(void (*)(void))(fn), flags, NULL}


#ifndef Py_TPFLAGS_DISALLOW_INSTANTIATION
#define Py_TPFLAGS_DISALLOW_INSTANTIATION 0
#endif

/* A GC type's PyType_Spec `Name_spec` over the slots given; the member table of a type with a
 * weakreflist; TYPE_TABLES(P): the slots of P_methods, P_getset and P_members. */
#define TYPE_SPEC(Name, qualname_, Type, more_flags, ...)                                      \
    static PyType_Slot Name##_slots[] = {__VA_ARGS__, {0, NULL}};                              \
    PyType_Spec Name##_spec = {.name = qualname_, .basicsize = sizeof(Type),                   \
                               .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | (more_flags), \
                               .slots = Name##_slots}
#define WEAKREF_MEMBERS(Name, Type)                                                            \
    static PyMemberDef Name##_members[] = {                                                    \
        {"__weaklistoffset__", T_PYSSIZET, offsetof(Type, weakreflist), READONLY, NULL}, {NULL}}
#define TYPE_TABLES(P)                                                                         \
    {Py_tp_methods, P##_methods}, {Py_tp_getset, P##_getset}, {Py_tp_members, P##_members}

/* Its references are visited and cleared by module.c (STATE_REFS): a new one goes there too. */
typedef struct {
    PyTypeObject *Metric_Type;
    PyTypeObject *Limiter_Type;
    PyTypeObject *Entry_Type;
    PyTypeObject *KeyedLimiter_Type;
    PyTypeObject *KeyedEntry_Type;
    PyTypeObject *Bucket_Type;
    PyTypeObject *Stats_Type;
    PyObject *BlockedError;
    PyObject *default_names; /* tuple of the default event names */
    PyObject *default_map;   /* dict name -> index */
    /* the Python layer's functions, registered by _set_layer() (NULL until then) */
    PyObject *aenter;        /* aenter(owner, entry): the coroutine of entry.__aenter__ */
    PyObject *aexit;         /* aexit(owner, entry, et): the coroutine of entry.__aexit__ */
    PyObject *breaker_tell;  /* breaker_tell(breaker, old, new, value): a change of state */
    PyObject *registry;      /* dict name -> [weakref]: the named objects (limiters()) */
} module_state;

#define BINDING_MODULE_NAME "slidewin._core"

/** The module state of an instance's type (walking up from Python subclasses), or NULL. */
module_state *state_of_type(PyTypeObject *tp);
/** state_of_type for a constructor: NULL with TypeError set when none. */
module_state *state_for_new(PyTypeObject *tp);

/* The start of tp_dealloc of a GC type with weak references. @return its type, to release
 * last */
static inline PyTypeObject *dealloc_start(PyObject *self, PyObject *weakreflist)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (weakreflist != NULL)
        PyObject_ClearWeakRefs(self);
    return tp;
}

/* tp_traverse of a heap type holding no other object: visits its type. */
static inline int traverse_type(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

typedef struct {
    PyObject_HEAD
    struct sw_window win;   /* strong mode (win.leap), and the lock of either mode */
    struct sw_evleap *ev;   /* consistency="eventual": the ring (in mem), else NULL */
    struct sw_metric_mem *mem; /* owned core state (standalone), or NULL for a limiter's view */
    PyObject *owner;        /* the Limiter whose state this views, or NULL */
    PyObject *names;        /* tuple of event names */
    PyObject *name_map;     /* dict name -> index */
    module_state *st;
    struct fork_link fork;  /* standalone only: its lock is reset across fork() */
    struct sw_shm shm;      /* shared=: the region holding mem (base NULL when private) */
    PyObject *shared;       /* None, True, or the name or path it was opened with */
    PyObject *name;         /* name= (or the region's), or NULL */
    int name_given;
    PyObject *weakreflist;
} MetricObject;

/* The head of the limiter types, first after PyObject_HEAD, read by limiting_ops.h through
 * LimitingObject: an anonymous union of the fields themselves (self->shm) and of the same
 * fields as one struct (self->head), so the layout is the same in every type. */
struct limiting_ops;
#define LIMITING_FIELDS                                                                        \
    const struct limiting_ops *ops; /* the type's operations */                               \
    module_state *st;                                                                          \
    /* the settings: written under the state's lock and cfg_mu, read under cfg_mu only (a  \
     * peer stopped holding the region's lock never blocks a getter or a repr) */           \
    struct sw_limiter_cfg cfg;                                                                 \
    uint64_t settings_gen; /* bumped by every change of the settings, under both */           \
    pthread_mutex_t cfg_mu;                                                                    \
    int grade;             /* as constructed: never changes (read without a lock) */          \
    int64_t interval_ms;   /* as constructed: never changes (read without a lock) */          \
    struct waitq wq;       /* threads waiting in acquire() for a release (private) */         \
    struct fork_link fork; /* the core lock and wq, reset across fork() (private) */          \
    PyObject *weakreflist;                                                                     \
    void *viewp;           /* the type's view (struct sw_view, sw_kview) in the object */     \
    int32_t *my_slot;      /* its my_slot */                                                   \
    struct sw_shm shm;     /* shared=: the region (base NULL when private) */                 \
    int is_shared;                                                                             \
    _Atomic uint64_t fork_gen; /* the fork generation my_slot was claimed in */               \
    PyObject *shared;      /* None, True, or the name or path it was opened with */           \
    PyObject *name;        /* name= (or the region's), or NULL */                             \
    int name_given;        /* name= was given (repr shows it) */                              \
    PyObject *waker;       /* the asyncio waiter queue's, called by releases, or NULL */      \
    PyObject *rate;        /* rate= as given (repr shows it in place of qps=), or NULL; set   \
                              with the settings, under cfg_mu */
struct limiting_head {
    LIMITING_FIELDS
};
#define LIMITING_HEAD                                                                          \
    union {                                                                                    \
        struct {                                                                               \
            LIMITING_FIELDS                                                                    \
        };                                                                                     \
        struct limiting_head head;                                                             \
    }
/* Any limiter type, seen through its head. */
typedef struct {
    PyObject_HEAD
    LIMITING_HEAD;
} LimitingObject;
#define LIMITING(o) (&((LimitingObject *)(void *)(o))->head)

typedef struct {
    PyObject_HEAD
    LIMITING_HEAD;
    struct sw_limiter *lim;    /* owned core state (private), or NULL (shared) */
    struct sw_view view;       /* how decisions reach the state: always through this */
    struct sw_rule rule;       /* this process's settings (shared; private: lim->rule) */
    int64_t held;              /* shared: what this object holds in the process's slot */
} LimiterObject;

/* Entry states: each transition is one atomic step (compare-exchange). */
enum entry_state {
    ENTRY_IDLE = 0,     /* made, not entered (also after a refused enter) */
    ENTRY_ENTERING = 1, /* claimed by one __enter__/__aenter__, deciding or queued */
    ENTRY_ENTERED = 2,  /* holding its in-flight count */
    ENTRY_EXITED = 3    /* count given back */
};

/* The head of Entry and KeyedEntry: the owner (named by the type, and as `owner` for the
 * methods written once in entry.c), then the common fields. */
#define ENTRY_HEAD(owner_type, owner_name)                                                     \
    PyObject_HEAD                                                                              \
    union {                                                                                    \
        owner_type *owner_name;                                                                \
        PyObject *owner; /* NULL only after the GC broke a cycle */                            \
    };                                                                                         \
    int64_t n;                                                                                 \
    int64_t start_ns;                                                                          \
    atomic_int state;   /* enum entry_state */                                                 \
    int hollow;         /* shadow mode: admitted although an enforcing limiter would have      \
                           refused; holds nothing, counts nothing on exit */                   \
    int64_t timeout_ns; /* entry(timeout=): how long to wait for admission; -1: none */        \
    PyObject *key;      /* KeyedEntry: the key (fingerprint fp); NULL for an Entry */          \
    uint64_t fp;                                                                               \
    uint64_t fork_gen;  /* when entered: an entry inherited by a fork() child is the parent's */
typedef struct {
    ENTRY_HEAD(PyObject, owner_obj)
} AnyEntryObject;

typedef struct {
    ENTRY_HEAD(LimiterObject, limiter)
} EntryObject;

/* the states' names, by enum entry_state (errors and repr) */
extern const char *const entry_state_names[4];

/* The constructors' keywords, in this order (KeyedLimiter's own last), and where the
 * parsed values of some are */
enum { CTOR_SHARED = 9, CTOR_NAME = 10, CTOR_MAX_KEYS = 12, CTOR_OVERRIDES = 13, CTOR_N = 14 };
extern const char *const ctor_names[CTOR_N];
/** Parse and check the constructor's arguments (the first nnames of ctor_names, named fname
 * in errors) into cfg; v: the values (borrowed; NULL when absent, shared= and name= None).
 * @return 0, or -1 with an exception set */
int limiter_parse_cfg_as(const char *fname, PyObject *args, PyObject *kwds, Py_ssize_t nnames,
                         struct sw_limiter_cfg *cfg, PyObject **v);
extern const char *const default_event_names[SW_EV_DEFAULT_COUNT];

/* The settings update() changes in cfg, first in a type's list, in this order */
#define UPDATE_CFG_SETTINGS                                                                    \
    "qps", "concurrency", "behavior", "warm_up_s", "cold_factor", "max_queueing_ms",           \
        "occupy_timeout_ms", "shadow"
/** update(**kwds) of any type sorted into settings (vals, NULL when absent). @return 0; 1 for
 * a layout keyword (*layout_key, borrowed; nothing raised); or -1 with TypeError set */
int update_collect(PyObject *args, PyObject *kwds, const char *const *settings,
                   PyObject **vals, Py_ssize_t n_settings, const char *const *layout,
                   PyObject **layout_key);
/** update(**kwds) of a limiter type: update_collect (a layout keyword: ValueError), then the
 * UPDATE_CFG_SETTINGS given applied to cfg and checked; the private _rate= (the last of
 * settings: an exact str, or None) into *rate for limiting_install (NULL: unchanged; a new
 * qps= or concurrency= without it: no rate), its value kept in *slot. @return 0, or -1 with
 * an exception set (cfg may be half-changed: work on a copy) */
int update_parse(const char *tname, PyObject *args, PyObject *kwds, const char *const *settings,
                 PyObject **vals, Py_ssize_t n_settings, const char *const *layout,
                 struct sw_limiter_cfg *cfg, PyObject ***rate, PyObject **slot);

/* the behaviours' names, by enum sw_behavior */
extern const char *const behavior_names[4];

/** A property reading the object field at offset `at` (None for NULL). */
PyObject *get_object_or_none(PyObject *self, void *at);

/** Append a part (stolen; NULL: the error of making it) to a repr's list. @return 0 or -1 */
int repr_add(PyObject *parts, PyObject *part);
/** Append "<fmt with the float's repr>" (fmt takes one %U). @return 0, or -1 */
int repr_add_float(PyObject *parts, const char *fmt, double v);
/** Append the settings' parts (not the defaults; rate= in place of qps= and interval_ms=).
 * @return 0, or -1 with an exception set */
int repr_settings(PyObject *parts, const struct sw_limiter_cfg *c, int occupy, PyObject *rate);
/** The repr "Type(part, ...)": parts (stolen) then shadow=, shared=, name= (when given).
 * @return new reference or NULL */
PyObject *repr_finish(PyObject *self, PyObject *parts, int shadow, PyObject *shared,
                      PyObject *name, int name_given);

/** Set BlockedError for the refusal of n by `self` (of `key`, or NULL for a Limiter). */
void blocked_raise(module_state *st, PyObject *self, PyObject *key, int64_t n,
                   const struct sw_decision *d);
/** A Stats of the window's counts (rates per second) and evicted. @return new ref or NULL */
PyObject *stats_new(module_state *st, const struct sw_stats *s, int64_t interval_ms,
                    int64_t evicted);

/* A core call that gave up waiting for another process's lock (wait.h: lock_gave_up()). */
#define GAVE_UP(rc) (__builtin_expect((rc) == SW_EBUSY, 0))

#endif /* SW_BINDING_H */
