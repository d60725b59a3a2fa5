/* module.c - the module `slidewin._core`: state, types, clocks, multi-phase init. */
#include "binding.h"
#include "blocked.h"
#include "entry.h"
#include "keyed.h"
#include "limiter.h"
#include "metric.h"
#include "breaker.h"
#include "observe.h"
#include "shared.h"
#include "group.h"
#include "slice.h"

#include <signal.h>
#include <time.h>

/* ---- struct sequences ---- */

static PyStructSequence_Field Bucket_fields[] = {
    {"start_ms", "the bucket's start, ms on the monotonic clock"},
    {"counts", "a tuple of counts indexed by event"},
    {"min_rt", "the bucket's minimum RT, ms (5000 when none)"},
    {NULL, NULL}};
static PyStructSequence_Desc Bucket_desc = {"slidewin.Bucket", "One bucket of a Metric window.",
                                            Bucket_fields, 3};

static PyStructSequence_Field Stats_fields[] = {
    {"pass_qps", "passes per second over the window"},
    {"block_qps", "blocks per second over the window"},
    {"success_qps", "successes per second over the window"},
    {"exception_qps", "exceptions per second over the window"},
    {"avg_rt_ms", "RT sum / success over the window (0.0 without success)"},
    {"min_rt_ms", "minimum RT over the window (5000.0 when none)"},
    {"concurrency", "requests in flight"},
    {"waiting", "passes granted ahead (prioritized), not yet current"},
    {"occupied_qps", "prioritized passes borrowed from the next window, per second"},
    {"evicted", "KeyedLimiter: keys evicted since creation (0 for a Limiter)"},
    {NULL, NULL}};
static PyStructSequence_Desc Stats_desc = {"slidewin.Stats", "A Limiter's window statistics.",
                                           Stats_fields, 9}; /* + evicted, an attribute only */

/* ---- module ---- */

#define CLOCK_FN(fn, clock)                                                                    \
    static PyObject *fn(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))                        \
    {                                                                                          \
        return PyLong_FromLongLong(clock());                                                   \
    }
CLOCK_FN(mod_clock_ns, sw_time_ns)
CLOCK_FN(mod_coarse_clock_ns, sw_time_coarse_ns)
CLOCK_FN(mod_coarse_resolution_ns, sw_time_coarse_resolution_ns)

/* _set_test_hook(us), tests only: every critical section sleeps `us` microseconds between two
 * stores, holding the lock (0: no hook), for a test to kill a process inside a decision; -1:
 * the next one stops the process (SIGSTOP, once) holding the lock, as `docker pause` may. */
