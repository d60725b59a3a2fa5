/* breaker_read.c - what is read of a breaker's state, by the type (breaker.c) and by the
 * observers (observe.c: read_region): the state names, the totals as a dict. */
#include "breaker_read.h"

const char *const breaker_state_names[3] = {"closed", "open", "half_open"};

PyObject *breaker_totals_dict(const struct sw_brk_totals *tp)
{
    const struct sw_brk_totals t = *tp;
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsLsL}", "total", (long long)t.t[SW_BRK_T_TOTAL],
                         "errors", (long long)t.t[SW_BRK_T_ERRORS], "slow",
                         (long long)t.t[SW_BRK_T_SLOW], "refused",
                         (long long)t.t[SW_BRK_T_REFUSED], "probes",
                         (long long)t.t[SW_BRK_T_PROBES], "cancelled",
                         (long long)t.t[SW_BRK_T_CANCELLED], "probes_timed_out",
                         (long long)t.t[SW_BRK_T_PROBE_TIMEOUTS], "timed_out",
                         (long long)t.t[SW_BRK_T_TIMED_OUT], "opened",
                         (long long)t.transitions[SW_BRK_OPEN], "half_opened",
                         (long long)t.transitions[SW_BRK_HALF_OPEN], "closed",
                         (long long)t.transitions[SW_BRK_CLOSED]);
}
