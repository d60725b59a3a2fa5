/* sw_keyed.c - a bounded table of per-key admission states (see sw_keyed.h). */
#include "sw_keyed.h"

#include "sw_platform.h"
#include "sw_proc.h"
#include "sw_shm.h"
#include "sw_time.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The maintained XXH3 (vendor/xxhash.h, BSD-2-Clause, vendor/LICENSE-xxhash), inlined here
 * only: its own code is not held to the core's warning flags. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#define XXH_INLINE_ALL
#define XXH_NO_STREAM
#include "vendor/xxhash.h"
#pragma GCC diagnostic pop

uint64_t sw_keyed_hash(uint64_t seed, int tag, const void *data, size_t len)
{
    /* the tag goes into the seed (no copy of the key with a tag byte in front: XXH3 reads
     * the caller's bytes in place); every (tag, bytes) pair is still its own input */
    uint64_t h = XXH3_64bits_withSeed(data, len, seed ^ ((uint64_t)(unsigned char)tag << 56));
    return h == 0 ? 1 : h;
}

int (*volatile sw_test_random_seed)(uint64_t *out) = NULL;

int sw_keyed_random_seed(uint64_t *out)
{
    if (sw_test_random_seed != NULL)
        return sw_test_random_seed(out);
    uint64_t x = 0;
    if (sw_platform_random(&x, sizeof x) != 0)
        return SW_EOS;
    *out = x != 0 ? x : 1; /* 0 marks no seed */
    return SW_OK;
}

static inline void lock_table(const struct sw_kview *v);
static inline void unlock_table(const struct sw_kview *v);

/* ---- layout ---------------------------------------------------------------------------- */

#define HOLD_DEL UINT32_MAX

/* Entries of a table of max_keys keys: 1.3 a key (a load factor of at most 0.77; 62.4 bytes
 * a key with the default window's 48-byte entries). */
static uint32_t cap_of(uint32_t max_keys)
{
    return max_keys + (uint32_t)(((uint64_t)max_keys * 3u) / 10u) + 1u;
}

static uint32_t hold_cap_of(uint32_t max_keys, bool shared)
{
    return shared ? max_keys / 2u + 64u : 0u;
}

/* Whether an entry keeps its window's total (else it is the sum of its counts). */
static inline bool keeps_total(uint32_t sample_count)
{
    return sample_count > SW_KEYED_SUM_MAX;
}

static struct sw_node_cfg node_cfg(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc;
    nc.interval_ms = interval_ms;
    nc.sample_count = sample_count;
    nc.borrowable = false;
    return nc;
}

struct klayout {
    uint64_t off_node, off_entries, off_hold, size, stride, total;
    uint32_t cap, entry_size, hold_cap, n_stripes, stripe_keys;
};

_Static_assert(offsetof(struct sw_kstate, live) % 64u == 0 &&
                   sizeof(struct sw_kstate) == offsetof(struct sw_kstate, live) + 64u,
               "a stripe's live count sits on a line of its own");

/* Stripes of a table: one (private, or a small shared table: exact LRU over the whole table
 * stays), else a power of 2 with at least SW_KEYED_STRIPE_KEYS keys each. */
static uint32_t stripes_of(uint32_t max_keys, bool shared)
{
    uint32_t s = 1;
    while (shared && s < SW_KEYED_MAX_STRIPES && max_keys / (2u * s) >= SW_KEYED_STRIPE_KEYS)
        s *= 2u;
    return s;
}

/* Keys one stripe may hold: its share, plus room for the keys' uneven spread over the
 * stripes (about 2 standard deviations more; the whole table still holds max_keys at most). */
static uint32_t stripe_keys_of(uint32_t max_keys, uint32_t n_stripes)
{
    if (n_stripes == 1)
        return max_keys;
    uint32_t per = (max_keys + n_stripes - 1u) / n_stripes, r = 1;
    while ((r + 1u) * (r + 1u) <= per)
        r++;
    uint32_t k = per + 2u * r + 8u;
    return k < max_keys ? k : max_keys;
}

static bool layout_of(int64_t interval_ms, uint32_t sample_count, uint32_t max_keys, bool shared,
                      struct klayout *k)
{
    if (max_keys < 1 || max_keys > SW_KEYED_MAX_KEYS || sample_count < 1 ||
        sample_count > SW_MAX_SAMPLES)
        return false;
    struct sw_node_cfg nc = node_cfg(interval_ms, sample_count);
    size_t node = sw_node_size(&nc);
    if (node == 0)
        return false;
    k->n_stripes = stripes_of(max_keys, shared);
    k->stripe_keys = stripe_keys_of(max_keys, k->n_stripes);
    max_keys = k->stripe_keys;
    k->cap = cap_of(max_keys);
    uint64_t words = (uint64_t)sample_count + (keeps_total(sample_count) ? 1u : 0u);
    k->entry_size = (uint32_t)(sizeof(struct sw_kentry) + 8u * words);
    k->hold_cap = hold_cap_of(max_keys, shared);
    k->off_node = sw_align8(sizeof(struct sw_kstate));
    /* the entries at a multiple of 64 bytes (on cache lines when the table starts on one) */
    k->off_entries = (k->off_node + sw_align8(node) + 63u) & ~(uint64_t)63u;
    uint64_t entries = (uint64_t)k->cap * k->entry_size;
    k->off_hold = k->off_entries + entries;
    k->size = k->off_hold + (uint64_t)k->hold_cap * sizeof(struct sw_khold);
    k->stride = (k->size + 63u) & ~(uint64_t)63u;
    k->total = k->n_stripes == 1 ? k->size : k->stride * k->n_stripes;
    return k->total <= (UINT64_C(1) << 40);
}

size_t sw_keyed_size(int64_t interval_ms, uint32_t sample_count, uint32_t max_keys, bool shared)
{
    struct klayout k;
    if (!layout_of(interval_ms, sample_count, max_keys, shared, &k))
        return 0;
    return (size_t)k.total;
}

static inline struct sw_kentry *entry_at(struct sw_kstate *st, uint32_t i)
{
    return (struct sw_kentry *)(void *)((char *)st + st->off_entries +
                                        (size_t)i * st->entry_size);
}

static inline struct sw_khold *holds_of(struct sw_kstate *st)
{
    return (struct sw_khold *)(void *)((char *)st + st->off_hold);
}

/* Stripe i of a table (st: the first). */
static inline struct sw_kstate *stripe_at(struct sw_kstate *st, uint32_t i)
{
    return (struct sw_kstate *)(void *)((char *)st + (size_t)i * st->stride);
}

/* The table's first stripe, from any of its stripes. */
static inline struct sw_kstate *first_stripe(struct sw_kstate *st)
{
    return (struct sw_kstate *)(void *)((char *)st - (size_t)st->stripe * st->stride);
}

/* The stripe of a key: its fingerprint's low bits (home_of reads the high ones). */
static inline uint32_t stripe_of(const struct sw_kstate *st, uint64_t fp)
{
    return (uint32_t)(fp & (uint64_t)(st->n_stripes - 1u));
}

/* A view of the stripe that holds key fp (the view itself when the table has one stripe).
 * @param buf the stripe's view, when one is made */
static inline const struct sw_kview *key_view(const struct sw_kview *v, uint64_t fp,
                                              struct sw_kview *buf)
{
    if (v->st->n_stripes == 1)
        return v;
    *buf = *v;
    buf->st = stripe_at(v->st, stripe_of(v->st, fp));
    return buf;
}

/* A view of stripe i. */
static inline const struct sw_kview *stripe_view(const struct sw_kview *v, uint32_t i,
                                                 struct sw_kview *buf)
{
    if (i == 0)
        return v;
    *buf = *v;
    buf->st = stripe_at(v->st, i);
    return buf;
}

int sw_keyed_init(struct sw_kstate *st, int64_t interval_ms, uint32_t sample_count,
                  uint32_t max_keys, bool shared)
{
    struct klayout k;
    uint64_t seed;
    if (st == NULL || !layout_of(interval_ms, sample_count, max_keys, shared, &k))
        return SW_EINVAL;
    if (sw_keyed_random_seed(&seed) != SW_OK)
        return SW_EOS;
    struct sw_node_cfg nc = node_cfg(interval_ms, sample_count);
    struct sw_kstate *first = st;
    for (uint32_t i = 0; i < k.n_stripes; i++) {
        st = (struct sw_kstate *)(void *)((char *)first + (size_t)i * k.stride);
        sw_lock_init(&st->lock);
        st->max_keys = k.stripe_keys;
        st->n_stripes = k.n_stripes;
        st->n_live = 0;
        st->cap = k.cap;
        st->entry_size = k.entry_size;
        st->sample_count = sample_count;
        st->hold_cap = k.hold_cap;
        st->stripe = i;
        st->interval_ms = interval_ms;
        st->window_ms = interval_ms / (int64_t)sample_count;
        st->tick = 0;
        st->sweep = 0;
        st->evicted = 0;
        st->size = k.size;
        st->off_node = k.off_node;
        st->seed = seed;
        st->off_entries = k.off_entries;
        st->off_hold = k.off_hold;
        st->stride = k.stride;
        st->max_total = max_keys;
        atomic_init(&st->live, 0);
        /* the entries and holdings are zero already (the caller's zeroed memory): their
         * pages are touched only as keys arrive */
        int rc = sw_node_init(sw_keyed_node(st), &nc);
        if (rc != SW_OK)
            return rc;
    }
    return SW_OK;
}

