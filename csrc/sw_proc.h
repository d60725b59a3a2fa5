/* sw_proc.h - who is alive: process tokens for locks and slots in shared regions.
 *
 * A process token is `pid << 32 | (start time & 0xffffffff)`, the start time being the
 * process's start in clock ticks since boot (/proc/<pid>/stat, field 22). A pid reused by a
 * new process has another start time, so a token names one process for ever. Tokens are
 * never 0 or 1 (SW_LOCK_PRIVATE, sw_lock.h: pid >= 1). Linux only.
 */
#ifndef SW_PROC_H
#define SW_PROC_H

#include "sw_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** This process's token (computed once, recomputed in the child after fork()).
 * @return the token, never 0 */
uint64_t sw_proc_token(void);

/** Whether the process a token names has died: no such pid, a zombie, or a pid now used by
 * another process. Reads /proc (a few microseconds): call it only on slow paths.
 * @param token a process token (pid bits non-zero)
 * @return true when that process is certainly gone */
bool sw_proc_token_dead(uint64_t token);

/* What sw_proc_token_state finds. */
enum { SW_PROC_GONE = 0, SW_PROC_RUNNING = 1, SW_PROC_STOPPED = 2 };

/** The state of the process a token names: SW_PROC_GONE as sw_proc_token_dead;
 * SW_PROC_STOPPED when it is stopped (SIGSTOP, the cgroup freezer: 'T'; traced: 't');
 * SW_PROC_RUNNING otherwise (running, sleeping, or unknown). Reads /proc: slow paths only. */
int sw_proc_token_state(uint64_t token);
/** sw_proc_token_state, and the state letter of /proc/<pid>/stat in *letter ('?' unknown).
 * 'D' (in the kernel, uninterruptible; a cgroup v1 frozen task) counts as stopped. */
int sw_proc_token_state_letter(uint64_t token, char *letter);
/** Whether the process a token names is frozen by the cgroup freezer (docker pause): its
 * cgroup v2 cgroup.events says "frozen 1", or its v1 freezer.state FROZEN/FREEZING. A frozen
 * task shows 'S' (v2), so its state letter alone calls it running. Reads /proc and /sys a few
 * times: call it only once an owner has held a lock for seconds. */
bool sw_proc_frozen(uint64_t token);

/** Whether /proc is this process's own: its /proc/self names this process's pid. A process in
 * a PID namespace that sees another namespace's /proc (unshare --pid without --mount-proc, a
 * container given the host's /proc) would judge liveness by the wrong processes.
 * @return 1 its own, 0 another namespace's, -1 no /proc (liveness then uses kill()) */
int sw_proc_is_own(void);

/** A counter bumped in the child by every fork() (pthread_atfork), starting at 0: objects
 * that cache per-process things (a process slot) compare it to notice they were forked. */
uint64_t sw_proc_fork_generation(void);

#ifdef __cplusplus
}
#endif
#endif /* SW_PROC_H */
