/* sw_keyed_shared.c - a shared keyed table: validation of a region's table, repair after a
 * process died inside a critical section, reaping dead processes, giving back what an
 * object holds (see sw_keyed.h). */
#include "sw_keyed_impl.h"

#include "sw_platform.h"
#include "sw_proc.h"
#include "sw_shm.h"
#include "sw_time.h"

#include <stdlib.h>
#include <string.h>

/* ---- shared regions: validation, repair, reaping ----------------------------------------- */

int sw_kt_validate_stripe(const struct sw_kstate *s, uint32_t i, const struct klayout *k,
                          int64_t interval_ms, uint32_t sample_count, uint32_t max_keys,
                          uint64_t seed)
{
    if (s->max_keys != k->stripe_keys || s->n_stripes != k->n_stripes || s->stripe != i ||
        s->cap != k->cap || s->entry_size != k->entry_size ||
        s->sample_count != sample_count || s->hold_cap != k->hold_cap ||
        s->interval_ms != interval_ms ||
        s->window_ms != interval_ms / (int64_t)sample_count || s->size != k->size ||
        s->off_node != k->off_node || s->seed == 0 || s->seed != seed ||
        s->off_entries != k->off_entries || s->off_hold != k->off_hold ||
        s->stride != k->stride || s->max_total != max_keys || s->n_live > k->stripe_keys)
        return SW_EINVAL;
    return SW_OK;
}

int sw_keyed_validate_header(const struct sw_kstate *st, size_t size, int64_t interval_ms,
                             uint32_t sample_count, uint32_t max_keys, bool shared)
{
    struct klayout k;
    if (st == NULL || !sw_kt_layout(interval_ms, sample_count, max_keys, shared, &k) ||
        size < k.total)
        return SW_EINVAL;
    for (uint32_t i = 0; i < k.n_stripes; i++) {
        const struct sw_kstate *s =
            (const struct sw_kstate *)(const void *)((const char *)st + (size_t)i * k.stride);
        if (sw_kt_validate_stripe(s, i, &k, interval_ms, sample_count, max_keys, st->seed) !=
            SW_OK)
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

int sw_keyed_region_init(void *state, const struct sw_shm_layout *lay)
{
    return sw_keyed_init(state, lay->interval_ms, lay->sample_count, lay->max_keys, true);
}

int sw_keyed_region_check(void *state, const struct sw_shm_layout *lay)
{
    return sw_keyed_validate(state, (size_t)lay->state_size, lay->interval_ms,
                             lay->sample_count, lay->max_keys, true);
}

sw_lock *sw_keyed_region_lock(void *state)
{
    return &((struct sw_kstate *)state)->lock;
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
    /* a process killed between counting a key in `live` and noting it in `pending` left
     * `live` a key ahead of the table (never behind): count the stripes' keys again */
    if (st->n_stripes > 1)
        sw_kt_try_recount(st, sw_token_resolve(v->token));
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
    sw_kt_enter(st); /* the counts on the lock's line: into the node, and back */
    sw_kt_leave(st);
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
        kb[k].mine = 0; /* kb serves each stripe in turn: nothing of the previous one's */
        kb[k].theirs = 0;
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
        sw_kt_hold_add(v, kb[j].ent - 1u, -take);
        sw_kt_slot_add(slot, -take);
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
