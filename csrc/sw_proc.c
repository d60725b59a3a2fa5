/* sw_proc.c - process tokens and liveness from /proc, or kill(pid, 0) where there is none
 * (see sw_proc.h, sw_platform.h). */
#include "sw_proc.h"

#include "sw_platform.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static _Atomic uint64_t token_cache;     /* 0: not computed in this process yet */
static _Atomic uint64_t fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Read /proc/<pid>/stat: the state letter and the start time. @return 0, or -1 when the
 * file cannot be read (no such process) or parsed */
static int read_stat(long pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    if (!sw_platform_has_proc())
        return -1;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return -1;
    buf[got] = '\0';
    /* the command name (field 2) is in parentheses and may hold anything: skip past the
     * last ')' */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* fields 3 (state) .. 22 (starttime): skip 19 separators */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
    }
    char *end = NULL;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p)
        return -1;
    *start = (uint64_t)v;
    return 0;
}

static void child_after_fork(void)
{
    atomic_store(&token_cache, 0);
    atomic_fetch_add(&fork_generation, 1);
}

static void register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, child_after_fork);
}

uint64_t sw_proc_token(void)
{
    uint64_t t = atomic_load_explicit(&token_cache, memory_order_relaxed);
    if (t != 0)
        return t;
    pthread_once(&atfork_once, register_atfork);
    long pid = (long)getpid();
    char state;
    uint64_t start = 0;
    if (read_stat(pid, &state, &start) != 0)
        start = 0; /* no /proc: the pid alone (liveness then falls back to kill(pid, 0)) */
    t = ((uint64_t)(uint32_t)pid << 32) | (start & UINT64_C(0xffffffff));
    atomic_store_explicit(&token_cache, t, memory_order_relaxed);
    return t;
}

int sw_proc_token_state_letter(uint64_t token, char *letter)
{
    long pid = (long)(token >> 32);
    if (letter != NULL)
        *letter = '?';
    if (pid <= 0)
        return SW_PROC_RUNNING;
    char state;
    uint64_t start;
    if (read_stat(pid, &state, &start) != 0) {
        /* no readable /proc entry: ask the kernel (EPERM: it exists, another user's). A
         * child of this process that exited and is not reaped yet still answers kill():
         * waitid tells, without reaping it (WNOWAIT) */
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            si.si_pid == (pid_t)pid)
            return SW_PROC_GONE;
        return kill((pid_t)pid, 0) != 0 && errno == ESRCH ? SW_PROC_GONE : SW_PROC_RUNNING;
    }
    if (letter != NULL)
        *letter = state;
    if (state == 'Z' || state == 'X' || state == 'x')
        return SW_PROC_GONE; /* killed, not yet reaped by its parent */
    if ((token & UINT64_C(0xffffffff)) != 0 &&
        (start & UINT64_C(0xffffffff)) != (token & UINT64_C(0xffffffff)))
        return SW_PROC_GONE; /* the pid is another process's now */
    /* (made without /proc: no start time to compare, the pid is there). 'D': in the kernel,
     * uninterruptible (a task frozen by the cgroup v1 freezer shows it): not in user code */
    return state == 'T' || state == 't' || state == 'D' ? SW_PROC_STOPPED : SW_PROC_RUNNING;
}

int sw_proc_token_state(uint64_t token)
{
    return sw_proc_token_state_letter(token, NULL);
}

/* Read a small file into buf (NUL-terminated). @return its length, or -1 */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, buf, size - 1);
    close(fd);
    if (got < 0)
        return -1;
    buf[got] = '\0';
    return got;
}

/* The mount point of the cgroup v2 hierarchy (want_v1_freezer false) or of the v1 freezer
 * hierarchy, and that mount's root, from /proc/self/mountinfo. @return 0 found, -1 not */
static int cgroup_mount(bool want_v1_freezer, char *mnt, size_t mnt_size, char *root,
                        size_t root_size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return -1;
    char line[1024];
    int found = -1;
    while (found != 0 && fgets(line, sizeof line, f) != NULL) {
        /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
        char *sep = strstr(line, " - ");
        if (sep == NULL)
            continue;
        char fstype[32], superopts[256] = "";
        if (sscanf(sep + 3, "%31s %*s %255s", fstype, superopts) < 1)
            continue;
        bool hit = want_v1_freezer ? strcmp(fstype, "cgroup") == 0 &&
                                         strstr(superopts, "freezer") != NULL
                                   : strcmp(fstype, "cgroup2") == 0;
        if (!hit)
            continue;
        char r[256], m[256];
        if (sscanf(line, "%*s %*s %*s %255s %255s", r, m) != 2)
            continue;
        snprintf(mnt, mnt_size, "%s", m);
        snprintf(root, root_size, "%s", r);
        found = 0;
    }
    fclose(f);
    return found;
}

bool sw_proc_frozen(uint64_t token)
{
    long pid = (long)(token >> 32);
    if (pid <= 0)
        return false;
    char path[64], groups[2048];
    if (!sw_platform_has_proc())
        return false; /* (no cgroup freezer) */
    snprintf(path, sizeof path, "/proc/%ld/cgroup", pid);
    if (read_small(path, groups, sizeof groups) <= 0)
        return false;
    for (char *line = groups; line != NULL && *line != '\0';) {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        /* "hierarchy-id:controllers:path": v2 is "0::path", v1's freezer names "freezer" */
        char *c1 = strchr(line, ':'), *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        if (c2 != NULL) {
            bool v2 = c2 == c1 + 1 && strncmp(line, "0:", 2) == 0;
            *c2 = '\0';
            bool v1 = !v2 && strstr(c1 + 1, "freezer") != NULL;
            const char *cg = c2 + 1;
            char mnt[256], root[256], file[1024], buf[512];
            if ((v1 || v2) && cgroup_mount(v1, mnt, sizeof mnt, root, sizeof root) == 0) {
                size_t rl = strlen(root);
                if (strcmp(root, "/") != 0 && strncmp(cg, root, rl) == 0)
                    cg += rl; /* the mount shows a sub-tree: the path below it */
                snprintf(file, sizeof file, "%s%s%s/%s", mnt, *cg == '/' ? "" : "/", cg,
                         v2 ? "cgroup.events" : "freezer.state");
                if (read_small(file, buf, sizeof buf) > 0) {
                    if (v2 && (strncmp(buf, "frozen 1", 8) == 0 || strstr(buf, "\nfrozen 1")))
                        return true;
                    if (v1 && (strncmp(buf, "FROZEN", 6) == 0 || strncmp(buf, "FREEZING", 8) == 0))
                        return true;
                }
            }
        }
        line = next;
    }
    return false;
}

int sw_proc_is_own(void)
{
    char buf[32];
    if (!sw_platform_has_proc())
        return -1;
    ssize_t got = readlink("/proc/self", buf, sizeof buf - 1);
    if (got <= 0)
        return -1;
    buf[got] = '\0';
    char *end = NULL;
    long pid = strtol(buf, &end, 10);
    return end != buf && *end == '\0' && pid == (long)getpid() ? 1 : 0;
}

bool sw_proc_token_dead(uint64_t token)
{
    return sw_proc_token_state(token) == SW_PROC_GONE;
}

uint64_t sw_proc_fork_generation(void)
{
    pthread_once(&atfork_once, register_atfork);
    return atomic_load_explicit(&fork_generation, memory_order_relaxed);
}
