/* sw_common.c - error strings and the test hook. */
#include "sw_common.h"

#include <stdarg.h>
#include <stdio.h>

const char *sw_strerror(int code)
{
    switch (code) {
    case SW_OK: return "success";
    case SW_EINVAL: return "invalid argument";
    case SW_ENOMEM: return "out of memory";
    case SW_ERANGE: return "value out of range";
    case SW_ENORT: return "this window has no RT counters (user-defined events)";
    case SW_EEVENT: return "unknown event";
    case SW_ESTATE: return "operation does not fit the current state";
    case SW_EOS: return "a system call failed";
    case SW_EBUSY: return "gave up waiting for another process's lock";
    default: return "unknown error";
    }
}

void (*volatile sw_test_in_critical)(void) = NULL;

int sw_cfg_fail(struct sw_cfg_error *err, const char *param, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->param = param;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return SW_EINVAL;
}

int sw_cfg_check_window(struct sw_cfg_error *err, int64_t interval_ms, uint32_t sample_count)
{
    if (interval_ms < 1 || interval_ms > SW_MAX_INTERVAL_MS)
        return sw_cfg_fail(err, "interval_ms", "interval_ms must be an int in [1, 2**40], got %lld",
                           (long long)interval_ms);
    if (sample_count < 1 || sample_count > SW_MAX_SAMPLES)
        return sw_cfg_fail(err, "sample_count", "sample_count must be an int in [1, %d], got %lu",
                           SW_MAX_SAMPLES, (unsigned long)sample_count);
    if (interval_ms % (int64_t)sample_count != 0)
        return sw_cfg_fail(err, "interval_ms", "interval_ms (%lld) must be divisible by "
                           "sample_count (%lu)", (long long)interval_ms,
                           (unsigned long)sample_count);
    return SW_OK;
}
