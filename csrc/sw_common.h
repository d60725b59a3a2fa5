/* sw_common.h - error codes, limits and helpers shared by the slidewin C core.
 *
 * The core never includes Python.h, never reads a clock outside sw_time.c, never prints,
 * never aborts. Errors are returned codes; yes/no decisions return bool.
 */
#ifndef SW_COMMON_H
#define SW_COMMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
enum {
    SW_OK = 0,      /* success */
    SW_EINVAL = 1,  /* an argument is out of range or the configuration is impossible */
    SW_ENOMEM = 2,  /* an allocation failed */
    SW_ERANGE = 3,  /* a value overflows what the core can represent */
    SW_ENORT = 4,   /* the window has no RT counters (user-defined events) */
    SW_EEVENT = 5,  /* unknown event index */
    SW_ESTATE = 6,  /* the call does not fit the object's state (release beyond in flight) */
    SW_EOS = 7,     /* a system call failed (shared regions: the error says which errno) */
    SW_EBUSY = 8    /* gave up waiting for another process's lock (sw_lock_wait_hook said so,
                     * or its owner is stuck): nothing was done */
};

/** Describe a return code.
 * @param code one of the SW_* codes
 * @return a static, NUL-terminated English message (never NULL) */
const char *sw_strerror(int code);

/* Why a configuration was refused: the parameter and a message naming its value and what is
 * allowed (what the binding raises as ValueError); the products' check_ex fill it in. */
struct sw_cfg_error {
    const char *param; /* the parameter, as the constructor names it ("qps", "error_ratio") */
    char msg[320];
};

/** Refuse a configuration: fill err (when not NULL) with param and the formatted message.
 * @return SW_EINVAL */
int sw_cfg_fail(struct sw_cfg_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Check a window's interval_ms and sample_count (every product's window) with sw_cfg_fail.
 * @return SW_OK or SW_EINVAL */
int sw_cfg_check_window(struct sw_cfg_error *err, int64_t interval_ms, uint32_t sample_count);

/* Pass `SW_NOW` as `now_ns` to let the core read the clock inside its critical section. */
#define SW_NOW INT64_MIN

/* Limits of a window. */
#define SW_MAX_EVENTS 32           /* events per bucket */
#define SW_MAX_SAMPLES 100000      /* buckets per ring */
#define SW_MAX_INTERVAL_MS (INT64_C(1) << 40) /* about 34 years */
#define SW_MIN_RT_INIT 5000        /* Sentinel's statisticMaxRt, ms */

/* The default event set (docs/design.md §3). */
enum sw_event {
    SW_EV_PASS = 0,
    SW_EV_BLOCK = 1,
    SW_EV_EXCEPTION = 2,
    SW_EV_SUCCESS = 3,
    SW_EV_RT = 4,
    SW_EV_OCCUPIED_PASS = 5,
    SW_EV_DEFAULT_COUNT = 6
};

/** Round a byte count up to a multiple of 8 (offsets of the parts of flat state).
 * @param x bytes @return the smallest multiple of 8 >= x */
static inline size_t sw_align8(size_t x)
{
    return (x + 7u) & ~(size_t)7u;
}

/** Tell the CPU this is a spin-wait loop (pause / yield), a no-op elsewhere. */
static inline void sw_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Test hook: the core calls it while holding a limiter's lock, in the middle of a decision
 * (between two stores), when set. Tests use it to widen the window in which a process can be
 * killed inside a critical section. NULL (the default) costs one predictable branch. */
extern void (*volatile sw_test_in_critical)(void);

/* Saturating helpers on int64 (the core never overflows silently). */
static inline int64_t sw_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}
static inline int64_t sw_sat_sub(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
}
static inline int64_t sw_sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return ((a < 0) != (b < 0)) ? INT64_MIN : INT64_MAX;
    return r;
}

#ifdef __cplusplus
}
#endif
#endif /* SW_COMMON_H */