int sw_keyed_set_seed(const struct sw_kview *v, uint64_t seed)
{
    int rc = SW_OK;
    if (seed == 0)
        return SW_EINVAL;
    sw_keyed_lock(v);
    uint32_t n = v->st->n_stripes;
    for (uint32_t i = 0; i < n; i++)
        if (stripe_at(v->st, i)->n_live != 0)
            rc = SW_ESTATE;
    for (uint32_t i = 0; i < n && rc == SW_OK; i++)
        stripe_at(v->st, i)->seed = seed;
    sw_keyed_unlock(v);
    return rc;
}

/* ---- the table: open addressing, the probed entry is the key's ---------------------------- */

static inline uint32_t home_of(const struct sw_kstate *st, uint64_t fp)
{
    return (uint32_t)(((unsigned __int128)fp * st->cap) >> 64);
}

static inline uint32_t probe_len(const struct sw_kstate *st)
{
    return st->cap < SW_KEYED_PROBE ? st->cap : SW_KEYED_PROBE;
}

/* An entry that ends a probe: never used, or emptied where no probe goes past. */
static inline bool is_empty(const struct sw_kentry *e)
{
    return e->fp == 0 && !(e->flags & SW_KE_TOMB);
}

/* Look a key up. @param free_pos receives the first free entry of its probe path (not
 * found; UINT32_MAX when the path has none) @param stop receives the distance from the
 * key's home of the first empty entry (probe_len when none) @return its entry or UINT32_MAX */
static uint32_t find(struct sw_kstate *st, uint64_t fp, uint32_t *free_pos, uint32_t *stop)
{
    uint32_t pos = home_of(st, fp), plen = probe_len(st), fr = UINT32_MAX, d;
    for (d = 0; d < plen; d++) {
        struct sw_kentry *e = entry_at(st, pos);
        if (e->fp == fp)
            return pos;
        if (e->fp == 0) {
            if (fr == UINT32_MAX)
                fr = pos;
            if (!(e->flags & SW_KE_TOMB))
                break;
        }
        if (++pos == st->cap)
            pos = 0;
    }
    *free_pos = fr;
    *stop = d;
    return UINT32_MAX;
}

static inline uint32_t lookup(struct sw_kstate *st, uint64_t fp)
{
    uint32_t fr, stop;
    return find(st, fp, &fr, &stop);
}

/* ---- per-key windows ------------------------------------------------------------------- */

static inline uint32_t kslot(const struct sw_kstate *st, int64_t start)
{
    return (uint32_t)((uint64_t)(start / st->window_ms) % st->sample_count);
}

static inline int64_t kstart(const struct sw_kstate *st, int64_t t)
{
    return t - t % st->window_ms;
}

/* The window's clamp (design.md §2): a time behind the key's newest bucket counts there. */
static inline int64_t kclamp(const struct sw_kentry *e, int64_t t)
{
    return ((e->flags & SW_KE_WINDOW) && t < e->a) ? e->a : t;
}

/* Passes in the buckets a key holds: the sum of its counts, or the total it keeps. */
static inline int64_t ktotal(const struct sw_kstate *st, const struct sw_kentry *e)
{
    if (keeps_total(st->sample_count))
        return e->counts[st->sample_count];
    int64_t t = 0;
    for (uint32_t s = 0; s < st->sample_count; s++)
        t = sw_sat_add(t, e->counts[s]);
    return t;
}

static inline void kset_total(const struct sw_kstate *st, struct sw_kentry *e, int64_t v)
{
    if (keeps_total(st->sample_count))
        e->counts[st->sample_count] = v;
}

static void kwin_clear(struct sw_kstate *st, struct sw_kentry *e)
{
    memset(e->counts, 0, (size_t)st->sample_count * 8u);
    kset_total(st, e, 0);
}

static void kwin_fresh(struct sw_kstate *st, struct sw_kentry *e, int64_t t)
{
    e->flags = SW_KE_WINDOW;
    e->a = kstart(st, t);
    kwin_clear(st, e);
}

/* Roll the key's window to the bucket of t (t clamped): the buckets sliding out leave. */
static void kwin_advance(struct sw_kstate *st, struct sw_kentry *e, int64_t t)
{
    if (!(e->flags & SW_KE_WINDOW)) {
        kwin_fresh(st, e, t);
        return;
    }
    int64_t cur = kstart(st, t);
    if (cur <= e->a)
        return;
    int64_t gap = sw_sat_sub(cur, e->a); /* `a` may be anything in a region */
    if (gap >= st->interval_ms) {
        kwin_clear(st, e);
    } else {
        int64_t k = gap / st->window_ms;
        uint32_t s = kslot(st, e->a);
        bool keep = keeps_total(st->sample_count);
        for (int64_t j = 0; j < k; j++) {
            if (++s == st->sample_count)
                s = 0;
            if (keep)
                e->counts[st->sample_count] =
                    sw_sat_sub(e->counts[st->sample_count], e->counts[s]);
            e->counts[s] = 0;
        }
    }
    e->a = cur;
}

/* Passes in the key's window at t without changing anything (for eviction). */
static int64_t kwin_peek(const struct sw_kstate *st, const struct sw_kentry *e, int64_t t)
{
    if (!(e->flags & SW_KE_WINDOW))
        return 0;
    t = kclamp(e, t);
    int64_t cur = kstart(st, t);
    if (cur <= e->a)
        return ktotal(st, e);
    int64_t gap = sw_sat_sub(cur, e->a);
    if (gap >= st->interval_ms)
        return 0;
    int64_t k = gap / st->window_ms, left = ktotal(st, e);
    uint32_t s = kslot(st, e->a);
    for (int64_t j = 0; j < k; j++) {
        if (++s == st->sample_count)
            s = 0;
        left = sw_sat_sub(left, e->counts[s]);
    }
    return left;
}

/* sw_reject_retry_ms over a key's window (already rolled to t): the same formula. */
static int64_t kwin_retry_ms(const struct sw_kstate *st, const struct sw_kentry *e, int64_t t,
                             int64_t n, double limit)
{
    if ((double)n > limit)
        return -1;
    int64_t cur = e->a, gone = 0, total = ktotal(st, e);
    for (int64_t k = (int64_t)st->sample_count - 1; k >= 0; k--) {
        int64_t start = sw_sat_sub(cur, k * st->window_ms);
        if (start >= 0)
            gone = sw_sat_add(gone, e->counts[kslot(st, start)]);
        if (sw_reject_fits(sw_sat_sub(total, gone), n, limit)) {
            int64_t at = sw_sat_sub(sw_sat_add(start, st->interval_ms), t);
            return at < 0 ? 0 : at;
        }
    }
    return -1;
}

/* ---- settings ---------------------------------------------------------------------------- */

int sw_krule_init(struct sw_krule *r, const struct sw_limiter_cfg *cfg)
{
    if (r == NULL || cfg == NULL || cfg->behavior == SW_WARM_UP ||
        cfg->behavior == SW_WARM_UP_THROTTLE)
        return SW_EINVAL;
    r->over = NULL;
    r->n_over = 0;
    return sw_rule_init(&r->base, cfg);
}

double sw_krule_count(const struct sw_krule *r, uint64_t fp, double *limit)
{
    if (r->n_over > 0) {
        uint32_t lo = 0, hi = r->n_over;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2u;
            if (r->over[mid].fp < fp)
                lo = mid + 1u;
            else
                hi = mid;
        }
        if (lo < r->n_over && r->over[lo].fp == fp) {
            *limit = r->over[lo].limit;
            return r->over[lo].count;
        }
    }
    *limit = r->base.limit;
    return r->base.count;
}

static inline bool is_throttle(const struct sw_rule *r)
{
    return r->grade == SW_GRADE_QPS && r->behavior == SW_THROTTLE;
}

/* ---- eviction ---------------------------------------------------------------------------- */

/* Whether forgetting the key changes no decision now: its window is empty (reject), its
 * throttle has let a request's cost go by (throttle), nothing is in flight (concurrency). */
static bool kidle(const struct sw_kview *v, const struct sw_kentry *e, int64_t now_ns)
{
    const struct sw_kstate *st = v->st;
    if (e->flags & SW_KE_WINDOW)
        return kwin_peek(st, e, sw_ms_of_ns(now_ns)) == 0;
    if (e->flags & SW_KE_PACING) {
        double lim;
        double rate = sw_krule_count(v->rule, e->fp, &lim);
        if (!(rate > 0))
            return true;
        return sw_sat_sub(now_ns, e->a) >= sw_throttle_cost(rate, 1);
    }
    return true;
}

/* Keep the stores before it before the stores after it (a process may be killed between any
 * two stores; the compiler must not reorder them: the test hook, being conditional, does not
 * stop it). */
#define STORE_ORDER() atomic_signal_fence(memory_order_seq_cst)

