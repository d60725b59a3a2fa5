/* bench_clock.c - what a clock read costs: CLOCK_MONOTONIC vs CLOCK_MONOTONIC_COARSE, and a
 * whole reject decision with each (the numbers behind the clock choice in README.md).
 * Build and run: make -C csrc bench-clock */
#include "sw_limiter.h"
#include "sw_time.h"

#include <stdio.h>
#include <stdlib.h>

#define N 20000000

static double per_call(int64_t t0, int64_t t1)
{
    return (double)(t1 - t0) / (double)N;
}

int main(void)
{
    volatile int64_t sink = 0;
    struct sw_limiter_cfg cfg;
    sw_limiter_cfg_default(&cfg);
    cfg.count = 1; /* refuses after the first: the reject path */
    struct sw_limiter *lim = calloc(1, sw_limiter_size(&cfg));
    if (lim == NULL || sw_limiter_init(lim, &cfg) != SW_OK)
        return 1;
    struct sw_decision d;
    printf("coarse clock resolution: %lld ns\n", (long long)sw_time_coarse_resolution_ns());
    for (int round = 0; round < 3; round++) {
        int64_t a = sw_time_ns();
        for (int i = 0; i < N; i++)
            sink += sw_time_ns();
        int64_t b = sw_time_ns();
        for (int i = 0; i < N; i++)
            sink += sw_time_coarse_ns();
        int64_t c = sw_time_ns();
        for (int i = 0; i < N; i++)
            sw_limiter_decide(lim, 1, INT64_C(5000000000), SW_F_TRY, &d);
        int64_t e = sw_time_ns();
        for (int i = 0; i < N; i++)
            sw_limiter_decide(lim, 1, SW_NOW, SW_F_TRY, &d);
        int64_t f = sw_time_ns();
        printf("round %d: CLOCK_MONOTONIC %.1f ns, CLOCK_MONOTONIC_COARSE %.1f ns, "
               "decision without clock %.1f ns, decision with coarse clock %.1f ns\n",
               round, per_call(a, b), per_call(b, c), per_call(c, e), per_call(e, f));
    }
    free(lim);
    return sink == 42 ? 2 : 0;
}
