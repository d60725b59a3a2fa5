/* test_breaker.c - the circuit breaker: Sentinel's degrade scenarios (ExceptionCircuitBreakerTest,
 * ResponseTimeCircuitBreakerTest, CircuitBreakingIntegrationTest) with explicit times, tickets,
 * cancels (#1638), configuration errors, a shared-state check, and exactly one probe under
 * threads. */
#include "harness.h"

#include "sw_breaker.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#define SEC(x) ((int64_t)(x) * INT64_C(1000000000))

struct brk {
    struct sw_breaker *br;
    struct sw_bview v;
    struct sw_brk_changes last; /* the changes of the last call */
    int64_t changes[3][3];      /* [from][to] seen */
};

static int64_t retry_of(const struct sw_bview *v, int64_t now_ns)
{
    int64_t r = -2;
    CHECK_EQ(sw_breaker_retry_ns(v, now_ns, &r), SW_OK);
    return r;
}

static struct sw_breaker_cfg cfg_of(int grade, double threshold, int64_t min_requests,
                                    double recovery_s, int64_t interval_ms)
{
    struct sw_breaker_cfg c;
    sw_breaker_cfg_default(&c);
    c.grade = grade;
    c.threshold = threshold;
    c.min_requests = min_requests;
    c.recovery_s = recovery_s;
    c.interval_ms = interval_ms;
    return c;
}

static bool brk_new(struct brk *b, const struct sw_breaker_cfg *c)
{
    memset(b, 0, sizeof *b);
    size_t size = sw_breaker_size(c);
    CHECK(size > 0);
    if (size == 0)
        return false;
    b->br = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (b->br == NULL)
        return false;
    CHECK_EQ(sw_breaker_init(b->br, c), SW_OK);
    sw_breaker_view(b->br, &b->v);
    return true;
}

/* New settings c for b's breaker (checked), through its view. */
static void brk_set_rule(struct brk *b, const struct sw_breaker_cfg *c)
{
    struct sw_brule nr;
    CHECK_EQ(sw_brule_init(&nr, c), SW_OK);
    CHECK_EQ(sw_bview_set_rule(&b->v, &b->br->rule, &nr), SW_OK);
}

static void brk_free(struct brk *b)
{
    free(b->br);
    b->br = NULL;
}

static void note(struct brk *b)
{
    for (uint32_t i = 0; i < b->last.n; i++)
        b->changes[b->last.c[i].from][b->last.c[i].to]++;
}

/* try_pass at t; on a pass, the ticket in *ticket */
static bool pass_at(struct brk *b, int64_t t, uint64_t *ticket)
{
    uint64_t tk = 0;
    bool ok = sw_breaker_try_pass(&b->v, t, &tk, &b->last);
    note(b);
    if (ticket != NULL)
        *ticket = tk;
    return ok;
}

static void record_at(struct brk *b, uint64_t ticket, double rt_ms, bool error, int64_t t)
{
    CHECK_EQ(sw_breaker_record(&b->v, rt_ms, error, ticket, t, &b->last), SW_OK);
    note(b);
}

/* Sentinel's entryAndSleepFor / entryWithErrorIfPresent: a call starting at *t, running
 * rt_ms, ending with an error or not; *t moves on by rt_ms. @return whether it was admitted */
static bool call(struct brk *b, int64_t *t, int64_t rt_ms, bool error)
{
    uint64_t tk;
    if (!pass_at(b, *t, &tk))
        return false;
    *t += MS(rt_ms);
    record_at(b, tk, (double)rt_ms, error, *t);
    return true;
}

/* ExceptionCircuitBreakerTest.testRecordErrorOrSuccess: ratio 0.2, 20 s window, 10 s open,
 * min 1. */
static void test_exception_ratio(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_RATIO, 0.2, 1, 10, 20000);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    int64_t t = SEC(100);
    CHECK(call(&b, &t, 10, false));
    CHECK(call(&b, &t, 0, true)); /* 1/2 > 0.2 -> open */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK(b.last.n == 1 && b.last.c[0].from == SW_BRK_CLOSED && b.last.c[0].to == SW_BRK_OPEN);
    CHECK_NEAR(b.last.c[0].value, 0.5, 1e-12);
    CHECK(!call(&b, &t, 0, true));
    CHECK(!call(&b, &t, 100, false));
    CHECK_EQ(retry_of(&b.v, t), SEC(10));
    t += SEC(5);
    CHECK(!call(&b, &t, 100, false));
    t += SEC(5);
    CHECK_EQ(retry_of(&b.v, t), 0);
    CHECK(call(&b, &t, 0, true)); /* -> half -> open */
    CHECK_EQ(b.changes[SW_BRK_OPEN][SW_BRK_HALF_OPEN], 1);
    CHECK_EQ(b.changes[SW_BRK_HALF_OPEN][SW_BRK_OPEN], 1);
    CHECK(!call(&b, &t, 100, false));
    CHECK(!call(&b, &t, 100, false));
    t += SEC(10);
    CHECK(call(&b, &t, 100, false)); /* -> half -> closed, window emptied */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK_EQ(b.changes[SW_BRK_HALF_OPEN][SW_BRK_CLOSED], 1);
    struct sw_brk_stats s;
    sw_breaker_stats(&b.v, t, &s);
    CHECK_EQ(s.total, 0);
    CHECK_EQ(s.retry_ns, -1);
    for (int i = 0; i < 6; i++)
        CHECK(call(&b, &t, 100, false));
    CHECK(call(&b, &t, 0, true)); /* 1/7 <= 0.2 */
    CHECK(call(&b, &t, 100, false));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    struct sw_brk_totals tot;
    sw_breaker_totals(&b.v, &tot);
    CHECK_EQ(tot.t[SW_BRK_T_TOTAL], 12);
    CHECK_EQ(tot.t[SW_BRK_T_ERRORS], 3);
    CHECK_EQ(tot.t[SW_BRK_T_REFUSED], 5);
    CHECK_EQ(tot.t[SW_BRK_T_PROBES], 2);
    CHECK_EQ(tot.transitions[SW_BRK_OPEN], 2);
    CHECK_EQ(tot.transitions[SW_BRK_HALF_OPEN], 2);
    CHECK_EQ(tot.transitions[SW_BRK_CLOSED], 1);
    brk_free(&b);
}

