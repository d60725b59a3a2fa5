/* shm_lim_util.h - helpers shared by the tests of limiter regions (test_shm.c,
 * test_shm_crash.c, test_shm_crafted.c): a limiter layout, a rule, an anonymous region with a
 * rule (and a view of it), and a view of a region for this process or as another's. */
#ifndef SW_TEST_SHM_LIM_UTIL_H
#define SW_TEST_SHM_LIM_UTIL_H

#include "lim_region.h"
#include "limiter_util.h"
#include "shm_util.h"
#include "sw_proc.h"

#include <string.h>

static inline struct sw_shm_layout lim_layout(int64_t interval_ms, uint32_t samples)
{
    struct sw_shm_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.kind = SW_KIND_LIMITER;
    lay.interval_ms = interval_ms;
    lay.sample_count = samples;
    lay.n_slots = SW_SHM_MAX_PROCS;
    lay.state_size = sw_lstate_size(interval_ms, samples);
    lay.init_state = lim_init_state;
    lay.check_state = lim_check_state;
    lay.state_lock = lim_state_lock;
    return lay;
}

/* A rule of these settings (checked). */
static inline void rule_of(struct sw_rule *rule, int grade, double count)
{
    struct sw_limiter_cfg cfg = cfg_of(grade, SW_REJECT, count);
    CHECK_EQ(sw_rule_init(rule, &cfg), SW_OK);
}

/* A fresh anonymous region of the default layout (1000 ms in 2 buckets), and a rule. */
static inline void region_open(struct sw_shm *s, struct sw_rule *rule, int grade, double count)
{
    struct sw_shm_layout lay = lim_layout(1000, 2);
    shm_anon(s, &lay);
    rule_of(rule, grade, count);
}

static inline void view_of(struct sw_shm *shm, const struct sw_rule *rule, struct sw_view *v)
{
    v->st = shm->state;
    v->rule = rule;
    v->token = sw_proc_token();
    v->slots = shm->slots;
    v->n_slots = shm->n_slots;
    v->my_slot = sw_shm_claim_slot(shm, v->token);
    v->held = NULL;
    v->lease = false;
}

/* A fresh anonymous region of the default layout, a rule (region_open), and this process's
 * view of it. */
struct lregion {
    struct sw_shm s;
    struct sw_rule rule;
    struct sw_view v;
};

static inline void lregion_new(struct lregion *r, int grade, double count)
{
    region_open(&r->s, &r->rule, grade, count);
    view_of(&r->s, &r->rule, &r->v);
}

/* A view of r's region as another process's: a slot claimed for this process's token ^ k
 * (k = 1, 2, ...: distinct other processes). */
static inline void view_as_other(struct lregion *r, struct sw_view *v, uint64_t k)
{
    view_of(&r->s, &r->rule, v);
    v->my_slot = sw_shm_claim_slot(&r->s, sw_proc_token() ^ k);
}

/* The region at path opened (checked) as a, and v, its view for this process of a rule of
 * these settings. */
static inline void region_at(struct sw_shm *a, const char *path, const struct sw_shm_layout *lay,
                             struct sw_rule *rule, int grade, double count, struct sw_view *v)
{
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(a, path, lay, &err), SW_OK);
    rule_of(rule, grade, count);
    view_of(a, rule, v);
}

/* n tries of 1 at now_ns through v (each checked SW_OK): how many passed. */
static inline int tries_passed(struct sw_view *v, int n, int64_t now_ns)
{
    int passed = 0;
    for (int i = 0; i < n; i++) {
        struct sw_decision d;
        CHECK_EQ(sw_decide(v, 1, now_ns, SW_F_TRY, &d), SW_OK);
        passed += d.verdict == SW_PASS;
    }
    return passed;
}

#endif /* SW_TEST_SHM_LIM_UTIL_H */
