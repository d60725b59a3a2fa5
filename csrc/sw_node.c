/* sw_node.c - a node: limiter window + borrow ring + minute window + in-flight count. */
#include "sw_node.h"

#include <stdlib.h>
#include <string.h>

static void node_cfgs(const struct sw_node_cfg *cfg, struct sw_leap_cfg *sec,
                      struct sw_leap_cfg *fut, struct sw_leap_cfg *min)
{
    sec->interval_ms = cfg->interval_ms;
    sec->sample_count = cfg->sample_count;
    sec->n_events = SW_EV_DEFAULT_COUNT;
    sec->has_rt = true;
    sw_borrow_cfg(sec, fut);
    min->interval_ms = SW_MINUTE_INTERVAL_MS;
    min->sample_count = SW_MINUTE_SAMPLES;
    min->n_events = SW_EV_DEFAULT_COUNT;
    min->has_rt = true;
}

/* The offset, at or after off, of a ring that starts a 64-byte line when the node lies
 * SW_NODE_LINE_OFFSET bytes past one. */
static size_t ring_offset(size_t off)
{
    return ((off + SW_NODE_LINE_OFFSET + 63u) & ~(size_t)63u) - SW_NODE_LINE_OFFSET;
}

/* The layout: each ring's offset, and the total (0 when cfg is invalid). */
static size_t node_layout(const struct sw_node_cfg *cfg, size_t *off_sec, size_t *off_fut,
                          size_t *off_min)
{
    struct sw_leap_cfg sec, fut, min;
    if (cfg == NULL)
        return 0;
    node_cfgs(cfg, &sec, &fut, &min);
    size_t a = sw_leap_size(&sec), b = cfg->borrowable ? sw_leap_size(&fut) : 1u,
           c = sw_leap_size(&min);
    if (a == 0 || b == 0 || c == 0)
        return 0;
    /* the node's fields take less than a 64-byte line beyond the first: adding one did not
     * move the rings (a region's layout stays that of SW_SHM_LAYOUT_VERSION) */
    _Static_assert(sizeof(struct sw_node) <= 128 && sizeof(struct sw_node) > 64,
                   "the rings of a node start at byte 128");
    size_t off = ring_offset(sizeof(struct sw_node));
    *off_sec = off;
    off += sw_align8(a);
    *off_fut = 0;
    if (cfg->borrowable) {
        off = ring_offset(off);
        *off_fut = off;
        off += sw_align8(b);
    }
    off = ring_offset(off);
    *off_min = off;
    return off + sw_align8(c);
}

size_t sw_node_size(const struct sw_node_cfg *cfg)
{
    size_t a, b, c;
    return node_layout(cfg, &a, &b, &c);
}

int sw_node_init(struct sw_node *node, const struct sw_node_cfg *cfg)
{
    struct sw_leap_cfg sec, fut, min;
    size_t off_sec, off_fut, off_min;
    size_t total = node_layout(cfg, &off_sec, &off_fut, &off_min);
    if (node == NULL || total == 0)
        return SW_EINVAL;
    if (total > UINT32_MAX)
        return SW_ERANGE;
    node_cfgs(cfg, &sec, &fut, &min);
    node->in_flight = 0;
    for (uint32_t e = 0; e < SW_EV_DEFAULT_COUNT; e++)
        node->totals[e] = 0;
    node->shadow_block = 0;
    memset(&node->adapt, 0, sizeof node->adapt);
    node->off_sec = (uint32_t)off_sec;
    node->off_fut = (uint32_t)off_fut;
    node->off_min = (uint32_t)off_min;
    node->size = (uint32_t)total;
    int rc = sw_leap_init(sw_node_sec(node), &sec);
    if (rc == SW_OK && cfg->borrowable)
        rc = sw_leap_init(sw_node_fut(node), &fut);
    if (rc == SW_OK)
        rc = sw_leap_init(sw_node_min(node), &min);
    return rc;
}

void sw_node_reset(struct sw_node *node)
{
    sw_leap_reset(sw_node_sec(node));
    if (node->off_fut)
        sw_leap_reset(sw_node_fut(node));
    sw_leap_reset(sw_node_min(node));
}

void sw_node_add(struct sw_node *node, uint32_t ev, int64_t n, int64_t t)
{
    sw_leap_add(sw_node_sec(node), sw_node_fut(node), ev, n, t);
    sw_leap_add(sw_node_min(node), NULL, ev, n, t);
    sw_node_total_add(node, ev, n);
}

void sw_node_add_rt(struct sw_node *node, int64_t rt_ms, int64_t t)
{
    sw_leap_add_rt(sw_node_sec(node), sw_node_fut(node), rt_ms, t);
    sw_leap_add_rt(sw_node_min(node), NULL, rt_ms, t);
    sw_node_total_add(node, SW_EV_RT, rt_ms);
}

