/* sw_limiter.h - a limiter: a node (statistics) + a controller, behind one lock.
 *
 * Every admission is one critical section: read the clock (when the caller gave none),
 * roll the window, check and count (docs/design.md §7). Under any number of threads no window
 * ever admits more than its limit, with or without Python's GIL.
 *
 * State is flat and pointer-free in caller-owned memory (see struct sw_lstate).
 */
#ifndef SW_LIMITER_H
#define SW_LIMITER_H

#include "sw_node.h"
#include "sw_reject.h"
#include "sw_shm.h"
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
    uint32_t shadow;           /* 1: decide and count as configured, admit everything
                                  (see SW_F_SHADOW) */
};

/** Fill a configuration with Sentinel's defaults (qps grade, reject, count 0, warm-up 10 s,
 * cold factor 3, queue 500 ms, occupy 500 ms, 2 x 500 ms window). */
void sw_limiter_cfg_default(struct sw_limiter_cfg *cfg);



/** Check a configuration. @return SW_OK or SW_EINVAL */
int sw_limiter_check(const struct sw_limiter_cfg *cfg);
/** Check a configuration and say what is wrong (the one source of truth for the binding).
 * @param err receives the parameter and message when the result is SW_EINVAL (may be NULL)
 * @return SW_OK or SW_EINVAL */
int sw_limiter_check_ex(const struct sw_limiter_cfg *cfg, struct sw_cfg_error *err);

/* A limiter is split in two:
 * - its settings (`struct sw_rule`: behavior, threshold, queue, warm-up parameters), which
 *   belong to each process, derived from a configuration;
 * - its state (`struct sw_lstate`: the lock, the node's windows and in-flight count, the
 *   warm-up tokens, the throttle's last slot), flat and pointer-free, which may live in
 *   memory shared by processes. Its layout depends only on interval_ms and sample_count, so
 *   processes with different settings can share one state (each decides with its own).
 * `struct sw_limiter` puts both side by side for a process-private limiter. */
struct sw_rule {
    uint32_t grade;
    uint32_t behavior;
    double count;             /* threshold */
    double limit;             /* L = count * interval_ms / 1000 (QPS grade) */
    double min_rate;          /* rule (c): min(q, one request per window), per second */
    int64_t max_queue_ns;
    int64_t occupy_timeout_ms;
    int64_t interval_ms;
    uint32_t sample_count;
    uint32_t shadow;          /* decisions as with SW_F_SHADOW */
    struct sw_warmup warm;
    struct sw_adapt_cfg adapt; /* algo SW_ADAPT_NONE, or an adaptive concurrency limit: the
                                  limit in force is learned (the node's adapt state), `count`
                                  is max_limit (sw_rule_set_adapt) */
};

/* The state is laid out for processes sharing it (docs/design.md, "Region layout"): two
 * 64-byte lines (a region puts the state on a 64-byte boundary), then the node.
 * - Line 0: what a rejecting QPS decision only reads (the node's offset) and what the other
 *   behaviors write (warm-up tokens, the throttle's last slot).
 * - Line 1: the lock, and `hot`: the counts such a decision writes, so that a decision in
 *   the current bucket writes one cache line, the lock's. hot[] holds, for the head bucket
 *   of the limiter's window (SW_HOT_SEC), of the minute window (SW_HOT_MIN) and for the
 *   lifetime totals (SW_HOT_LIFE), the PASS and BLOCK counts (+0, +1) as absolute values:
 *   the true count is max(the slot's or total's own word, hot[]). A decision at the head
 *   of both windows raises hot[] only (sw_decide's fast path); every other operation first
 *   raises the words in the rings and totals to hot[] and zeroes hot[] (sw_lstate_enter),
 *   works on the node as usual, then loads hot[] back from it (sw_lstate_leave). Each step
 *   only raises a word to a maximum or lowers hot[] to a value already stored elsewhere,
 *   so a process killed at any point leaves max(...) exact, and the repair (sw_lstate_repair)
 *   redoes the same steps. The node's windows are never read without sw_lstate_enter. */
