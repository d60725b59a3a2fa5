/* blocked.c - BlockedError: a limiter refused the request. */
#include "binding.h"
#include "args.h"

typedef struct {
    PyBaseExceptionObject base;
    PyObject *retry_after;
    PyObject *limiter;
} BlockedErrorObject;

static int BlockedError_init(BlockedErrorObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"message", "retry_after", "limiter", NULL};
    PyObject *message = NULL, *retry_after = Py_None, *limiter = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OO:BlockedError", kwlist, &message,
                                     &retry_after, &limiter))
        return -1;
    if (retry_after != Py_None) {
        double v;
        if (as_nonneg_double(retry_after, "retry_after", 1e300, &v) < 0)
            return -1;
    }
    /* BaseException keeps the positional args (for str() and pickling) */
    PyObject *bargs = message ? PyTuple_Pack(1, message) : PyTuple_New(0);
    if (bargs == NULL)
        return -1;
    int rc = ((PyTypeObject *)PyExc_Exception)->tp_init((PyObject *)self, bargs, NULL);
    Py_DECREF(bargs);
    if (rc < 0)
        return -1;
    Py_INCREF(retry_after);
    Py_XSETREF(self->retry_after, retry_after);
    Py_INCREF(limiter);
    Py_XSETREF(self->limiter, limiter);
    return 0;
}

static int BlockedError_traverse(BlockedErrorObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->retry_after);
    Py_VISIT(self->limiter);
    return ((PyTypeObject *)PyExc_Exception)->tp_traverse((PyObject *)self, visit, arg);
}

static int BlockedError_clear(BlockedErrorObject *self)
{
    Py_CLEAR(self->retry_after);
    Py_CLEAR(self->limiter);
    return ((PyTypeObject *)PyExc_Exception)->tp_clear((PyObject *)self);
}

static void BlockedError_dealloc(BlockedErrorObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    BlockedError_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMemberDef BlockedError_members[] = {
    {"retry_after", T_OBJECT, offsetof(BlockedErrorObject, retry_after), READONLY,
     "Seconds after which the same request could be admitted, or None when unknown."},
    {"limiter", T_OBJECT, offsetof(BlockedErrorObject, limiter), READONLY,
     "The Limiter that refused the request (or None)."},
    {NULL}};

static PyType_Slot BlockedError_slots[] = {
    {Py_tp_doc, "BlockedError(message, *, retry_after=None, limiter=None)\n--\n\n"
                "A limiter refused the request. retry_after: seconds after which the same "
                "request could be admitted (None when unknown); limiter: the Limiter."},
    {Py_tp_init, BlockedError_init},
    {Py_tp_traverse, BlockedError_traverse},
    {Py_tp_clear, BlockedError_clear},
    {Py_tp_dealloc, BlockedError_dealloc},
    {Py_tp_members, BlockedError_members},
    {0, NULL}};

PyType_Spec BlockedError_spec = {
    .name = "slidewin.BlockedError",
    .basicsize = sizeof(BlockedErrorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = BlockedError_slots,
};
