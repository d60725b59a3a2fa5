/* harness.h - a tiny test harness for the slidewin C core (no Python, no framework).
 *
 * Each check counts as passed or failed; a failing check prints one line
 * `FAIL file:line: expression ...`. main() prints `N passed, M failed` and exits non-zero
 * on any failure. Checks run on the main thread only: stress workers record their findings
 * in their own structs and the main thread checks them afterwards.
 */
#ifndef SW_TEST_HARNESS_H
#define SW_TEST_HARNESS_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

extern long sw_t_passed;
extern long sw_t_failed;

/* One check counted; on failure, one line printed (printf's arguments). */
#define SW_T_RECORD(ok, ...)                                                                \
    do {                                                                                    \
        if (ok) {                                                                           \
            sw_t_passed++;                                                                  \
        } else {                                                                            \
            sw_t_failed++;                                                                  \
            printf(__VA_ARGS__);                                                            \
        }                                                                                   \
    } while (0)

#define CHECK(cond) SW_T_RECORD(cond, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond)

/* Integer equality: prints both values on failure. */
#define CHECK_EQ(got, expected)                                                             \
    do {                                                                                    \
        long long got_ = (long long)(got), exp_ = (long long)(expected);                    \
        SW_T_RECORD(got_ == exp_, "FAIL %s:%d: %s == %s: got %lld, expected %lld\n",        \
                    __FILE__, __LINE__, #got, #expected, got_, exp_);                       \
    } while (0)

/* Floating point equality within an absolute tolerance. */
#define CHECK_NEAR(got, expected, tol)                                                      \
    do {                                                                                    \
        double gotd_ = (double)(got), expd_ = (double)(expected);                           \
        SW_T_RECORD(fabs(gotd_ - expd_) <= (tol),                                           \
                    "FAIL %s:%d: %s ~= %s: got %.17g, expected %.17g\n", __FILE__, __LINE__, \
                    #got, #expected, gotd_, expd_);                                         \
    } while (0)

#define MS(x) ((int64_t)(x) * INT64_C(1000000)) /* ms -> ns */

/* Test groups (one per file). */
void test_leap(void);
void test_borrow(void);
void test_node(void);
void test_misc(void);
void test_limiter(void);
void test_warmup(void);
void test_throttle(void);
void test_stress(void);
void test_shm(void);
void test_lease(void);
void test_shm_crash(void);
void test_shm_crafted(void);
void test_totals(void);
void test_keyed(void);
void test_keyed_shared(void);
void test_keyed_stripes(void);
void test_observe(void);
void test_adaptive(void);
void test_group(void);
void test_breaker(void);
void test_evleap(void);
void test_region_read(void);

#endif /* SW_TEST_HARNESS_H */
