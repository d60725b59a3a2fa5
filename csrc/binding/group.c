/* group.c - the C base of slidewin.all_of's groups (sw_group.h); the waiting, entries and
 * the decorator are Python (slidewin/_group.py). */
#include "group.h"

#include "args.h"
#include "keyed.h"
#include "limiter.h"
#include "shared.h"

/* One member: a Limiter, or a key of a KeyedLimiter. */
struct gslot {
    PyObject *obj;      /* the Limiter or KeyedLimiter (a strong reference) */
    PyObject *key;      /* the key, or NULL for a Limiter */
    uint64_t fp;
    uint64_t order[2];  /* its lock order (sw_gmember_order_*) */
    int keyed;
    int shared;
};

typedef struct {
    PyObject_HEAD
    uint32_t count;
    struct gslot *slots;
    uint32_t *perm;     /* the slots in lock order (a decision passes them so: no sorting) */
    PyObject *members;  /* the members as given (a tuple) */
    PyObject *owners;   /* the limiters (a tuple): member i's Limiter or KeyedLimiter */
    PyObject *weakreflist;
} GroupObject;

/* Member i (a Limiter or a (KeyedLimiter, key) pair) into its slot and owners, refused when
 * a member before it is the same limiter. @return 0, or -1 with TypeError or ValueError set */
static int group_add(GroupObject *self, module_state *st, Py_ssize_t i, PyObject *o)
{
    struct gslot *s = &self->slots[i];
    if (PyObject_TypeCheck(o, st->Limiter_Type)) {
        LimiterObject *lim = (LimiterObject *)o;
        struct sw_gmember m = {.kind = SW_GM_LIMITER, .v = &lim->view};
        limiting_group_order(o, &m);
        memcpy(s->order, m.order, sizeof s->order);
        s->shared = lim->is_shared;
        s->obj = o;
    } else if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2 &&
               PyObject_TypeCheck(PyTuple_GET_ITEM(o, 0), st->KeyedLimiter_Type)) {
        PyObject *keyed = PyTuple_GET_ITEM(o, 0), *key = PyTuple_GET_ITEM(o, 1);
        if (keyed_group_member(keyed, key, &s->fp, s->order, &s->shared) < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "all_of() member %zd: the key of a (KeyedLimiter, "
                         "key) pair must be a str, bytes or int, not %.100s", i,
                         type_name_of(key));
            return -1;
        }
        s->keyed = 1;
        s->obj = keyed;
        s->key = key;
        Py_INCREF(key);
    } else if (PyTuple_Check(o)) {
        PyErr_Format(PyExc_TypeError, "all_of() member %zd: a tuple member must be a "
                     "(KeyedLimiter, key) pair, got a tuple of %zd item(s) starting with "
                     "%.100s", i, PyTuple_GET_SIZE(o),
                     PyTuple_GET_SIZE(o) > 0 ? type_name_of(PyTuple_GET_ITEM(o, 0)) : "nothing");
        return -1;
    } else if (PyObject_TypeCheck(o, st->KeyedLimiter_Type)) {
        PyErr_Format(PyExc_TypeError, "all_of() member %zd: a KeyedLimiter needs its key: "
                     "pass (keyed_limiter, key)", i);
        return -1;
    } else {
        PyErr_Format(PyExc_TypeError, "all_of() member %zd: expected a Limiter or a "
                     "(KeyedLimiter, key) pair, got %.100s", i, type_name_of(o));
        return -1;
    }
    Py_INCREF(s->obj);
    Py_INCREF(s->obj);
    PyTuple_SET_ITEM(self->owners, i, s->obj);
    self->count = (uint32_t)(i + 1);
    for (Py_ssize_t j = 0; j < i; j++) {
        if (self->slots[j].order[0] == s->order[0] && self->slots[j].order[1] == s->order[1]) {
            PyErr_Format(PyExc_ValueError, "all_of() members %zd and %zd are one limiter "
                         "(the same state%s): a group may hold each limiter once", j, i,
                         s->keyed ? "; a KeyedLimiter may be in a group with one key" : "");
            return -1;
        }
    }
    return 0;
}

