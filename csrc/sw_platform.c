/* sw_platform.c - the operating system's parts the core uses (see sw_platform.h). */
#if !defined(_GNU_SOURCE) && defined(__linux__)
#define _GNU_SOURCE /* O_TMPFILE, F_OFD_SETLK, linkat flags */
#endif
#include "sw_platform.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if SW_PLATFORM_LINUX
#include <linux/futex.h>
#include <sys/random.h>
#include <sys/syscall.h>
#elif defined(__APPLE__)
#include <sys/random.h> /* getentropy */
#endif

const char *sw_platform_name(void)
{
    return SW_PLATFORM_LINUX ? "linux" : "portable";
}

bool sw_platform_has_proc(void)
{
    return SW_PLATFORM_LINUX;
}

int sw_platform_random(void *buf, size_t len)
{
    if (len > 256)
        return -1;
#if SW_PLATFORM_LINUX
    size_t got = 0;
    while (got < len) {
        /* never wait for the pool (early boot): EAGAIN falls back to the device, which does
         * not block */
        ssize_t r = getrandom((char *)buf + got, len - got, GRND_NONBLOCK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == len)
        return 0;
    /* no getrandom(2) (ENOSYS: a kernel before 3.17, a seccomp filter; EAGAIN: the pool is
     * not ready yet): the device */
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    got = 0;
    while (got < len) {
        ssize_t r = read(fd, (char *)buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return got == len ? 0 : -1;
#else
    /* getentropy: macOS 10.12+, the BSDs, glibc 2.25+, musl */
    return getentropy(buf, len) == 0 ? 0 : -1;
#endif
}

int sw_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    if (timeout_ns < 0)
        timeout_ns = 0;
#if SW_PLATFORM_LINUX
    struct timespec ts;
    ts.tv_sec = (time_t)(timeout_ns / 1000000000);
    ts.tv_nsec = (long)(timeout_ns % 1000000000);
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
    if (r == 0)
        return 0;
    if (errno == EAGAIN)
        return 0; /* the value had already changed */
    return errno;
#else
    /* no address wait that is public and works across processes (macOS has
     * os_sync_wait_on_address from 14.4 only): poll, sleeping 50 us doubling to 1 ms, so a
     * waiter notices a change within about a millisecond */
    int64_t step = 50000;
    while (atomic_load_explicit(word, memory_order_acquire) == expected) {
        if (timeout_ns <= 0)
            return ETIMEDOUT;
        int64_t nap = step < timeout_ns ? step : timeout_ns;
        struct timespec ts = {(time_t)(nap / 1000000000), (long)(nap % 1000000000)};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
            return EINTR;
        timeout_ns -= nap;
        if (step < 1000000)
            step *= 2;
    }
    return 0;
#endif
}

void sw_futex_wake_all(_Atomic uint32_t *word)
{
#if SW_PLATFORM_LINUX
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

void sw_futex_wake_one(_Atomic uint32_t *word)
{
#if SW_PLATFORM_LINUX
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 1, NULL, NULL, 0);
#else
    (void)word;
#endif
}

int sw_platform_lock_byte(int fd, long byte, short type)
{
#if SW_PLATFORM_LINUX
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = byte;
    fl.l_len = 1;
    for (;;) {
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno != EINTR)
            return errno == EACCES ? EAGAIN : errno;
    }
#else
    /* POSIX fcntl locks belong to the process, not to the mapping: released by any close()
     * of the file in this process and shared by its threads, they cannot tell who maps a
     * region. The callers treat their absence as "unknown" and refuse what needs them. */
    (void)fd;
    (void)byte;
    (void)type;
    return ENOSYS;
#endif
}

int sw_platform_open_unnamed(const char *dir)
{
#if SW_PLATFORM_LINUX
    /* linking it needs /proc/self/fd */
    if (access("/proc/self/fd", X_OK) == 0)
        return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#else
    (void)dir;
#endif
    errno = EOPNOTSUPP;
    return -1;
}

int sw_platform_link_unnamed(int fd, const char *path)
{
#if SW_PLATFORM_LINUX
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
#else
    (void)fd;
    (void)path;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

int sw_platform_reserve(int fd, off_t size)
{
#if SW_PLATFORM_LINUX
    return posix_fallocate(fd, 0, size);
#else
    /* (macOS has no posix_fallocate) the zeros written: a full folder fails here */
    static const char zeros[65536];
    if (ftruncate(fd, 0) != 0)
        return errno;
    for (off_t at = 0; at < size;) {
        size_t n = size - at < (off_t)sizeof zeros ? (size_t)(size - at) : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : ENOSPC;
        at += w;
    }
    return 0;
#endif
}

#if !SW_PLATFORM_LINUX
static int64_t mono_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
#endif

static struct timespec ts_of(int64_t ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

int sw_platform_sleep_until(int64_t deadline_ns)
{
#if SW_PLATFORM_LINUX
    struct timespec ts = ts_of(deadline_ns);
    return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
#else
    int64_t left = deadline_ns - mono_ns();
    if (left <= 0)
        return 0;
    struct timespec ts = ts_of(left);
    return nanosleep(&ts, NULL) == 0 ? 0 : errno;
#endif
}

int sw_platform_cond_init(pthread_cond_t *cv)
{
#if SW_PLATFORM_LINUX
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
#else
    return pthread_cond_init(cv, NULL);
#endif
}

int sw_platform_cond_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ns)
{
#if SW_PLATFORM_LINUX
    struct timespec ts = ts_of(deadline_ns);
    return pthread_cond_timedwait(cv, mu, &ts);
#else
    int64_t left = deadline_ns - mono_ns();
    if (left <= 0)
        return ETIMEDOUT;
#if defined(__APPLE__)
    struct timespec rel = ts_of(left);
    return pthread_cond_timedwait_relative_np(cv, mu, &rel);
#else
    /* the condition variable's clock is the realtime one: the deadline moved onto it (a
     * step of that clock during the wait lengthens or shortens it; callers wait in slices) */
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0)
        return errno;
    struct timespec ts = ts_of((int64_t)now.tv_sec * 1000000000 + now.tv_nsec + left);
    return pthread_cond_timedwait(cv, mu, &ts);
#endif
#endif
}

const char *sw_platform_shm_dir(void)
{
    struct stat sb;
    return stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
}