static long test_hook_us;
static void test_hook_stop(void)
{
    sw_test_in_critical = NULL;
    raise(SIGSTOP);
}
static void test_hook(void)
{
    struct timespec ts = {test_hook_us / 1000000, (test_hook_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static PyObject *mod_set_test_hook(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long us = PyLong_AsLong(arg);
    if (us == -1 && PyErr_Occurred())
        return NULL;
    if (us < -1 || us > 1000000) {
        PyErr_SetString(PyExc_ValueError, "_set_test_hook: 0 to 1000000 microseconds, or -1");
        return NULL;
    }
    test_hook_us = us;
    sw_test_in_critical = us == -1 ? test_hook_stop : us > 0 ? test_hook : NULL;
    Py_RETURN_NONE;
}

static PyObject *mod_set_layer(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_set_layer(aenter, aexit, breaker_tell)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 3; i++)
        if (!PyCallable_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "_set_layer() takes callables, not %s",
                         Py_TYPE(args[i])->tp_name);
            return NULL;
        }
    module_state *st = (module_state *)PyModule_GetState(m);
    PyObject **slots[3] = {&st->aenter, &st->aexit, &st->breaker_tell};
    for (int i = 0; i < 3; i++)
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    METHOD(_set_layer, mod_set_layer, METH_FASTCALL, "(aenter, aexit, breaker_tell)", "The Python layer's functions the types call: registered once by slidewin at import."),
    METHOD(unlink, shared_unlink, METH_O, "(name)", "Remove a shared region's name (or path): True if it existed. Processes attached to it go on using it; the next to open the name gets a fresh one. Only a slidewin region of this user is removed: another file is a ValueError, another user's region a PermissionError."),
    METHOD(limiters, mod_limiters, METH_NOARGS, "()", "The live named Metric, Limiter and KeyedLimiter objects of this process: a dict name -> object (the newest object of a name)."),
    METHOD(read_region, mod_read_region, FASTKW, "(path, *, now_ns=None)", "Read a shared region without attaching to it (read-only, no lock, no process slot): a dict of its kind, name, layout, totals, window counts at now_ns, in-flight and waiting counts. For observers (Prometheus, top)."),
    METHOD(list_regions, mod_list_regions, FASTKW, "(folder=None)", "The paths of the slidewin regions (files slidewin-*) of a folder (default: SLIDEWIN_SHM_DIR or /dev/shm), sorted."),
    METHOD(_set_test_hook, mod_set_test_hook, METH_O, "(us)", "Tests only: hold every critical section us microseconds."),
    METHOD(clock_ns, mod_clock_ns, METH_NOARGS, "()", "CLOCK_MONOTONIC in ns (the clock of pacing and RT)."),
    METHOD(coarse_clock_ns, mod_coarse_clock_ns, METH_NOARGS, "()", "CLOCK_MONOTONIC_COARSE in ns (the clock of window math)."),
    METHOD(coarse_resolution_ns, mod_coarse_resolution_ns, METH_NOARGS, "()", "Resolution of the coarse clock in ns."),
    METHOD(_noop, bench_noop, METH_NOARGS, "()", "Do nothing (a benchmark floor)."),
    METHOD(_try_acquire_nogil, bench_try_acquire_nogil, FASTKW, "(lim, n=1, *, now_ns=None)", "lim.try_acquire() with the GIL released around the core call (the GIL study)."),
    {NULL}};

/* Tests only: SLIDEWIN_TEST_LOCK_STUCK_MS (1 to 60000) shortens the 5 s after which a live,
 * not stopped lock owner is taken as stuck (the suite's stuck-owner subprocesses). */
static void read_test_stuck_threshold(void)
{
    const char *s = getenv("SLIDEWIN_TEST_LOCK_STUCK_MS");
    if (s == NULL || *s == '\0')
        return;
    char *end;
    long ms = strtol(s, &end, 10);
    if (*end == '\0' && ms >= 1 && ms <= 60000)
        sw_lock_stuck_ns = (int64_t)ms * INT64_C(1000000);
}

static int module_exec(PyObject *m)
{
    read_test_stuck_threshold();
    lock_wait_install();
    module_state *st = (module_state *)PyModule_GetState(m);
    /* the types in order: those the state holds kept there, the others held by the module;
     * BlockedError's bases a tuple: a bare type is accepted only since 3.10 */
    PyObject *bases = PyTuple_Pack(1, PyExc_Exception);
    static const struct {
        PyType_Spec *spec;
        ptrdiff_t held; /* where in the state, or -1 */
    } types[] = {
        {&Metric_spec, offsetof(module_state, Metric_Type)},
        {&Limiter_spec, offsetof(module_state, Limiter_Type)},
        {&Entry_spec, offsetof(module_state, Entry_Type)},
        {&KeyedLimiter_spec, offsetof(module_state, KeyedLimiter_Type)},
        {&KeyedEntry_spec, offsetof(module_state, KeyedEntry_Type)},
        {&Breaker_spec, -1},
        {&LeaseSlice_spec, -1}, /* slidewin.redis lease=True's slices (slice.c) */
        {&KeyedSlices_spec, -1},
        {&Group_spec, -1},      /* slidewin.all_of's groups (group.c) */
        {&BlockedError_spec, offsetof(module_state, BlockedError)},
    };
    for (size_t i = 0; bases != NULL && i < sizeof types / sizeof types[0]; i++) {
        PyObject *t = PyType_FromModuleAndSpec(m, types[i].spec,
                                               types[i].spec == &BlockedError_spec ? bases : NULL);
        if (t == NULL || PyModule_AddType(m, (PyTypeObject *)t) < 0)
            Py_CLEAR(bases);
        else if (types[i].held >= 0)
            *(PyObject **)(void *)((char *)st + types[i].held) = Py_NewRef(t);
        Py_XDECREF(t);
    }
    if (bases == NULL)
        return -1;
    Py_DECREF(bases);
    if ((st->Bucket_Type = PyStructSequence_NewType(&Bucket_desc)) == NULL ||
        PyModule_AddType(m, st->Bucket_Type) < 0 ||
        (st->Stats_Type = PyStructSequence_NewType(&Stats_desc)) == NULL ||
        PyModule_AddType(m, st->Stats_Type) < 0)
        return -1;
    /* "linux", or "portable": the core's fallbacks for systems without futexes, /proc and
     * OFD locks (macOS; on Linux, a build with SLIDEWIN_PORTABLE=1), see sw_platform.h */
    if (PyModule_AddStringConstant(m, "_platform", sw_platform_name()) < 0)
        return -1;
    if ((st->default_names = PyTuple_New(SW_EV_DEFAULT_COUNT)) == NULL ||
        (st->default_map = PyDict_New()) == NULL)
        return -1;
    for (int i = 0; i < SW_EV_DEFAULT_COUNT; i++) {
        PyObject *nm = PyUnicode_InternFromString(default_event_names[i]), *idx = NULL;
        if (nm == NULL)
            return -1;
        PyTuple_SET_ITEM(st->default_names, i, nm);
        int bad = (idx = PyLong_FromLong(i)) == NULL ||
                  PyDict_SetItem(st->default_map, nm, idx) < 0;
        Py_XDECREF(idx);
        if (bad)
            return -1;
    }
    if ((st->registry = PyDict_New()) == NULL ||
        PyObject_SetAttrString(m, "EVENT_NAMES", st->default_names) < 0)
        return -1;
    static const struct {
        const char *name;
        long v;
    } ints[] = {{"F_TRY", SW_F_TRY}, {"F_PRIORITIZED", SW_F_PRIORITIZED},
                {"F_NO_BLOCK", SW_F_NO_BLOCK}, {"F_ENTRY", SW_F_ENTRY}, {"F_RETRY", SW_F_RETRY},
                {"F_SHADOW", SW_F_SHADOW}, {"SHADOWED", 3}, {"PASS", SW_PASS},
                {"LAYOUT_VERSION", SW_SHM_LAYOUT_VERSION}, {"BLOCK", SW_BLOCK},
                {"NEVER", SW_NEVER}, {"MAX_EVENTS", SW_MAX_EVENTS},
                {"MAX_SAMPLES", SW_MAX_SAMPLES}, {"MAX_KEYS", (long)SW_KEYED_MAX_KEYS}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (PyModule_AddIntConstant(m, ints[i].name, ints[i].v) < 0)
            return -1;
    return 0;
}

/* The module state's references (module_state, binding.h), visited and cleared. */
#define STATE_REFS(X)                                                                          \
    X(Metric_Type) X(Limiter_Type) X(Entry_Type) X(KeyedLimiter_Type) X(KeyedEntry_Type)       \
    X(Bucket_Type) X(Stats_Type) X(BlockedError) X(default_names) X(default_map) X(registry)  \
    X(aenter) X(aexit) X(breaker_tell)

#define REF_VISIT(f) Py_VISIT(st->f);
#define REF_CLEAR(f) Py_CLEAR(st->f);

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = (module_state *)PyModule_GetState(m);
    STATE_REFS(REF_VISIT)
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = (module_state *)PyModule_GetState(m);
    STATE_REFS(REF_CLEAR)
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}};

static struct PyModuleDef slidewin_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = BINDING_MODULE_NAME,
    .m_doc = "The C core of slidewin: sliding-window statistics and flow control.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void); /* (the one exported name) */
PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&slidewin_module);
}