enum { SW_HOT_SEC = 0, SW_HOT_MIN = 2, SW_HOT_LIFE = 4, SW_HOT_WORDS = 6 };
struct sw_lstate {
    uint32_t off_node;        /* byte offset of the node from the state's start */
    uint32_t size;            /* total bytes of the state, node included */
    struct sw_warm_state warm;
    struct sw_throttle thr;
    /* 1 while a process slot may hold a lease (sw_decide.c): every step that may move a
     * head bucket, and a refusal, first takes the leases back (sw_lease_reclaim). Written
     * only when it changes, so that it stays in every deciding core's cache */
    _Atomic uint32_t lease_out;
    uint32_t lease_hi;        /* 1 + the highest slot ever leased (under the lock) */
    uint64_t pad_;            /* zero: puts the lock at byte 64 */
    sw_lock lock;
    int64_t hot[SW_HOT_WORDS];
    /* for observers reading the state without the lock (sw_lstate_copy): odd from the start
     * of sw_lstate_enter to the end of sw_lstate_leave, and a new value each time. While it
     * stays even, no head bucket moves and hot[] holds the heads' counts (only a decision at
     * the heads changes it, raising it); a copy taken across a change may pair hot[] with a
     * newer head. A hint only: a process killed inside leaves it odd until the next settle. */
    _Atomic uint64_t hot_seq;
};
struct sw_limiter {
    struct sw_rule rule;
    struct sw_lstate st;      /* last: its node follows it */
};

/* How one process uses a limiter state: process-local, holds pointers, never shared. */
struct sw_view {
    struct sw_lstate *st;
    const struct sw_rule *rule;
    uint64_t token;             /* lock token: SW_LOCK_PRIVATE, or SW_LOCK_PROCESS */
    struct sw_proc_slot *slots; /* a shared state's process table, or NULL */
    uint32_t n_slots;
    int32_t my_slot;            /* this process's slot, or -1 */
    int64_t *held;              /* what the view's object holds of my_slot's count (>= 0: a
                                   release of more is another object's), given back when the
                                   object goes, or NULL; changed with the slot, under the lock */
    uint32_t lease;             /* this view's lease tag (1..SW_LEASE_TAG_MAX: it decides on
                                   leases of the head bucket in my_slot), or 0 */
};

/** Take a view's state lock (as a decision does: with the view's token, repairing the state
 * when the lock is taken over from a dead process). O(1), never sleeps for long. */
void sw_view_lock(const struct sw_view *v);
/** sw_view_lock for a caller that can give up (sw_lock_wait_hook; a destructor).
 * @return false when it gave up (the lock is not held) */
bool sw_view_lock_or_give_up(const struct sw_view *v);
/** Release the lock taken by sw_view_lock. */
void sw_view_unlock(const struct sw_view *v);
/** Replace a view's settings in place, under the state's lock: a decision sees either the
 * old rule or the new one, never a mix. The state (windows, warm-up tokens, the throttle's
 * last slot) is kept; what the new rule reads of it applies from the next decision.
 * @param dst the rule the view points to (v->rule) @param src the new settings (copied) */
void sw_view_set_rule(const struct sw_view *v, struct sw_rule *dst, const struct sw_rule *src);
/** sw_view_set_rule's swap with the state's lock already held (a caller that changes more
 * under the same lock): the rule is stored with atomic word stores while the state's sequence
 * count is odd, so a refusal without the lock that read any of it retries under the lock.
 * @param st the view's state @param dst v->rule @param src the new settings (copied) */
void sw_lstate_store_rule(struct sw_lstate *st, struct sw_rule *dst, const struct sw_rule *src);

/** sw_lstate_store_rule for a view (lock held): the leases of the head bucket are taken back
 * first (sw_lease_settle), so none granted under the old rule is used under the new one. */
void sw_view_store_rule(const struct sw_view *v, struct sw_rule *dst, const struct sw_rule *src);

/* ---- leases of the head bucket (a shared limiter; sw_decide.c takes and grants them) ----
 * A lease word in a process slot is (the end of its bucket in ms << SW_LEASE_BITS) | (the
 * holding view's tag << SW_LEASE_TAG_SHIFT) | the permits left; they were counted as passes of
 * the head bucket when granted. Only the view of that tag takes from it (the slot is the
 * process's; its other objects may decide with other settings). */
#define SW_LEASE_BITS 20
#define SW_LEASE_TAG_SHIFT 7
#define SW_LEASE_TAG_MAX 8191u /* tags 1..8191; 0: the view takes no lease */
#define SW_LEASE_LEFT ((UINT64_C(1) << SW_LEASE_TAG_SHIFT) - 1u)
#define SW_LEASE_MAX 64 /* permits a lease holds at most (more in a word: damage) */

