/* sw_breaker.h - a circuit breaker on the leap array: Sentinel's degrade rules
 * (docs/design.md §15).
 *
 * A product layer over the leap array (sw_leap.h), beside the limiter: a state word
 * (CLOSED / OPEN / HALF_OPEN, with a generation), the time a probe may next pass and the
 * time the open period began (monotonic ns), the probe's owner and the time it passed, and
 * a ring of (total, errors, slow) per bucket, all guarded by one
 * lock (sw_lock, as a limiter's state). The trip test runs in the same critical section as
 * the outcome that caused it, so two threads (or processes) can never both trip, both probe,
 * or miss a trip.
 *
 * Tickets. sw_breaker_try_pass hands out the state word it admitted under (its generation
 * and state): the generation changes with every state change, so only the outcome of a call
 * admitted in the current period decides anything (a call admitted before a trip is counted
 * and decides nothing), and only the probe holds the ticket of a HALF_OPEN period.
 * SW_BRK_ANY stands for "whoever is current" (the bare try_pass/record pair); a cancel with
 * SW_BRK_ANY gives back only a probe the bare sw_breaker_try_pass admitted, never one that
 * sw_breaker_pass_ticket (an entry) holds.
 *
 * Changes. Every call that can change the state reports what changed ("from A to B with
 * value v", at most two changes a call) so that the caller can tell its listeners after the
 * lock is released. The core never calls back. A view may count its changes (seq): each
 * takes the next number under the lock, so that a caller telling listeners from several
 * threads can tell them in the order they were made.
 *
 * Giving up. Every call that takes the lock waits for it as sw_lock_acquire_or_give_up: a lock
 * word held past SW_LOCK_STUCK_NS by a live process that is not in it (damage, a forgery), or
 * the caller's sw_lock_wait_hook, ends the wait with SW_EBUSY, and the call did nothing.
 *
 * State is flat and pointer-free in caller-owned memory (a private object or a shared
 * region); the settings (struct sw_brule) belong to each process.
 */
#ifndef SW_BREAKER_H
#define SW_BREAKER_H

#include "sw_leap.h"
#include "sw_lock.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sentinel's three degrade grades. */
enum sw_brk_grade { SW_BRK_ERROR_RATIO = 0, SW_BRK_ERROR_COUNT = 1, SW_BRK_SLOW_RATIO = 2 };
/* The states (the low two bits of the state word). */
enum sw_brk_state { SW_BRK_CLOSED = 0, SW_BRK_OPEN = 1, SW_BRK_HALF_OPEN = 2 };
/* Events of the breaker's ring. */
enum { SW_BRK_EV_TOTAL = 0, SW_BRK_EV_ERRORS = 1, SW_BRK_EV_SLOW = 2, SW_BRK_N_EVENTS = 3 };

/* The ticket of a caller that does not know which call it records (the bare pair): the
 * current period's outcome, the probe's when HALF_OPEN. */
#define SW_BRK_ANY UINT64_MAX

/* Limits. */
#define SW_BRK_MAX_RECOVERY_S 1.0e9     /* about 31 years */
#define SW_BRK_MAX_COUNT 9.0e15

struct sw_breaker_cfg {
    int grade;              /* enum sw_brk_grade */
    double threshold;       /* error ratio or slow ratio in [0, 1]; error count >= 0 */
    int64_t slow_rt_ms;     /* slow grade: a call is slow when its RT is > this (>= 0) */
    int64_t min_requests;   /* >= 0: no trip below this many calls in the window */
    double recovery_s;      /* >= 0: how long OPEN lasts before a probe may pass */
    double probe_timeout_s; /* > 0: a probe silent this long counts as failed; INFINITY:
                               wait for ever */
    int64_t interval_ms;    /* the window, as sw_leap_cfg */
    uint32_t sample_count;
};


/** Fill a configuration with Sentinel's defaults (error ratio 0, slow_rt_ms 0,
 * min_requests 5, recovery 10 s, one bucket of 1000 ms) and a probe timeout of 60 s. */