/* self->perm: the members by lock order (an insertion sort). */
static void group_sort(GroupObject *self)
{
    for (uint32_t i = 0; i < self->count; i++) {
        uint32_t j = i;
        const uint64_t *o = self->slots[i].order;
        while (j > 0) {
            const uint64_t *p = self->slots[self->perm[j - 1]].order;
            if (p[0] < o[0] || (p[0] == o[0] && p[1] < o[1]))
                break;
            self->perm[j] = self->perm[j - 1];
            j--;
        }
        self->perm[j] = i;
    }
}

static PyObject *Group_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    module_state *st = state_for_new(type);
    if (st == NULL)
        return NULL;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "all_of() takes its members as positional arguments "
                        "only (Limiters, or (KeyedLimiter, key) pairs)");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(args);
    if (count < 1) {
        PyErr_SetString(PyExc_TypeError, "all_of() needs at least one member: a Limiter, or a "
                        "(KeyedLimiter, key) pair");
        return NULL;
    }
    if ((size_t)count > SW_GROUP_MAX) {
        PyErr_Format(PyExc_ValueError, "all_of() takes at most %u members, got %zd",
                     SW_GROUP_MAX, count);
        return NULL;
    }
    GroupObject *self = (GroupObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->slots = PyMem_Calloc((size_t)count, sizeof(struct gslot));
    self->perm = PyMem_Calloc((size_t)count, sizeof(uint32_t));
    self->owners = PyTuple_New(count);
    self->members = Py_NewRef(args);
    if (self->slots == NULL || self->perm == NULL || self->owners == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (group_add(self, st, i, PyTuple_GET_ITEM(args, i)) < 0)
            goto fail;
    group_sort(self);
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int Group_traverse(GroupObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->members);
    Py_VISIT(self->owners);
    for (uint32_t i = 0; i < self->count; i++) {
        Py_VISIT(self->slots[i].obj);
        Py_VISIT(self->slots[i].key);
    }
    return 0;
}

/* A group cleared by the GC holds no member (its calls then raise). */
static int Group_clear(GroupObject *self)
{
    uint32_t count = self->count;
    self->count = 0;
    for (uint32_t i = 0; i < count; i++) { /* count is 0 when slots were never allocated */
        Py_CLEAR(self->slots[i].obj);
        Py_CLEAR(self->slots[i].key);
    }
    Py_CLEAR(self->members);
    Py_CLEAR(self->owners);
    return 0;
}

static void Group_dealloc(GroupObject *self)
{
    PyTypeObject *tp = dealloc_start((PyObject *)self, self->weakreflist);
    Group_clear(self);
    PyMem_Free(self->slots);
    PyMem_Free(self->perm);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* The request sizes, each an int >= lo: none (1 each; not for charge, lo 0), one for every
 * member, or one per member. */
static int parse_ns(GroupObject *self, const char *fname, PyObject *const *args,
                    Py_ssize_t nargs, int64_t lo, int64_t *ns)
{
    if ((nargs == 0 && lo == 0) || (nargs > 1 && (size_t)nargs != self->count)) {
        PyErr_Format(PyExc_TypeError, "%s() takes one n for every member or one n per member "
                     "(%u members), got %zd", fname, self->count, nargs);
        return -1;
    }
    for (uint32_t i = 0; i < self->count; i++) {
        ns[i] = 1;
        if (nargs > 0 && parse_n(args[nargs == 1 ? 0 : i], lo, &ns[i]) < 0)
            return -1;
    }
    return 0;
}

/* Scratch members for a decision: on the stack for small groups (a large frame would cost
 * the stack probes of every call), else on the heap. */
#define GROUP_STACK 4u
struct gscratch {
    struct sw_gmember small[GROUP_STACK];
    struct sw_gmember *m;
};

static struct sw_gmember *scratch_get(GroupObject *self, struct gscratch *s)
{
    s->m = self->count <= GROUP_STACK ? s->small
                                      : PyMem_Malloc(self->count * sizeof(struct sw_gmember));
    if (s->m == NULL)
        PyErr_NoMemory();
    return s->m;
}

static void scratch_put(struct gscratch *s)
{
    if (s->m != s->small)
        PyMem_Free(s->m);
}

/* One group decision. m: count members (scratch). @return 0 (out set; a lock given up at this
 * thread's deadline: a refusal), or -1 with an exception set */
static int group_decide(GroupObject *self, const int64_t *ns, int64_t now, unsigned flags,
                        struct sw_gmember *m, struct sw_decision *out)
{
    for (uint32_t i = 0; i < self->count; i++) { /* m[k]: slot perm[k] (lock order) */
        struct gslot *s = &self->slots[self->perm[i]];
        struct sw_gmember *x = &m[i];
        if (s->keyed) {
            x->kind = SW_GM_KEYED;
            x->kv = keyed_group_view(s->obj);
            x->fp = s->fp;
        } else {
            x->kind = SW_GM_LIMITER;
            x->v = limiter_view((LimiterObject *)s->obj);
        }
        x->n = ns[self->perm[i]];
    }
    /* checked and ordered when the group was made (Group_new): no sort, no checks */
    int rc = self->count > 0 ? sw_group_decide_ordered(m, self->count, now, flags, out)
                             : SW_EINVAL;
    if (rc == SW_OK)
        return 0;
    *out = (struct sw_decision){.verdict = SW_BLOCK, .retry_ns = -1};
    for (uint32_t i = 0; i < self->count; i++) {
        m[i].refused = 0;
        m[i].d = NULL;
    }
    if (GAVE_UP(rc))
        return lock_gave_up() < 0 ? -1 : 0;
    raise_core_error(rc);
    return -1;
}

/* A refusal: dead processes' counts of the shared members that refused, for the next call. */
static void reap_refusers(GroupObject *self, const struct sw_gmember *m)
{
    for (uint32_t k = 0; k < self->count; k++) {
        struct gslot *s = &self->slots[self->perm[k]];
        if (!s->shared || !m[k].refused)
            continue;
        if (s->keyed)
            keyed_group_maybe_reap(s->obj);
        else
            (void)limiting_maybe_reap(s->obj);
    }
}

/* try_acquire() (flags SW_F_TRY: a bool) and reserve() (0: the wait in ns, or None). */
static PyObject *group_call(GroupObject *self, const char *fname, unsigned flags,
                            PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int64_t ns[SW_GROUP_MAX], now = SW_NOW;
    struct sw_decision d;
    struct gscratch sc;
    if (nargs == 0 && kwnames == NULL) { /* the common call: 1 each, now */
        for (uint32_t i = 0; i < self->count; i++)
            ns[i] = 1;
    } else if (parse_ns(self, fname, args, nargs, 1, ns) < 0 ||
               parse_now_only(fname, kwnames ? args + nargs : NULL, 0, kwnames, &now) < 0) {
        return NULL;
    }
    struct sw_gmember *m = scratch_get(self, &sc);
    int rc = m == NULL ? -1 : group_decide(self, ns, now, flags, m, &d);
    if (rc == 0 && d.verdict != SW_PASS)
        reap_refusers(self, m);
    scratch_put(&sc);
    if (rc < 0)
        return NULL;
    if (flags == SW_F_TRY)
        return PyBool_FromLong(d.verdict == SW_PASS);
    if (d.verdict == SW_PASS)
        return PyLong_FromLongLong(d.wait_ns);
    Py_RETURN_NONE;
}

#define GROUP_CALL(fn, fname, flags)                                                           \
    static PyObject *fn(GroupObject *self, PyObject *const *args, Py_ssize_t nargs,            \
                        PyObject *kwnames)                                                     \
    {                                                                                          \
        return group_call(self, fname, flags, args, nargs, kwnames);                           \
    }
GROUP_CALL(Group_try_acquire, "try_acquire", SW_F_TRY)
GROUP_CALL(Group_reserve, "reserve", 0u)

/* The sizes of a tuple of ns (None: 1 each), as given by the Python layer. */
static int ns_of_tuple(GroupObject *self, PyObject *t, int64_t *ns)
{
    if (t == Py_None)
        return parse_ns(self, "_decide", NULL, 0, 1, ns);
    if (!PyTuple_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "ns must be a tuple");
        return -1;
    }
    return parse_ns(self, "acquire", &PyTuple_GET_ITEM(t, 0), PyTuple_GET_SIZE(t), 1, ns);
}

/* _decide(ns, flags, now_ns) -> (verdict, wait_ns, retry_ns, refused, shadowed, who):
 * refused and shadowed (shadow members that would have refused) are tuples of member indices;
 * who: the refuser with the largest retry (else the first; for SW_NEVER the first that can
 * never admit the request), or -1. */
static PyObject *Group_decide(GroupObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t ns[SW_GROUP_MAX], flags, now;
    struct gscratch sc;
    struct sw_decision d;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_decide(ns, flags, now_ns) takes 3 arguments");
        return NULL;
    }
    if (ns_of_tuple(self, args[0], ns) < 0 || as_int64(args[1], "flags", 0, 63, &flags) < 0 ||
        parse_now(args[2], &now) < 0)
        return NULL;
    PyObject *refused = NULL, *shadowed = NULL, *r = NULL;
    long who = -1;
    int64_t best = -2;
    struct sw_gmember *m = scratch_get(self, &sc);
    if (m == NULL || group_decide(self, ns, now, (unsigned)flags, m, &d) < 0 ||
        (refused = PyList_New(0)) == NULL || (shadowed = PyList_New(0)) == NULL)
        goto done;
    for (uint32_t i = 0; i < self->count; i++) { /* member i is m[k] */
        uint32_t k = 0;
        while (self->perm[k] != i)
            k++;
        if (m[k].refused || (m[k].d != NULL && m[k].d->shadowed)) {
            PyObject *ix = PyLong_FromUnsignedLong(i);
            int bad = ix == NULL || PyList_Append(m[k].refused ? refused : shadowed, ix) < 0;
            Py_XDECREF(ix);
            if (bad)
                goto done;
        }
        if (d.verdict == SW_NEVER) {
            /* the one to blame is a member that can never admit it, not one that is full
             * now (its retry time says nothing then) */
            if (m[k].refused && m[k].d->verdict == SW_NEVER && who < 0)
                who = (long)i;
        } else if (m[k].refused && m[k].d->retry_ns > best) {
            best = m[k].d->retry_ns;
            who = (long)i;
        }
    }
    if (d.verdict != SW_PASS)
        reap_refusers(self, m);
    r = Py_BuildValue("(iLLNNl)", d.verdict, (long long)d.wait_ns, (long long)d.retry_ns,
                      PyList_AsTuple(refused), PyList_AsTuple(shadowed), who);
done:
    Py_XDECREF(refused);
    Py_XDECREF(shadowed);
    scratch_put(&sc);
    return r;
}