/** Take every lease back (lock held, between sw_lstate_enter and sw_lstate_leave): each
 * slot's word is swapped for 0 and its permits left are taken out of the head buckets and the
 * lifetime total, so the counts hold exactly the permits used. O(slots ever leased). */
void sw_lease_reclaim(const struct sw_view *v);
/** sw_lease_reclaim with its own sw_lstate_enter .. sw_lstate_leave (lock held), when a
 * lease may be out. */
void sw_lease_settle(const struct sw_view *v);

/** Derive the settings from a configuration.
 * @return SW_OK, or SW_EINVAL (cfg fails sw_limiter_check) */
int sw_rule_init(struct sw_rule *rule, const struct sw_limiter_cfg *cfg);

/** Make a concurrency rule adaptive (sw_adapt.h): grade concurrency, reject, count = max_limit.
 * @param param set to the offending parameter on SW_EINVAL (see sw_adapt_check)
 * @return SW_OK or SW_EINVAL (nothing changed) */
int sw_rule_set_adapt(struct sw_rule *rule, const struct sw_adapt_cfg *cfg, const char **param);
/** The limit an adaptive rule has in force at now_ns, under the state's lock, computing it
 * first when due, as a decision would; SW_NOW: the limit the latest decision left (nothing
 * computed: reading it moves no window). @return the limit, or -1 when the view's rule is
 * not adaptive */
int64_t sw_adapt_limit_now(const struct sw_view *v, int64_t now_ns);
/** The limit an adaptive state shows (a node read without the lock, e.g. a region's copy):
 * initial_limit when fresh. @return the limit, clamped to [min_limit, max_limit] */
int64_t sw_adapt_limit_of(const struct sw_adapt_cfg *cfg, const struct sw_node *node);
/** Record the CPU use (permille) that an adaptive "bbr" rule's trigger compares, under the
 * lock. */
void sw_view_set_cpu(const struct sw_view *v, int64_t permille);

/** Bytes a state of this window needs (0 when the window is invalid). */
size_t sw_lstate_size(int64_t interval_ms, uint32_t sample_count);
/** Initialise a state in caller-owned memory of sw_lstate_size() bytes (unlocked, fresh).
 * @return SW_OK, SW_EINVAL or SW_ERANGE */
int sw_lstate_init(struct sw_lstate *st, int64_t interval_ms, uint32_t sample_count);
/** Check that a state (e.g. read from a shared region) has exactly the layout that
 * sw_lstate_init gives for this window, and that every index in it is in range.
 * @param st the state @param size the bytes available at st
 * @return SW_OK, or SW_EINVAL when something is off */
int sw_lstate_validate(struct sw_lstate *st, size_t size, int64_t interval_ms,
                       uint32_t sample_count);
/** Restore what a process that died inside a critical section may have left half-written
 * (derived totals, the counts on the lock's line, the in-flight total from the process
 * slots). Lock held by the caller. */
void sw_lstate_repair(const struct sw_view *v);
/** With the lock held, before reading or changing the node's windows or totals: raise them to
 * the counts kept on the lock's line, and zero those (see struct sw_lstate). */
void sw_lstate_enter(struct sw_lstate *st);
/** With the lock held, after sw_lstate_enter and the work on the node: load the counts of the
 * windows' head buckets and the totals back onto the lock's line. */
void sw_lstate_leave(struct sw_lstate *st);
/** Settle a copy of a state (e.g. read from a region, no lock): the node's windows and
 * totals then hold every count (sw_lstate_enter + sw_lstate_leave). */
void sw_lstate_settle(struct sw_lstate *st);
/* Where an observer copies a state from (a region's file, or memory): read copies len bytes
 * at offset off into dst, 0 on success; the state and the process slots lie at their offsets
 * (n_slots 0: a state without slots). */
struct sw_lstate_src {
    int (*read)(void *ctx, size_t off, size_t len, void *dst);
    void *ctx;
    size_t off_state, off_slots;
    uint32_t n_slots;
};
/** Copy a state that other processes may be changing (an observer: no lock), with the process
 * slots that may hold leases (the first min(lease_hi, n_slots); the others zeroed). Both are
 * copied between two reads of its hot_seq, again (after a sched_yield) while they differ or
 * are odd, up to `tries` times: between two equal, even reads no head bucket moved, no lease
 * was granted or taken back, and a lease's permits left only went down as its holder used
 * them (sw_lstate_settle_copy counts the copy's leases out of the passes: what it reads is
 * the passes used, between what they were at the first read and at the last).
 * @param dst caller-owned memory of `size` bytes (aligned for struct sw_lstate)
 * @param size the state's size (its header says it; validate the copy afterwards)
 * @param slots caller-owned room for src->n_slots slots (NULL when n_slots is 0)
 * @param tries copies at most (at least 1)
 * @param hot_ok set to whether the copy's hot[] belongs with its windows' heads: the two
 *        reads were equal and even, or equal and odd with the lock free or its owner dead
 *        (the state no longer changes); pass it to sw_lstate_settle_copy
 * @return 0, or -1 when read failed or size < sizeof(struct sw_lstate) */
