/* shared.c - see shared.h. */
#include "shared.h"
#include "args.h"
#include "wait.h"

#include "sw_observe.h"
#include "sw_proc.h"
#include "sw_time.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *shared_dir(void)
{
    const char *d = getenv("SLIDEWIN_SHM_DIR");
    return (d != NULL && d[0] != '\0') ? d : sw_platform_shm_dir();
}

static bool name_ok(const char *s, Py_ssize_t len)
{
    if (len < 1 || len > SHARED_NAME_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (Py_ssize_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

int shared_resolve(PyObject *shared, char *path, size_t cap)
{
    if (shared == NULL || shared == Py_None || shared == Py_False)
        return 0;
    if (shared == Py_True)
        return 1;
    if (!PyUnicode_Check(shared)) {
        PyErr_Format(PyExc_TypeError,
                     "shared must be None, True, a name or a path (str), not %.100s",
                     type_name_of(shared));
        return -1;
    }
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(shared, &len);
    if (s == NULL)
        return -1;
    if ((Py_ssize_t)strlen(s) != len) {
        PyErr_SetString(PyExc_ValueError, "shared must not contain NUL characters");
        return -1;
    }
    if (strchr(s, '/') != NULL) { /* a path: made absolute, so it names one file whatever
                                      * the working directory of a process it is sent to */
        if (s[len - 1] == '/') {
            PyErr_Format(PyExc_ValueError, "shared=%R is not a usable file path (it names a "
                         "folder)", shared);
            return -1;
        }
        size_t used = 0;
        if (s[0] != '/') {
            if (getcwd(path, cap) == NULL) {
                PyErr_SetFromErrno(PyExc_OSError);
                return -1;
            }
            used = strlen(path);
            if (used + 1 < cap && (used == 0 || path[used - 1] != '/'))
                path[used++] = '/';
        }
        if (used + (size_t)len + 1 > cap) {
            PyErr_Format(PyExc_ValueError, "shared=%R: the path is too long", shared);
            return -1;
        }
        memcpy(path + used, s, (size_t)len + 1);
        return 2;
    }
    if (!name_ok(s, len)) {
        PyErr_Format(PyExc_ValueError,
                     "shared=%R is not a valid region name: use 1 to 200 of the characters "
                     "A-Z a-z 0-9 . _ - (not '.' or '..'), or a path holding '/'", shared);
        return -1;
    }
    int w = snprintf(path, cap, "%s/slidewin-%s", shared_dir(), s);
    if (w < 0 || (size_t)w >= cap) {
        PyErr_SetString(PyExc_ValueError, "shared: SLIDEWIN_SHM_DIR is too long");
        return -1;
    }
    return 2;
}

PyObject *shared_canonical(PyObject *shared, const char *path)
{
    if (PyUnicode_Check(shared) && strchr(PyUnicode_AsUTF8(shared), '/') != NULL)
        return PyUnicode_DecodeFSDefault(path);
    return Py_NewRef(shared);
}

int shared_open(struct sw_shm *shm, int mode, const char *path, const struct sw_shm_layout *lay)
{
    struct sw_shm_error err;
    int rc;
    if (sw_proc_is_own() == 0) {
        PyErr_Format(PyExc_OSError, "shared=: this process's /proc is not its own (/proc/self "
                     "is not pid %ld: a PID namespace without its own /proc, e.g. unshare "
                     "--pid without --mount-proc, or the host's /proc mounted in a container); "
                     "the liveness of the processes sharing a region would be judged by other "
                     "processes, so shared regions are refused here: mount a /proc of this "
                     "namespace", (long)getpid());
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = mode == 1 ? sw_shm_anonymous(shm, lay, &err) : sw_shm_open(shm, path, lay, &err);
    Py_END_ALLOW_THREADS
    if (rc == SW_OK)
        return 0;
    (void)shared_error(rc, &err, mode == 2 ? path : NULL);
    return -1;
}

PyObject *shared_error(int rc, const struct sw_shm_error *err, const char *path)
{
    if (rc == SW_ENOMEM)
        return PyErr_NoMemory();
    if (rc != SW_EOS) {
        PyErr_SetString(PyExc_ValueError, err->msg);
        return NULL;
    }
    if (err->msg[0] == '\0') {
        errno = err->sys_errno;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    int e = err->sys_errno;
    PyObject *args = Py_BuildValue("(is)", e, err->msg);
    if (args != NULL) {
        PyErr_SetObject(e == EACCES || e == EPERM ? PyExc_PermissionError
                        : e == ENOENT             ? PyExc_FileNotFoundError
                                                  : PyExc_OSError, args);
        Py_DECREF(args);
    }
    return NULL;
}

bool shared_reap_due(struct sw_shm *shm)
{
    return sw_shm_reap_due(shm, sw_time_coarse_ns() / INT64_C(1000000), REAP_EVERY_MS);
}

bool shared_reap(struct sw_shm *shm, uint32_t (*reap)(const void *view), const void *view)
{
    uint32_t freed;
    Py_BEGIN_ALLOW_THREADS
    freed = reap(view);
    Py_END_ALLOW_THREADS
    if (freed > 0)
        shared_notify(shm);
    return freed > 0;
}

void shared_notify(struct sw_shm *shm)
{
    if (atomic_load_explicit(&shm->hdr->waiters, memory_order_acquire) == 0)
        return;
    atomic_fetch_add_explicit(&shm->hdr->release_seq, 1u, memory_order_release);
    sw_futex_wake_all(&shm->hdr->release_seq);
}

int shared_wait(struct sw_shm *shm, uint32_t seq, int64_t until_ns)
{
    int64_t now = sw_time_ns();
    int64_t step = until_ns - now;
    if (step > WAIT_SLICE_NS)
        step = WAIT_SLICE_NS;
    if (step > 0) {
        Py_BEGIN_ALLOW_THREADS
        (void)sw_futex_wait(&shm->hdr->release_seq, seq, step);
        Py_END_ALLOW_THREADS
    }
    return PyErr_CheckSignals();
}

PyObject *shared_unlink(PyObject *Py_UNUSED(m), PyObject *arg)
{
    char path[4096];
    if (arg == Py_True) {
        PyErr_SetString(PyExc_ValueError, "unlink() takes a region's name or path; an "
                        "anonymous region (shared=True) has neither and goes with its processes");
        return NULL;
    }
    int mode = PyUnicode_Check(arg) ? shared_resolve(arg, path, sizeof path) : 0;
    if (mode < 0)
        return NULL;
    if (mode != 2) { /* not a str */
        PyErr_Format(PyExc_TypeError, "unlink() takes a region's name or path (str), not %.100s",
                     type_name_of(arg));
        return NULL;
    }
    struct sw_shm_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sw_region_unlink(path, &err);
    Py_END_ALLOW_THREADS
    if (rc == SW_OK)
        Py_RETURN_TRUE;
    if (rc == SW_EOS && err.sys_errno == ENOENT && err.msg[0] == '\0')
        Py_RETURN_FALSE;
    return shared_error(rc, &err, path);
}