void sw_breaker_cfg_default(struct sw_breaker_cfg *cfg);
/** Check a configuration and say what is wrong.
 * @param err receives the parameter and message on SW_EINVAL (may be NULL)
 * @return SW_OK or SW_EINVAL */
int sw_breaker_check_ex(const struct sw_breaker_cfg *cfg, struct sw_cfg_error *err);

/* A process's settings, derived from a configuration. */
struct sw_brule {
    uint32_t grade;
    uint32_t pad_;
    double threshold;
    int64_t slow_rt_ms;     /* -1 for the error grades: nothing is slow */
    int64_t min_requests;
    int64_t recovery_ns;
    int64_t probe_timeout_ns; /* INT64_MAX: a probe may take for ever */
    int64_t interval_ms;
    uint32_t sample_count;
    uint32_t pad2_;
};

/* Lifetime totals (never reset). */
enum {
    SW_BRK_T_TOTAL = 0,     /* outcomes recorded */
    SW_BRK_T_ERRORS = 1,
    SW_BRK_T_SLOW = 2,
    SW_BRK_T_REFUSED = 3,   /* try_pass said no */
    SW_BRK_T_PROBES = 4,    /* probes let through */
    SW_BRK_T_CANCELLED = 5, /* probes cancelled (the reap's included) */
    SW_BRK_T_PROBE_TIMEOUTS = 6, /* probes silent past the probe timeout (failed) */
    SW_BRK_T_TIMED_OUT = 7, /* calls that ran past their caller's time limit (failures) */
    SW_BRK_T_WORDS = 8
};

/* The shared part: header, then the ring at off_leap. */
struct sw_bstate {
    uint32_t magic;              /* SW_BRK_MAGIC */
    uint32_t size;               /* bytes of the whole state, ring included */
    uint32_t off_leap;           /* byte offset of the ring */
    uint32_t pad_;
    sw_lock lock;
    _Atomic uint64_t word;       /* generation << 2 | state; read without the lock */
    int64_t next_ns;             /* OPEN: when a probe may pass (monotonic ns) */
    int64_t opened_ns;           /* OPEN: when this open period began (a trip, a failed
                                    probe; a cancel keeps it) */
    int64_t probe_ns;            /* HALF_OPEN: when the probe passed */
    _Atomic uint64_t probe_owner;/* HALF_OPEN: the lock token of the probe's process */
    _Atomic int64_t reap_ns;     /* when the probe owner was last checked for life */
    int64_t totals[SW_BRK_T_WORDS];
    int64_t transitions[3];      /* changes into each state */
    uint64_t probe_bare;         /* HALF_OPEN: the probe was admitted by sw_breaker_try_pass
                                    (the bare pair), not sw_breaker_pass_ticket */
};

#define SW_BRK_MAGIC 0x73774272u /* "swBr" */

/* How one process uses a breaker state (process-local). */
struct sw_bview {
    struct sw_bstate *st;
    const struct sw_brule *rule;
    uint64_t token;              /* SW_LOCK_PRIVATE, or SW_LOCK_PROCESS for a shared state */
    uint64_t *seq;               /* NULL, or the count of the changes made through this view
                                    (process-local; incremented under the lock) */
};

/* A private breaker: settings and state side by side (the ring follows). */
struct sw_breaker {
    struct sw_brule rule;
    struct sw_bstate st;
};

/* What changed in one call (for the listeners, called by the caller after unlocking). */
struct sw_brk_change {
    uint64_t seq;                /* the view's count after this change (*v->seq), or 0 */
    uint32_t from, to;
    double value;                /* the trip's ratio or count, a failed probe's RT or 1.0 for
                                    an error; NAN when there is none */
};
struct sw_brk_changes {
    uint32_t n;
    struct sw_brk_change c[2];
};

/** Derive the settings from a configuration. @return SW_OK or SW_EINVAL */
int sw_brule_init(struct sw_brule *rule, const struct sw_breaker_cfg *cfg);
/** Bytes a state of this window needs (0 when the window is invalid). */
size_t sw_bstate_size(int64_t interval_ms, uint32_t sample_count);
/** Initialise a state in caller-owned memory of sw_bstate_size() bytes: CLOSED, empty.
 * @return SW_OK or SW_EINVAL */
