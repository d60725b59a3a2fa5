/* sw_repair.c - checking state read from a shared region, and repairing what a process that
 * died inside a critical section may have left half-written. */
#include "sw_limiter.h"

#include <stdlib.h>
#include <string.h>

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