/* The trip test is a strict `>`; min_requests holds a trip back; the error count grade. */
static void test_strict_and_min_requests(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_RATIO, 0.5, 2, 10, 1000);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    int64_t t = SEC(1);
    CHECK(call(&b, &t, 1, true)); /* 1/1 but total < 2 */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK(call(&b, &t, 1, false)); /* 1/2 == 0.5: not above */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK(call(&b, &t, 1, true)); /* 2/3 */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    brk_free(&b);

    c = cfg_of(SW_BRK_ERROR_RATIO, 0.0, 5, 10, 1000);
    if (!brk_new(&b, &c))
        return;
    t = SEC(1);
    for (int i = 0; i < 4; i++)
        CHECK(call(&b, &t, 1, true));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK(call(&b, &t, 1, true));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    brk_free(&b);

    c = cfg_of(SW_BRK_ERROR_COUNT, 2, 1, 10, 1000);
    if (!brk_new(&b, &c))
        return;
    t = SEC(1);
    CHECK(call(&b, &t, 1, true));
    CHECK(call(&b, &t, 1, true)); /* 2 errors: not above 2 */
    CHECK(call(&b, &t, 1, false));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK(call(&b, &t, 1, true));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK_NEAR(b.last.c[0].value, 3.0, 0);
    brk_free(&b);

    /* a tumbling window: errors of the previous second are gone */
    c = cfg_of(SW_BRK_ERROR_COUNT, 2, 1, 10, 1000);
    if (!brk_new(&b, &c))
        return;
    t = SEC(1);
    CHECK(call(&b, &t, 1, true));
    CHECK(call(&b, &t, 1, true));
    t = SEC(2) + MS(10);
    CHECK(call(&b, &t, 1, true));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    brk_free(&b);
}

/* ResponseTimeCircuitBreakerTest.testMaxSlowRatioThreshold: slow ratio 1.0 trips at 1.0. */
static void test_slow_ratio_one(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_SLOW_RATIO, 1.0, 3, 5, 5000);
    c.slow_rt_ms = 10;
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    int64_t t = SEC(10);
    CHECK(call(&b, &t, 20, false));
    CHECK(call(&b, &t, 20, false));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK(call(&b, &t, 20, false)); /* 3/3 slow: == 1.0 == threshold */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK(!call(&b, &t, 20, false));
    t += SEC(1);
    CHECK(!call(&b, &t, 20, false));
    t += SEC(4);
    CHECK(call(&b, &t, 20, false)); /* the probe (slow: reopens) */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    brk_free(&b);

    /* 2 of 3 slow with threshold 1.0: no trip; an RT equal to slow_rt_ms is not slow */
    if (!brk_new(&b, &c))
        return;
    t = SEC(10);
    CHECK(call(&b, &t, 20, false));
    CHECK(call(&b, &t, 10, false));
    CHECK(call(&b, &t, 20, false));
    CHECK(call(&b, &t, 20, false));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    struct sw_brk_stats s;
    sw_breaker_stats(&b.v, t, &s);
    CHECK_EQ(s.total, 4);
    CHECK_EQ(s.slow, 3);
    brk_free(&b);
}

/* CircuitBreakingIntegrationTest.testSlowRequestMode: rt 50, min 10, ratio 0.8, 20 s, 5 s. */
static void test_slow_request_mode(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_SLOW_RATIO, 0.8, 10, 5, 20000);
    c.slow_rt_ms = 50;
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    int64_t t = SEC(1000);
    for (int i = 0; i < 10; i++)
        CHECK(call(&b, &t, i < 7 ? 65 : 35, false));
    /* 7/10; then slow calls: 8/11 .. 12/15 = 0.8 (not above), 13/16 trips */
    for (int i = 0; i < 5; i++) {
        CHECK(call(&b, &t, 65, false));
        CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    }
    CHECK(call(&b, &t, 65, false));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK_EQ(b.changes[SW_BRK_CLOSED][SW_BRK_OPEN], 1);
    CHECK_NEAR(b.last.c[0].value, 13.0 / 16.0, 1e-12);
    CHECK(!call(&b, &t, 1, false));
    t += SEC(1);
    CHECK(!call(&b, &t, 1, false));
    t += SEC(5);
    CHECK(call(&b, &t, 65, false)); /* HALF_OPEN -> OPEN */
    CHECK_EQ(b.changes[SW_BRK_OPEN][SW_BRK_HALF_OPEN], 1);
    CHECK_EQ(b.changes[SW_BRK_HALF_OPEN][SW_BRK_OPEN], 1);
    t += SEC(6);
    CHECK(call(&b, &t, 35, false)); /* HALF_OPEN -> CLOSED */
    CHECK_EQ(b.changes[SW_BRK_HALF_OPEN][SW_BRK_CLOSED], 1);
    CHECK(call(&b, &t, 65, false)); /* closed; 1 call is below min_requests */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    brk_free(&b);
}