/* _exit(ns, outcome, rt_ms, done): end an entry (outcome SUCCESS + RT, EXCEPTION, NONE) on each
 * member whose byte in `done` is 0, then set it: after a lock wait that gave up (raised, the
 * rest still held), calling again ends those, each member exactly once. */
static PyObject *Group_exit(GroupObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t ns[SW_GROUP_MAX], outcome, rt;
    if (nargs != 4 || !PyByteArray_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "_exit(ns, outcome, rt_ms, done) takes 4 arguments, "
                        "done a bytearray");
        return NULL;
    }
    if (ns_of_tuple(self, args[0], ns) < 0 ||
        as_int64(args[1], "outcome", SW_OUT_SUCCESS, SW_OUT_NONE, &outcome) < 0 ||
        as_int64(args[2], "rt_ms", 0, INT64_MAX, &rt) < 0)
        return NULL;
    if (PyByteArray_GET_SIZE(args[3]) != (Py_ssize_t)self->count) {
        PyErr_Format(PyExc_ValueError, "_exit(): done must have one byte per member (%u)",
                     self->count);
        return NULL;
    }
    for (uint32_t i = 0; i < self->count; i++) {
        struct gslot *s = &self->slots[i];
        char *done = PyByteArray_AS_STRING(args[3]); /* re-read: nothing here resizes it */
        if (done[i])
            continue;
        LimiterObject *lim = (LimiterObject *)s->obj;
        if (s->keyed ? keyed_group_exit(s->obj, s->fp, ns[i], rt, (int)outcome) != 0
                     : GAVE_UP(sw_exit_or_give_up(limiter_view(lim), ns[i], rt, (int)outcome,
                                                  SW_NOW))) {
            (void)lock_gave_up_error(); /* this one and the rest still held: retry */
            return NULL;
        }
        if (!s->keyed)
            limiter_notify(lim);
        done[i] = 1;
    }
    Py_RETURN_NONE;
}

