/* sw_platform.h - what the core needs from the operating system beyond POSIX, in one place.
 *
 * Linux gives each natively: futex waits, /proc (process liveness, stop and freeze states,
 * namespaces, the boot id), open-file-description (OFD) locks, O_TMPFILE, getrandom(2) and
 * posix_fallocate. Elsewhere (macOS, the BSDs), and on Linux when built with SW_PORTABLE=1,
 * the portable versions stand in:
 *   - waits on a shared word: a bounded sleep-poll (50 us doubling to 1 ms), no wake-up call;
 *   - process liveness: kill(pid, 0) only (no start time, so a reused pid reads as alive; no
 *     stopped or frozen state; no namespaces; no boot id: a region made before a reboot is
 *     kept, not reinitialised);
 *   - no OFD locks: a region made in another PID namespace is refused instead of taken over;
 *   - a new region is built in a named temporary file (an unguessable name) and linked in;
 *   - random bytes: getentropy(3);
 *   - space for a region reserved by writing zeros (a full folder fails at creation, as with
 *     posix_fallocate, not later with SIGBUS);
 *   - sleeps and condition-variable waits to a monotonic deadline (clock_nanosleep and
 *     pthread_condattr_setclock are not on macOS): a relative sleep, and a wait to the
 *     deadline converted to the realtime clock (macOS: its relative wait).
 * The Linux build of CI compiles these with SW_PORTABLE=1 too and runs the whole suite on
 * them (see CONTRIBUTING.md), so each fallback path runs on a machine we test. */
#ifndef SW_PLATFORM_H
#define SW_PLATFORM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__linux__) && !(defined(SW_PORTABLE) && SW_PORTABLE)
#define SW_PLATFORM_LINUX 1
#else
#define SW_PLATFORM_LINUX 0
#endif

/** "linux" (futexes, /proc, OFD locks) or "portable" (the fallbacks above). */
const char *sw_platform_name(void);

/** Whether /proc describes processes (Linux only; false in a portable build). */
bool sw_platform_has_proc(void);

/** Fill buf with len (<= 256) random bytes without blocking on an uninitialised pool.
 * @return 0, or -1 (no source of random bytes) */
int sw_platform_random(void *buf, size_t len);

/** Wait until *word != expected, a wake-up, or timeout_ns (>= 0) passes; across processes.
 * @return 0 woken or the value changed, ETIMEDOUT, EINTR */
int sw_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);
/** Wake every process waiting on word (the portable wait polls: nothing to do). */
void sw_futex_wake_all(_Atomic uint32_t *word);
/** Wake one process waiting on word (the portable wait polls: nothing to do). */
void sw_futex_wake_one(_Atomic uint32_t *word);

/** An OFD lock (F_OFD_SETLK) of one byte: type F_RDLCK, F_WRLCK or F_UNLCK.
 * @return 0 or an errno (EAGAIN: held by another open file description; ENOSYS: no OFD
 * locks on this platform) */
int sw_platform_lock_byte(int fd, long byte, short type);

/** A new, unnamed file in folder dir (O_TMPFILE), to publish with sw_platform_link_unnamed.
 * @return the fd, or -1 with errno (EOPNOTSUPP where unavailable: use a named file) */
int sw_platform_open_unnamed(const char *dir);
/** Give the unnamed file fd the name path. @return 0, or -1 with errno (EEXIST: taken) */
int sw_platform_link_unnamed(int fd, const char *path);

/** Reserve size bytes of fd's file (its storage, not a sparse hole). @return 0 or an errno */
int sw_platform_reserve(int fd, off_t size);

/** Sleep until CLOCK_MONOTONIC (sw_time_ns's clock) reads deadline_ns.
 * @return 0, or an errno (EINTR: a signal) */
int sw_platform_sleep_until(int64_t deadline_ns);

/** pthread_cond_init for waits to a monotonic deadline (sw_platform_cond_timedwait).
 * @return 0 or an errno */
int sw_platform_cond_init(pthread_cond_t *cv);
/** pthread_cond_timedwait until CLOCK_MONOTONIC reads deadline_ns (mu held).
 * @return 0 (signalled, or spuriously), ETIMEDOUT, or an errno */
int sw_platform_cond_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ns);

/** The folder of named shared regions when SLIDEWIN_SHM_DIR is not set: /dev/shm where that
 * folder exists (a tmpfs on Linux), else /tmp (macOS). */
const char *sw_platform_shm_dir(void);

#ifdef __cplusplus
}
#endif
#endif /* SW_PLATFORM_H */