/* CircuitBreakingIntegrationTest.testExceptionRatioMode: 0.5, min 10, 25 s, 5 s. */
static void test_exception_ratio_mode(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_RATIO, 0.5, 10, 5, 25000);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    int64_t t = SEC(1000);
    for (int i = 0; i < 9; i++)
        CHECK(call(&b, &t, 1, i < 6));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK(call(&b, &t, 1, true)); /* 7/10 */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK(!call(&b, &t, 1, false));
    t += SEC(2);
    CHECK(!call(&b, &t, 1, false));
    t += SEC(5);
    CHECK(call(&b, &t, 1, true));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    t += SEC(6);
    CHECK(call(&b, &t, 1, false));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK(call(&b, &t, 1, true));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    brk_free(&b);
}

/* CircuitBreakingIntegrationTest.testMultipleHalfOpenedBreakers: two breakers on one call;
 * the one that lets a probe through while the other refuses has the probe cancelled, back
 * to OPEN with its retry time unchanged (#1638). */
static void test_multiple_half_open(void)
{
    struct sw_breaker_cfg c1 = cfg_of(SW_BRK_SLOW_RATIO, 0.8, 1, 2, 20000);
    struct sw_breaker_cfg c2 = cfg_of(SW_BRK_SLOW_RATIO, 0.8, 1, 4, 20000);
    c1.slow_rt_ms = c2.slow_rt_ms = 50;
    struct brk b1, b2;
    if (!brk_new(&b1, &c1))
        return;
    if (!brk_new(&b2, &c2)) {
        brk_free(&b1);
        return;
    }
    int64_t t = SEC(500);
    uint64_t k1, k2;
    CHECK(pass_at(&b1, t, &k1) && pass_at(&b2, t, &k2));
    t += MS(100);
    record_at(&b1, k1, 100, false, t);
    record_at(&b2, k2, 100, false, t);
    CHECK_EQ(sw_breaker_state(&b1.v), SW_BRK_OPEN);
    CHECK_EQ(sw_breaker_state(&b2.v), SW_BRK_OPEN);
    t += SEC(3);
    for (int i = 0; i < 10; i++) {
        bool p1 = pass_at(&b1, t, &k1);
        CHECK(p1); /* b1 probes at once every time: its retry time did not move */
        bool p2 = pass_at(&b2, t, &k2);
        CHECK(!p2);
        if (p1 && !p2) {
            CHECK(sw_breaker_cancel(&b1.v, k1, t, &b1.last));
            note(&b1);
        }
        t += MS(100);
    }
    CHECK_EQ(sw_breaker_state(&b1.v), SW_BRK_OPEN);
    CHECK_EQ(sw_breaker_state(&b2.v), SW_BRK_OPEN);
    CHECK_EQ(b1.changes[SW_BRK_OPEN][SW_BRK_HALF_OPEN], 10);
    CHECK_EQ(b1.changes[SW_BRK_HALF_OPEN][SW_BRK_OPEN], 10);
    CHECK(isnan(b1.last.c[0].value));
    t += SEC(3);
    for (int i = 0; i < 10; i++) {
        CHECK(pass_at(&b1, t, &k1) && pass_at(&b2, t, &k2));
        t += MS(1);
        record_at(&b1, k1, 1, false, t);
        record_at(&b2, k2, 1, false, t);
    }
    CHECK_EQ(sw_breaker_state(&b1.v), SW_BRK_CLOSED);
    CHECK_EQ(sw_breaker_state(&b2.v), SW_BRK_CLOSED);
    struct sw_brk_totals tot;
    sw_breaker_totals(&b1.v, &tot);
    CHECK_EQ(tot.t[SW_BRK_T_CANCELLED], 10);
    brk_free(&b1);
    brk_free(&b2);
}

/* Tickets: only the probe decides HALF_OPEN; a call admitted before a trip decides nothing;
 * a cancel that is not the probe's does nothing; the bare pair (SW_BRK_ANY) decides. */
