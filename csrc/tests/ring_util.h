/* ring_util.h - a standalone ring with its own lock (what a Metric object holds), shared
 * by the leap array tests. */
#ifndef SW_TEST_RING_UTIL_H
#define SW_TEST_RING_UTIL_H

#include "harness.h"
#include "sw_limiter.h"

#include <stdlib.h>
#include <string.h>

struct ring {
    sw_lock lock;
    struct sw_leap *leap;
    struct sw_leap *fut;
    struct sw_window w;
};

static inline void ring_open(struct ring *r, int64_t interval_ms, uint32_t samples,
                             uint32_t n_events, bool has_rt, bool borrowable)
{
    struct sw_leap_cfg c = {interval_ms, samples, n_events, has_rt};
    sw_lock_init(&r->lock);
    r->leap = malloc(sw_leap_size(&c));
    CHECK(r->leap != NULL);
    memset(r->leap, 0xa5, sw_leap_size(&c)); /* init must not rely on zeroed memory */
    CHECK_EQ(sw_leap_init(r->leap, &c), SW_OK);
    r->fut = NULL;
    if (borrowable) {
        struct sw_leap_cfg f;
        sw_borrow_cfg(&c, &f);
        r->fut = malloc(sw_leap_size(&f));
        CHECK(r->fut != NULL);
        memset(r->fut, 0xa5, sw_leap_size(&f));
        CHECK_EQ(sw_leap_init(r->fut, &f), SW_OK);
    }
    r->w.lock = &r->lock;
    r->w.leap = r->leap;
    r->w.future = r->fut;
    r->w.token = SW_LOCK_PRIVATE;
    r->w.repair = NULL;
    r->w.repair_ctx = NULL;
    r->w.enter = NULL;
    r->w.leave = NULL;
    r->w.hot_ctx = NULL;
}

static inline void ring_close(struct ring *r)
{
    free(r->leap);
    free(r->fut);
}

static inline int64_t wsum(struct ring *r, uint32_t ev, int64_t ms)
{
    int64_t v = -1;
    CHECK_EQ(sw_window_read(&r->w, SW_READ_SUM, ev, MS(ms), &v), SW_OK);
    return v;
}
static inline int64_t wcur(struct ring *r, uint32_t ev, int64_t ms)
{
    int64_t v = -1;
    CHECK_EQ(sw_window_read(&r->w, SW_READ_CURRENT, ev, MS(ms), &v), SW_OK);
    return v;
}
static inline int64_t wprev(struct ring *r, uint32_t ev, int64_t ms)
{
    int64_t v = -1;
    CHECK_EQ(sw_window_read(&r->w, SW_READ_PREVIOUS, ev, MS(ms), &v), SW_OK);
    return v;
}
static inline int64_t wminrt(struct ring *r, int64_t ms)
{
    int64_t m = -1;
    CHECK_EQ(sw_window_rt(&r->w, MS(ms), &m, NULL, NULL), SW_OK);
    return m;
}

#endif /* SW_TEST_RING_UTIL_H */
