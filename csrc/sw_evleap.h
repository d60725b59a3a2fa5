/* sw_evleap.h - the eventually consistent leap array: adds with no lock (docs/metrics.md).
 *
 * The same ring of time buckets as sw_leap.h (slot of t: (t / window_ms) % sample_count),
 * for `Metric(..., consistency="eventual")`: every add is a few atomic loads and one
 * compare-and-swap on a counter cell, no lock; reads sum the cells without a lock either.
 *
 * Layout (flat, pointer-free, so it can live in a shared region): a header, the slots'
 * bucket starts (`sample_count` words), then `n_stripes` stripes. A stripe holds, for each
 * slot, one cell per event (and, with RT, one for the bucket's min_rt). A thread adds to its
 * own stripe (picked from its process id and thread number), so processes on different
 * cores write different cache lines and scale; a read sums the stripes.
 *
 * A cell is one 64-bit word: the bucket's tag (its bucket number, start / window_ms, modulo
 * 2^SW_EV_TAG_BITS) in the high bits, the count in the low SW_EV_COUNT_BITS (saturating).
 * A cell counts for the bucket that its slot's start names iff its tag is that bucket's.
 * So a bucket is reset cell by cell, each by one compare-and-swap that replaces an older
 * tag: no cell is ever torn, and no add for the new bucket is ever overwritten.
 *
 * The one race (documented bound): an add that read its slot's start just before another
 * caller moved that slot to a newer bucket lands either in the old bucket (its cell was not
 * reset yet: the count leaves the window with the old bucket) or in the new one (the cell
 * was reset first). Only the adds in flight at that instant are concerned; every other add
 * counts exactly once in the bucket of its (clamped) time. A read may miss adds in flight.
 *
 * Every word is read and written with atomics, and every value read is checked before it is
 * used as an index or in arithmetic that could overflow: a region written by anyone never
 * makes these functions crash, only count wrongly.
 */
#ifndef SW_EVLEAP_H
#define SW_EVLEAP_H

#include "sw_common.h"
#include "sw_leap.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_EV_TAG_BITS 24
#define SW_EV_COUNT_BITS 40
#define SW_EV_COUNT_MAX ((INT64_C(1) << SW_EV_COUNT_BITS) - 1) /* a cell's count saturates */
#define SW_EV_MAX_STRIPES 64u
#define SW_EV_NEWEST_IDX_BITS 17 /* the slot's bits in `newest` (SW_MAX_SAMPLES < 2^17) */
#define SW_EV_STRIPES_BYTES ((size_t)1 << 20) /* stripes fewer when they would pass 1 MiB */

struct sw_evleap {
    int64_t interval_ms;
    int64_t window_ms;
    uint32_t sample_count;
    uint32_t n_events;
    uint32_t has_rt;
    uint32_t n_stripes;     /* a power of two, 1 .. SW_EV_MAX_STRIPES */
    uint32_t row;           /* cells per slot in a stripe: n_events (+ 1 min_rt with RT) */
    uint32_t pad_;
    uint64_t stripe_words;  /* words per stripe (rows, then a cache line of padding) */
    int64_t newest;         /* newest bucket seen (atomic): its bucket number (start /
                             * window_ms) << SW_EV_NEWEST_IDX_BITS | its slot; < 0: none */
    int64_t words[];        /* sample_count starts (rounded up to 8 words), then the stripes */
};

/** How many stripes a ring of this configuration gets (depends on cfg only, so every process
 * computes the same region size). @return 0 when cfg is invalid */
uint32_t sw_evleap_stripes(const struct sw_leap_cfg *cfg);
/** Bytes of a ring with sw_evleap_stripes(cfg) stripes. @return 0 when cfg is invalid */
size_t sw_evleap_size(const struct sw_leap_cfg *cfg);
/** Initialise a ring in caller-owned memory of sw_evleap_size(cfg) bytes.
 * @return SW_OK or SW_EINVAL */
int sw_evleap_init(struct sw_evleap *l, const struct sw_leap_cfg *cfg);
/** Whether a ring read from a region has exactly the layout of cfg (its header fields).
 * @return true when it does */
bool sw_evleap_layout_ok(const struct sw_evleap *l, const struct sw_leap_cfg *cfg);

/** Add n >= 0 to event ev at now_ns (SW_NOW: the coarse clock). No lock.
 * @return SW_OK, SW_EEVENT for an unknown event, SW_EINVAL for n < 0 */
int sw_evleap_add(struct sw_evleap *l, uint32_t ev, int64_t n, int64_t now_ns);
/** Add a response time rt_ms >= 0 (RT sum and the bucket's min_rt). No lock.
 * @return SW_OK, SW_ENORT, SW_EINVAL */
int sw_evleap_add_rt(struct sw_evleap *l, int64_t rt_ms, int64_t now_ns);
/** Read one event: `which` is SW_READ_SUM, SW_READ_CURRENT or SW_READ_PREVIOUS (sw_leap.h).
 * @return SW_OK or SW_EEVENT */
int sw_evleap_read(struct sw_evleap *l, int which, uint32_t ev, int64_t now_ns, int64_t *out);
/** Min RT (max(1, min), SW_MIN_RT_INIT without data), RT sum and success over the window.
 * @return SW_OK or SW_ENORT */
int sw_evleap_rt(struct sw_evleap *l, int64_t now_ns, int64_t *min_rt, int64_t *rt_sum,
                 int64_t *success);
/** Dense bucket copy, same format as sw_leap_buckets (stride 2 + n_events).
 * @return the number of buckets */
uint32_t sw_evleap_buckets(struct sw_evleap *l, int64_t now_ns, int64_t *out);
/** Forget everything, the newest time seen included (adds racing it may survive). */
void sw_evleap_reset(struct sw_evleap *l);

/** Tests: the stripe that adds use, SW_EV_STRIPE_CPU (-1) for the calling thread's own. */
#define SW_EV_STRIPE_CPU (-1)
extern int sw_evleap_test_stripe;
/** Tests: called by an add between reading its slot's bucket start and writing its cell. */
extern void (*sw_evleap_test_after_start)(void);

#ifdef __cplusplus
}
#endif
#endif /* SW_EVLEAP_H */