/* Give entry e to key fp, fresh. Its state is cleared before fp is written: a process killed
 * in between leaves the old key (reset, nothing in flight) or a free entry still marked as
 * one that probes go past. The mark goes only once fp is written (a free entry unmarked for
 * an instant would end the probes of the keys behind it). */
static void kentry_take(struct sw_kstate *st, struct sw_kentry *e, uint64_t fp)
{
    e->in_flight = 0;
    e->a = 0;
    memset(e->counts, 0, (size_t)(st->entry_size - sizeof(struct sw_kentry)));
    e->flags &= SW_KE_TOMB;
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    STORE_ORDER();
    e->fp = fp;
    STORE_ORDER();
    e->flags = 0;
}

/* Whether a free entry marked SW_KE_TOMB must stay marked: a key after it (before the next
 * empty entry, within a probe window) has its home at or before it, so its lookups go past. */
static bool tomb_needed(struct sw_kstate *st, uint32_t t)
{
    uint32_t plen = probe_len(st), q = t;
    for (uint32_t d = 1; d < plen; d++) {
        if (++q == st->cap)
            q = 0;
        struct sw_kentry *e = entry_at(st, q);
        if (is_empty(e))
            return false;
        if (e->fp == 0)
            continue;
        uint32_t h = home_of(st, e->fp);
        uint32_t from_home = q >= h ? q - h : q + st->cap - h;
        if (from_home >= d)
            return true;
    }
    return false;
}

/* Make a free entry that no lookup needs to go past empty, then the marked entries right
 * before it (each now followed by an empty one). Each write leaves a valid table. */
static void tomb_clear(struct sw_kstate *st, uint32_t i)
{
    for (uint32_t k = 0; k < st->cap; k++) {
        struct sw_kentry *e = entry_at(st, i);
        if (e->fp != 0 || !(e->flags & SW_KE_TOMB))
            break;
        STORE_ORDER();
        e->flags = 0;
        i = i == 0 ? st->cap - 1u : i - 1u;
    }
}

/* Move the key of entry j (nothing in flight: no holding names it) into the free entry i
 * before it on its path. A process killed in between leaves the key twice (the repair keeps
 * the first, which lookups find) or once; never half a key. */
static void kentry_move(struct sw_kstate *st, uint32_t i, uint32_t j)
{
    struct sw_kentry *dst = entry_at(st, i), *src = entry_at(st, j);
    dst->in_flight = src->in_flight;
    dst->last_use = src->last_use;
    dst->a = src->a;
    memcpy(dst->counts, src->counts, (size_t)(st->entry_size - sizeof(struct sw_kentry)));
    dst->flags = src->flags | SW_KE_TOMB; /* still free: probes go past */
    STORE_ORDER();
    dst->fp = src->fp;
    STORE_ORDER();
    dst->flags = src->flags;
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    STORE_ORDER();
    src->flags = SW_KE_TOMB;
    STORE_ORDER();
    src->fp = 0;
}

/* Fill the hole left by free entry i (marked) as linear probing's deletion does: the
 * keys after it (up to the next empty entry) whose lookups go past it move up into it, the
 * hole moving with them. A key with requests in flight never moves (holdings name entries
 * by number). The last hole stays marked for probes to go past while a key after it needs
 * that (one in flight), else it is emptied. Each write leaves a valid table.
 * @param end the scan stops there (the new key's home: its path, up to the free entry it
 * is about to take, stays as it is) @param keep an entry that does not move (the new key's,
 * whose number the decision holds), or UINT32_MAX */
static void hole_fill(struct sw_kstate *st, uint32_t i, uint32_t end, uint32_t keep)
{
    uint32_t plen = probe_len(st), j = i, gap = 0;
    for (uint32_t k = 1; k < plen; k++) {
        if (++j == st->cap)
            j = 0;
        if (j == end)
            break;
        gap++;
        struct sw_kentry *x = entry_at(st, j);
        if (is_empty(x))
            break;
        if (x->fp == 0)
            continue; /* a marked free entry: the run goes on */
        uint32_t h = home_of(st, x->fp);
        uint32_t from_home = j >= h ? j - h : j + st->cap - h;
        if (from_home < gap)
            continue; /* its home is after the hole: its lookups do not go past it */
        if (x->in_flight != 0 || j == keep)
            continue; /* stays: a key further on may fill the hole */
        kentry_move(st, i, j);
        i = j;
        gap = 0;
    }
    if (!tomb_needed(st, i))
        tomb_clear(st, i);
}

/* Free entry i (its key evicted) and fill the hole (hole_fill). */
static void kentry_free(struct sw_kstate *st, uint32_t i, uint32_t end)
{
    struct sw_kentry *e = entry_at(st, i);
    e->flags = SW_KE_TOMB;
    STORE_ORDER();
    e->fp = 0;
    STORE_ORDER();
    hole_fill(st, i, end, UINT32_MAX);
}

/* Look at a few marked entries in turn (a cursor over the table): those no lookup needs any
 * more (the keys that needed them have gone) become empty, so that marks do not pile up. */
static void tomb_sweep(struct sw_kstate *st, uint32_t keep)
{
    for (uint32_t k = 0; k < SW_KEYED_SWEEP; k++) {
        uint32_t i = (uint32_t)(st->sweep % st->cap);
        st->sweep = i + 1u;
        struct sw_kentry *e = entry_at(st, i);
        if (e->fp == 0 && (e->flags & SW_KE_TOMB))
            hole_fill(st, i, i, keep); /* the keys that went past it move up, or it empties */
    }
}

/* Whether the whole table has room for one more key (several stripes: the first stripe's
 * count of keys; one stripe: its own n_live tells). */
static inline bool room_total(struct sw_kstate *st)
{
    return st->n_stripes == 1 ||
           atomic_load_explicit(&first_stripe(st)->live, memory_order_relaxed) < st->max_total;
}

/* Hold a place in the whole table for a key about to take a free entry of stripe st (lock
 * held): the first stripe's count of keys goes up, below max_total, and the stripe notes it
 * (`pending`: a process killed before the key is counted in n_live leaves the repair what it
 * needs to count it once). @return false when the table holds max_total keys */
static bool reserve_key(struct sw_kstate *st)
{
    if (st->n_stripes == 1)
        return true;
    _Atomic uint32_t *live = &first_stripe(st)->live;
    uint32_t x = atomic_load_explicit(live, memory_order_relaxed);
    do {
        if (x >= st->max_total)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(live, &x, x + 1u, memory_order_relaxed,
                                                    memory_order_relaxed));
    st->pending = st->n_live + 1u;
    STORE_ORDER();
    return true;
}

/* The entry of a key, inserted when absent (evicting when needed). A new key goes into the
 * first free entry of its probe path while the table holds fewer than max_keys keys; else (or
 * when its path has no free entry) it replaces the least recently used of a sample of the
 * keys of its probe window (idle ones first, never one in flight: see sw_keyed.h): the
 * victim's own entry when it lies on the path before the first empty entry, else the path's
 * first free entry (the victim's is freed).
 * @return the entry, or UINT32_MAX when the key cannot be held (all candidates in flight) */
static uint32_t get_key(const struct sw_kview *v, uint64_t fp, int64_t now_ns, bool insert)
{
    struct sw_kstate *st = v->st;
    uint32_t fr, stop;
    uint32_t i = find(st, fp, &fr, &stop);
    if (i != UINT32_MAX || !insert)
        return i;
    if (fr != UINT32_MAX && st->n_live < st->max_keys && reserve_key(st)) {
        kentry_take(st, entry_at(st, fr), fp);
        st->n_live++;
        if (st->n_stripes > 1) {
            STORE_ORDER();
            st->pending = 0;
        }
        return fr;
    }
    /* the candidates: the first SW_KEYED_EVICT_SAMPLE keys that may go (not in flight) from
     * the key's home on, wherever they lie in its probe window (a victim off the key's path
     * is freed and the keys behind it move up: kentry_free). The keys around a key's home
     * are a random sample of the table's (the hash is seeded at random), so a key used
     * recently survives a flood of new keys: it is rarely the oldest of 8 (and never when
     * fewer than 7 keys came since). A small table: every key (exact LRU). */
    uint32_t want = st->max_keys <= SW_KEYED_SAMPLE ? UINT32_MAX : SW_KEYED_EVICT_SAMPLE;
    uint32_t plen = probe_len(st), p = home_of(st, fp), seen = 0;
    uint32_t best = UINT32_MAX, best_d = 0, age = 0;
    uint32_t idle = UINT32_MAX, idle_d = 0, age_idle = 0;
    uint32_t tick = (uint32_t)st->tick;
    for (uint32_t d = 0; d < plen && seen < want; d++) {
        struct sw_kentry *e = entry_at(st, p);
        if (e->fp != 0 && e->in_flight <= 0) {
            uint32_t a = tick - e->last_use;
            seen++;
            if (kidle(v, e, now_ns)) {
                if (idle == UINT32_MAX || a > age_idle) {
                    idle = p;
                    idle_d = d;
                    age_idle = a;
                }
            } else if (best == UINT32_MAX || a > age) {
                best = p;
                best_d = d;
                age = a;
            }
        }
        if (++p == st->cap)
            p = 0;
    }
    uint32_t di = best_d;
    i = best;
    if (idle != UINT32_MAX) {
        i = idle;
        di = idle_d;
    }
    if (i == UINT32_MAX)
        return UINT32_MAX;
    st->evicted++;
    if (di < stop || fr == UINT32_MAX) {
        /* on the path (a path without a free entry has no empty one either) */
        kentry_take(st, entry_at(st, i), fp);
    } else {
        kentry_free(st, i, home_of(st, fp));
        if (sw_test_in_critical != NULL)
            sw_test_in_critical();
        STORE_ORDER();
        kentry_take(st, entry_at(st, fr), fp);
        i = fr;
    }
    /* after the new key is in place: a mark its lookups go past is needed again */
    tomb_sweep(st, i);
    return i;
}

