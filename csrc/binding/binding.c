/* binding.c - what binding.h declares for every type: the module state of a type, the
 * default event names. */
#include "binding.h"

#include <string.h>

const char *const default_event_names[SW_EV_DEFAULT_COUNT] = {
    "pass", "block", "exception", "success", "rt", "occupied_pass"};

module_state *state_of_type(PyTypeObject *tp)
{
    /* instances of Python subclasses: walk up to the extension's own type (a heap type made
     * from this module: known by its name and state size, not by module.c's PyModuleDef) */
    while (tp != NULL) {
        if (tp->tp_flags & Py_TPFLAGS_HEAPTYPE) {
            PyHeapTypeObject *ht = (PyHeapTypeObject *)tp;
            PyModuleDef *def = ht->ht_module != NULL ? PyModule_GetDef(ht->ht_module) : NULL;
            if (def != NULL && def->m_size == (Py_ssize_t)sizeof(module_state) &&
                def->m_name != NULL && strcmp(def->m_name, BINDING_MODULE_NAME) == 0)
                return (module_state *)PyModule_GetState(ht->ht_module);
        }
        tp = tp->tp_base;
    }
    return NULL;
}

module_state *state_for_new(PyTypeObject *tp)
{
    module_state *st = state_of_type(tp);
    if (st == NULL)
        PyErr_SetString(PyExc_TypeError, "slidewin module state not found");
    return st;
}