int sw_lstate_copy(struct sw_lstate *dst, size_t size, const struct sw_lstate_src *src,
                   struct sw_proc_slot *slots, unsigned tries, bool *hot_ok);
/** sw_lstate_settle for a copy made by sw_lstate_copy (validated), which also takes the
 * copied slots' leases back as sw_lease_reclaim does (their permits left were counted as
 * passes and are not used yet). When !hot_ok, the head buckets' counts on the lock's line
 * are left out (they may be an older bucket's: the copy's windows then miss the decisions
 * counted there since the last settle, rather than add an older bucket's counts to a newer
 * one); the lifetime totals' (only ever rising) are always settled.
 * @param st the copy @param hot_ok as sw_lstate_copy set it
 * @param slots, n_slots the slots it copied (changed: their leases taken back) */
void sw_lstate_settle_copy(struct sw_lstate *st, bool hot_ok, struct sw_proc_slot *slots,
                           uint32_t n_slots);
/** Around a change that observers must not copy halfway (a lease granted on the fast path,
 * the lock held): hot_seq odd before it, even again after (see sw_lstate_copy). */
void sw_lstate_seq_odd(struct sw_lstate *st);
void sw_lstate_seq_even(struct sw_lstate *st);
/** Give back the in-flight counts of the dead processes of a shared state's table.
 * Checks liveness outside the lock (reads /proc), then moves each dead slot's count out of
 * the total under the lock, and frees the slot.
 * @return the number of slots freed */
uint32_t sw_lstate_reap(const struct sw_view *v);

/** On attaching to a shared state: under its lock, restore every invariant the hot path
 * relies on (the repair, O(sample_count + process slots); a no-op on a consistent state).
 * @return SW_OK, or SW_EBUSY when the wait for the lock gave up (sw_lock_wait_hook) */
int sw_lstate_check_repair(const struct sw_view *v);
/** Detach a view from a shared state: free its process slot when it holds nothing in flight
 * (otherwise the slot keeps its count until the process dies and is reaped). */
void sw_lstate_detach(const struct sw_view *v);

/** Give back what a view's object still holds in flight as it goes, lock held (sw_view_lock):
 * *v->held, at most what this process's slot holds beyond `others` (what the process's other
 * objects on the region hold: their counts stay), out of the slot and the total (never below
 * 0: a deficit is cancelled as the reap does); *v->held becomes 0.
 * @return the count given back */
int64_t sw_lstate_give_back_locked(const struct sw_view *v, int64_t others);

/** Bytes a limiter of this configuration needs. @return 0 when cfg is invalid */
size_t sw_limiter_size(const struct sw_limiter_cfg *cfg);
/** Initialise in caller-owned memory of sw_limiter_size(cfg) bytes.
 * @return SW_OK, SW_EINVAL or SW_ERANGE */
int sw_limiter_init(struct sw_limiter *lim, const struct sw_limiter_cfg *cfg);
/** A private limiter's view. */
void sw_limiter_view(struct sw_limiter *lim, struct sw_view *out);

/** A state's node (statistics). */
static inline struct sw_node *sw_lstate_node(struct sw_lstate *st)
{
    return (struct sw_node *)(void *)((char *)st + st->off_node);
}
/** The limiter's node (statistics). */
static inline struct sw_node *sw_limiter_node(struct sw_limiter *lim)
{
    return sw_lstate_node(&lim->st);
}
/** A locked view of a state's window (for a Metric object). */
void sw_lstate_window(struct sw_lstate *st, struct sw_window *out);
/** A locked view of the limiter's window (for a Metric object). */
void sw_limiter_window(struct sw_limiter *lim, struct sw_window *out);
/** A locked view of the window of the state a view uses, locking with the view's token and
 * repairing the whole state (in-flight total included) if it takes the lock over from a dead
 * process. `v` must outlive the window. */