/* ---- holdings (shared tables): who holds what in flight --------------------------------- */

static inline uint32_t hold_home(const struct sw_kstate *st, uint32_t entry, uint32_t slot)
{
    uint64_t x = ((uint64_t)entry << 32 | slot) * UINT64_C(0x9e3779b97f4a7c15);
    return (uint32_t)(((unsigned __int128)x * st->hold_cap) >> 64);
}

/* Add d to (entry, this process)'s holding; a full neighbourhood leaves it unattributed. */
static void hold_add(const struct sw_kview *v, uint32_t idx, int64_t d)
{
    struct sw_kstate *st = v->st;
    if (st->hold_cap == 0 || v->my_slot < 0)
        return;
    struct sw_khold *h = holds_of(st);
    uint32_t want = idx + 1u, slot = (uint32_t)v->my_slot;
    uint32_t p = hold_home(st, want, slot), free_pos = UINT32_MAX;
    uint32_t plen = st->hold_cap < SW_KEYED_HOLD_PROBE ? st->hold_cap : SW_KEYED_HOLD_PROBE;
    for (uint32_t k = 0; k < plen; k++) {
        if (h[p].entry == 0) {
            if (free_pos == UINT32_MAX)
                free_pos = p;
            break;
        }
        if (h[p].entry == HOLD_DEL) {
            if (free_pos == UINT32_MAX)
                free_pos = p;
        } else if (h[p].entry == want && h[p].slot == slot) {
            h[p].count = sw_sat_add(h[p].count, d);
            if (h[p].count <= 0) {
                h[p].count = 0;
                h[p].entry = HOLD_DEL;
            }
            return;
        }
        if (++p == st->hold_cap)
            p = 0;
    }
    if (d > 0 && free_pos != UINT32_MAX) {
        h[free_pos].slot = slot;
        h[free_pos].count = d;
        h[free_pos].entry = want;
    }
}

/* ---- what one object holds (process memory, struct sw_kheld) ----------------------------- */

