/* breaker_read.c - what is read of a breaker's state, by the type (breaker.c) and by the
 * observers (observe.c: read_region): the state names, the totals as a dict, a region's copy. */
#include "breaker_read.h"

#include <string.h>

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

int breaker_peek(void *copy, size_t size, int64_t interval_ms, uint32_t sample_count,
                 int64_t now_ns, PyObject **window, PyObject **totals, const char **state)
{
    struct sw_bstate *st = copy;
    if (sw_bstate_validate(st, size, interval_ms, sample_count) != SW_OK)
        return 1;
    struct sw_leap *l = sw_bstate_leap(st);
    sw_leap_repair(l); /* a copy taken without the lock: make its derived words agree */
    int64_t t = sw_leap_clamp(l, sw_ms_of_ns(now_ns));
    long long total = (long long)sw_leap_sum_at(l, NULL, SW_BRK_EV_TOTAL, t);
    long long errors = (long long)sw_leap_sum_at(l, NULL, SW_BRK_EV_ERRORS, t);
    long long slow = (long long)sw_leap_sum_at(l, NULL, SW_BRK_EV_SLOW, t);
    struct sw_brk_totals tt;
    memcpy(tt.t, st->totals, sizeof tt.t);
    memcpy(tt.transitions, st->transitions, sizeof tt.transitions);
    *window = Py_BuildValue("{sLsLsL}", "total", total, "errors", errors, "slow", slow);
    if (*window == NULL)
        return -1;
    *totals = breaker_totals_dict(&tt);
    if (*totals == NULL) {
        Py_CLEAR(*window);
        return -1;
    }
    *state = breaker_state_names[atomic_load_explicit(&st->word, memory_order_relaxed) & 3u];
    return 0;
}