void sw_view_window(const struct sw_view *v, struct sw_window *out);

/* Flags of sw_decide. */
#define SW_F_TRY 1u          /* never wait: a throttle admits only when the wait is 0 */
#define SW_F_PRIORITIZED 2u  /* may borrow from the next window (reject + qps only) */
#define SW_F_NO_BLOCK 4u     /* a refusal is not counted (an internal retry) */
#define SW_F_ENTRY 8u        /* hold an in-flight count when admitted (qps grade too) */
#define SW_F_RETRY 16u       /* on refusal, compute retry_ns (else it stays -1) */
#define SW_F_SHADOW 32u      /* shadow: decide and count exactly as without it (a refusal
                                counts BLOCK and holds nothing, SW_F_NO_BLOCK is ignored: the
                                decision is final), then admit: verdict SW_PASS, wait_ns 0,
                                `shadowed` 1 when the verdict would have been a refusal.
                                A rule with `shadow` set decides so whatever the flags. */

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
    int shadowed;      /* shadow decisions: 1 when the enforcing verdict was a refusal (then
                          nothing is held in flight), else 0 */
};

/** Make one admission decision and count it (PASS, BLOCK, or OCCUPIED_PASS + a future PASS).
 * @param v the view (state + this process's settings)
 * @param n request size >= 1
 * @param now_ns time of the decision, or SW_NOW to read the clock under the lock
 * @param flags SW_F_*
 * @param out the decision
 * @return SW_OK, or SW_EINVAL for n < 1 */
int sw_decide(const struct sw_view *v, int64_t n, int64_t now_ns, unsigned flags,
              struct sw_decision *out);
/* A decision made and not yet counted, for deciding several limiters at once (sw_group.h):
 * nothing is counted or held while it is open; the throttle's slot, a warm-up payback and a
 * borrow's grant are computed into it and stored only when it is committed, which cannot
 * fail. Planning may roll the windows and sync the warm-up tokens (both idempotent at one
 * time: they change no count and no later decision). */
struct sw_plan {
    struct sw_decision d;   /* the verdict, as sw_decide would return it before shadow mode */
    int64_t n;
    int64_t t;              /* the clamped ms of the decision */
    int64_t grant_ms;       /* a borrow's grant (d.occupied) */
    int64_t paid_until_ms;  /* warm-up: the payback to store on commit, INT64_MIN none */
    struct sw_throttle thr; /* throttle: its state after the reservation (has_thr) */
    struct sw_warm_state warm; /* warm-up: the tokens synced at the plan's time */
    unsigned flags;         /* as resolved (a shadow rule adds SW_F_SHADOW) */
    uint32_t grade;
    int has_thr;
    int keep_sync;          /* sw_decide's own plans, made in place: the token sync stays,
                               admitted or not; thr and warm unused */
    int fast;               /* decided on the counts of the lock's line (t, thr, warm unset) */
};

/** Plan a decision, the view's lock held (sw_view_lock / sw_view_lock_or_give_up): as
 * sw_decide (flags SW_F_TRY, SW_F_PRIORITIZED, SW_F_NO_BLOCK, SW_F_ENTRY, SW_F_RETRY; a shadow
 * rule's SW_F_SHADOW, which keeps SW_F_NO_BLOCK, unlike sw_decide), counting nothing: the warm-up tokens are synced on a copy, kept only
 * by a commit. Every plan must be ended (sw_plan_end_locked) before
 * the lock is released. @param now_ns the time, or SW_NOW (the clock read now)
 * @return SW_OK, or SW_EINVAL for n < 1 (nothing to end then) */
int sw_plan_locked(const struct sw_view *v, int64_t n, int64_t now_ns, unsigned flags,
                   struct sw_plan *p);
/** End a plan, lock still held. commit: an admitted plan counts PASS and takes its throttle
 * slot, payback, grant and in-flight count (as sw_decide); a refused one (only a shadow's
 * can be committed) counts BLOCK. Not commit: nothing is taken; a refused plan counts BLOCK
 * (unless SW_F_NO_BLOCK), an admitted one nothing. Cannot fail. */
void sw_plan_end_locked(const struct sw_view *v, const struct sw_plan *p, bool commit);

/** Count n of event ev at now_ns (e.g. the final BLOCK of a request that retried).
 * @return SW_OK, SW_EEVENT or SW_EINVAL */
