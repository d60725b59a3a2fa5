/* lim_region.h - a limiter region's state callbacks (struct sw_shm_layout's init_state,
 * check_state and state_lock over a struct sw_lstate), for the tests and the fuzzer that make
 * limiter regions without the binding. */
#ifndef SW_TEST_LIM_REGION_H
#define SW_TEST_LIM_REGION_H

#include "sw_limiter.h"
#include "sw_shm.h"

static inline int lim_init_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_init(state, lay->interval_ms, lay->sample_count);
}

static inline sw_lock *lim_state_lock(void *state)
{
    return &((struct sw_lstate *)state)->lock;
}

static inline int lim_check_state(void *state, const struct sw_shm_layout *lay)
{
    return sw_lstate_validate(state, (size_t)lay->state_size, lay->interval_ms,
                              lay->sample_count);
}

#endif /* SW_TEST_LIM_REGION_H */
