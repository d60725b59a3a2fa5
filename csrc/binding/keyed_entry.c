/* keyed_entry.c - KeyedEntry (`with per_user.entry(key):`) and what a group (all_of) asks
 * of a KeyedLimiter member. */
#include "keyed.h"
#include "limiting_ops.h"

#include "sw_group.h"

/* ---- KeyedEntry (its steps: limiting_ops.c) ---- */

static PyObject *KEntry_repr(KeyedEntryObject *self)
{
    return PyUnicode_FromFormat("<slidewin keyed entry key=%R n=%lld %s of %R>",
                                self->key ? self->key : Py_None, (long long)self->n,
                                entry_state_names[atomic_load(&self->state) & 3],
                                self->lim ? (PyObject *)self->lim : Py_None);
}

static PyGetSetDef KEntry_getset[] = {
    {"n", entry_get_n, NULL, "The request size.", NULL},
    {"key", get_object_or_none, NULL, "The key.", (void *)offsetof(KeyedEntryObject, key)},
    {"timeout", entry_get_timeout, NULL,
     "The longest wait for admission, s (entry(key, timeout=)), or None: refused at once.",
     NULL},
    {"limiter", entry_get_limiter, NULL, "The KeyedLimiter.", NULL},
    {NULL}};

TYPE_SPEC(KeyedEntry, "slidewin._core.KeyedEntry", KeyedEntryObject,
          Py_TPFLAGS_DISALLOW_INSTANTIATION,
          {Py_tp_doc, "A keyed admission in progress: `with per_key.entry(key):` (or async "
                      "with)."},
          ENTRY_NEW_SLOT{Py_tp_traverse, entry_traverse}, {Py_tp_clear, entry_clear},
          {Py_tp_dealloc, entry_dealloc}, {Py_tp_methods, entry_methods},
          {Py_tp_getset, KEntry_getset}, {Py_tp_repr, KEntry_repr});

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