static void test_tickets(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 1, 1000);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    int64_t t = SEC(10);
    uint64_t early, early2, trip, probe, other;
    CHECK(pass_at(&b, t, &early));
    CHECK(pass_at(&b, t, &early2));
    CHECK(pass_at(&b, t, &trip));
    record_at(&b, trip, 1, true, t); /* trips */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    record_at(&b, early, 1, false, t); /* counted, OPEN: nothing */
    t += SEC(1);
    CHECK(pass_at(&b, t, &probe));
    CHECK_EQ(probe & 3u, SW_BRK_HALF_OPEN);
    CHECK(!pass_at(&b, t, &other));
    CHECK(!sw_breaker_cancel(&b.v, early, t, &b.last)); /* not the probe: nothing */
    CHECK_EQ(b.last.n, 0);
    record_at(&b, early2, 1, true, t); /* an error of an old call: counted, decides nothing */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_HALF_OPEN);
    CHECK_EQ(b.last.n, 0);
    record_at(&b, probe, 1, false, t);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    /* a ticket from the first closed period records an error in the second: no trip */
    record_at(&b, trip, 1, true, t);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    struct sw_brk_stats s;
    sw_breaker_stats(&b.v, t, &s);
    CHECK_EQ(s.errors, 1);
    /* the bare pair */
    record_at(&b, SW_BRK_ANY, 1, true, t);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    t += SEC(1);
    CHECK(pass_at(&b, t, NULL));
    CHECK(sw_breaker_cancel(&b.v, SW_BRK_ANY, t, &b.last));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK_EQ(retry_of(&b.v, t), 0); /* next unchanged: probes at once */
    CHECK(pass_at(&b, t, NULL));
    CHECK_EQ(retry_of(&b.v, t), SEC(1)); /* HALF_OPEN: the recovery time */
    record_at(&b, SW_BRK_ANY, 1, false, t);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    CHECK_EQ(sw_breaker_record(&b.v, -1.0, false, SW_BRK_ANY, t, &b.last), SW_EINVAL);
    CHECK_EQ(sw_breaker_record(&b.v, NAN, false, SW_BRK_ANY, t, &b.last), SW_EINVAL);
    CHECK_EQ(sw_breaker_record(&b.v, INFINITY, false, SW_BRK_ANY, t, &b.last), SW_EINVAL);
    /* a slow probe reopens only the slow grade; an error probe reopens every grade */
    brk_free(&b);
}

static void expect_error(struct sw_breaker_cfg c, const char *param)
{
    struct sw_cfg_error err;
    memset(&err, 0, sizeof err);
    CHECK_EQ(sw_breaker_check_ex(&c, &err), SW_EINVAL);
    SW_T_RECORD(err.param != NULL && strcmp(err.param, param) == 0,
                "FAIL %s:%d: expected param %s, got %s (%s)\n", __FILE__, __LINE__, param,
                err.param ? err.param : "NULL", err.msg);
    CHECK(strstr(err.msg, param) != NULL || strcmp(param, "error_ratio") == 0);
    CHECK_EQ(sw_breaker_size(&c), 0);
}

static void test_check(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_RATIO, 0.5, 5, 10, 1000);
    CHECK_EQ(sw_breaker_check_ex(&c, NULL), SW_OK);
    struct sw_breaker_cfg d = c;
    d.threshold = 1.5;
    expect_error(d, "error_ratio");
    d.threshold = NAN;
    expect_error(d, "error_ratio");
    d = c;
    d.grade = SW_BRK_ERROR_COUNT;
    d.threshold = 1.5;
    expect_error(d, "error_count");
    d.threshold = -1;
    expect_error(d, "error_count");
    d = c;
    d.grade = SW_BRK_SLOW_RATIO;
    d.slow_rt_ms = -1;
    expect_error(d, "slow_rt_ms");
    d.slow_rt_ms = 10;
    d.threshold = -0.1;
    expect_error(d, "slow_ratio");
    d = c;
    d.grade = 7;
    expect_error(d, "error_ratio");
    d = c;
    d.min_requests = -1;
    expect_error(d, "min_requests");
    d = c;
    d.recovery_s = -1;
    expect_error(d, "recovery_s");
    d.recovery_s = INFINITY;
    expect_error(d, "recovery_s");
    d = c;
    d.probe_timeout_s = 0;
    expect_error(d, "probe_timeout_s");
    d.probe_timeout_s = NAN;
    expect_error(d, "probe_timeout_s");
    d.probe_timeout_s = INFINITY; /* wait for ever */
    CHECK_EQ(sw_breaker_check_ex(&d, NULL), SW_OK);
    d = c;
    d.interval_ms = 0;
    expect_error(d, "interval_ms");
    d = c;
    d.sample_count = 0;
    expect_error(d, "sample_count");
    d = c;
    d.sample_count = 3;
    expect_error(d, "interval_ms");
}

/* A state as a shared region holds it: validated as input; repaired on attach. */
static void test_validate(void)
{
    size_t size = sw_bstate_size(1000, 4);
    CHECK(size > 0);
    struct sw_bstate *st = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (st == NULL)
        return;
    CHECK_EQ(sw_bstate_init(st, 1000, 4), SW_OK);
    CHECK_EQ(sw_bstate_validate(st, size, 1000, 4), SW_OK);
    CHECK_EQ(sw_bstate_validate(st, size - 1, 1000, 4), SW_EINVAL);
    CHECK_EQ(sw_bstate_validate(st, size, 1000, 2), SW_EINVAL);
    CHECK_EQ(sw_bstate_validate(st, size, 2000, 4), SW_EINVAL);
    st->magic ^= 1u;
    CHECK_EQ(sw_bstate_validate(st, size, 1000, 4), SW_EINVAL);
    st->magic ^= 1u;
    atomic_store(&st->word, UINT64_C(7));
    CHECK_EQ(sw_bstate_validate(st, size, 1000, 4), SW_EINVAL);
    atomic_store(&st->word, UINT64_C(0));
    sw_bstate_leap(st)->newest_idx = 99;
    sw_bstate_leap(st)->newest = 0;
    CHECK_EQ(sw_bstate_validate(st, size, 1000, 4), SW_EINVAL);
    sw_leap_reset(sw_bstate_leap(st));
    CHECK_EQ(sw_bstate_validate(st, size, 1000, 4), SW_OK);
    /* a HALF_OPEN word with no probe owner is repaired to OPEN */
    struct sw_brule rule;
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_RATIO, 0.5, 5, 10, 1000);
    c.sample_count = 4;
    CHECK_EQ(sw_brule_init(&rule, &c), SW_OK);
    struct sw_bview v = {st, &rule, SW_LOCK_PRIVATE, NULL};
    atomic_store(&st->word, (UINT64_C(5) << 2) | SW_BRK_HALF_OPEN);
    sw_bstate_check_repair(&v);
    CHECK_EQ(sw_breaker_state(&v), SW_BRK_OPEN);
    free(st);
}

