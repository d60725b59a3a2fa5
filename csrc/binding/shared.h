/* shared.h - the binding's side of `shared=`: names to paths, opening regions (errors become
 * the right Python exceptions), reaping dead processes, waking waiters across processes. */
#ifndef SW_BINDING_SHARED_H
#define SW_BINDING_SHARED_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include "sw_shm.h"

/* Longest name of the allowed form [A-Za-z0-9._-]{1,200}. */
#define SHARED_NAME_MAX 200
/* A dead process's in-flight counts come back within this (plus one decision). */
#define REAP_EVERY_MS 200

/** Resolve `shared=`: None -> 0 (private); True -> 1 (anonymous); a name or a path -> 2 with
 * the file's path in `path`. @return 0/1/2, or -1 with TypeError/ValueError set */
int shared_resolve(PyObject *shared, char *path, size_t cap);

/** What `.shared` reports (shared= as shared_resolve took it, mode 1 or 2): the name, True,
 * or for a path the absolute path it resolved to. @return a new reference, or NULL */
PyObject *shared_canonical(PyObject *shared, const char *path);

/** The folder of named regions: SLIDEWIN_SHM_DIR, else the platform's (/dev/shm). */
const char *shared_dir(void);

/** Open (or create) a region; errors become ValueError (layout), PermissionError, OSError.
 * @param mode 1 anonymous, 2 file @return 0, or -1 with an exception set */
int shared_open(struct sw_shm *shm, int mode, const char *path, const struct sw_shm_layout *lay);
/** A failed open or read of a region (rc, err) as the exception: MemoryError; ValueError for a
 * file that is not a good region; else OSError of (errno, message), PermissionError or
 * FileNotFoundError by the errno (no message: from errno, naming path). @return NULL */
PyObject *shared_error(int rc, const struct sw_shm_error *err, const char *path);

/** Is a reap of dead processes' slots due (rate-limited across processes)? */
bool shared_reap_due(struct sw_shm *shm);
/** Reap dead processes' slots now: reap(view) with the GIL released, then wake the waiters
 * when anything was given back. @return whether anything was given back */
bool shared_reap(struct sw_shm *shm, uint32_t (*reap)(const void *view), const void *view);

/** Wake the waiters of every process after a release (cheap when none waits). */
void shared_notify(struct sw_shm *shm);

/** Wait for a release in any process: until the release counter moves from `seq`, until
 * `until_ns`, or one slice; the GIL released; then the signal handlers run.
 * @return 0, or -1 with an exception set */
int shared_wait(struct sw_shm *shm, uint32_t seq, int64_t until_ns);

/** slidewin._core.unlink(name) -> bool */
PyObject *shared_unlink(PyObject *m, PyObject *arg);

#endif /* SW_BINDING_SHARED_H */
