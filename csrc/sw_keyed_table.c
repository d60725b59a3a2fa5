/* sw_keyed_table.c - a keyed table's layout, lookup, eviction and holdings (see
 * sw_keyed.h). */
#include "sw_keyed_impl.h"

#include "sw_platform.h"
#include "sw_proc.h"
#include "sw_time.h"

#include <stdlib.h>
#include <string.h>

/* ---- layout ---------------------------------------------------------------------------- */

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


_Static_assert(offsetof(struct sw_kstate, lock) == 128u &&
                   offsetof(struct sw_kstate, live) == 192u && sizeof(struct sw_kstate) == 256u,
               "a stripe's layout, its lock and the table's count of keys on lines apart");

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

bool sw_kt_layout(int64_t interval_ms, uint32_t sample_count, uint32_t max_keys, bool shared,
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
    if (!sw_kt_layout(interval_ms, sample_count, max_keys, shared, &k))
        return 0;
    return (size_t)k.total;
}

int sw_keyed_init(struct sw_kstate *st, int64_t interval_ms, uint32_t sample_count,
                  uint32_t max_keys, bool shared)
{
    struct klayout k;
    uint64_t seed;
    if (st == NULL || !sw_kt_layout(interval_ms, sample_count, max_keys, shared, &k))
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

/* Look a key up. @param free_pos receives the first free entry of its probe path (not
 * found; UINT32_MAX when the path has none) @param stop receives the distance from the
 * key's home of the first empty entry (probe_len when none) @return its entry or UINT32_MAX */
uint32_t sw_kt_find(struct sw_kstate *st, uint64_t fp, uint32_t *free_pos, uint32_t *stop)
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

/* Key fp written into entry e (marked free until then: probes go past it), then its flags,
 * which drop the mark. */
static void kentry_publish(struct sw_kentry *e, uint64_t fp, uint32_t flags)
{
    STORE_ORDER();
    e->fp = fp;
    STORE_ORDER();
    e->flags = flags;
}

/* Entry e free: marked first (probes go past it), then its key cleared. */
static void kentry_unpublish(struct sw_kentry *e)
{
    e->flags = SW_KE_TOMB;
    STORE_ORDER();
    e->fp = 0;
}

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
    kentry_publish(e, fp, 0);
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
    kentry_publish(dst, src->fp, src->flags);
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    STORE_ORDER();
    kentry_unpublish(src);
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
    kentry_unpublish(entry_at(st, i));
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
    if (sw_test_in_critical != NULL)
        sw_test_in_critical(); /* tests: killed here, `live` is a key ahead (the repair recounts) */
    STORE_ORDER();
    st->pending = st->n_live + 1u;
    STORE_ORDER();
    return true;
}

void sw_kt_recount(struct sw_kstate *first)
{
    uint32_t sum = 0;
    for (uint32_t i = 0; i < first->n_stripes; i++)
        sum += stripe_at(first, i)->n_live;
    atomic_store_explicit(&first->live, sum, memory_order_relaxed);
    atomic_store_explicit(&first->recount, 0u, memory_order_relaxed);
}

void sw_kt_try_recount(struct sw_kstate *held, uint64_t token)
{
    struct sw_kstate *first = first_stripe(held);
    uint32_t n = first->n_stripes, got = 0;
    atomic_store_explicit(&first->recount, 1u, memory_order_relaxed);
    for (; got < n; got++) {
        struct sw_kstate *s = stripe_at(first, got);
        uint64_t free_word = 0;
        if (s != held && !atomic_compare_exchange_strong_explicit(
                             &s->lock.word, &free_word, token, memory_order_acquire,
                             memory_order_relaxed))
            break;
    }
    if (got == n)
        sw_kt_recount(first);
    while (got-- > 0)
        if (stripe_at(first, got) != held)
            sw_lock_release(&stripe_at(first, got)->lock);
}

/* The entry of a key, inserted when absent (evicting when needed). A new key goes into the
 * first free entry of its probe path while the table holds fewer than max_keys keys; else (or
 * when its path has no free entry) it replaces the least recently used of a sample of the
 * keys of its probe window (idle ones first, never one in flight: see sw_keyed.h): the
 * victim's own entry when it lies on the path before the first empty entry, else the path's
 * first free entry (the victim's is freed).
 * @return the entry, or UINT32_MAX when the key cannot be held (all candidates in flight) */
uint32_t sw_kt_get_key(const struct sw_kview *v, uint64_t fp, int64_t now_ns, bool insert)
{
    struct sw_kstate *st = v->st;
    uint32_t fr, stop;
    uint32_t i = sw_kt_find(st, fp, &fr, &stop);
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
void sw_kt_hold_add(const struct sw_kview *v, uint32_t idx, int64_t d)
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
void sw_kt_slot_add(struct sw_proc_slot *slot, int64_t d)
{
    int64_t x = __atomic_load_n(&slot->in_flight, __ATOMIC_RELAXED), y;
    do {
        y = sw_sat_add(x, d);
    } while (!__atomic_compare_exchange_n(&slot->in_flight, &x, y, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
}

/* Change a key's in-flight count by d (lock held): the key, the table, this process. */
void sw_kt_add_in_flight(const struct sw_kview *v, uint32_t idx, struct sw_kentry *e,
                         int64_t d)
{
    struct sw_node *node = sw_keyed_node(v->st);
    if (v->my_slot >= 0) {
        /* the process's count and the object's map: its threads may change them under the
         * locks of different stripes */
        sw_kt_slot_add(&v->slots[v->my_slot], d);
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
        sw_kt_hold_add(v, idx, d);
    else
        e->in_flight = sw_sat_add(e->in_flight, d);
    if (sw_test_in_critical != NULL)
        sw_test_in_critical();
    STORE_ORDER();
    if (d > 0)
        e->in_flight = sw_sat_add(e->in_flight, d);
    else
        sw_kt_hold_add(v, idx, d);
    node->in_flight = sw_sat_add(node->in_flight, d);
}

/* Whether get_key(insert) would find an entry for an absent key (lock held; changes
 * nothing): a free entry of its path while the table holds fewer than max_keys keys, or a
 * key of its probe window without requests in flight to evict. */
bool sw_kt_can_insert(struct sw_kstate *st, uint64_t fp)
{
    uint32_t fr, stop;
    if (sw_kt_find(st, fp, &fr, &stop) != UINT32_MAX)
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