int sw_count(const struct sw_view *v, uint32_t ev, int64_t n, int64_t now_ns);
/** Count n BLOCK at now_ns that a shadow rule admitted (shadow_block too): the one would-be
 * refusal of a group's request that retried (sw_plan_locked keeps SW_F_NO_BLOCK for a
 * shadow). @return SW_OK or SW_EINVAL */
int sw_count_shadow_block(const struct sw_view *v, int64_t n, int64_t now_ns);

/** Count n more as admitted now, without a decision (what a request used beyond what it was
 * admitted for, e.g. tokens known after the reply): PASS (n) in the bucket of now_ns, seen by
 * every later decision until it slides out of the window (the window may then hold more
 * than its limit: later requests are refused until enough slides out); a throttle's queue
 * moves by the cost of n, as for n admitted now. Nothing is ever given back.
 * @param n >= 0 @return SW_OK, SW_EINVAL (n < 0), or SW_ESTATE (n > 0 on a concurrency
 *         limiter: it counts requests in flight, not amounts) */
int sw_charge(const struct sw_view *v, int64_t n, int64_t now_ns);

/** Give back the throttle slot of n not used after all (tokens estimated and not spent):
 * the queue moves back by the cost of n, never before now_ns (a later request still waits
 * its own cost from now). Counts nothing; a limiter that is not a throttle is unchanged.
 * @param n >= 0 @return SW_OK or SW_EINVAL (n < 0) */
int sw_refund(const struct sw_view *v, int64_t n, int64_t now_ns);

/** End an entry: record SUCCESS (n) and RT, or EXCEPTION (n), or nothing; release n in
 * flight (never below 0).
 * @param rt_ms the response time (SUCCESS only) @return SW_OK or SW_EINVAL */
int sw_exit(const struct sw_view *v, int64_t n, int64_t rt_ms, int outcome, int64_t now_ns);
/** sw_exit from a call site that can give up waiting for the lock (sw_lock_wait_hook; a stuck
 * owner): @return SW_OK, SW_EINVAL, or SW_EBUSY when it gave up (nothing counted, nothing
 * given back: the count is still held and the exit may be retried) */
int sw_exit_or_give_up(const struct sw_view *v, int64_t n, int64_t rt_ms, int outcome,
                       int64_t now_ns);
/** sw_exit with the response time in ns (an adaptive rule samples it at that resolution;
 * the windows record whole ms: rt_ns / 1e6). @return SW_OK or SW_EINVAL */
int sw_exit_rt(const struct sw_view *v, int64_t n, int64_t rt_ns, int outcome, int64_t now_ns);
/** sw_exit_rt that may give up on a stuck lock owner, as sw_exit_or_give_up does.
 * @return SW_OK, SW_EINVAL or SW_EBUSY (nothing counted, the count still held) */
int sw_exit_rt_or_give_up(const struct sw_view *v, int64_t n, int64_t rt_ns, int outcome,
                          int64_t now_ns);
/** Give back n in flight. @return SW_OK, SW_ESTATE when fewer than n are in flight, or
 * SW_EBUSY when the wait for the lock gave up (sw_lock_wait_hook: nothing given back) */
int sw_release(const struct sw_view *v, int64_t n);
/** Requests in flight now. */
int64_t sw_in_flight(const struct sw_view *v);

struct sw_stats {
    int64_t pass, block, success, exception, rt_sum, min_rt; /* over the window */
    int64_t in_flight, waiting;
    int64_t occupied_pass;
};
/** Read the window's statistics at now_ns (SW_NOW: the coarse clock). */
void sw_stats_read(const struct sw_view *v, int64_t now_ns, struct sw_stats *out);

/* Lifetime totals since creation (monotonic, never reset). */
struct sw_totals {
    int64_t pass;          /* admitted (prioritized grants included, when granted) */
    int64_t block;         /* refused (a shadow would-be refusal included) */
    int64_t exception;     /* entries ended by an Exception */
    int64_t success;       /* entries ended normally */
    int64_t occupied_pass; /* prioritized grants borrowed from the next window */
    int64_t rt;            /* ms, summed over the successes */
    int64_t shadow_block;  /* shadow decisions an enforcing limiter would have refused (a
                              part of `block`) */
};
/** Read a node's window statistics at now_ns without a lock (a node in caller-owned memory,
 * e.g. a private copy of a shared region's node: sw_node_repair it first). Updates the
 * rings' newest time as any read does; in_flight is read as >= 0. */
