/* sw_time.c - clock reads (the only file of the core that reads a clock). */
#define _POSIX_C_SOURCE 200809L
#include "sw_time.h"

#include <time.h>

#ifndef CLOCK_MONOTONIC_COARSE
#define CLOCK_MONOTONIC_COARSE CLOCK_MONOTONIC
#endif

static int64_t ts_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * INT64_C(1000000000) + (int64_t)ts->tv_nsec;
}

int64_t sw_time_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return ts_ns(&ts);
}

int64_t sw_time_coarse_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return sw_time_ns();
    return ts_ns(&ts);
}

int64_t sw_time_coarse_resolution_ns(void)
{
    struct timespec ts;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return 1;
    return ts_ns(&ts);
}