/* A crafted shared state: a probe owner with no pid (12345, SW_LOCK_PRIVATE) is repaired on
 * attach and reaped when read; a retry time at INT64_MAX is brought back to opened + recovery
 * (now + recovery for an opened time in the future);
 * the bare cancel gives back only a bare probe. */
static void test_crafted_states(void)
{
    size_t size = sw_bstate_size(1000, 1);
    struct sw_bstate *st = aligned_alloc(64, (size + 63) & ~(size_t)63);
    CHECK(st != NULL);
    if (st == NULL)
        return;
    struct sw_brule rule;
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 1, 1000);
    CHECK_EQ(sw_brule_init(&rule, &c), SW_OK);
    struct sw_bview v = {st, &rule, SW_LOCK_PROCESS, NULL};
    struct sw_brk_changes chg;
    uint64_t tk;
    const uint64_t owners[2] = {12345u, SW_LOCK_PRIVATE};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sw_bstate_init(st, 1000, 1), SW_OK);
        atomic_store(&st->word, (UINT64_C(7) << 2) | SW_BRK_HALF_OPEN);
        atomic_store(&st->probe_owner, owners[i]);
        CHECK_EQ(sw_bstate_check_repair(&v), SW_OK); /* attach */
        CHECK_EQ(sw_breaker_state(&v), SW_BRK_OPEN);
        CHECK_EQ(sw_bstate_init(st, 1000, 1), SW_OK);
        atomic_store(&st->word, (UINT64_C(7) << 2) | SW_BRK_HALF_OPEN);
        atomic_store(&st->probe_owner, owners[i]);
        CHECK_EQ(sw_breaker_try_pass(&v, SEC(10), &tk, &chg), 1); /* read: reaped, probes */
        CHECK_EQ(sw_breaker_state(&v), SW_BRK_HALF_OPEN);
    }
    CHECK_EQ(sw_bstate_init(st, 1000, 1), SW_OK);
    atomic_store(&st->word, (UINT64_C(7) << 2) | SW_BRK_OPEN);
    st->next_ns = INT64_MAX;
    st->opened_ns = INT64_MAX; /* later than now: the bound is now + recovery */
    CHECK(retry_of(&v, SEC(10)) <= SEC(1));
    CHECK_EQ(sw_breaker_try_pass(&v, SEC(10), &tk, &chg), 0);
    CHECK_EQ(sw_breaker_try_pass(&v, SEC(11), &tk, &chg), 1);
    /* an entry's probe is not the bare cancel's; a bare one is */
    CHECK_EQ(sw_breaker_record(&v, 1, true, tk, SEC(11), &chg), SW_OK);
    CHECK_EQ(sw_breaker_pass_ticket(&v, SEC(12), &tk, &chg), 1);
    CHECK_EQ(sw_breaker_cancel(&v, SW_BRK_ANY, SEC(12), &chg), 0);
    CHECK_EQ(sw_breaker_cancel(&v, tk, SEC(12), &chg), 1);
    CHECK_EQ(sw_breaker_try_pass(&v, SEC(12), &tk, &chg), 1);
    CHECK_EQ(sw_breaker_cancel(&v, SW_BRK_ANY, SEC(12), &chg), 1);
    free(st);
}

/* A shared state whose probe is held by a process that died: the next refused caller finds
 * the owner dead, cancels the probe and probes itself. A live holder keeps it. */