static Py_ssize_t Group_length(GroupObject *self)
{
    return (Py_ssize_t)self->count;
}

/* charge(*ns, now_ns=None): sw_charge on each member given an n > 0 (its doc: Group_methods) */
static PyObject *Group_charge(GroupObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    int64_t ns[SW_GROUP_MAX], now;
    if (parse_ns(self, "charge", args, nargs, 0, ns) < 0 ||
        parse_now_only("charge", kwnames ? args + nargs : NULL, 0, kwnames, &now) < 0)
        return NULL;
    for (uint32_t i = 0; i < self->count; i++) {
        struct gslot *s = &self->slots[i];
        int grade = s->keyed ? keyed_group_grade(s->obj) : ((LimiterObject *)s->obj)->grade;
        if (ns[i] > 0 && grade == SW_GRADE_CONCURRENCY) {
            PyErr_Format(PyExc_ValueError, "charge(): member %u is a concurrency limiter, which "
                         "counts requests in flight, not amounts: charge it 0", i);
            return NULL;
        }
    }
    for (uint32_t i = 0; i < self->count; i++) {
        struct gslot *s = &self->slots[i];
        if (ns[i] == 0)
            continue;
        if (s->keyed)
            (void)keyed_group_charge(s->obj, s->fp, ns[i], now);
        else
            (void)sw_charge(limiter_view((LimiterObject *)s->obj), ns[i], now);
    }
    Py_RETURN_NONE;
}

