/* shm_util.h - helpers shared by the tests of shared regions (test_shm*.c, test_keyed*.c): a
 * fresh anonymous region, a fresh path under /tmp, and a child process killed inside a
 * critical section.
 *
 * A child killed at a test hook (sw_test_in_critical) inside a critical section:
 *
 *     struct victim k;
 *     if (victim_fork(&k)) {
 *         ...                          (the child: takes counts, ...)
 *         victim_arm(victim_hang);     (from now on its first hook call hangs)
 *         ...                          (an operation that takes the lock: it hangs inside)
 *         _exit(0);
 *     }
 *     victim_wait(&k);                 (the parent: the child hangs inside now)
 *     victim_kill(&k);                 (SIGKILL, reaped)
 *
 * The child says where it is through a pipe ('x' armed, 'h' hanging inside its critical
 * section, anything else through victim_tell), so the parent kills it there whatever the
 * machine's load: no sleep that a busy machine could outlast. */
#ifndef SW_TEST_SHM_UTIL_H
#define SW_TEST_SHM_UTIL_H

#include "harness.h"
#include "sw_common.h"
#include "sw_shm.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* A fresh anonymous region of layout `lay` (checked). Close with sw_shm_close(). */
static inline void shm_anon(struct sw_shm *s, const struct sw_shm_layout *lay)
{
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_anonymous(s, lay, &err), SW_OK);
}

/* A path under /tmp for this process, tag naming it, and nothing there yet. */
static inline void tmp_path(char *out, size_t cap, const char *tag)
{
    snprintf(out, cap, "/tmp/sw-test-%ld-%s", (long)getpid(), tag);
    unlink(out);
}

struct victim {
    pid_t pid;
    int pipe[2]; /* the child writes, the parent reads */
};

/* The child's end of its pipe (for the hooks, which take no argument). */
static int victim_fd = -1;

/* Fork a child (the pipe checked). @return true in the child, false in the parent */
static inline bool victim_fork(struct victim *k)
{
    CHECK_EQ(pipe(k->pipe), 0);
    k->pid = fork();
    if (k->pid == 0) {
        close(k->pipe[0]);
        victim_fd = k->pipe[1];
        return true;
    }
    close(k->pipe[1]); /* a child that ends without a word reads as the end of the pipe */
    return false;
}

/* In the child: one byte to the parent (a child that cannot tell it gives up). */
static inline void victim_tell(char what)
{
    if (write(victim_fd, &what, 1) != 1)
        _exit(2);
}

/* In the child: `hook` runs at each test hook call inside a critical section from now on;
 * tells the parent ('x'). */
static inline void victim_arm(void (*hook)(void))
{
    sw_test_in_critical = hook;
    victim_tell('x');
}

/* A hook (or the end of one): tells the parent ('h') and hangs there, lock held. */
static inline void victim_hang(void)
{
    victim_tell('h');
    for (;;)
        pause();
}

/* In the child: from now on its k-th hook call hangs there (victim_hang), telling the parent
 * ('x' now, 'h' then). The count lives in the function (one per test file). */
static inline volatile int *victim_countdown(void)
{
    static volatile int left;
    return &left;
}
static inline void victim_hang_at_countdown(void)
{
    volatile int *left = victim_countdown();
    if (*left > 0 && --*left == 0)
        victim_hang();
}
static inline void victim_arm_at(int k)
{
    *victim_countdown() = k;
    victim_arm(victim_hang_at_countdown);
}

/* In the parent: waits for the child to arm its hook (checked), then for its next word.
 * @return 'h' when it hangs inside its critical section, what it told otherwise, or 0 when
 * it ended without a word */
static inline char victim_wait(struct victim *k)
{
    char c = 0;
    CHECK_EQ(read(k->pipe[0], &c, 1), 1);
    if (read(k->pipe[0], &c, 1) != 1)
        c = 0;
    return c;
}

/* In the parent: SIGKILL the child where it is and reap it. */
static inline void victim_kill(struct victim *k)
{
    kill(k->pid, SIGKILL);
    waitpid(k->pid, NULL, 0);
    close(k->pipe[0]);
}

#endif /* SW_TEST_SHM_UTIL_H */