int sw_bstate_init(struct sw_bstate *st, int64_t interval_ms, uint32_t sample_count);
/** Check a state read from a shared region (input): the layout sw_bstate_init gives for this
 * window within `size` bytes, a valid state word, indices in range.
 * @return SW_OK, or SW_EINVAL when something is off */
int sw_bstate_validate(const struct sw_bstate *st, size_t size, int64_t interval_ms,
                       uint32_t sample_count);
/** On attaching to a shared state: under its lock, restore what a process killed inside a
 * critical section may have left (the ring's derived totals, a bad state word, a HALF_OPEN
 * period whose probe owner is no process). @return SW_OK or SW_EBUSY (gave up) */
int sw_bstate_check_repair(const struct sw_bview *v);

/** Bytes a private breaker of this configuration needs. @return 0 when cfg is invalid */
size_t sw_breaker_size(const struct sw_breaker_cfg *cfg);
/** Initialise a private breaker in caller-owned memory of sw_breaker_size(cfg) bytes.
 * @return SW_OK or SW_EINVAL */
int sw_breaker_init(struct sw_breaker *br, const struct sw_breaker_cfg *cfg);
/** A private breaker's view (seq NULL). */
void sw_breaker_view(struct sw_breaker *br, struct sw_bview *out);
/** Replace a view's settings under the state's lock (the state is kept, but for
 * sw_bview_swap_rule_locked's rescheduling).
 * @return SW_OK or SW_EBUSY (gave up: nothing changed) */
int sw_bview_set_rule(const struct sw_bview *v, struct sw_brule *dst,
                      const struct sw_brule *src);
/** sw_bview_set_rule with the lock held (sw_bview_lock): *dst = *src (dst is the view's
 * rule); when the recovery time changed while OPEN, the next probe moves at once to
 * opened_ns + the new recovery time (shorter: sooner; longer: later). */
void sw_bview_swap_rule_locked(const struct sw_bview *v, struct sw_brule *dst,
                               const struct sw_brule *src);
/** Take the state's lock as a call does (repairing after a dead owner), or give up: for a
 * caller that changes what decisions read under it (the binding's update()).
 * @return SW_OK (held: sw_bview_unlock it) or SW_EBUSY (gave up: not held) */
int sw_bview_lock(const struct sw_bview *v);
/** Release the lock sw_bview_lock took. */
void sw_bview_unlock(const struct sw_bview *v);

/** Admission: CLOSED passes (no lock: one atomic load); OPEN refuses until next_ns, then
 * lets exactly one caller through as the probe (OPEN -> HALF_OPEN); HALF_OPEN refuses (a
 * shared state's probe held by a dead process, or by no process, is cancelled first, checked
 * at most every 100 ms, and the caller may probe). A next_ns further than opened_ns (or now,
 * when earlier) + this view's recovery is brought back to it (damage; a shorter recovery of
 * this process).
 *
 * Probe timeout (every call that decides: try_pass, record, cancel): a HALF_OPEN probe
 * silent for this view's probe_timeout_ns counts as failed: OPEN again, opened at its
 * deadline (probe_ns + probe_timeout_ns) for the recovery time, whenever a call notices; its
 * outcome, when it comes, decides nothing (its ticket is of a past period; a bare record
 * meets OPEN). A probe_ns later than now (damage) is brought back to now.
 * @param now_ns the time, or SW_NOW (the coarse clock, sw_time_coarse_ns, read under the
 *        lock: every time of a breaker is on it)
 * @param ticket receives the ticket of an admitted call (for record / cancel)
 * @param chg receives the changes (n = 0 when none)
 * @return 1 when the call may run, 0 when refused, SW_EBUSY when it gave up (nothing done) */
int sw_breaker_try_pass(const struct sw_bview *v, int64_t now_ns, uint64_t *ticket,
                        struct sw_brk_changes *chg);
