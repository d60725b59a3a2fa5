/* sw_limiter.h - a limiter: a node (statistics) + a controller, behind one lock.
 *
 * Every admission is one critical section: read the clock (when the caller gave none),
 * roll the window, check and count (DESIGN.md §6). Under any number of threads no window
 * ever admits more than its limit, with or without Python's GIL.
 *
 * State is flat and pointer-free in caller-owned memory of sw_limiter_size(cfg) bytes.
 */
#ifndef SW_LIMITER_H
#define SW_LIMITER_H

#include "sw_node.h"
#include "sw_reject.h"
#include "sw_throttle.h"
#include "sw_warmup.h"

#ifdef __cplusplus
extern "C" {
#endif

enum sw_grade { SW_GRADE_QPS = 0, SW_GRADE_CONCURRENCY = 1 };
enum sw_behavior {
    SW_REJECT = 0,
    SW_WARM_UP = 1,
    SW_THROTTLE = 2,
    SW_WARM_UP_THROTTLE = 3
};

struct sw_limiter_cfg {
    int grade;                 /* enum sw_grade */
    int behavior;              /* enum sw_behavior; SW_REJECT for concurrency */
    double count;              /* qps (per second) or concurrency, >= 0 */
    double warm_up_s;          /* >= 0 */
    double cold_factor;        /* > 1 */
    int64_t max_queueing_ms;   /* >= 0 */
    int64_t occupy_timeout_ms; /* >= 0 */
    int64_t interval_ms;       /* the window, as sw_leap_cfg */
    uint32_t sample_count;
};

/** Fill a configuration with Sentinel's defaults (qps grade, reject, count 0, warm-up 10 s,
 * cold factor 3, queue 500 ms, occupy 500 ms, 2 x 500 ms window). */
void sw_limiter_cfg_default(struct sw_limiter_cfg *cfg);

/** Check a configuration. @return SW_OK or SW_EINVAL (the binding names the parameter) */
int sw_limiter_check(const struct sw_limiter_cfg *cfg);

struct sw_limiter {
    sw_lock lock;
    uint32_t grade;
    uint32_t behavior;
    uint32_t off_node;        /* byte offset of the node */
    uint32_t size;
    uint32_t pad_;
    double count;             /* threshold */
    double limit;             /* L = count * interval_ms / 1000 (QPS grade) */
    double min_rate;          /* rule (c): min(q, one request per window), per second */
    int64_t max_queue_ns;
    int64_t occupy_timeout_ms;
    struct sw_warmup warm;
    struct sw_throttle thr;
};

/** Bytes a limiter of this configuration needs. @return 0 when cfg is invalid */
size_t sw_limiter_size(const struct sw_limiter_cfg *cfg);
/** Initialise in caller-owned memory of sw_limiter_size(cfg) bytes.
 * @return SW_OK, SW_EINVAL or SW_ERANGE */
int sw_limiter_init(struct sw_limiter *lim, const struct sw_limiter_cfg *cfg);

/** The limiter's node (statistics). */
static inline struct sw_node *sw_limiter_node(struct sw_limiter *lim)
{
    return (struct sw_node *)(void *)((char *)lim + lim->off_node);
}
/** A locked view of the limiter's window (for a Metric object). */
void sw_limiter_window(struct sw_limiter *lim, struct sw_window *out);

/* Flags of sw_limiter_decide. */
#define SW_F_TRY 1u          /* never wait: a throttle admits only when the wait is 0 */
#define SW_F_PRIORITIZED 2u  /* may borrow from the next window (reject + qps only) */
#define SW_F_NO_BLOCK 4u     /* a refusal is not counted (an internal retry) */
#define SW_F_ENTRY 8u        /* hold an in-flight count when admitted (qps grade too) */
#define SW_F_RETRY 16u       /* on refusal, compute retry_ns (else it stays -1) */

enum sw_verdict {
    SW_PASS = 0,    /* admitted (after wait_ns) */
    SW_BLOCK = 1,   /* refused now */
    SW_NEVER = 2    /* can never pass as configured (qps 0, n above the limit) */
};

struct sw_decision {
    int verdict;       /* enum sw_verdict */
    int occupied;      /* admitted by borrowing from the next window */
    int64_t wait_ns;   /* admitted: the wait before proceeding (0 = now) */
    int64_t retry_ns;  /* refused, with SW_F_RETRY: ns until the same request could pass,
                          -1 unknown */
    int64_t now_ns;    /* the time of the decision (the clock read under the lock, or the
                          caller's now_ns): an admitted request proceeds at now_ns + wait_ns */
};

/** Make one admission decision and count it (PASS, BLOCK, or OCCUPIED_PASS + a future PASS).
 * @param lim the limiter
 * @param n request size >= 1
 * @param now_ns time of the decision, or SW_NOW to read the clock under the lock
 * @param flags SW_F_*
 * @param out the decision
 * @return SW_OK, or SW_EINVAL for n < 1 */
int sw_limiter_decide(struct sw_limiter *lim, int64_t n, int64_t now_ns, unsigned flags,
                      struct sw_decision *out);

/** Count n of event ev at now_ns (e.g. the final BLOCK of a request that retried).
 * @return SW_OK, SW_EEVENT or SW_EINVAL */
int sw_limiter_count(struct sw_limiter *lim, uint32_t ev, int64_t n, int64_t now_ns);

enum sw_outcome { SW_OUT_SUCCESS = 0, SW_OUT_EXCEPTION = 1, SW_OUT_NONE = 2 };
/** End an entry: record SUCCESS (n) and RT, or EXCEPTION (n), or nothing; release n in
 * flight (never below 0).
 * @param rt_ms the response time (SUCCESS only) @return SW_OK or SW_EINVAL */
int sw_limiter_exit(struct sw_limiter *lim, int64_t n, int64_t rt_ms, int outcome,
                    int64_t now_ns);

/** Give back n in flight. @return SW_OK, or SW_ESTATE when fewer than n are in flight */
int sw_limiter_release(struct sw_limiter *lim, int64_t n);

/** Requests in flight now. */
int64_t sw_limiter_in_flight(struct sw_limiter *lim);

struct sw_stats {
    int64_t pass, block, success, exception, rt_sum, min_rt; /* over the window */
    int64_t in_flight, waiting;
    int64_t occupied_pass;
};
/** Read the window's statistics at now_ns (SW_NOW: the coarse clock). */
void sw_limiter_stats(struct sw_limiter *lim, int64_t now_ns, struct sw_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* SW_LIMITER_H */
