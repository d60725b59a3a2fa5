/* sw_node.h - the statistics of one limited resource (docs/design.md §3).
 *
 * A node is flat state in caller-owned memory: the limiter's window (interval_ms /
 * sample_count, 2 x 500 ms by default, optionally borrowable), the minute-level window
 * (60 x 1000 ms) and the count of requests in flight. Calls are unlocked: the owner
 * (a limiter) serialises them with its lock.
 */
#ifndef SW_NODE_H
#define SW_NODE_H

#include "sw_adapt.h"
#include "sw_borrow.h"
#include "sw_leap.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sw_node_cfg {
    int64_t interval_ms;   /* the limiter's window */
    uint32_t sample_count;
    bool borrowable;       /* with a future ring for prioritized requests */
};

#define SW_MINUTE_INTERVAL_MS 60000
#define SW_MINUTE_SAMPLES 60

struct sw_node {
    /* lifetime totals per event (PASS .. OCCUPIED_PASS, RT: the ms sum) since the node was
     * made: monotonic, saturating, never reset (sw_node_reset keeps them). A prioritized
     * grant counts its PASS here when granted (the window counts it in the bucket it was
     * granted for). One aligned word each: a reader without the lock sees whole values.
     * In a limiter state, PASS and BLOCK may be behind the counts on the lock's line
     * (struct sw_lstate). */
    int64_t totals[SW_EV_DEFAULT_COUNT];
    int64_t in_flight;     /* requests in flight (entry() or concurrency admissions) */
    uint32_t off_sec;      /* byte offsets from the node's start */
    uint32_t off_fut;      /* 0 when not borrowable */
    uint32_t off_min;
    uint32_t size;         /* total bytes */
    /* lifetime count of shadow decisions that an enforcing limiter would have refused
     * (counted in totals[BLOCK] too), as the other totals. Written only on such a refusal,
     * so enforcing limiters never touch it. It lies in the padding before the first ring
     * (the layout is unchanged: a region made before it holds 0 there). */
    int64_t shadow_block;
    /* the adaptive controller's learned state (sw_adapt.h), zero in a fresh node and unused
     * by other limiters; in the padding before the first ring, as shadow_block */
    struct sw_adapt_state adapt;
};

/* Where a node is placed relative to 64-byte lines: a limiter state puts its node on a
 * line's start. The rings are laid out to start on lines when it is so (their 64-byte
 * headers, read by every decision, then never share a line with a bucket that is written);
 * elsewhere that only costs a few bytes of padding. */
#define SW_NODE_LINE_OFFSET 0u

/** Bytes a node of this configuration needs. @return 0 when cfg is invalid */
size_t sw_node_size(const struct sw_node_cfg *cfg);
/** Initialise a node in caller-owned memory of sw_node_size(cfg) bytes.
 * @return SW_OK, SW_EINVAL or SW_ERANGE (too large) */
int sw_node_init(struct sw_node *node, const struct sw_node_cfg *cfg);
/** Check a node read from a shared region against the layout sw_node_init gives for cfg
 * (every offset and ring header), and that its indices are in range.
 * @return SW_OK, SW_EINVAL, or SW_ENOMEM */
int sw_node_validate(struct sw_node *node, const struct sw_node_cfg *cfg);
/** Restore a node's derived fields after its lock was taken over from a dead process. */
void sw_node_repair(struct sw_node *node);

/** Forget all statistics (the in-flight count is kept: those requests are still running). */
void sw_node_reset(struct sw_node *node);

/** The limiter's window. */
static inline struct sw_leap *sw_node_sec(struct sw_node *node)
{
    return (struct sw_leap *)(void *)((char *)node + node->off_sec);
}
/** Its borrow ring, or NULL when not borrowable. */
static inline struct sw_leap *sw_node_fut(struct sw_node *node)
{
    return node->off_fut ? (struct sw_leap *)(void *)((char *)node + node->off_fut) : NULL;
}
/** The minute-level window. */
static inline struct sw_leap *sw_node_min(struct sw_node *node)
{
    return (struct sw_leap *)(void *)((char *)node + node->off_min);
}

/** Add n (>= 0) to the lifetime total of event ev (saturating). */
static inline void sw_node_total_add(struct sw_node *node, uint32_t ev, int64_t n)
{
    node->totals[ev] = sw_sat_add(node->totals[ev], n);
}

/** Count n of event ev at t (ms) in both windows and the lifetime total. */
void sw_node_add(struct sw_node *node, uint32_t ev, int64_t n, int64_t t);
/** Record a response time at t in both windows. */
void sw_node_add_rt(struct sw_node *node, int64_t rt_ms, int64_t t);
/* How a request ended (exits of limiters and tables) */
enum sw_outcome { SW_OUT_SUCCESS = 0, SW_OUT_EXCEPTION = 1, SW_OUT_NONE = 2 };

/** Count how n requests ended at t (ms): SW_OUT_SUCCESS, SUCCESS (n) and their response
 * time; any other, EXCEPTION (n) (the callers count nothing for SW_OUT_NONE). Inline: on an
 * entry's exit. */
static inline void sw_node_add_outcome(struct sw_node *node, int outcome, int64_t n,
                                       int64_t rt_ms, int64_t t)
{
    if (outcome == SW_OUT_SUCCESS) {
        sw_node_add(node, SW_EV_SUCCESS, n, t);
        sw_node_add_rt(node, rt_ms, t);
    } else {
        sw_node_add(node, SW_EV_EXCEPTION, n, t);
    }
}

/** Count a shadow rule's would-be refusal of n at t (ms): a BLOCK, and in shadow_block. */
static inline void sw_node_add_shadow_block(struct sw_node *node, int64_t n, int64_t t)
{
    sw_node_add(node, SW_EV_BLOCK, n, t);
    node->shadow_block = sw_sat_add(node->shadow_block, n);
}

/** sw_node_add for t already clamped on the limiter's window (sw_leap_clamp(sec, t)). */
void sw_node_add_at(struct sw_node *node, uint32_t ev, int64_t n, int64_t t);
/** sw_node_pass for t already clamped on the limiter's window. */
int64_t sw_node_pass_at(struct sw_node *node, int64_t t);
/** Passes in the limiter's window at t. */
int64_t sw_node_pass(struct sw_node *node, int64_t t);
/** Passes of the previous whole second (the minute window's previous bucket). */
int64_t sw_node_previous_second_pass(struct sw_node *node, int64_t t);
/** Passes granted ahead, not yet current at t (0 when not borrowable). */
int64_t sw_node_waiting(struct sw_node *node, int64_t t);

#ifdef __cplusplus
}
#endif
#endif /* SW_NODE_H */