void sw_node_stats(struct sw_node *node, int64_t now_ns, struct sw_stats *out);
/** A node's totals, read as whole words (callers hold the lock, or accept a racy read). */
void sw_node_totals(const struct sw_node *node, struct sw_totals *out);
/** Read a limiter state's totals under its lock. */
void sw_totals_read(const struct sw_view *v, struct sw_totals *out);

/* The same on a private limiter (through its own view). */
int sw_limiter_decide(struct sw_limiter *lim, int64_t n, int64_t now_ns, unsigned flags,
                      struct sw_decision *out);
int sw_limiter_count(struct sw_limiter *lim, uint32_t ev, int64_t n, int64_t now_ns);
int sw_limiter_exit(struct sw_limiter *lim, int64_t n, int64_t rt_ms, int outcome,
                    int64_t now_ns);
int sw_limiter_release(struct sw_limiter *lim, int64_t n);
int64_t sw_limiter_in_flight(struct sw_limiter *lim);
void sw_limiter_stats(struct sw_limiter *lim, int64_t now_ns, struct sw_stats *out);
void sw_limiter_totals(struct sw_limiter *lim, struct sw_totals *out);

/** Requests in flight: the node's total, which a shared state keeps equal to the sum of its
 * process slots and never below 0 (the reap and the repair cancel a deficit); a total below 0
 * (a damaged private state) reads as 0. */
static inline int64_t sw_node_in_flight_now(const struct sw_node *node)
{
    return node->in_flight < 0 ? 0 : node->in_flight;
}

/** Change a view's in-flight count by d, lock held: the total, and this process's slot. A
 * release beyond what this process's slot holds (a count acquired in another process) lowers
 * the total only: the slot stays >= 0, so slots never understate what their processes hold
 * and the total is below their sum by what was released for others (see sw_lstate_reap). A
 * slot allowed below 0 would be filled again by its own process's next acquisitions, and the
 * reap of the acquirer would then take its count out of the total twice. */
static inline void sw_view_add_in_flight(const struct sw_view *v, struct sw_node *node, int64_t d)
{
    if (v->my_slot >= 0) {
        int64_t mine = v->slots[v->my_slot].in_flight;
        int64_t ds = d < 0 && sw_sat_add(mine, d) < 0 ? (mine > 0 ? -mine : 0) : d;
        v->slots[v->my_slot].in_flight = sw_sat_add(mine, ds);
        if (v->held != NULL) {
            int64_t h = sw_sat_add(*v->held, d);
            *v->held = h < 0 ? 0 : h;
        }
    }
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    node->in_flight = sw_sat_add(node->in_flight, d);
}

/* hot[]'s words are loaded and stored atomically: a refusal proven without the lock
 * (sw_decide.c, refuse_unlocked) loads hot[SW_HOT_SEC] and raises the three BLOCK words
 * (odd indices) with a compare-and-swap while a lock holder may work on them. So a BLOCK word
 * is raised with a compare-and-swap by lock holders too; a PASS word is written by lock
 * holders only (a plain read, an atomic store).
 * Between sw_lstate_enter and sw_lstate_leave a BLOCK word holds SW_HOT_MARK: its count is
 * in the ring or the total it belongs to, and no refusal without the lock adds to it (such a
 * refusal counts under the lock instead: sw_hot_count_unlocked). So the word never holds a
 * count that lives nowhere else, and a process killed inside the bracket loses none. */