/** sw_breaker_try_pass for a caller that keeps its ticket (an entry): its probe is given back
 * only by a cancel with its ticket. */
int sw_breaker_pass_ticket(const struct sw_bview *v, int64_t now_ns, uint64_t *ticket,
                           struct sw_brk_changes *chg);
/** The outcome of an admitted call: counted in the window (total, errors, slow), then, when
 * the ticket is current (or SW_BRK_ANY): HALF_OPEN: an error or a slow call reopens
 * (next = now + recovery), else closes and empties the window; CLOSED: with total >=
 * min_requests and the grade's value > threshold (slow ratio: or == 1.0 == threshold), opens.
 * A timed-out probe is reopened first (see sw_breaker_try_pass).
 * @param rt_ms the response time (>= 0, finite)
 * @return SW_OK, or SW_EINVAL for a bad rt_ms, SW_EBUSY when it gave up (nothing done) */
int sw_breaker_record(const struct sw_bview *v, double rt_ms, bool error, uint64_t ticket,
                      int64_t now_ns, struct sw_brk_changes *chg);
/** sw_breaker_record for a call that ran past its caller's time limit (call_timeout_s): an
 * error, slow for the slow grade whatever its RT, and counted in SW_BRK_T_TIMED_OUT. */
int sw_breaker_record_timeout(const struct sw_bview *v, double rt_ms, uint64_t ticket,
                              int64_t now_ns, struct sw_brk_changes *chg);
/** An admitted call that did not run: when it is the probe (its ticket, or SW_BRK_ANY while
 * HALF_OPEN with a probe the bare sw_breaker_try_pass admitted), HALF_OPEN -> OPEN with
 * next_ns unchanged (Sentinel #1638), so the next caller probes at once; otherwise nothing
 * (a probe that timed out by now_ns is reopened for the recovery time instead, and the
 * cancel decides nothing).
 * @param now_ns the time (SW_NOW: the coarse clock), for the probe timeout
 * @return 1 when a probe was cancelled, 0 when not, SW_EBUSY when it gave up (nothing done) */
int sw_breaker_cancel(const struct sw_bview *v, uint64_t ticket, int64_t now_ns,
                      struct sw_brk_changes *chg);

/** The state now (no lock). */
static inline int sw_breaker_state(const struct sw_bview *v)
{
    return (int)(atomic_load_explicit(&v->st->word, memory_order_acquire) & 3u);
}
/** ns until a probe may pass, as the next sw_breaker_try_pass at now_ns would meet it: -1
 * when CLOSED, max(0, next - now) when OPEN (next bounded as try_pass bounds it), the recovery
 * time when HALF_OPEN (a probe is out; if it fails, that long), or, when the probe timed out
 * by now, the wait left of the open period its timeout began. Changes nothing.
 * @return SW_OK or SW_EBUSY (gave up; *out is -1) */
int sw_breaker_retry_ns(const struct sw_bview *v, int64_t now_ns, int64_t *out);

struct sw_brk_stats {
    int64_t total, errors, slow;  /* in the window at now */
    int state;
    int64_t retry_ns;             /* as sw_breaker_retry_ns */
};
/** Read the window at now_ns (SW_NOW: the coarse clock) under the lock.
 * @return SW_OK or SW_EBUSY (gave up) */
int sw_breaker_stats(const struct sw_bview *v, int64_t now_ns, struct sw_brk_stats *out);

struct sw_brk_totals {
    int64_t t[SW_BRK_T_WORDS];
    int64_t transitions[3];
};
/** Read the lifetime totals under the lock. @return SW_OK or SW_EBUSY (gave up) */
int sw_breaker_totals(const struct sw_bview *v, struct sw_brk_totals *out);

/** A state's ring. */
static inline struct sw_leap *sw_bstate_leap(struct sw_bstate *st)
{
    return (struct sw_leap *)(void *)((char *)st + st->off_leap);
}

#ifdef __cplusplus
}
#endif
#endif /* SW_BREAKER_H */