int64_t sw_node_pass(struct sw_node *node, int64_t t)
{
    return sw_leap_sum(sw_node_sec(node), sw_node_fut(node), SW_EV_PASS, t);
}

/* The slot of t when t lies in the ring's newest bucket and that slot holds it (what
 * sw_leap_refresh returns then, without a call), else NULL. */
static inline int64_t *newest_slot(struct sw_leap *l, int64_t t)
{
    if (!sw_leap_in_newest(l, t))
        return NULL;
    int64_t *slot = l->slots + (size_t)l->newest_idx * l->stride;
    return slot[SW_SLOT_START] == l->newest ? slot : NULL;
}

void sw_node_add_at(struct sw_node *node, uint32_t ev, int64_t n, int64_t t)
{
    /* the usual case: t in both windows' newest buckets (t is clamped on the second
     * window, so the minute window's clamp would keep it too) */
    int64_t *a = newest_slot(sw_node_sec(node), t), *b = newest_slot(sw_node_min(node), t);
    if (a != NULL && b != NULL) {
        a[SW_SLOT_COUNTS + ev] = sw_sat_add(a[SW_SLOT_COUNTS + ev], n);
        b[SW_SLOT_COUNTS + ev] = sw_sat_add(b[SW_SLOT_COUNTS + ev], n);
        sw_node_total_add(node, ev, n);
        return;
    }
    sw_leap_add_at(sw_node_sec(node), sw_node_fut(node), ev, n, t);
    sw_leap_add(sw_node_min(node), NULL, ev, n, t);
    sw_node_total_add(node, ev, n);
}

int64_t sw_node_pass_at(struct sw_node *node, int64_t t)
{
    return sw_leap_sum_at(sw_node_sec(node), sw_node_fut(node), SW_EV_PASS, t);
}

int64_t sw_node_previous_second_pass(struct sw_node *node, int64_t t)
{
    return sw_leap_previous(sw_node_min(node), SW_EV_PASS, t);
}

int64_t sw_node_waiting(struct sw_node *node, int64_t t)
{
    struct sw_leap *fut = sw_node_fut(node);
    if (fut == NULL)
        return 0;
    t = sw_leap_clamp(sw_node_sec(node), t);
    return sw_borrow_waiting(fut, t);
}

/* ---- checking a node read from a shared region; repairing what a process that died
 * inside a critical section may have left half-written ---- */

/* The header words of a ring that its configuration fixes (everything before `newest`). */
static bool leap_layout_equal(const struct sw_leap *a, const struct sw_leap *b)
{
    return a->interval_ms == b->interval_ms && a->window_ms == b->window_ms &&
           a->sample_count == b->sample_count && a->n_events == b->n_events &&
           a->has_rt == b->has_rt && a->stride == b->stride;
}

int sw_node_validate(struct sw_node *node, const struct sw_node_cfg *cfg)
{
    size_t size = sw_node_size(cfg);
    if (node == NULL || size == 0)
        return SW_EINVAL;
    struct sw_node *tpl = calloc(1, size);
    if (tpl == NULL)
        return SW_ENOMEM;
    int rc = sw_node_init(tpl, cfg);
    if (rc == SW_OK) {
        if (node->off_sec != tpl->off_sec || node->off_fut != tpl->off_fut ||
            node->off_min != tpl->off_min || node->size != tpl->size) {
            rc = SW_EINVAL;
        } else {
            struct sw_leap *mine[3] = {sw_node_sec(node), sw_node_fut(node), sw_node_min(node)};
            struct sw_leap *want[3] = {sw_node_sec(tpl), sw_node_fut(tpl), sw_node_min(tpl)};
            for (int i = 0; i < 3 && rc == SW_OK; i++) {
                if ((mine[i] == NULL) != (want[i] == NULL))
                    rc = SW_EINVAL;
                else if (mine[i] != NULL && (!leap_layout_equal(mine[i], want[i]) ||
                                             !sw_leap_indices_ok(mine[i])))
                    rc = SW_EINVAL;
            }
        }
    }
    free(tpl);
    return rc;
}

void sw_node_repair(struct sw_node *node)
{
    struct sw_leap *rings[3] = {sw_node_sec(node), sw_node_fut(node), sw_node_min(node)};
    for (int i = 0; i < 3; i++)
        if (rings[i] != NULL)
            sw_leap_repair(rings[i]);
    /* a total is one aligned word, never half-written: a process killed between a window's
     * add and the total's add leaves the total at most that one request behind; only a
     * damaged value (below 0) is put right */
    for (uint32_t e = 0; e < SW_EV_DEFAULT_COUNT; e++)
        if (node->totals[e] < 0)
            node->totals[e] = 0;
    if (node->shadow_block < 0)
        node->shadow_block = 0;
}