#define SW_HOT_MARK INT64_MIN
static inline int64_t sw_hot_get(const struct sw_lstate *st, int i)
{
    return __atomic_load_n(&st->hot[i], __ATOMIC_RELAXED);
}
static inline void sw_hot_set(struct sw_lstate *st, int i, int64_t v)
{
    /* a release (a plain store on x86): a refusal without the lock that loads a PASS word
     * with the permits of a lease in it also sees lease_out set (sw_decide.c) */
    __atomic_store_n(&st->hot[i], v, __ATOMIC_RELEASE);
}
static inline void sw_hot_add(struct sw_lstate *st, int i, int64_t n)
{
    if (!(i & 1)) {
        sw_hot_set(st, i, sw_sat_add(st->hot[i], n));
        return;
    }
    int64_t x = sw_hot_get(st, i);
    while (!__atomic_compare_exchange_n(&st->hot[i], &x, sw_sat_add(x, n), true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}
/* Without the lock: add n to the BLOCK words of hot[] from index i on (SW_HOT_SEC + 1, then
 * the minute's, then the lifetime's) until one holds SW_HOT_MARK. @return the index of that
 * word (its count and the later ones' are still to make, under the lock), or SW_HOT_WORDS
 * when every word was counted */
static inline int sw_hot_count_unlocked(struct sw_lstate *st, int i, int64_t n)
{
    for (; i < SW_HOT_WORDS; i += 2) {
        int64_t x = sw_hot_get(st, i);
        do {
            if (x == SW_HOT_MARK)
                return i;
        } while (!__atomic_compare_exchange_n(&st->hot[i], &x, sw_sat_add(x, n), true,
                                              __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    }
    return SW_HOT_WORDS;
}
/* count n of event k (0 PASS, 1 BLOCK) on the lock's line: the heads of both windows and
 * the lifetime totals */
static inline void sw_hot_count(struct sw_lstate *st, int k, int64_t n)
{
    sw_hot_add(st, SW_HOT_SEC + k, n);
    sw_hot_add(st, SW_HOT_MIN + k, n);
    sw_hot_add(st, SW_HOT_LIFE + k, n);
}

/** The verdict of n on the lock's line (lock held; both windows at the head bucket of the
 * decision's ms): a concurrency rule against `cap` (its limit, or an adaptive one's learned
 * limit), a rejecting QPS rule against the passes counted there; -1 when a refusal wants more
 * than this gives (a borrow, a retry time). */
static inline int sw_fast_verdict(const struct sw_rule *r, const struct sw_lstate *st,
                                  struct sw_node *node, int64_t n, unsigned flags, double cap)
{
    if (r->grade == SW_GRADE_CONCURRENCY)
        return (double)n > r->count                                 ? SW_NEVER
               : sw_reject_fits(sw_node_in_flight_now(node), n, cap) ? SW_PASS
                                                                     : SW_BLOCK;
    if ((double)n > r->limit)
        return SW_NEVER;
    if (sw_reject_fits(sw_leap_sum_with_head(sw_node_sec(node), SW_EV_PASS, st->hot[SW_HOT_SEC]),
                       n, r->limit))
        return SW_PASS;
    /* a lease out (sw_decide.c): some passes may be permits not yet used; the general path
     * takes them back before it refuses */
    if (atomic_load_explicit(&st->lease_out, memory_order_relaxed) != 0u)
        return -1;
    if (!((flags & SW_F_PRIORITIZED) && !(flags & SW_F_TRY)) && !(flags & SW_F_RETRY))
        return SW_BLOCK;
    return -1;
}

/** The plan of a decision made on the lock's line (sw_plan_locked's fast path, inline for
 * sw_group's decisions over limiters), lock held, reading only: the verdict of n at ms
 * (SW_PASS, SW_BLOCK, SW_NEVER) when the rule decides there (not a shadow; a rejecting QPS
 * rule or a fixed concurrency limit; both windows at their head bucket; a refusal that wants
 * nothing more: no borrow, no retry time), else -1: sw_plan_locked is needed. End it with
 * sw_plan_fast_count. */
static inline int sw_plan_fast_locked(const struct sw_view *v, int64_t n, int64_t ms,
                                      unsigned flags)
{
    const struct sw_rule *r = v->rule;
    struct sw_lstate *st = v->st;
    struct sw_node *node = sw_lstate_node(st);
    bool conc = r->grade == SW_GRADE_CONCURRENCY;
    if (r->shadow ||
        !(conc ? r->adapt.algo == SW_ADAPT_NONE : (r->behavior == SW_REJECT && r->count > 0)) ||
        !sw_leap_at_head(sw_node_sec(node), ms) || !sw_leap_at_head(sw_node_min(node), ms))
        return -1;
    return sw_fast_verdict(r, st, node, n, flags, r->count);
}

/** End a plan of sw_plan_fast_locked, lock held: k 0 counts n PASS (and holds n in flight for
 * a concurrency rule or SW_F_ENTRY), 1 counts n BLOCK, on the lock's line; -1 nothing. */
static inline void sw_plan_fast_count(const struct sw_view *v, int64_t n, unsigned flags, int k)
{
    if (k < 0)
        return;
    struct sw_lstate *st = v->st;
    sw_hot_count(st, k, n);
    if (k == 0 && (v->rule->grade == SW_GRADE_CONCURRENCY || (flags & SW_F_ENTRY)))
        sw_view_add_in_flight(v, sw_lstate_node(st), n);
}

#ifdef __cplusplus
}
#endif
#endif /* SW_LIMITER_H */
