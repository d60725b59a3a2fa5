/* limiter_util.h - helpers shared by the limiter tests. */
#ifndef SW_TEST_LIMITER_UTIL_H
#define SW_TEST_LIMITER_UTIL_H

#include "harness.h"
#include "sw_limiter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A limiter in fresh heap memory (checked), or NULL. Free with free(). */
static inline struct sw_limiter *lim_new(const struct sw_limiter_cfg *cfg)
{
    size_t sz = sw_limiter_size(cfg);
    CHECK(sz > 0);
    if (sz == 0)
        return NULL;
    struct sw_limiter *lim = calloc(1, sz);
    CHECK(lim != NULL);
    if (lim == NULL)
        return NULL;
    int rc = sw_limiter_init(lim, cfg);
    CHECK_EQ(rc, SW_OK);
    if (rc != SW_OK) {
        free(lim);
        return NULL;
    }
    return lim;
}

/* The limiter *lim freed and replaced by a new one of cfg: whether it was made (checked). */
static inline bool lim_renew(struct sw_limiter **lim, const struct sw_limiter_cfg *cfg)
{
    free(*lim);
    *lim = lim_new(cfg);
    return *lim != NULL;
}

static inline struct sw_limiter_cfg cfg_of(int grade, int behavior, double count)
{
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = grade;
    c.behavior = behavior;
    c.count = count;
    return c;
}

/* A limiter of cfg_of(grade, behavior, count) in fresh heap memory (checked), or NULL. */
static inline struct sw_limiter *lim_of(int grade, int behavior, double count)
{
    struct sw_limiter_cfg c = cfg_of(grade, behavior, count);
    return lim_new(&c);
}

/* One decision; returns the verdict (or -1 on an error code). */
static inline int decide(struct sw_limiter *lim, int64_t n, int64_t now_ns, unsigned flags,
                         struct sw_decision *d)
{
    struct sw_decision tmp;
    if (d == NULL)
        d = &tmp;
    int rc = sw_limiter_decide(lim, n, now_ns, flags, d);
    return rc == SW_OK ? d->verdict : -1;
}

/* One decision of a fresh limiter of `cfg` (its first); returns the verdict (or -1 on an
 * error code, or when the limiter could not be made: d zeroed then). */
static inline int decide_fresh(const struct sw_limiter_cfg *cfg, int64_t n, int64_t now_ns,
                               unsigned flags, struct sw_decision *d)
{
    struct sw_limiter *lim = lim_new(cfg);
    if (lim == NULL) {
        if (d != NULL)
            memset(d, 0, sizeof *d);
        return -1;
    }
    int v = decide(lim, n, now_ns, flags, d);
    free(lim);
    return v;
}

/* A decision script: steps decided in order on one limiter, each checked. */
struct step {
    int64_t n;
    int64_t t_ns;
    unsigned flags;
    int verdict;   /* expected */
    int64_t after; /* expected: a pass's wait_ns, a refusal's retry_ns; or ANY_NS (not read) */
};

#define ANY_NS INT64_MIN

/* Each of the n steps decided on lim: its verdict checked, and its wait or retry unless
 * ANY_NS (a failure names the caller's file:line and the step). */
static inline void steps_check(struct sw_limiter *lim, const struct step *s, size_t n,
                               const char *file, int line)
{
    for (size_t i = 0; i < n; i++) {
        struct sw_decision d;
        int v = decide(lim, s[i].n, s[i].t_ns, s[i].flags, &d);
        SW_T_RECORD(v == s[i].verdict, "FAIL %s:%d: step %zu: verdict %d, expected %d\n", file,
                    line, i, v, s[i].verdict);
        if (s[i].after == ANY_NS)
            continue;
        bool pass = s[i].verdict == SW_PASS;
        int64_t after = pass ? d.wait_ns : d.retry_ns;
        SW_T_RECORD(after == s[i].after, "FAIL %s:%d: step %zu: %s %lld, expected %lld\n", file,
                    line, i, pass ? "wait_ns" : "retry_ns", (long long)after,
                    (long long)s[i].after);
    }
}

/* The steps of an array, on a limiter / on a fresh limiter of *cfg (freed after). */
#define CHECK_STEPS(lim, steps)                                                             \
    steps_check((lim), (steps), sizeof(steps) / sizeof(steps)[0], __FILE__, __LINE__)
#define CHECK_STEPS_FRESH(cfg, steps)                                                       \
    do {                                                                                    \
        struct sw_limiter *fresh_ = lim_new(cfg);                                           \
        if (fresh_ != NULL)                                                                 \
            CHECK_STEPS(fresh_, steps);                                                     \
        free(fresh_);                                                                       \
    } while (0)

/* Every field of the limiter's window statistics at now_ns as in *want (a check each; a
 * failure names the caller's file:line and the field). */
static inline void stats_check(struct sw_limiter *lim, int64_t now_ns, const struct sw_stats *want,
                               const char *file, int line)
{
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
        {"pass", offsetof(struct sw_stats, pass)},
        {"block", offsetof(struct sw_stats, block)},
        {"success", offsetof(struct sw_stats, success)},
        {"exception", offsetof(struct sw_stats, exception)},
        {"rt_sum", offsetof(struct sw_stats, rt_sum)},
        {"min_rt", offsetof(struct sw_stats, min_rt)},
        {"in_flight", offsetof(struct sw_stats, in_flight)},
        {"waiting", offsetof(struct sw_stats, waiting)},
        {"occupied_pass", offsetof(struct sw_stats, occupied_pass)},
    };
    struct sw_stats got;
    sw_limiter_stats(lim, now_ns, &got);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int64_t g, w;
        memcpy(&g, (const char *)&got + fields[i].off, sizeof g);
        memcpy(&w, (const char *)want + fields[i].off, sizeof w);
        SW_T_RECORD(g == w, "FAIL %s:%d: stats.%s: got %lld, expected %lld\n", file, line,
                    fields[i].name, (long long)g, (long long)w);
    }
}

/* The window statistics at now_ns checked whole: the fields named (designated initializers
 * of struct sw_stats), every other one 0. */
#define CHECK_STATS(lim, now_ns, ...)                                                       \
    stats_check((lim), (now_ns), &(struct sw_stats){__VA_ARGS__}, __FILE__, __LINE__)

/* The limiter's lifetime totals and its window at now_ns both count `pass` passes and `block`
 * refusals (checked). */
static inline void check_counted(struct sw_limiter *lim, int64_t now_ns, int64_t pass,
                                 int64_t block)
{
    struct sw_totals tot;
    sw_limiter_totals(lim, &tot);
    CHECK_EQ(tot.pass, pass);
    CHECK_EQ(tot.block, block);
    struct sw_stats st;
    sw_limiter_stats(lim, now_ns, &st);
    CHECK_EQ(st.pass, pass);
    CHECK_EQ(st.block, block);
}

#endif /* SW_TEST_LIMITER_UTIL_H */
