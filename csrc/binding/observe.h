/* observe.h - names, the registry of named objects, totals as dicts, and the read-only side
 * for observers (read_region, list_regions): see observe.c. */
#ifndef SW_BINDING_OBSERVE_H
#define SW_BINDING_OBSERVE_H

#include "binding.h"
#include "sw_breaker.h"

/** Resolve `shared=` (as shared_resolve, into path) then `name=`: None, or a str of 1 to 200
 * characters. *name: the name given, else the default of an object opened with shared= (the
 * region's name, the file's basename for a path), NULL for none (a private or anonymous
 * one), a new reference; *name_given: whether name= was given.
 * @return the mode (0/1/2), or -1 with TypeError/ValueError set */
int shared_and_name(PyObject *o_shared, PyObject *o_name, char *path, size_t cap,
                    PyObject **name, int *name_given);
/** Record a named object in the registry (a weak reference; limiters() shows the newest
 * live object of a name). @return 0, or -1 with an exception set */
int registry_add(module_state *st, PyObject *name, PyObject *obj);
/** The totals as a dict with the keys pass, block, exception, success, occupied_pass, rt. */
PyObject *totals_dict(const struct sw_totals *t);
/** The state names, by enum sw_brk_state. */
extern const char *const breaker_state_names[3];
/** Lifetime totals as Breaker.totals() gives them. @return a new dict, or NULL */
PyObject *breaker_totals_dict(const struct sw_brk_totals *t);

PyObject *mod_limiters(PyObject *m, PyObject *unused);
PyObject *mod_read_region(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
PyObject *mod_list_regions(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);

#endif /* SW_BINDING_OBSERVE_H */