static inline uint32_t kheld_home(uint64_t fp, uint32_t cap)
{
    return (uint32_t)((fp * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & (cap - 1u);
}

/* Move the cells into `cap` new ones (a power of 2 above n). @return false without memory */
static bool kheld_resize(struct sw_kheld *h, uint32_t cap)
{
    uint64_t *fp = calloc(cap, sizeof *fp);
    int64_t *count = malloc((size_t)cap * sizeof *count);
    if (fp == NULL || count == NULL) {
        free(fp);
        free(count);
        return false;
    }
    for (uint32_t i = 0; i < h->cap; i++) {
        if (h->fp[i] == 0)
            continue;
        uint32_t p = kheld_home(h->fp[i], cap);
        while (fp[p] != 0)
            p = (p + 1u) & (cap - 1u);
        fp[p] = h->fp[i];
        count[p] = h->count[i];
    }
    free(h->fp);
    free(h->count);
    h->fp = fp;
    h->count = count;
    h->cap = cap;
    return true;
}

/* The cell of fp, or UINT32_MAX. */
static uint32_t kheld_find(const struct sw_kheld *h, uint64_t fp)
{
    if (h->n == 0)
        return UINT32_MAX;
    for (uint32_t p = kheld_home(fp, h->cap);; p = (p + 1u) & (h->cap - 1u)) {
        if (h->fp[p] == fp)
            return p;
        if (h->fp[p] == 0)
            return UINT32_MAX;
    }
}

/* Free cell p (linear probing: the cells after it that would no longer be found move up). */
static void kheld_remove(struct sw_kheld *h, uint32_t p)
{
    uint32_t mask = h->cap - 1u;
    for (uint32_t q = (p + 1u) & mask; h->fp[q] != 0; q = (q + 1u) & mask) {
        uint32_t home = kheld_home(h->fp[q], h->cap);
        /* q's key may fill the hole at p when p lies on its path from home to q */
        if (((q - home) & mask) >= ((q - p) & mask)) {
            h->fp[p] = h->fp[q];
            h->count[p] = h->count[q];
            p = q;
        }
    }
    h->fp[p] = 0;
    h->n--;
    /* a small map stays (no allocation per admission); a large one shrinks as it empties */
    if (h->cap > 64u && h->n * 8u < h->cap)
        (void)kheld_resize(h, h->cap / 2u);
}

/* Add d to what the object holds of fp (never below 0: a release of more gave back another
 * holder's). Without memory for a new cell the count is left unattributed (never given
 * back: at worst what the object held stays until the process exits). */
static void kheld_add(struct sw_kheld *h, uint64_t fp, int64_t d)
{
    uint32_t p = kheld_find(h, fp);
    if (p != UINT32_MAX) {
        h->count[p] = sw_sat_add(h->count[p], d);
        if (h->count[p] <= 0)
            kheld_remove(h, p);
        return;
    }
    if (d <= 0)
        return;
    if ((h->n + 1u) * 4u > h->cap * 3u &&
        (h->cap >= (UINT32_C(1) << 30) || !kheld_resize(h, h->cap == 0 ? 8u : h->cap * 2u)))
        return;
    for (p = kheld_home(fp, h->cap); h->fp[p] != 0; p = (p + 1u) & (h->cap - 1u)) {
    }
    h->fp[p] = fp;
    h->count[p] = d;
    h->n++;
}

int64_t sw_kheld_get(const struct sw_kheld *h, uint64_t fp)
{
    uint32_t p = kheld_find(h, fp);
    return p != UINT32_MAX ? h->count[p] : 0;
}

void sw_kheld_clear(struct sw_kheld *h)
{
    free(h->fp);
    free(h->count);
    memset(h, 0, sizeof *h);
}

/* Add d to a process slot's in-flight count: the stripes' locks do not
 * exclude one another, so the word changes atomically. */
static void slot_add(struct sw_proc_slot *slot, int64_t d)
{
    int64_t x = __atomic_load_n(&slot->in_flight, __ATOMIC_RELAXED), y;
    do {
        y = sw_sat_add(x, d);
    } while (!__atomic_compare_exchange_n(&slot->in_flight, &x, y, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
}

/* Change a key's in-flight count by d (lock held): the key, the table, this process. */
static void add_in_flight(const struct sw_kview *v, uint32_t idx, struct sw_kentry *e, int64_t d)
{
    struct sw_node *node = sw_keyed_node(v->st);
    if (v->my_slot >= 0) {
        /* the process's count and the object's map: its threads may change them under the
         * locks of different stripes */
        slot_add(&v->slots[v->my_slot], d);
        if (v->held != NULL && d != 0) {
            sw_lock_acquire(&v->held->lock);
            kheld_add(v->held, e->fp, d);
            sw_lock_release(&v->held->lock);
        }
    }
    /* a holding is never behind its share of the key's count: taking, the holding goes
     * first; giving back, the count. A process killed in between leaves its holding ahead,
     * by its own change only, and the reap gives back no more than the others leave */
    if (d > 0)
        hold_add(v, idx, d);
    else
        e->in_flight = sw_sat_add(e->in_flight, d);
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    STORE_ORDER();
    if (d > 0)
        e->in_flight = sw_sat_add(e->in_flight, d);
    else
        hold_add(v, idx, d);
    node->in_flight = sw_sat_add(node->in_flight, d);
}

/* ---- locking ------------------------------------------------------------------------------ */

static inline void lock_table(const struct sw_kview *v)
{
    if (sw_lock_acquire_as(&v->st->lock, sw_token_resolve(v->token)))
        sw_keyed_repair(v);
}

/* lock_table for a call site that can give up (sw_lock_wait_hook): the same cost when the
 * lock is free. @return false when it gave up (the lock is not held) */
static inline bool lock_table_or_give_up(const struct sw_kview *v)
{
    int got = sw_lock_acquire_or_give_up(&v->st->lock, sw_token_resolve(v->token));
    if (got == SW_LOCK_TOOK_OVER)
        sw_keyed_repair(v);
    return got != SW_LOCK_GAVE_UP;
}

static inline void unlock_table(const struct sw_kview *v)
{
    sw_lock_release(&v->st->lock);
}

/* ns from now_ns until ms time `at_ms`, never negative (as sw_limiter.c) */
static int64_t ns_until(int64_t at_ms, int64_t now_ns)
{
    int64_t d = sw_sat_sub(sw_sat_mul(at_ms, INT64_C(1000000)), now_ns < 0 ? 0 : now_ns);
    return d < 0 ? 0 : d;
}

/* ---- decisions ---------------------------------------------------------------------------- */

int sw_keyed_decide(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns,
                    unsigned flags, struct sw_decision *out)
{
    if (n < 1)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    /* the key's home entry (and the line after it) is fetched while the lock is taken and
     * the clock read: its address needs only layout constants, no lock */
    const char *home = (const char *)entry_at(st, home_of(st, fp));
    __builtin_prefetch(home, 1, 3);
    __builtin_prefetch(home + 64, 1, 3);
    out->verdict = SW_BLOCK;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1;
    out->shadowed = 0;
    if (!lock_table_or_give_up(v))
        return SW_EBUSY;
    /* the settings are read under the lock only (sw_keyed_set_rule swaps them under it) */
    const struct sw_rule *r = &v->rule->base;
    double limit = r->limit, count = r->count;
    if (v->rule->n_over > 0)
        count = sw_krule_count(v->rule, fp, &limit);
    bool conc = r->grade == SW_GRADE_CONCURRENCY, thr = is_throttle(r);
    if (r->shadow)
        flags |= SW_F_SHADOW;
    if (flags & SW_F_SHADOW)
        flags &= ~SW_F_NO_BLOCK;
    /* requests that can never pass: decided without taking an entry */
    bool never = conc ? (double)n > count : (count <= 0 || (!thr && (double)n > limit));
    if (now_ns == SW_NOW)
        now_ns = thr ? sw_time_ns() : sw_time_coarse_ns();
    out->now_ns = now_ns;
    int64_t t_ms = sw_ms_of_ns(now_ns);
    struct sw_leap *sec = sw_node_sec(node);
    int64_t tn = sw_leap_clamp(sec, t_ms);
    uint32_t i = get_key(v, fp, now_ns, !(never && (conc || thr)));
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (e != NULL)
        e->last_use = (uint32_t)++st->tick;
    if (never) {
        out->verdict = SW_NEVER;
        if (e != NULL && !conc && !thr)
            kwin_advance(st, e, kclamp(e, t_ms)); /* the clamp records the time, as ever */
    } else if (e == NULL) {
        /* the table is full of keys with requests in flight */
    } else if (conc) {
        if (sw_reject_fits(e->in_flight, n, count))
            out->verdict = SW_PASS;
    } else if (thr) {
        if (!(e->flags & SW_KE_PACING)) {
            e->flags = SW_KE_PACING;
            e->a = 0;
        }
        struct sw_throttle th;
        th.last_ns = e->a;
        th.has_last = (e->flags & SW_KE_HAS_LAST) ? 1u : 0u;
        th.saturated = (e->flags & SW_KE_SATURATED) ? 1u : 0u;
        int64_t cost = sw_throttle_cost(count, n);
        if (sw_throttle_reserve(&th, cost, now_ns, r->max_queue_ns, (flags & SW_F_TRY) != 0,
                                &out->wait_ns, &out->retry_ns))
            out->verdict = SW_PASS;
        e->a = th.last_ns;
        e->flags = SW_KE_PACING | (th.has_last ? SW_KE_HAS_LAST : 0u) |
                   (th.saturated ? SW_KE_SATURATED : 0u);
    } else {
        int64_t t = kclamp(e, t_ms);
        uint32_t slot;
        if ((e->flags & SW_KE_WINDOW) && e->a == sec->newest && sw_leap_in_newest(sec, t) &&
            (uint32_t)sec->newest_idx < st->sample_count) {
            /* t in the key's newest bucket, which is the table's newest: nothing rolls, and
             * the table's ring knows the bucket's slot (no division) */
            slot = (uint32_t)sec->newest_idx;
        } else {
            kwin_advance(st, e, t);
            slot = kslot(st, e->a);
        }
        if (sw_reject_fits(ktotal(st, e), n, limit)) {
            out->verdict = SW_PASS;
            e->counts[slot] = sw_sat_add(e->counts[slot], n);
            if (sw_test_in_critical != NULL)
                sw_test_in_critical();
            if (keeps_total(st->sample_count))
                e->counts[st->sample_count] = sw_sat_add(e->counts[st->sample_count], n);
        } else if (flags & SW_F_RETRY) {
            int64_t ms = kwin_retry_ms(st, e, t, n, limit);
            out->retry_ns = ms < 0 ? -1 : ns_until(sw_sat_add(t, ms), now_ns);
        }
    }
    if (out->verdict == SW_PASS) {
        sw_node_add_at(node, SW_EV_PASS, n, tn);
        if (conc || (flags & SW_F_ENTRY))
            add_in_flight(v, i, e, n);
    } else if (!(flags & SW_F_NO_BLOCK)) {
        sw_node_add_at(node, SW_EV_BLOCK, n, tn);
        if (flags & SW_F_SHADOW)
            node->shadow_block = sw_sat_add(node->shadow_block, n);
    }
    unlock_table(v);
    if (flags & SW_F_SHADOW) {
        out->shadowed = out->verdict != SW_PASS;
        out->verdict = SW_PASS;
        out->wait_ns = 0;
        out->retry_ns = -1;
    }
    return SW_OK;
}

size_t sw_keyed_node_size(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc = node_cfg(interval_ms, sample_count);
    return sw_node_size(&nc);
}

int sw_keyed_node_validate(struct sw_node *node, int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc = node_cfg(interval_ms, sample_count);
    return sw_node_validate(node, &nc);
}

void sw_keyed_lock(const struct sw_kview *v)
{
    struct sw_kview sv;
    for (uint32_t i = 0; i < v->st->n_stripes; i++)
        lock_table(stripe_view(v, i, &sv));
}

bool sw_keyed_lock_or_give_up(const struct sw_kview *v)
{
    struct sw_kview sv;
    for (uint32_t i = 0; i < v->st->n_stripes; i++) {
        if (!lock_table_or_give_up(stripe_view(v, i, &sv))) {
            while (i-- > 0)
                unlock_table(stripe_view(v, i, &sv));
            return false;
        }
    }
    return true;
}

void sw_keyed_unlock(const struct sw_kview *v)
{
    struct sw_kview sv;
    for (uint32_t i = v->st->n_stripes; i-- > 0;)
        unlock_table(stripe_view(v, i, &sv));
}

bool sw_keyed_lock_key_or_give_up(const struct sw_kview *v, uint64_t fp)
{
    struct sw_kview kbuf;
    return lock_table_or_give_up(key_view(v, fp, &kbuf));
}

void sw_keyed_unlock_key(const struct sw_kview *v, uint64_t fp)
{
    struct sw_kview kbuf;
    unlock_table(key_view(v, fp, &kbuf));
}

const void *sw_keyed_lock_id(const struct sw_kview *v)
{
    return &v->st->lock;
}

void sw_keyed_totals(const struct sw_kview *v, struct sw_totals *out)
{
    struct sw_kview sv;
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < v->st->n_stripes; i++) {
        const struct sw_kview *s = stripe_view(v, i, &sv);
        struct sw_totals t;
        lock_table(s);
        sw_node_totals(sw_keyed_node(s->st), &t);
        unlock_table(s);
        out->pass = sw_sat_add(out->pass, t.pass);
        out->block = sw_sat_add(out->block, t.block);
        out->exception = sw_sat_add(out->exception, t.exception);
        out->success = sw_sat_add(out->success, t.success);
        out->occupied_pass = sw_sat_add(out->occupied_pass, t.occupied_pass);
        out->rt = sw_sat_add(out->rt, t.rt);
        out->shadow_block = sw_sat_add(out->shadow_block, t.shadow_block);
    }
}

static int kexit_as(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms, int outcome,
                    int64_t now_ns, bool may_give_up)
{
    if (n < 0 || rt_ms < 0)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    if (!may_give_up)
        lock_table(v);
    else if (!lock_table_or_give_up(v))
        return SW_EBUSY; /* nothing counted, the count stays held: the caller may retry */
    uint32_t i = lookup(st, fp);
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (outcome != SW_OUT_NONE) {
        if (now_ns == SW_NOW)
            now_ns = sw_time_coarse_ns();
        int64_t t = sw_ms_of_ns(now_ns);
        sw_node_add_outcome(node, outcome, n, rt_ms, t);
        /* a private limiter's window sees this time too (its clamp) */
        if (e != NULL && (e->flags & SW_KE_WINDOW))
            kwin_advance(st, e, kclamp(e, t));
    }
    if (e != NULL) {
        e->last_use = (uint32_t)++st->tick;
        add_in_flight(v, i, e, -(e->in_flight > n ? n : e->in_flight > 0 ? e->in_flight : 0));
    }
    unlock_table(v);
    return SW_OK;
}

int sw_keyed_exit(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms, int outcome,
                  int64_t now_ns)
{
    return kexit_as(v, fp, n, rt_ms, outcome, now_ns, false);
}

int sw_keyed_exit_or_give_up(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms,
                             int outcome, int64_t now_ns)
{
    return kexit_as(v, fp, n, rt_ms, outcome, now_ns, true);
}

int sw_keyed_release(const struct sw_kview *v, uint64_t fp, int64_t n)
{
    int rc = SW_OK;
    if (n < 1)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    if (!lock_table_or_give_up(v))
        return SW_EBUSY; /* the count stays held: the caller may try again */
    uint32_t i = lookup(st, fp);
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (e == NULL || e->in_flight < n) {
        rc = SW_ESTATE;
    } else {
        e->last_use = (uint32_t)++st->tick;
        add_in_flight(v, i, e, -n);
    }
    unlock_table(v);
    return rc;
}

int64_t sw_keyed_in_flight(const struct sw_kview *v, uint64_t fp)
{
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    lock_table(v);
    uint32_t i = lookup(v->st, fp);
    int64_t x = i != UINT32_MAX ? entry_at(v->st, i)->in_flight : 0;
    unlock_table(v);
    return x;
}

int sw_keyed_count(const struct sw_kview *v, uint32_t ev, int64_t n, int64_t now_ns)
{
    if (ev >= SW_EV_DEFAULT_COUNT)
        return SW_EEVENT;
    if (n < 0)
        return SW_EINVAL;
    lock_table(v);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    sw_node_add(sw_keyed_node(v->st), ev, n, sw_ms_of_ns(now_ns));
    unlock_table(v);
    return SW_OK;
}

int sw_keyed_count_shadow_block(const struct sw_kview *v, int64_t n, int64_t now_ns)
{
    if (n < 0)
        return SW_EINVAL;
    lock_table(v);
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    sw_node_add_shadow_block(sw_keyed_node(v->st), n, sw_ms_of_ns(now_ns));
    unlock_table(v);
    return SW_OK;
}

/* One stripe's statistics (as sw_keyed_stats). */
static void stripe_stats(const struct sw_kview *v, int64_t now_ns, struct sw_stats *out,
                         int64_t *evicted, int64_t *keys)
{
    struct sw_node *node = sw_keyed_node(v->st);
    struct sw_leap *sec = sw_node_sec(node);
    lock_table(v);
    int64_t t = sw_leap_clamp(sec, sw_ms_of_ns(now_ns));
    out->min_rt = sw_leap_min_rt(sec, NULL, t);
    out->pass = sw_leap_sum(sec, NULL, SW_EV_PASS, t);
    out->block = sw_leap_sum(sec, NULL, SW_EV_BLOCK, t);
    out->success = sw_leap_sum(sec, NULL, SW_EV_SUCCESS, t);
    out->exception = sw_leap_sum(sec, NULL, SW_EV_EXCEPTION, t);
    out->rt_sum = sw_leap_sum(sec, NULL, SW_EV_RT, t);
    out->occupied_pass = 0;
    out->in_flight = node->in_flight;
    out->waiting = 0;
    *evicted = v->st->evicted;
    *keys = v->st->n_live;
    unlock_table(v);
}

void sw_keyed_stats(const struct sw_kview *v, int64_t now_ns, struct sw_stats *out,
                    int64_t *evicted, int64_t *keys)
{
    if (now_ns == SW_NOW)
        now_ns = sw_time_coarse_ns();
    stripe_stats(v, now_ns, out, evicted, keys);
    struct sw_kview sv;
    for (uint32_t i = 1; i < v->st->n_stripes; i++) {
        struct sw_stats s;
        int64_t ev, k;
        stripe_stats(stripe_view(v, i, &sv), now_ns, &s, &ev, &k);
        /* (a stripe without data reads SW_MIN_RT_INIT, the most a bucket's minimum is) */
        if (s.min_rt < out->min_rt)
            out->min_rt = s.min_rt;
        out->pass = sw_sat_add(out->pass, s.pass);
        out->block = sw_sat_add(out->block, s.block);
        out->success = sw_sat_add(out->success, s.success);
        out->exception = sw_sat_add(out->exception, s.exception);
        out->rt_sum = sw_sat_add(out->rt_sum, s.rt_sum);
        out->in_flight = sw_sat_add(out->in_flight, s.in_flight);
        *evicted = sw_sat_add(*evicted, ev);
        *keys += k;
    }
}

uint32_t sw_keyed_len(const struct sw_kview *v)
{
    struct sw_kview sv;
    uint32_t x = 0;
    for (uint32_t i = 0; i < v->st->n_stripes; i++) {
        const struct sw_kview *s = stripe_view(v, i, &sv);
        lock_table(s);
        x += s->st->n_live;
        unlock_table(s);
    }
    return x;
}

/* ---- shared regions: validation, repair, reaping ----------------------------------------- */

int sw_keyed_validate_header(const struct sw_kstate *st, size_t size, int64_t interval_ms,
                             uint32_t sample_count, uint32_t max_keys, bool shared)
{
    struct klayout k;
    if (st == NULL || !layout_of(interval_ms, sample_count, max_keys, shared, &k) ||
        size < k.total)
        return SW_EINVAL;
    uint64_t seed = st->seed;
    for (uint32_t i = 0; i < k.n_stripes; i++) {
        const struct sw_kstate *s =
            (const struct sw_kstate *)(const void *)((const char *)st + (size_t)i * k.stride);
        if (s->max_keys != k.stripe_keys || s->n_stripes != k.n_stripes || s->stripe != i ||
            s->cap != k.cap || s->entry_size != k.entry_size ||
            s->sample_count != sample_count || s->hold_cap != k.hold_cap ||
            s->interval_ms != interval_ms ||
            s->window_ms != interval_ms / (int64_t)sample_count || s->size != k.size ||
            s->off_node != k.off_node || s->seed == 0 || s->seed != seed ||
            s->off_entries != k.off_entries || s->off_hold != k.off_hold ||
            s->stride != k.stride || s->max_total != max_keys ||
            s->n_live > k.stripe_keys)
            return SW_EINVAL;
    }
    return SW_OK;
}

int sw_keyed_validate(struct sw_kstate *st, size_t size, int64_t interval_ms,
                      uint32_t sample_count, uint32_t max_keys, bool shared)
{
    if (sw_keyed_validate_header(st, size, interval_ms, sample_count, max_keys, shared) !=
        SW_OK)
        return SW_EINVAL;
    /* other processes may be deciding meanwhile (no lock here): every bound checked is a
     * constant of the layout, never a count that moves. The entries hold no index (any bit
     * pattern is a state a decision handles); the holdings name entries. */
    struct sw_node_cfg nc = node_cfg(interval_ms, sample_count);
    for (uint32_t i = 0; i < st->n_stripes; i++) {
        struct sw_kstate *s = stripe_at(st, i);
        const struct sw_khold *h = holds_of(s);
        for (uint32_t p = 0; p < s->hold_cap; p++) {
            uint32_t e = h[p].entry;
            if (e != HOLD_DEL && (e > s->cap || h[p].slot >= SW_SHM_MAX_PROCS))
                return SW_EINVAL;
        }
        int rc = sw_node_validate(sw_keyed_node(s), &nc);
        if (rc != SW_OK)
            return rc;
    }
    return SW_OK;
}

/* Whether the key in entry i is where a lookup finds it: within its probe window, no empty
 * entry before it on its path, and no earlier entry of the same key. */
static bool reachable(struct sw_kstate *st, uint32_t i)
{
    uint64_t fp = entry_at(st, i)->fp;
    uint32_t pos = home_of(st, fp), plen = probe_len(st);
    for (uint32_t d = 0; d < plen; d++) {
        if (pos == i)
            return true;
        struct sw_kentry *e = entry_at(st, pos);
        if (e->fp == fp || is_empty(e))
            return false;
        if (++pos == st->cap)
            pos = 0;
    }
    return false;
}

void sw_keyed_repair(const struct sw_kview *v)
{
    struct sw_kstate *st = v->st;
    uint32_t live = 0, was = st->n_live;
    int64_t in_flight = 0;
    /* a key lost here (a duplicate, out of its window, or beyond max_keys: never from a
     * process killed mid-decision, only from damage) frees its entry for probes to go past */
    for (uint32_t i = 0; i < st->cap; i++) {
        struct sw_kentry *e = entry_at(st, i);
        if (e->fp == 0) {
            e->flags &= SW_KE_TOMB;
            continue;
        }
        e->flags &= ~SW_KE_TOMB;
        if (live >= st->max_keys || !reachable(st, i)) {
            e->flags = SW_KE_TOMB;
            STORE_ORDER();
            e->fp = 0;
            continue;
        }
        if (e->in_flight < 0)
            e->in_flight = 0;
        if (e->flags & SW_KE_WINDOW) {
            int64_t total = 0;
            for (uint32_t s = 0; s < st->sample_count; s++) {
                if (e->counts[s] < 0)
                    e->counts[s] = 0;
                total = sw_sat_add(total, e->counts[s]);
            }
            kset_total(st, e, total);
            if (e->a < 0)
                e->a = 0;
        }
        live++;
        in_flight = sw_sat_add(in_flight, e->in_flight);
    }
    if (st->n_stripes > 1) {
        /* the table's count of keys: this stripe's change, less the place a key being taken
         * held in it (`pending`: counted there, and in `live` below once taken) */
        uint32_t before = st->pending != 0 ? st->pending - 1u : was;
        int64_t d = (int64_t)live - (int64_t)before - (st->pending != 0 ? 1 : 0);
        _Atomic uint32_t *all = &first_stripe(st)->live;
        if (d > 0)
            atomic_fetch_add_explicit(all, (uint32_t)d, memory_order_relaxed);
        for (; d < 0; d++) {
            uint32_t x = atomic_load_explicit(all, memory_order_relaxed);
            while (x > 0 && !atomic_compare_exchange_weak_explicit(
                                all, &x, x - 1u, memory_order_relaxed, memory_order_relaxed)) {
            }
        }
        st->pending = 0;
    }
    st->n_live = live;
    struct sw_khold *h = holds_of(st);
    for (uint32_t p = 0; p < st->hold_cap; p++) {
        if (h[p].entry == 0 || h[p].entry == HOLD_DEL)
            continue;
        if (h[p].entry > st->cap || entry_at(st, h[p].entry - 1u)->fp == 0 ||
            h[p].slot >= v->n_slots || h[p].count <= 0)
            h[p].entry = HOLD_DEL;
    }
    struct sw_node *node = sw_keyed_node(st);
    sw_node_repair(node);
    node->in_flight = in_flight;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Give back the holdings of dead slot s (lock held). A holding gives back its count, but
 * never more than its entry holds beyond the other slots' holdings of it: a process killed
 * between its holding and the key's count left the holding ahead (add_in_flight). */
static void reap_slot(const struct sw_kview *v, uint32_t s)
{
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    struct sw_khold *h = holds_of(st);
    uint32_t n = 0;
    for (uint32_t p = 0; p < st->hold_cap; p++)
        n += h[p].entry != 0 && h[p].entry != HOLD_DEL && h[p].entry <= st->cap &&
             h[p].slot == s;
    /* the entries s holds (sorted, unique) and what the other slots hold of each */
    uint32_t *ents = n > 0 ? malloc((size_t)n * sizeof *ents) : NULL;
    int64_t *others = n > 0 ? calloc(n, sizeof *others) : NULL;
    if (ents != NULL && others != NULL) {
        uint32_t k = 0;
        for (uint32_t p = 0; p < st->hold_cap && k < n; p++)
            if (h[p].entry != 0 && h[p].entry != HOLD_DEL && h[p].entry <= st->cap &&
                h[p].slot == s)
                ents[k++] = h[p].entry;
        qsort(ents, k, sizeof *ents, cmp_u32);
        n = 0;
        for (uint32_t j = 0; j < k; j++)
            if (n == 0 || ents[n - 1] != ents[j])
                ents[n++] = ents[j];
        for (uint32_t p = 0; p < st->hold_cap; p++) {
            if (h[p].entry == 0 || h[p].entry == HOLD_DEL || h[p].slot == s || h[p].count <= 0)
                continue;
            uint32_t *at = bsearch(&h[p].entry, ents, n, sizeof *ents, cmp_u32);
            if (at != NULL)
                others[at - ents] = sw_sat_add(others[at - ents], h[p].count);
        }
    } else {
        n = 0; /* no memory: each holding gives back its count (at most the key's) */
    }
    for (uint32_t p = 0; p < st->hold_cap; p++) {
        if (h[p].entry == 0 || h[p].entry == HOLD_DEL || h[p].slot != s)
            continue;
        if (h[p].entry <= st->cap) {
            struct sw_kentry *e = entry_at(st, h[p].entry - 1u);
            uint32_t *at = n > 0 ? bsearch(&h[p].entry, ents, n, sizeof *ents, cmp_u32) : NULL;
            int64_t room = sw_sat_sub(e->in_flight, at != NULL ? others[at - ents] : 0);
            int64_t give = h[p].count < room ? h[p].count : room;
            if (give > 0) {
                e->in_flight -= give;
                int64_t left = sw_sat_sub(node->in_flight, give);
                node->in_flight = left < 0 ? 0 : left;
            }
        }
        h[p].count = 0;
        h[p].entry = HOLD_DEL;
    }
    free(ents);
    free(others);
}

uint32_t sw_keyed_reap(const struct sw_kview *v)
{
    uint32_t freed = 0;
    if (v->slots == NULL)
        return 0;
    uint64_t me = sw_token_resolve(v->token);
    for (uint32_t s = 0; s < v->n_slots; s++) {
        uint64_t tok = atomic_load_explicit(&v->slots[s].token, memory_order_acquire);
        if (tok == 0 || tok == me || !sw_proc_token_dead(tok))
            continue;
        sw_keyed_lock(v);
        if (atomic_load_explicit(&v->slots[s].token, memory_order_relaxed) == tok) {
            struct sw_kview sv;
            for (uint32_t i = 0; i < v->st->n_stripes; i++)
                reap_slot(stripe_view(v, i, &sv), s);
            __atomic_store_n(&v->slots[s].in_flight, 0, __ATOMIC_RELAXED);
            atomic_store_explicit(&v->slots[s].token, 0, memory_order_release);
            freed++;
        }
        sw_keyed_unlock(v);
    }
    return freed;
}

/* One key an object gives back (sw_keyed_give_back_locked). */
struct kback {
    uint32_t ent;   /* entry index + 1 */
    int64_t count;  /* what the object holds */
    int64_t others; /* what the process's other objects hold */
    int64_t mine;   /* this process's holding */
    int64_t theirs; /* the other processes' holdings */
};

static int cmp_kback(const void *a, const void *b)
{
    uint32_t x = ((const struct kback *)a)->ent, y = ((const struct kback *)b)->ent;
    return x < y ? -1 : x > y;
}

/* sw_keyed_give_back_locked over the keys of one stripe (v: its view). @param kb room for
 * held->n keys @return the count given back */
static int64_t give_back_stripe(const struct sw_kview *v, const struct sw_kheld *held,
                                struct kback *kb, int64_t (*others)(uint64_t fp, void *ctx),
                                void *ctx)
{
    struct sw_kstate *st = v->st;
    int64_t total = 0;
    uint32_t k = 0;
    for (uint32_t p = 0; p < held->cap; p++) {
        if (held->fp[p] == 0 || stripe_of(st, held->fp[p]) != st->stripe)
            continue;
        uint32_t i = lookup(st, held->fp[p]); /* gone (evicted once at 0): nothing to give */
        if (i == UINT32_MAX || k == held->n)
            continue;
        kb[k].ent = i + 1u;
        kb[k].count = held->count[p];
        kb[k].others = others != NULL ? others(held->fp[p], ctx) : 0;
        k++;
    }
    qsort(kb, k, sizeof *kb, cmp_kback);
    /* one pass over the holdings: this process's and the others' of each of those keys */
    const struct sw_khold *h = holds_of(st);
    uint32_t me = (uint32_t)v->my_slot;
    for (uint32_t p = 0; p < st->hold_cap && k > 0; p++) {
        if (h[p].entry == 0 || h[p].entry == HOLD_DEL || h[p].count <= 0)
            continue;
        struct kback key = {h[p].entry, 0, 0, 0, 0};
        struct kback *at = bsearch(&key, kb, k, sizeof *kb, cmp_kback);
        if (at == NULL)
            continue;
        if (h[p].slot == me)
            at->mine = sw_sat_add(at->mine, h[p].count);
        else
            at->theirs = sw_sat_add(at->theirs, h[p].count);
    }
    struct sw_node *node = sw_keyed_node(st);
    struct sw_proc_slot *slot = &v->slots[me];
    for (uint32_t j = 0; j < k; j++) {
        struct sw_kentry *e = entry_at(st, kb[j].ent - 1u);
        int64_t o = kb[j].others < 0 ? 0 : kb[j].others;
        int64_t room = sw_sat_sub(kb[j].mine, o);
        int64_t key_room = sw_sat_sub(sw_sat_sub(e->in_flight, kb[j].theirs), o);
        if (key_room < room)
            room = key_room;
        int64_t take = kb[j].count < room ? kb[j].count : room;
        if (take <= 0)
            continue;
        /* as a release: the key's count first, then the holding (add_in_flight) */
        e->in_flight -= take;
        if (sw_test_in_critical != NULL)
            sw_test_in_critical();
        STORE_ORDER();
        hold_add(v, kb[j].ent - 1u, -take);
        slot_add(slot, -take);
        int64_t left = sw_sat_sub(node->in_flight, take);
        node->in_flight = left < 0 ? 0 : left;
        total = sw_sat_add(total, take);
    }
    return total;
}

int64_t sw_keyed_give_back_locked(const struct sw_kview *v,
                                  int64_t (*others)(uint64_t fp, void *ctx), void *ctx)
{
    struct sw_kheld *held = v->held;
    int64_t total = 0;
    if (held == NULL || held->n == 0)
        return 0;
    struct kback *kb = NULL;
    /* only this process's own slot (a slot reaped and claimed again is another's) */
    if (v->slots == NULL || v->my_slot < 0 || v->st->hold_cap == 0 ||
        atomic_load_explicit(&v->slots[v->my_slot].token, memory_order_relaxed) !=
            sw_token_resolve(v->token) ||
        (kb = calloc(held->n, sizeof *kb)) == NULL)
        goto out;
    struct sw_kview sv;
    for (uint32_t i = 0; i < v->st->n_stripes; i++)
        total = sw_sat_add(total, give_back_stripe(stripe_view(v, i, &sv), held, kb, others, ctx));
out:
    free(kb);
    sw_kheld_clear(held);
    return total;
}

void sw_keyed_detach(const struct sw_kview *v)
{
    if (v->slots == NULL || v->my_slot < 0)
        return;
    sw_keyed_lock(v);
    struct sw_proc_slot *slot = &v->slots[v->my_slot];
    if (__atomic_load_n(&slot->in_flight, __ATOMIC_RELAXED) == 0)
        atomic_store_explicit(&slot->token, 0, memory_order_release);
    sw_keyed_unlock(v);
}

/* ---- plans (sw_group.c): decide a key without counting, then commit or not -------------- */

/* Whether get_key(insert) would find an entry for an absent key (lock held; changes
 * nothing): a free entry of its path while the table holds fewer than max_keys keys, or a
 * key of its probe window without requests in flight to evict. */
static bool can_insert(struct sw_kstate *st, uint64_t fp)
{
    uint32_t fr, stop;
    if (find(st, fp, &fr, &stop) != UINT32_MAX)
        return true;
    if (fr != UINT32_MAX && st->n_live < st->max_keys && room_total(st))
        return true;
    uint32_t plen = probe_len(st), p = home_of(st, fp);
    for (uint32_t d = 0; d < plen; d++) {
        const struct sw_kentry *e = entry_at(st, p);
        if (e->fp != 0 && e->in_flight <= 0)
            return true;
        if (++p == st->cap)
            p = 0;
    }
    return false;
}

int sw_keyed_plan_locked(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns,
                         unsigned flags, struct sw_kplan *p)
{
    if (n < 1)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    const struct sw_rule *r = &v->rule->base;
    double limit = r->limit, count = r->count;
    if (v->rule->n_over > 0)
        count = sw_krule_count(v->rule, fp, &limit);
    bool conc = r->grade == SW_GRADE_CONCURRENCY, thr = is_throttle(r);
    if (r->shadow)
        flags |= SW_F_SHADOW;
    /* (a shadow keeps SW_F_NO_BLOCK here, as sw_plan_locked) */
    bool never = conc ? (double)n > count : (count <= 0 || (!thr && (double)n > limit));
    if (now_ns == SW_NOW)
        now_ns = thr ? sw_time_ns() : sw_time_coarse_ns();
    struct sw_decision *out = &p->d;
    out->verdict = SW_BLOCK;
    out->occupied = 0;
    out->wait_ns = 0;
    out->retry_ns = -1;
    out->now_ns = now_ns;
    out->shadowed = 0;
    p->fp = fp;
    p->n = n;
    p->flags = flags;
    p->conc = conc;
    p->has_thr = 0;
    p->t_ms = sw_ms_of_ns(now_ns);
    p->tn = sw_leap_clamp(sw_node_sec(node), p->t_ms);
    uint32_t i = lookup(st, fp);
    p->entry = i;
    struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
    if (never) {
        out->verdict = SW_NEVER;
    } else if (e == NULL) {
        /* a new key starts empty (its window, its throttle, nothing in flight): it passes
         * when it can be held (a throttle's first request at once) */
        if (can_insert(st, fp)) {
            out->verdict = SW_PASS;
            if (thr) {
                sw_throttle_init(&p->thr);
                int64_t w, rt;
                (void)sw_throttle_reserve(&p->thr, sw_throttle_cost(count, n), now_ns,
                                          r->max_queue_ns, true, &w, &rt);
                p->has_thr = 1;
            }
        }
    } else if (conc) {
        if (sw_reject_fits(e->in_flight, n, count))
            out->verdict = SW_PASS;
    } else if (thr) {
        struct sw_throttle *th = &p->thr;
        sw_throttle_init(th);
        if (e->flags & SW_KE_PACING) {
            th->last_ns = e->a;
            th->has_last = (e->flags & SW_KE_HAS_LAST) ? 1u : 0u;
            th->saturated = (e->flags & SW_KE_SATURATED) ? 1u : 0u;
        }
        if (sw_throttle_reserve(th, sw_throttle_cost(count, n), now_ns, r->max_queue_ns,
                                (flags & SW_F_TRY) != 0, &out->wait_ns, &out->retry_ns)) {
            out->verdict = SW_PASS;
            p->has_thr = 1;
        }
    } else {
        /* the key's window rolls to t (the buckets sliding out leave: no count changes) */
        int64_t t = kclamp(e, p->t_ms);
        kwin_advance(st, e, t);
        if (sw_reject_fits(ktotal(st, e), n, limit)) {
            out->verdict = SW_PASS;
        } else if (flags & SW_F_RETRY) {
            int64_t ms = kwin_retry_ms(st, e, t, n, limit);
            out->retry_ns = ms < 0 ? -1 : ns_until(sw_sat_add(t, ms), now_ns);
        }
    }
    return SW_OK;
}

void sw_keyed_plan_end_locked(const struct sw_kview *v, const struct sw_kplan *p, bool commit)
{
    struct sw_kview kbuf;
    v = key_view(v, p->fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    int64_t n = p->n;
    if (p->d.verdict == SW_PASS) {
        if (!commit)
            return;
        uint32_t i = p->entry;
        if (i == UINT32_MAX)
            i = get_key(v, p->fp, p->d.now_ns, true); /* can_insert said it can */
        struct sw_kentry *e = i != UINT32_MAX ? entry_at(st, i) : NULL;
        if (e != NULL) {
            e->last_use = (uint32_t)++st->tick;
            if (p->has_thr) {
                e->a = p->thr.last_ns;
                e->flags = SW_KE_PACING | (p->thr.has_last ? SW_KE_HAS_LAST : 0u) |
                           (p->thr.saturated ? SW_KE_SATURATED : 0u);
            } else if (!p->conc) {
                int64_t t = kclamp(e, p->t_ms);
                kwin_advance(st, e, t);
                uint32_t slot = kslot(st, e->a);
                e->counts[slot] = sw_sat_add(e->counts[slot], n);
                if (sw_test_in_critical != NULL)
                    sw_test_in_critical();
                if (keeps_total(st->sample_count))
                    e->counts[st->sample_count] = sw_sat_add(e->counts[st->sample_count], n);
            }
        }
        sw_node_add_at(node, SW_EV_PASS, n, p->tn);
        if (e != NULL && (p->conc || (p->flags & SW_F_ENTRY)))
            add_in_flight(v, i, e, n);
    } else if (!(p->flags & SW_F_NO_BLOCK)) {
        sw_node_add_at(node, SW_EV_BLOCK, n, p->tn);
        if (p->flags & SW_F_SHADOW)
            node->shadow_block = sw_sat_add(node->shadow_block, n);
    }
}

int sw_keyed_charge(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns)
{
    if (n < 0)
        return SW_EINVAL;
    struct sw_kview kbuf;
    v = key_view(v, fp, &kbuf);
    struct sw_kstate *st = v->st;
    struct sw_node *node = sw_keyed_node(st);
    lock_table(v);
    const struct sw_rule *r = &v->rule->base;
    if (r->grade == SW_GRADE_CONCURRENCY || n == 0) {
        unlock_table(v);
        return n == 0 ? SW_OK : SW_ESTATE;
    }
    double limit, count = sw_krule_count(v->rule, fp, &limit);
    bool thr = is_throttle(r);
    if (now_ns == SW_NOW)
        now_ns = thr ? sw_time_ns() : sw_time_coarse_ns();
    int64_t t_ms = sw_ms_of_ns(now_ns);
    int64_t tn = sw_leap_clamp(sw_node_sec(node), t_ms);
    uint32_t i = get_key(v, fp, now_ns, true);
    if (i != UINT32_MAX) { /* (a table full of keys in flight: the table's count only) */
        struct sw_kentry *e = entry_at(st, i);
        e->last_use = (uint32_t)++st->tick;
        if (thr) {
            if (!(e->flags & SW_KE_PACING)) {
                e->flags = SW_KE_PACING;
                e->a = 0;
            }
            if (count > 0 && !(e->flags & SW_KE_SATURATED)) {
                int64_t cost = sw_throttle_cost(count, n);
                if (!(e->flags & SW_KE_HAS_LAST) || sw_sat_sub(now_ns, e->a) >= cost) {
                    e->a = now_ns;
                    e->flags = SW_KE_PACING | SW_KE_HAS_LAST;
                } else if (__builtin_add_overflow(e->a, cost, &e->a)) {
                    e->a = INT64_MAX;
                    e->flags |= SW_KE_SATURATED;
                }
            }
        } else {
            int64_t t = kclamp(e, t_ms);
            kwin_advance(st, e, t);
            uint32_t slot = kslot(st, e->a);
            e->counts[slot] = sw_sat_add(e->counts[slot], n);
            if (sw_test_in_critical != NULL)
                sw_test_in_critical();
            if (keeps_total(st->sample_count))
                e->counts[st->sample_count] = sw_sat_add(e->counts[st->sample_count], n);
        }
    }
    sw_node_add_at(node, SW_EV_PASS, n, tn);
    unlock_table(v);
    return SW_OK;
}
