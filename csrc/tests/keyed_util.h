/* keyed_util.h - helpers shared by the keyed table tests (test_keyed.c, test_keyed_shared.c,
 * test_keyed_stripes.c): a private table with a rule and a view, fingerprints of integer keys
 * and of a given home entry, an entry by index, a pseudo-random sequence, a repair that must
 * keep every key, a keyed rule, a shared table's layout and view, a region with a table (and
 * a view of it). */
#ifndef SW_TEST_KEYED_UTIL_H
#define SW_TEST_KEYED_UTIL_H

#include "ktable.h"
#include "limiter_util.h"
#include "shm_util.h"
#include "sw_keyed.h"
#include "sw_proc.h"

#include <stdlib.h>

/* any seed: the core takes fingerprints; the binding hashes with the table's seed */
#define TEST_SEED UINT64_C(0x736c69646577696e)

struct ktab {
    struct sw_kstate *st;
    struct sw_krule rule;
    struct sw_kview v;
};

static inline int ktab_new(struct ktab *k, const struct sw_limiter_cfg *cfg, uint32_t max_keys)
{
    size_t sz = sw_keyed_size(cfg->interval_ms, cfg->sample_count, max_keys, false);
    CHECK(sz > 0);
    k->st = calloc(1, sz);
    if (k->st == NULL)
        return -1;
    CHECK_EQ(sw_keyed_init(k->st, cfg->interval_ms, cfg->sample_count, max_keys, false), SW_OK);
    CHECK_EQ(sw_krule_init(&k->rule, cfg), SW_OK);
    k->v.st = k->st;
    k->v.rule = &k->rule;
    k->v.token = SW_LOCK_PRIVATE;
    k->v.slots = NULL;
    k->v.n_slots = 0;
    k->v.my_slot = -1;
    k->v.held = NULL;
    return 0;
}

/* A table of cfg_of(grade, behavior, count) for max_keys keys, as ktab_new. */
static inline int ktab_of(struct ktab *k, int grade, int behavior, double count,
                          uint32_t max_keys)
{
    struct sw_limiter_cfg cfg = cfg_of(grade, behavior, count);
    return ktab_new(k, &cfg, max_keys);
}

static inline uint64_t fp_int(int64_t x)
{
    return sw_keyed_hash(TEST_SEED, SW_KEY_INT, &x, sizeof x);
}

static inline uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A repair (as a takeover does it), then the table holds `len` keys. */
static inline void check_repair_keeps(struct sw_kview *v, uint32_t len)
{
    sw_keyed_lock(v);
    sw_keyed_repair(v);
    sw_keyed_unlock(v);
    CHECK_EQ(sw_keyed_len(v), len);
}

/* The k-th fingerprint (k >= 1) whose home is entry h of st's table. */
static inline uint64_t fp_home(const struct sw_kstate *st, uint32_t h, uint64_t k)
{
    unsigned __int128 base = (((unsigned __int128)h << 64) + st->cap - 1u) / st->cap;
    return (uint64_t)base + k;
}

/* A keyed rule of cfg_of(grade, SW_REJECT, count) (checked). */
static inline void krule_of(struct sw_krule *rule, int grade, double count)
{
    struct sw_limiter_cfg cfg = cfg_of(grade, SW_REJECT, count);
    CHECK_EQ(sw_krule_init(rule, &cfg), SW_OK);
}

/* A shared table's layout (interval 1000 ms, 2 samples, max_keys keys), and a view of the
 * table in a region (a slot claimed for this process). */
static inline struct sw_shm_layout kshm_layout(uint32_t max_keys)
{
    struct sw_shm_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.kind = SW_KIND_KEYED;
    lay.interval_ms = 1000;
    lay.sample_count = 2;
    lay.max_keys = max_keys;
    lay.n_slots = SW_SHM_MAX_PROCS;
    lay.state_size = sw_keyed_size(1000, 2, max_keys, true);
    lay.init_state = sw_keyed_region_init;
    lay.check_state = sw_keyed_region_check;
    lay.state_lock = sw_keyed_region_lock;
    return lay;
}

static inline void kshm_view(struct sw_shm *shm, const struct sw_krule *rule,
                             struct sw_kview *v)
{
    v->st = shm->state;
    v->rule = rule;
    v->token = SW_LOCK_PROCESS;
    v->slots = shm->slots;
    v->n_slots = shm->n_slots;
    v->my_slot = sw_shm_claim_slot(shm, sw_proc_token());
    v->held = NULL;
}

/* A fresh anonymous region holding a table of max_keys keys (its layout in *lay), and a
 * rule (checked). */
static inline void kregion_open(struct sw_shm *s, struct sw_shm_layout *lay,
                                struct sw_krule *rule, uint32_t max_keys, int grade, double count)
{
    *lay = kshm_layout(max_keys);
    shm_anon(s, lay);
    krule_of(rule, grade, count);
}

/* A fresh anonymous region holding a table (kregion_open), and this process's view of it. */
struct kregion {
    struct sw_shm s;
    struct sw_shm_layout lay;
    struct sw_krule rule;
    struct sw_kview v;
};

static inline void kregion_new(struct kregion *r, uint32_t max_keys, int grade, double count)
{
    kregion_open(&r->s, &r->lay, &r->rule, max_keys, grade, count);
    kshm_view(&r->s, &r->rule, &r->v);
}

/* Another view of r's table: a child process's own (a slot claimed for the caller). */
static inline struct sw_kview kregion_view(struct kregion *r)
{
    struct sw_kview v;
    kshm_view(&r->s, &r->rule, &v);
    return v;
}

#endif
