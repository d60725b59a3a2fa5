/* blocked.c - BlockedError: a limiter refused the request. */
#include "blocked.h"
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
    double v;
    if (retry_after != Py_None && as_nonneg_double(retry_after, "retry_after", 1e300, &v) < 0)
        return -1;
    /* BaseException keeps the positional args (for str() and pickling) */
    PyObject *bargs = message ? PyTuple_Pack(1, message) : PyTuple_New(0);
    if (bargs == NULL)
        return -1;
    int rc = ((PyTypeObject *)PyExc_Exception)->tp_init((PyObject *)self, bargs, NULL);
    Py_DECREF(bargs);
    if (rc < 0)
        return -1;
    Py_XSETREF(self->retry_after, Py_NewRef(retry_after));
    Py_XSETREF(self->limiter, Py_NewRef(limiter));
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

/* The state that pickling and copying carry: the instance dict plus retry_after and limiter.
 * keep_limiter: a copy keeps the Limiter; a pickle drops a private Limiter (it lives in this
 * process only and cannot be pickled) to None, and keeps any other value. */
static PyObject *blocked_state(BlockedErrorObject *self, int keep_limiter)
{
    PyObject *state = NULL, *d = PyObject_GetAttrString((PyObject *)self, "__dict__");
    if (d == NULL)
        return NULL;
    state = PyDict_Copy(d);
    Py_DECREF(d);
    if (state == NULL)
        return NULL;
    PyObject *lim = self->limiter ? self->limiter : Py_None;
    if (!keep_limiter) {
        module_state *st = state_of_type(Py_TYPE(self));
        if (st != NULL && (PyObject_TypeCheck(lim, st->Limiter_Type) ||
                           PyObject_TypeCheck(lim, st->KeyedLimiter_Type)))
            lim = Py_None;
    }
    if (PyDict_SetItemString(state, "retry_after",
                             self->retry_after ? self->retry_after : Py_None) < 0 ||
        PyDict_SetItemString(state, "limiter", lim) < 0) {
        Py_DECREF(state);
        return NULL;
    }
    return state;
}

static PyObject *blocked_args(BlockedErrorObject *self)
{
    return self->base.args == NULL ? PyTuple_New(0) : Py_NewRef(self->base.args);
}

/* __reduce__: (type, args, state); the state's retry_after and limiter go back in through
 * __setstate__ */
static PyObject *BlockedError_reduce(BlockedErrorObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *state = blocked_state(self, 0);
    if (state == NULL)
        return NULL;
    return Py_BuildValue("(ONN)", (PyObject *)Py_TYPE(self), blocked_args(self), state);
}

static PyObject *BlockedError_setstate(BlockedErrorObject *self, PyObject *state)
{
    if (state == Py_None)
        Py_RETURN_NONE;
    if (!PyDict_Check(state)) {
        PyErr_Format(PyExc_TypeError, "BlockedError state must be a dict, not %.100s",
                     type_name_of(state));
        return NULL;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(state, &pos, &key, &value)) {
        if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, "retry_after") == 0) {
            double v;
            if (value != Py_None && as_nonneg_double(value, "retry_after", 1e300, &v) < 0)
                return NULL;
            Py_XSETREF(self->retry_after, Py_NewRef(value));
        } else if (PyUnicode_Check(key) &&
                   PyUnicode_CompareWithASCIIString(key, "limiter") == 0) {
            Py_XSETREF(self->limiter, Py_NewRef(value));
        } else if (PyObject_SetAttr((PyObject *)self, key, value) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

/* a copy with `state`: type(self)(*args), then the state */
static PyObject *blocked_rebuild(BlockedErrorObject *self, PyObject *args, PyObject *state)
{
    PyObject *res = PyObject_Call((PyObject *)Py_TYPE(self), args, NULL), *r = NULL;
    if (res != NULL && (r = BlockedError_setstate((BlockedErrorObject *)res, state)) == NULL)
        Py_CLEAR(res);
    Py_XDECREF(r);
    return res;
}

/* __copy__: the same message, retry_after and limiter (the same Limiter object) */
static PyObject *BlockedError_copy(BlockedErrorObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *args = blocked_args(self), *state = blocked_state(self, 1), *res = NULL;
    if (args != NULL && state != NULL)
        res = blocked_rebuild(self, args, state);
    Py_XDECREF(args);
    Py_XDECREF(state);
    return res;
}

/* __deepcopy__(memo): args and the instance dict deep-copied; the limiter is shared (a
 * limiter is a resource, like a lock: a deep copy of an error does not make a new one) */
static PyObject *BlockedError_deepcopy(BlockedErrorObject *self, PyObject *memo)
{
    PyObject *copy = PyImport_ImportModule("copy"), *state = blocked_state(self, 1), *d = NULL,
             *res = NULL;
    if (copy == NULL || state == NULL || PyDict_DelItemString(state, "limiter") < 0)
        goto done;
    d = PyObject_CallMethod(copy, "deepcopy", "(NO)O", blocked_args(self), state, memo);
    if (d == NULL)
        goto done;
    if (!PyTuple_Check(d) || PyTuple_GET_SIZE(d) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(d, 0)) ||
        !PyDict_Check(PyTuple_GET_ITEM(d, 1)))
        PyErr_SetString(PyExc_TypeError, "BlockedError: deepcopy gave an unexpected state");
    else if (PyDict_SetItemString(PyTuple_GET_ITEM(d, 1), "limiter",
                                  self->limiter ? self->limiter : Py_None) == 0)
        res = blocked_rebuild(self, PyTuple_GET_ITEM(d, 0), PyTuple_GET_ITEM(d, 1));
done:
    Py_XDECREF(copy);
    Py_XDECREF(state);
    Py_XDECREF(d);
    return res;
}

static PyMethodDef BlockedError_methods[] = {
    {"__reduce__", (PyCFunction)BlockedError_reduce, METH_NOARGS,
     "Pickle support: keeps retry_after; a Limiter is dropped to None (not picklable)."},
    HIDDEN(__setstate__, BlockedError_setstate, METH_O),
    {"__copy__", (PyCFunction)BlockedError_copy, METH_NOARGS,
     "A copy with the same retry_after and limiter."},
    {"__deepcopy__", (PyCFunction)BlockedError_deepcopy, METH_O,
     "A deep copy; the limiter is the same object."},
    {NULL}};

static PyMemberDef BlockedError_members[] = {
    {"retry_after", T_OBJECT, offsetof(BlockedErrorObject, retry_after), READONLY,
     "Seconds after which the same request could be admitted, or None when unknown."},
    {"limiter", T_OBJECT, offsetof(BlockedErrorObject, limiter), READONLY,
     "The Limiter that refused the request (or None)."},
    {NULL}};

TYPE_SPEC(BlockedError, "slidewin.BlockedError", BlockedErrorObject, Py_TPFLAGS_BASETYPE,
          {Py_tp_doc, "BlockedError(message, *, retry_after=None, limiter=None)\n--\n\n"
                      "A limiter refused the request. retry_after: seconds after which the "
                      "same request could be admitted (None when unknown); limiter: the "
                      "Limiter."},
          {Py_tp_init, BlockedError_init}, {Py_tp_traverse, BlockedError_traverse},
          {Py_tp_clear, BlockedError_clear}, {Py_tp_dealloc, BlockedError_dealloc},
          {Py_tp_members, BlockedError_members}, {Py_tp_methods, BlockedError_methods});
