/* sw_leap.h - the leap array: a ring of time buckets reset in place (docs/design.md §2-3).
 *
 * A `struct sw_leap` is flat and pointer-free: a header, then `sample_count` slots of
 * `2 + n_events` int64 words each (bucket start in ms, min_rt in ms, then the counters),
 * then the running totals (two words per event), then, with RT, the min_rt deque
 * (`sample_count` uint32 slot indices). The caller owns the memory (sw_leap_size() bytes)
 * and serialises every call with a lock of its own (see sw_window below); the functions
 * here are the unlocked building blocks.
 *
 * Times are whole milliseconds `t >= 0`. Slot of t: (t / window_ms) % sample_count;
 * bucket start of t: t - t % window_ms.
 *
 * Cost: every read and write is O(1) in sample_count, amortised over elapsed buckets.
 * `head` is the start of the newest bucket held in a slot; the window of the ring is the
 * buckets with start in (head - interval_ms, head]. Invariants (between calls):
 *   - every slot holds SW_LEAP_EMPTY or a start <= head; a slot counts iff its start is in
 *     the window, so a slot left behind by a jump is known stale from its start alone;
 *   - totals[ev] == the exact sum (128-bit, two words) of counter ev over the slots that
 *     count, the head's slot excepted: a read adds the head's count and saturates to int64.
 *     So counting into the current bucket writes one word of its slot and nothing else
 *     (in a region shared by processes, one cache line less to move per decision); the
 *     head's slot joins the totals when a newer bucket starts;
 *   - with RT, the deque holds, oldest first, slots that count, with strictly increasing
 *     min_rt; its front is the window's min_rt and its back is always the head's slot.
 * Starting bucket `start > head` first adds the head's slot to the totals (if it still counts)
 * and subtracts the buckets that slide out: one slot per
 * elapsed bucket, or nothing at all (totals zeroed, deque emptied) when
 * `start - head >= interval_ms`, so a jump past the whole ring is O(1).
 */
#ifndef SW_LEAP_H
#define SW_LEAP_H

#include "sw_common.h"
#include "sw_lock.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Configuration of a ring. */
struct sw_leap_cfg {
    int64_t interval_ms;   /* > 0, <= SW_MAX_INTERVAL_MS, divisible by sample_count */
    uint32_t sample_count; /* 1 .. SW_MAX_SAMPLES */
    uint32_t n_events;     /* 1 .. SW_MAX_EVENTS */
    bool has_rt;           /* the default event set: RT and min_rt are tracked */
};

/* Marker of a slot that never held a bucket, and of "no newest bucket yet". */
#define SW_LEAP_EMPTY INT64_MIN
/* The latest time (ms) a ring holds: every time comes from a nanosecond clock (at most
 * INT64_MAX / 1e6 ms), a grant lies at most one interval ahead. A ring read from a region
 * with a later head or newest bucket is damaged (sw_leap_indices_ok). */
#define SW_LEAP_T_MAX (INT64_MAX / INT64_C(1000000) + 2 * SW_MAX_INTERVAL_MS)

struct sw_leap {
    int64_t interval_ms;
    int64_t window_ms;
    uint32_t sample_count;
    uint32_t n_events;
    uint32_t has_rt;
    uint32_t stride;        /* int64 words per slot */
    int64_t newest;         /* newest bucket start seen by a read or write, or SW_LEAP_EMPTY */
    int64_t newest_idx;     /* its slot */
    int64_t head;           /* newest bucket start held in a slot (<= newest), or EMPTY;
                             * for a borrow ring: the latest start granted ahead */
    uint32_t dq_first;      /* min_rt deque (has_rt only): position of its front */
    uint32_t dq_len;        /* min_rt deque: entries */
    int64_t slots[];        /* sample_count * stride words, then 2 * n_events words of
                             * totals, then (has_rt) sample_count uint32 deque entries */
};

/* Word offsets inside a slot. */
#define SW_SLOT_START 0
#define SW_SLOT_MIN_RT 1
#define SW_SLOT_COUNTS 2

/** Check a ring configuration.
 * @param cfg the configuration
 * @return SW_OK, or SW_EINVAL if a field is out of range */
int sw_leap_check(const struct sw_leap_cfg *cfg);

/** Bytes a ring of this configuration needs (header + slots + totals + min_rt deque).
 * @param cfg a configuration that passed sw_leap_check
 * @return the size in bytes, or 0 when cfg is invalid */