static void test_dead_probe_owner(void)
{
    size_t size = sw_bstate_size(1000, 1);
    struct sw_bstate *st = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                -1, 0);
    CHECK(st != MAP_FAILED);
    if (st == MAP_FAILED)
        return;
    CHECK_EQ(sw_bstate_init(st, 1000, 1), SW_OK);
    struct sw_brule rule;
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 1, 1000);
    CHECK_EQ(sw_brule_init(&rule, &c), SW_OK);
    struct sw_bview v = {st, &rule, SW_LOCK_PROCESS, NULL};
    struct sw_brk_changes chg;
    uint64_t tk;
    CHECK_EQ(sw_breaker_record(&v, 1, true, SW_BRK_ANY, SEC(1), &chg), SW_OK);
    for (int round = 0; round < 2; round++) {
        int up[2], down[2]; /* child -> parent, parent -> child */
        CHECK_EQ(pipe(up), 0);
        CHECK_EQ(pipe(down), 0);
        pid_t pid = fork();
        if (pid == 0) { /* the child takes the probe, tells the parent, then dies or waits */
            char b = sw_breaker_try_pass(&v, SEC(10 + round * 10), &tk, &chg) ? 'p' : 'n';
            if (write(up[1], &b, 1) != 1)
                _exit(2);
            if (round == 1) { /* stays alive until the parent has looked */
                char x;
                if (read(down[0], &x, 1) != 1)
                    _exit(3);
            }
            _exit(0);
        }
        char got = 0;
        CHECK(read(up[0], &got, 1) == 1);
        CHECK(got == 'p');
        if (round == 0) {
            int status;
            CHECK(waitpid(pid, &status, 0) == pid);
            /* the owner is dead: cancelled, and this caller is the probe */
            atomic_store(&st->reap_ns, INT64_C(0)); /* due now */
            CHECK(sw_breaker_try_pass(&v, SEC(10), &tk, &chg));
            CHECK_EQ(chg.n, 2);
            CHECK(chg.c[0].from == SW_BRK_HALF_OPEN && chg.c[0].to == SW_BRK_OPEN);
            CHECK(chg.c[1].from == SW_BRK_OPEN && chg.c[1].to == SW_BRK_HALF_OPEN);
            CHECK_EQ(sw_breaker_record(&v, 1, true, tk, SEC(10), &chg), SW_OK); /* reopen */
            CHECK_EQ(sw_breaker_state(&v), SW_BRK_OPEN);
        } else {
            /* a live owner keeps its probe */
            atomic_store(&st->reap_ns, INT64_C(0));
            CHECK(!sw_breaker_try_pass(&v, SEC(20), &tk, &chg));
            CHECK_EQ(sw_breaker_state(&v), SW_BRK_HALF_OPEN);
            char x = 'x';
            CHECK(write(down[1], &x, 1) == 1);
            int status;
            CHECK(waitpid(pid, &status, 0) == pid);
        }
        close(up[0]);
        close(up[1]);
        close(down[0]);
        close(down[1]);
    }
    struct sw_brk_totals tot;
    sw_breaker_totals(&v, &tot);
    CHECK_EQ(tot.t[SW_BRK_T_CANCELLED], 1);
    munmap(st, size);
}

/* ---- exactly one probe among threads ---- */

#define BRK_THREADS 8
#define BRK_ROUNDS 300

struct probe_shared {
    struct sw_bview v;
    pthread_barrier_t barrier;
    _Atomic int passed;
    _Atomic uint64_t probe_ticket;
    _Atomic int64_t round_now;
};

struct probe_arg {
    struct probe_shared *sh;
    int refused;
};

static void *probe_worker(void *p)
{
    struct probe_arg *a = p;
    for (int r = 0; r < BRK_ROUNDS; r++) {
        pthread_barrier_wait(&a->sh->barrier);
        int64_t now = atomic_load(&a->sh->round_now);
        uint64_t tk;
        struct sw_brk_changes chg;
        if (sw_breaker_try_pass(&a->sh->v, now, &tk, &chg)) {
            atomic_fetch_add(&a->sh->passed, 1);
            atomic_store(&a->sh->probe_ticket, tk);
        } else {
            a->refused++;
        }
        pthread_barrier_wait(&a->sh->barrier);
        pthread_barrier_wait(&a->sh->barrier); /* the main thread reopens */
    }
    return NULL;
}

static void test_one_probe_threads(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 0.001, 1000);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    struct probe_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.v = b.v;
    pthread_barrier_init(&sh.barrier, NULL, BRK_THREADS + 1);
    int64_t t = SEC(1);
    record_at(&b, SW_BRK_ANY, 1, true, t); /* open */
    pthread_t th[BRK_THREADS];
    struct probe_arg args[BRK_THREADS];
    for (int i = 0; i < BRK_THREADS; i++) {
        args[i].sh = &sh;
        args[i].refused = 0;
        CHECK_EQ(pthread_create(&th[i], NULL, probe_worker, &args[i]), 0);
    }
    int bad = 0;
    for (int r = 0; r < BRK_ROUNDS; r++) {
        t += SEC(1);
        atomic_store(&sh.round_now, t);
        atomic_store(&sh.passed, 0);
        pthread_barrier_wait(&sh.barrier);
        pthread_barrier_wait(&sh.barrier);
        if (atomic_load(&sh.passed) != 1)
            bad++;
        /* the probe fails (odd rounds) or is cancelled (even rounds): OPEN again */
        uint64_t tk = atomic_load(&sh.probe_ticket);
        if (r % 2)
            record_at(&b, tk, 1, true, t);
        else
            CHECK(sw_breaker_cancel(&b.v, tk, t, &b.last));
        pthread_barrier_wait(&sh.barrier);
    }
    for (int i = 0; i < BRK_THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(bad, 0);
    struct sw_brk_totals tot;
    sw_breaker_totals(&b.v, &tot);
    CHECK_EQ(tot.t[SW_BRK_T_PROBES], BRK_ROUNDS);
    CHECK_EQ(tot.t[SW_BRK_T_REFUSED], (int64_t)BRK_ROUNDS * (BRK_THREADS - 1));
    pthread_barrier_destroy(&sh.barrier);
    brk_free(&b);
}

