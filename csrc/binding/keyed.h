/* keyed.h - KeyedLimiter and KeyedEntry (keyed.c). */
#ifndef SW_BINDING_KEYED_H
#define SW_BINDING_KEYED_H

#include "binding.h"
#include "sw_keyed.h"

extern PyType_Spec KeyedLimiter_spec;
extern PyType_Spec KeyedEntry_spec;

/* for slidewin.all_of (group.c): a (KeyedLimiter, key) member */
/** A (KeyedLimiter, key) member: the key's fingerprint in the table, the table's lock order
 * (sw_gmember_order_*), whether it is shared. @param keyed a KeyedLimiter (checked by the
 * caller) @return 0, or -1 with TypeError set (the key) */
int keyed_group_member(PyObject *keyed, PyObject *key, uint64_t *fp, uint64_t order[2],
                       int *shared);
/** The view a decision on the table goes through (a forked shared table claims its slot). */
const struct sw_kview *keyed_group_view(PyObject *keyed);
/** End a group entry's hold on a key (sw_keyed_exit_or_give_up), then wake the table's
 * waiters. @return 0, or SW_EBUSY when the wait for a shared table's lock gave up (wait.h:
 * nothing counted, the count still held) */
int keyed_group_exit(PyObject *keyed, uint64_t fp, int64_t n, int64_t rt_ms, int outcome);
/** sw_keyed_charge on the table. @return its code */
int keyed_group_charge(PyObject *keyed, uint64_t fp, int64_t n, int64_t now_ns);
/** The table's grade (enum sw_grade, as constructed). */
int keyed_group_grade(PyObject *keyed);
/** A refusal by a shared table: give back dead processes' counts when due. */
void keyed_group_maybe_reap(PyObject *keyed);


#endif /* SW_BINDING_KEYED_H */