size_t sw_leap_size(const struct sw_leap_cfg *cfg);

/** Initialise a ring in caller-owned memory of sw_leap_size(cfg) bytes (all buckets empty).
 * @param l memory owned by the caller
 * @param cfg the configuration (copied)
 * @return SW_OK or SW_EINVAL */
int sw_leap_init(struct sw_leap *l, const struct sw_leap_cfg *cfg);

/** Forget every bucket and the newest time seen. @param l the ring */
void sw_leap_reset(struct sw_leap *l);

/** Convert a monotonic time in ns to the ring's millisecond time (negative times count as 0).
 * @param now_ns nanoseconds
 * @return milliseconds */
static inline int64_t sw_ms_of_ns(int64_t now_ns)
{
    return now_ns <= 0 ? 0 : now_ns / INT64_C(1000000);
}

/** Bucket start of t. @param l the ring @param t ms >= 0 @return t - t % window_ms */
static inline int64_t sw_leap_start_of(const struct sw_leap *l, int64_t t)
{
    return t - t % l->window_ms;
}

/** Slot index of the bucket starting at `start`. @param l the ring @param start >= 0
 * @return (start / window_ms) % sample_count */
static inline uint32_t sw_leap_index(const struct sw_leap *l, int64_t start)
{
    return (uint32_t)((start / l->window_ms) % (int64_t)l->sample_count);
}

/** Whether t lies in the newest bucket seen (no division). @param l the ring @param t ms */
static inline bool sw_leap_in_newest(const struct sw_leap *l, int64_t t)
{
    /* test for EMPTY first: with newest == SW_LEAP_EMPTY (INT64_MIN) `t - newest`
     * overflows (undefined behaviour) */
    return l->newest != SW_LEAP_EMPTY && t >= l->newest && t - l->newest < l->window_ms;
}

/* The words a reader without the lock loads (sw_leap_at_head_peek, sw_leap_sum_peek: a
 * limiter's refusal without its lock, sw_decide.c): newest, newest_idx, head, each slot's
 * start and the running totals. The writers, lock held, store them with relaxed atomic
 * stores (a plain store on the usual targets) so that such a read is no data race; the
 * reader brackets its loads with the state's sequence count (struct sw_lstate, hot_seq). */
static inline void sw_leap_store_(int64_t *w, int64_t v)
{
    __atomic_store_n(w, v, __ATOMIC_RELAXED);
}
static inline int64_t sw_leap_load_(const int64_t *w)
{
    return __atomic_load_n(w, __ATOMIC_ACQUIRE); /* a later load stays after it */
}
static inline void sw_leap_store_u_(uint64_t *w, uint64_t v)
{
    __atomic_store_n(w, v, __ATOMIC_RELAXED);
}

/** (Re)start a slot in place: bucket `start`, min_rt SW_MIN_RT_INIT, counters 0.
 * Only the slot changes: a ring's totals are kept by its callers. */
static inline void sw_leap_slot_clear(const struct sw_leap *l, int64_t *slot, int64_t start)
{
    sw_leap_store_(&slot[SW_SLOT_START], start);
    slot[SW_SLOT_MIN_RT] = SW_MIN_RT_INIT;
    for (uint32_t e = 0; e < l->n_events; e++)
        slot[SW_SLOT_COUNTS + e] = 0;
}

/* The running totals: event ev's exact sum is the two's-complement 128-bit number
 * (totals[2ev + 1] : totals[2ev]), so no order of adds and slides loses a count. */
static inline uint64_t *sw_leap_totals_(struct sw_leap *l)
{
    return (uint64_t *)(void *)(l->slots + (size_t)l->sample_count * l->stride);
}
static inline const uint64_t *sw_leap_ctotals_(const struct sw_leap *l)
{
    return (const uint64_t *)(const void *)(l->slots + (size_t)l->sample_count * l->stride);
}

/** Add a (signed) delta to event ev's running total. */
static inline void sw_leap_total_add_(struct sw_leap *l, uint32_t ev, int64_t d)
{
    uint64_t *w = sw_leap_totals_(l) + 2u * ev;
    uint64_t lo = w[0] + (uint64_t)d;
    sw_leap_store_u_(&w[1], w[1] + (d < 0 ? UINT64_MAX : 0u) + (lo < w[0] ? 1u : 0u));
    sw_leap_store_u_(&w[0], lo);
}