/* members, limiters: a tuple field (closure: its offset); empty once cleared by the GC */
static PyObject *Group_get_tuple(PyObject *self, void *at)
{
    PyObject *t = *(PyObject **)(void *)((char *)self + (size_t)at);
    return t != NULL ? Py_NewRef(t) : PyTuple_New(0);
}

static PyObject *Group_repr(GroupObject *self)
{
    if (self->members == NULL)
        return PyUnicode_FromString("all_of()");
    if (PyTuple_GET_SIZE(self->members) == 1) /* not the tuple's "(a,)" */
        return PyUnicode_FromFormat("all_of(%R)", PyTuple_GET_ITEM(self->members, 0));
    PyObject *inner = PyObject_Repr(self->members), *r = NULL; /* "(a, b)" */
    if (inner != NULL)
        r = PyUnicode_FromFormat("all_of%U", inner);
    Py_XDECREF(inner);
    return r;
}

static PyMethodDef Group_methods[] = {
    METHOD(try_acquire, Group_try_acquire, FASTKW, "(*ns, now_ns=None)", "Admit now by every member, or charge none; never waits. ns: nothing (1 each), one n for every member, or one n per member. A refusal counts BLOCK on the refusing members."),
    METHOD(reserve, Group_reserve, FASTKW, "(*ns, now_ns=None)", "Admission that may need a wait (throttle members): the largest of the members' waits in ns (0 = go now), already counted as admitted by all; None when refused."),
    METHOD(charge, Group_charge, FASTKW, "(*ns, now_ns=None)", "Count ns more as admitted now on the members, without a decision: what a request used beyond its admission (tokens known after the reply). One n for all or one per member, each >= 0 (0: not charged; a concurrency member only 0). Never refuses, never gives back."),
    HIDDEN(_decide, Group_decide, METH_FASTCALL),
    HIDDEN(_exit, Group_exit, METH_FASTCALL),
    {NULL}};

static PyGetSetDef Group_getset[] = {
    {"members", Group_get_tuple, NULL,
     "The members as given: Limiters and (KeyedLimiter, key) pairs.",
     (void *)offsetof(GroupObject, members)},
    {"limiters", Group_get_tuple, NULL,
     "The limiters of the members, in order (a KeyedLimiter for a pair).",
     (void *)offsetof(GroupObject, owners)},
    {NULL}};

WEAKREF_MEMBERS(Group, GroupObject);

TYPE_SPEC(Group, "slidewin._core.Group", GroupObject, Py_TPFLAGS_BASETYPE,
          {Py_tp_doc, "The C base of slidewin.all_of's groups."}, {Py_tp_new, Group_new},
          {Py_tp_traverse, Group_traverse}, {Py_tp_clear, Group_clear},
          {Py_tp_dealloc, Group_dealloc}, {Py_tp_repr, Group_repr}, TYPE_TABLES(Group),
          {Py_sq_length, Group_length});
