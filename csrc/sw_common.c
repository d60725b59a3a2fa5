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