/** Subtract a (signed) value from event ev's running total. */
static inline void sw_leap_total_sub_(struct sw_leap *l, uint32_t ev, int64_t v)
{
    uint64_t *w = sw_leap_totals_(l) + 2u * ev;
    uint64_t lo = w[0] - (uint64_t)v;
    sw_leap_store_u_(&w[1], w[1] - ((v < 0 ? UINT64_MAX : 0u) + (lo > w[0] ? 1u : 0u)));
    sw_leap_store_u_(&w[0], lo);
}

/** The head's slot (the bucket starting at head), or NULL when the ring holds none or the
 * head's slot no longer holds it (left so by a process killed inside a critical section).
 * No division in the usual case (head == newest). */
static inline const int64_t *sw_leap_head_slot_(const struct sw_leap *l)
{
    if (l->head == SW_LEAP_EMPTY)
        return NULL;
    uint32_t i = l->head == l->newest ? (uint32_t)l->newest_idx
                                      : (uint32_t)((l->head / l->window_ms) %
                                                   (int64_t)l->sample_count);
    const int64_t *slot = l->slots + (size_t)i * l->stride;
    return slot[SW_SLOT_START] == l->head ? slot : NULL;
}

/* The 128-bit total (hi : lo) plus d, saturated to int64. */
static inline int64_t sw_leap_sum128_(uint64_t lo, uint64_t hi, int64_t d)
{
    {
        uint64_t s = lo + (uint64_t)d;
        hi += (d < 0 ? UINT64_MAX : 0u) + (s < lo ? 1u : 0u);
        lo = s;
    }
    if (hi == 0u)
        return lo > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)lo;
    if (hi == UINT64_MAX && lo > (uint64_t)INT64_MAX)
        return -(int64_t)~lo - 1;
    return (hi >> 63) ? INT64_MIN : INT64_MAX;
}

/** The running total of event ev (the window's buckets before the head) plus `d`, saturated
 * to int64. @param l the ring @param ev event index < n_events @param d the head's count */
static inline int64_t sw_leap_sum_with_head(const struct sw_leap *l, uint32_t ev, int64_t d)
{
    const uint64_t *w = sw_leap_ctotals_(l) + 2u * ev;
    return sw_leap_sum128_(w[0], w[1], d);
}

/** sw_leap_sum_with_head read without the lock (atomic loads): a value to trust only when
 * the state's sequence count was even and unchanged around the read (sw_decide.c). */
static inline int64_t sw_leap_sum_peek(const struct sw_leap *l, uint32_t ev, int64_t d)
{
    const uint64_t *w = sw_leap_ctotals_(l) + 2u * ev;
    uint64_t lo = __atomic_load_n(&w[0], __ATOMIC_ACQUIRE);
    uint64_t hi = __atomic_load_n(&w[1], __ATOMIC_ACQUIRE);
    return sw_leap_sum128_(lo, hi, d);
}

/** Sum of event ev over the buckets in the window of the newest bucket held,
 * (head - interval_ms, head], saturated to int64: the running total of the buckets before
 * the head plus the head's own count; O(1), changes nothing.
 * @param l the ring @param ev event index < n_events @return the sum (0 when empty) */
static inline int64_t sw_leap_held_sum(const struct sw_leap *l, uint32_t ev)
{
    const int64_t *head = sw_leap_head_slot_(l);
    return sw_leap_sum_with_head(l, ev, head != NULL ? head[SW_SLOT_COUNTS + ev] : 0);
}

/** Whether t lies in the newest bucket and that bucket is the head, held in its slot: a
 * count at t then goes to the head's slot with nothing to refresh. */
static inline bool sw_leap_at_head(const struct sw_leap *l, int64_t t)
{
    return sw_leap_in_newest(l, t) && l->head == l->newest &&
           l->slots[(size_t)l->newest_idx * l->stride + SW_SLOT_START] == l->newest;
}

/** sw_leap_at_head read without the lock (atomic loads; an index out of range: false): to
 * trust only when the state's sequence count was even and unchanged around the read. */
static inline bool sw_leap_at_head_peek(const struct sw_leap *l, int64_t t)
{
    int64_t newest = sw_leap_load_(&l->newest);
    if (newest == SW_LEAP_EMPTY || t < newest || t - newest >= l->window_ms ||
        sw_leap_load_(&l->head) != newest)
        return false;
    int64_t i = sw_leap_load_(&l->newest_idx);
    return i >= 0 && i < (int64_t)l->sample_count &&
           sw_leap_load_(&l->slots[(size_t)i * l->stride + SW_SLOT_START]) == newest;
}