/* A free-for-all: threads pass, record (errors half the time) and cancel on the real clock;
 * at no time do two probes run. */
struct ffa_shared {
    struct sw_bview v;
    _Atomic int probes_running;
    _Atomic int overlap;
    _Atomic long calls;
};

static void *ffa_worker(void *p)
{
    struct ffa_shared *sh = p;
    unsigned seed = (unsigned)(uintptr_t)&seed;
    for (int i = 0; i < 20000; i++) {
        uint64_t tk;
        struct sw_brk_changes chg;
        if (!sw_breaker_try_pass(&sh->v, SW_NOW, &tk, &chg))
            continue;
        bool probe = (tk & 3u) == SW_BRK_HALF_OPEN;
        if (probe && atomic_fetch_add(&sh->probes_running, 1) != 0)
            atomic_store(&sh->overlap, 1);
        atomic_fetch_add(&sh->calls, 1);
        seed = seed * 1103515245u + 12345u;
        unsigned roll = (seed >> 16) % 8u;
        if (probe)
            atomic_fetch_sub(&sh->probes_running, 1);
        if (roll == 0)
            (void)sw_breaker_cancel(&sh->v, tk, SW_NOW, &chg);
        else
            (void)sw_breaker_record(&sh->v, 1.0, roll < 4, tk, SW_NOW, &chg);
    }
    return NULL;
}

static void test_threads_free_for_all(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_RATIO, 0.4, 5, 0.0, 10);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    struct ffa_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.v = b.v;
    pthread_t th[BRK_THREADS];
    for (int i = 0; i < BRK_THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, ffa_worker, &sh), 0);
    for (int i = 0; i < BRK_THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(atomic_load(&sh.overlap), 0);
    struct sw_brk_totals tot;
    sw_breaker_totals(&b.v, &tot);
    CHECK(tot.transitions[SW_BRK_OPEN] > 0);
    CHECK(atomic_load(&sh.calls) > 0);
    brk_free(&b);
}

/* A view that counts its changes numbers them 1, 2, 3, ... in the order they were made; a
 * view without a counter reports 0. sw_bview_lock holds what every call waits for. */
static void test_change_seq(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 1, 1000);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    CHECK(b.v.seq == NULL);
    uint64_t count = 0;
    uint64_t tk;
    record_at(&b, SW_BRK_ANY, 1, true, SEC(1));          /* closed -> open, uncounted */
    CHECK_EQ(b.last.n, 1u);
    CHECK_EQ(b.last.c[0].seq, 0u);
    b.v.seq = &count;
    CHECK(pass_at(&b, SEC(3), &tk));                     /* open -> half_open: 1 */
    CHECK_EQ(b.last.n, 1u);
    CHECK_EQ(b.last.c[0].seq, 1u);
    CHECK_EQ(sw_breaker_cancel(&b.v, tk, SEC(3), &b.last), 1);   /* half_open -> open: 2 */
    CHECK_EQ(b.last.c[0].seq, 2u);
    CHECK(pass_at(&b, SEC(3), &tk));                     /* 3 */
    record_at(&b, tk, 1, false, SEC(3));                 /* half_open -> closed: 4 */
    CHECK_EQ(b.last.c[0].seq, 4u);
    CHECK_EQ(b.last.c[0].to, (uint32_t)SW_BRK_CLOSED);
    record_at(&b, SW_BRK_ANY, 1, false, SEC(4));         /* no change: the count stays */
    CHECK_EQ(b.last.n, 0u);
    CHECK_EQ(count, 4u);
    CHECK_EQ(sw_bview_lock(&b.v), SW_OK);
    CHECK(atomic_load(&b.br->st.lock.word) != 0);
    sw_bview_unlock(&b.v);
    CHECK(atomic_load(&b.br->st.lock.word) == 0);
    brk_free(&b);
}

/* A probe silent past probe_timeout_ns failed: OPEN again, opened at its deadline, whichever
 * call notices (try_pass, record, cancel); its own outcome afterwards decides nothing; a
 * bare record after it does not close; no timeout (INFINITY) waits for ever. */