/** Min of min_rt over the same buckets (not clamped to 1), SW_MIN_RT_INIT when none or
 * without RT; O(1), changes nothing. @param l the ring @return ms */
int64_t sw_leap_held_min_rt(const struct sw_leap *l);

/** Slow path of sw_leap_clamp (t outside the newest bucket). */
int64_t sw_leap_clamp_slow(struct sw_leap *l, int64_t t);

/** Clamp t to the newest bucket start seen (docs/design.md §2) and record a newer one.
 * @param l the ring
 * @param t ms (negative counts as 0)
 * @return t, or the newest bucket start when t lies behind it */
static inline int64_t sw_leap_clamp(struct sw_leap *l, int64_t t)
{
    if (sw_leap_in_newest(l, t)) /* fast path, no division */
        return t;
    return sw_leap_clamp_slow(l, t);
}

/** The slot holding the bucket of t, (re)started in place if it held an older bucket
 * (the buckets sliding out leave the totals first). When `future` is given (a borrowable
 * window), a restarted bucket begins with the passes granted ahead for its start (design.md §4).
 * @param l the ring; t must already be clamped (a t behind the newest bucket held gets
 *        that bucket's slot)
 * @param future the borrow ring (1 event, PASS) or NULL
 * @param t ms
 * @return pointer to the slot's words (owned by the ring) */
int64_t *sw_leap_refresh_slow(struct sw_leap *l, const struct sw_leap *future, int64_t t);
static inline int64_t *sw_leap_refresh(struct sw_leap *l, const struct sw_leap *future,
                                       int64_t t)
{
    if (sw_leap_in_newest(l, t)) {
        int64_t *slot = l->slots + (size_t)l->newest_idx * l->stride;
        if (slot[SW_SLOT_START] == l->newest)
            return slot;
    }
    return sw_leap_refresh_slow(l, future, t);
}

/** The slot that holds exactly the bucket starting at `start`, without changing anything.
 * @return the slot's words, or NULL when that bucket is not in the ring */
const int64_t *sw_leap_find(const struct sw_leap *l, int64_t start);

/** Whether a slot counts in the window read at t: start <= t and t - start <= interval_ms. */
static inline bool sw_leap_valid(const struct sw_leap *l, const int64_t *slot, int64_t t)
{
    int64_t s = slot[SW_SLOT_START];
    return s != SW_LEAP_EMPTY && s <= t && t - s <= l->interval_ms;
}

/** Pointer to slot i (0 <= i < sample_count). */
static inline int64_t *sw_leap_slot(struct sw_leap *l, uint32_t i)
{
    return l->slots + (size_t)i * l->stride;
}
static inline const int64_t *sw_leap_cslot(const struct sw_leap *l, uint32_t i)
{
    return l->slots + (size_t)i * l->stride;
}

/* ---- operations on a clamped time, lock held by the caller ---- */

/** Add n to event ev in the bucket of t (t is clamped first). */
void sw_leap_add(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t n,
                 int64_t t);
/** Add a response time: RT += rt_ms and the bucket's min_rt lowered (t is clamped first). */
void sw_leap_add_rt(struct sw_leap *l, const struct sw_leap *future, int64_t rt_ms, int64_t t);
/** sw_leap_add for a t already clamped by sw_leap_clamp on this ring. */
static inline void sw_leap_add_at(struct sw_leap *l, const struct sw_leap *future, uint32_t ev,
                                  int64_t n, int64_t t)
{
    int64_t *slot = sw_leap_refresh(l, future, t);
    /* the head's slot: the running totals take it in only when the head moves on, so an
     * add writes this one word (one cache line) */
    slot[SW_SLOT_COUNTS + ev] = sw_sat_add(slot[SW_SLOT_COUNTS + ev], n);
}
/** sw_leap_sum for a t already clamped by sw_leap_clamp on this ring (O(1)). */
int64_t sw_leap_sum_at(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t t);
/** Sum of event ev over the valid buckets at t (refreshes the slot of t); O(1) amortised. */
int64_t sw_leap_sum(struct sw_leap *l, const struct sw_leap *future, uint32_t ev, int64_t t);
/** Count of event ev in the bucket containing t (refreshes it). */
int64_t sw_leap_current(struct sw_leap *l, const struct sw_leap *future, uint32_t ev,
                        int64_t t);