static void test_probe_timeout(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 10, 1000);
    c.probe_timeout_s = 30;
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    uint64_t probe, tk;
    record_at(&b, SW_BRK_ANY, 1, true, SEC(1));          /* open until 11 s */
    CHECK(pass_at(&b, SEC(11), &probe));                 /* the probe (an entry's ticket) */
    CHECK(!pass_at(&b, SEC(40), NULL));                  /* 29 s silent: still out */
    CHECK_EQ(retry_of(&b.v, SEC(40)), SEC(10));
    CHECK_EQ(retry_of(&b.v, SEC(45)), SEC(6));           /* timed out at 41: open until 51 */
    CHECK(!pass_at(&b, SEC(45), NULL));                  /* noticed: half_open -> open */
    CHECK_EQ(b.last.n, 1u);
    CHECK(b.last.c[0].from == SW_BRK_HALF_OPEN && b.last.c[0].to == SW_BRK_OPEN);
    CHECK(b.last.c[0].value == 1.0);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK_EQ(retry_of(&b.v, SEC(45)), SEC(6));
    record_at(&b, probe, 1, false, SEC(46));             /* the late probe: nothing */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK(!pass_at(&b, SEC(50), NULL));
    CHECK(pass_at(&b, SEC(51), &tk));                    /* the next probe */
    record_at(&b, tk, 1, false, SEC(51));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_CLOSED);
    /* a bare probe whose late bare record comes first after the timeout: not closed */
    record_at(&b, SW_BRK_ANY, 1, true, SEC(100));        /* open until 110 */
    CHECK(pass_at(&b, SEC(110), NULL));
    record_at(&b, SW_BRK_ANY, 1, false, SEC(141));       /* noticed by the record itself */
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK_EQ(b.last.n, 1u);
    CHECK_EQ(retry_of(&b.v, SEC(141)), SEC(9));          /* opened at 140 */
    /* a cancel after the timeout: the probe failed, the retry time is not reset */
    CHECK(pass_at(&b, SEC(150), NULL));
    CHECK_EQ(sw_breaker_cancel(&b.v, SW_BRK_ANY, SEC(181), &b.last), 0);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    CHECK_EQ(retry_of(&b.v, SEC(181)), SEC(9));
    struct sw_brk_totals tot;
    sw_breaker_totals(&b.v, &tot);
    CHECK_EQ(tot.t[SW_BRK_T_PROBE_TIMEOUTS], 3);
    CHECK_EQ(tot.t[SW_BRK_T_CANCELLED], 0);
    brk_free(&b);

    c.probe_timeout_s = INFINITY; /* wait for ever */
    if (!brk_new(&b, &c))
        return;
    record_at(&b, SW_BRK_ANY, 1, true, SEC(1));
    CHECK(pass_at(&b, SEC(11), &probe));
    CHECK(!pass_at(&b, INT64_MAX - 1, NULL));
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_HALF_OPEN);
    CHECK_EQ(retry_of(&b.v, INT64_MAX - 1), SEC(10));
    brk_free(&b);
}

/* New settings with another recovery time move the next probe of an open breaker at once to
 * when it opened + the new time, sooner or later; other settings leave it. */
static void test_new_recovery_moves_next_probe(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 60, 1000);
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    record_at(&b, SW_BRK_ANY, 1, true, SEC(1));          /* open until 61 s */
    c.recovery_s = 5;
    brk_set_rule(&b, &c);
    CHECK_EQ(retry_of(&b.v, SEC(3)), SEC(3));
    CHECK(!pass_at(&b, SEC(3), NULL));                   /* refused, and not pushed back */
    CHECK_EQ(retry_of(&b.v, SEC(3)), SEC(3));
    c.recovery_s = 20;
    brk_set_rule(&b, &c);
    CHECK(!pass_at(&b, SEC(6), NULL));                   /* longer: until 21 s */
    c.min_requests = 3;                                  /* not the recovery: no move */
    brk_set_rule(&b, &c);
    CHECK_EQ(retry_of(&b.v, SEC(6)), SEC(15));
    CHECK(pass_at(&b, SEC(21), NULL));
    brk_free(&b);
}

/* A call past its caller's time limit: an error for every grade, slow for the slow grade
 * whatever its RT; counted as timed out. */
static void test_record_timeout(void)
{
    struct sw_breaker_cfg c = cfg_of(SW_BRK_SLOW_RATIO, 0.5, 1, 10, 1000);
    c.slow_rt_ms = 10000;
    struct brk b;
    if (!brk_new(&b, &c))
        return;
    uint64_t tk;
    CHECK(pass_at(&b, SEC(1), &tk));
    CHECK_EQ(sw_breaker_record_timeout(&b.v, 5, tk, SEC(1), &b.last), SW_OK);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);       /* 1 slow of 1 */
    struct sw_brk_stats s;
    sw_breaker_stats(&b.v, SEC(1), &s);
    CHECK(s.total == 1 && s.errors == 1 && s.slow == 1);
    struct sw_brk_totals tot;
    sw_breaker_totals(&b.v, &tot);
    CHECK_EQ(tot.t[SW_BRK_T_TIMED_OUT], 1);
    CHECK_EQ(sw_breaker_record_timeout(&b.v, -1, tk, SEC(1), &b.last), SW_EINVAL);
    brk_free(&b);
    c = cfg_of(SW_BRK_ERROR_COUNT, 0, 1, 10, 1000);
    if (!brk_new(&b, &c))
        return;
    CHECK_EQ(sw_breaker_record_timeout(&b.v, 5, SW_BRK_ANY, SEC(1), &b.last), SW_OK);
    CHECK_EQ(sw_breaker_state(&b.v), SW_BRK_OPEN);
    sw_breaker_stats(&b.v, SEC(1), &s);
    CHECK(s.errors == 1 && s.slow == 0);                 /* no slow in the error grades */
    brk_free(&b);
}

void test_breaker(void)
{
    test_exception_ratio();
    test_strict_and_min_requests();
    test_slow_ratio_one();
    test_slow_request_mode();
    test_exception_ratio_mode();
    test_multiple_half_open();
    test_tickets();
    test_check();
    test_validate();
    test_dead_probe_owner();
    test_crafted_states();
    test_one_probe_threads();
    test_threads_free_for_all();
    test_change_seq();
    test_probe_timeout();
    test_new_recovery_moves_next_probe();
    test_record_timeout();
}