/** Count of event ev in the bucket just before the bucket of t, 0 if the ring no longer holds
 * it; refreshes nothing (the clamp still applies). */
int64_t sw_leap_previous(struct sw_leap *l, uint32_t ev, int64_t t);
/** max(1, min of min_rt over the valid buckets); SW_MIN_RT_INIT when there is no data.
 * O(1) amortised (the deque). */
int64_t sw_leap_min_rt(struct sw_leap *l, const struct sw_leap *future, int64_t t);

/** Copy the window's buckets at t, oldest first, dense (docs/design.md §2, Metric.buckets()).
 * @param out room for sample_count * (2 + n_events) words: start, min_rt, counts... per bucket
 * @return the number of buckets written (fewer than sample_count only where a start < 0) */
uint32_t sw_leap_buckets(struct sw_leap *l, const struct sw_leap *future, int64_t t,
                         int64_t *out);

/** Whether every index the ring uses as an array subscript is in range and its head and
 * newest bucket are bucket starts in [0, SW_LEAP_T_MAX] (a ring read from a shared region is
 * input). O(sample_count) for the min_rt deque. */
bool sw_leap_indices_ok(const struct sw_leap *l);
/** Rebuild the running totals and the min_rt deque from the slots (after a process died
 * inside a critical section); a ring whose indices are out of range starts afresh, and a
 * count below 0 (damage: never stored) becomes 0. */
void sw_leap_repair(struct sw_leap *l);

/* ---- a locked view: what the binding's Metric type calls ---- */

/* A window as callers see it: the ring, its optional borrow ring, and the lock that guards
 * both. A view holds pointers and lives outside shared state (in the caller's object). */
struct sw_window {
    sw_lock *lock;
    struct sw_leap *leap;
    struct sw_leap *future; /* NULL unless borrowable */
    uint64_t token;         /* lock token: SW_LOCK_PRIVATE (0 means the same), or
                               SW_LOCK_PROCESS for a window in a shared region */
    /* called with the lock held, right after taking it (enter) and right before releasing
     * it (leave), with hot_ctx: a limiter's window settles the counts that its decisions
     * keep on the lock's cache line (sw_lstate_enter / sw_lstate_leave). NULL for a plain
     * ring. */
    void (*enter)(const void *ctx);
    void (*leave)(const void *ctx);
    const void *hot_ctx;
    /* what to repair when the lock is taken over from a dead process: NULL repairs the two
     * rings; a limiter's window repairs the limiter's whole state (its in-flight total) */
    void (*repair)(const void *ctx);
    const void *repair_ctx;
};

/** Add n to event ev at now_ns (SW_NOW: the coarse clock, read under the lock).
 * @return SW_OK, SW_EEVENT for an unknown event, SW_EINVAL for n < 0 */
int sw_window_add(const struct sw_window *w, uint32_t ev, int64_t n, int64_t now_ns);
/** Add a response time (ms >= 0) at now_ns. @return SW_OK, SW_ENORT, SW_EINVAL */
int sw_window_add_rt(const struct sw_window *w, int64_t rt_ms, int64_t now_ns);
/* Reads of one event at now_ns. `which`: 0 sum, 1 current, 2 previous. */
enum { SW_READ_SUM = 0, SW_READ_CURRENT = 1, SW_READ_PREVIOUS = 2 };
/** Read one event. @param out the count @return SW_OK or SW_EEVENT */
int sw_window_read(const struct sw_window *w, int which, uint32_t ev, int64_t now_ns,
                   int64_t *out);
/** Window statistics of RT at now_ns: min RT and (rt sum, success).
 * @return SW_OK or SW_ENORT */
int sw_window_rt(const struct sw_window *w, int64_t now_ns, int64_t *min_rt, int64_t *rt_sum,
                 int64_t *success);
/** Dense bucket copy (see sw_leap_buckets). @return the number of buckets */
uint32_t sw_window_buckets(const struct sw_window *w, int64_t now_ns, int64_t *out);
/** Forget everything, the newest time seen included. */
void sw_window_reset(const struct sw_window *w);
/** On attaching to a shared window: restore its invariants under the lock (a no-op on a
 * consistent ring; O(sample_count)).
 * @return SW_OK, or SW_EBUSY when the wait for the lock gave up (sw_lock_wait_hook) */
int sw_window_check_repair(const struct sw_window *w);

#ifdef __cplusplus
}
#endif
#endif /* SW_LEAP_H */
