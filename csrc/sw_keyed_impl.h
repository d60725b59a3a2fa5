/* sw_keyed_impl.h - what the files of the keyed table share (sw_keyed.c: hashing, per-key
 * windows, decisions, plans, statistics; sw_keyed_table.c: layout, lookup, eviction,
 * holdings; sw_keyed_shared.c: validation, repair, reaping, giving back). Internal: not
 * part of the core's interface. */
#ifndef SW_KEYED_IMPL_H
#define SW_KEYED_IMPL_H

#include "sw_keyed.h"
#include "sw_shm.h"

#include <stdatomic.h>

/* A table's layout (sw_keyed_table.c). */
struct klayout {
    uint64_t off_node, off_entries, off_hold, size, stride, total;
    uint32_t cap, entry_size, hold_cap, n_stripes, stripe_keys;
};

/* Between the files of the keyed table (a stripe's lock held where they change it):
 * sw_kt_layout: a table's layout, false when too large or invalid;
 * sw_kt_find: look a key up (free_pos: the first free entry of its probe path, UINT32_MAX
 *   when none; stop: the distance from its home of the first empty entry), UINT32_MAX when
 *   absent;
 * sw_kt_get_key: a key's entry, taken when absent (evicting when needed; sw_keyed.h), or
 *   UINT32_MAX;
 * sw_kt_can_insert: whether sw_kt_get_key would find an entry (changes nothing);
 * sw_kt_add_in_flight: a key's in-flight count by d: the key, the stripe, the process;
 * sw_kt_hold_add: d to (entry, this process)'s holding;
 * sw_kt_slot_add: d to a process slot's in-flight count (atomically: the stripes' locks do
 *   not exclude one another). */
bool sw_kt_layout(int64_t interval_ms, uint32_t sample_count, uint32_t max_keys, bool shared,
                  struct klayout *k);
uint32_t sw_kt_find(struct sw_kstate *st, uint64_t fp, uint32_t *free_pos, uint32_t *stop);
uint32_t sw_kt_get_key(const struct sw_kview *v, uint64_t fp, int64_t now_ns, bool insert);
bool sw_kt_can_insert(struct sw_kstate *st, uint64_t fp);
void sw_kt_add_in_flight(const struct sw_kview *v, uint32_t idx, struct sw_kentry *e,
                         int64_t d);
void sw_kt_hold_add(const struct sw_kview *v, uint32_t idx, int64_t d);
void sw_kt_slot_add(struct sw_proc_slot *slot, int64_t d);
/* The node's counts kept on the stripe's lock's line (struct sw_kstate, hot[]), lock held:
 * sw_kt_enter before any other use of the node (its words raised to them, then they are
 * zeroed), sw_kt_leave after (loaded back from its head buckets and totals);
 * sw_kt_node_add: sw_node_add_at through them (a PASS at both heads: on the lock's line). */
void sw_kt_enter(struct sw_kstate *st);
void sw_kt_leave(struct sw_kstate *st);
void sw_kt_node_add(struct sw_kstate *st, uint32_t ev, int64_t n, int64_t t);
/* The table's count of keys (`live`) made the sum of its stripes' n_live: sw_kt_recount with
 * every stripe's lock held; sw_kt_try_recount with stripe `held`'s lock held, the others
 * taken only when free at once (no wait: a stripe's repair runs with its lock held),
 * else the table is marked for the next sw_keyed_lock. */
void sw_kt_recount(struct sw_kstate *first);
void sw_kt_try_recount(struct sw_kstate *held, uint64_t token);
/* Whether stripe i's header (s, a copy or in place) agrees with the table's layout k and
 * arguments, seed its first stripe's. @return SW_OK or SW_EINVAL */
int sw_kt_validate_stripe(const struct sw_kstate *s, uint32_t i, const struct klayout *k,
                          int64_t interval_ms, uint32_t sample_count, uint32_t max_keys,
                          uint64_t seed);


#define HOLD_DEL UINT32_MAX

/* Whether an entry keeps its window's total (else it is the sum of its counts). */
static inline bool keeps_total(uint32_t sample_count)
{
    return sample_count > SW_KEYED_SUM_MAX;
}

static inline struct sw_node_cfg node_cfg(int64_t interval_ms, uint32_t sample_count)
{
    struct sw_node_cfg nc;
    nc.interval_ms = interval_ms;
    nc.sample_count = sample_count;
    nc.borrowable = false;
    return nc;
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

static inline uint32_t lookup(struct sw_kstate *st, uint64_t fp)
{
    uint32_t fr, stop;
    return sw_kt_find(st, fp, &fr, &stop);
}

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

static inline bool is_throttle(const struct sw_rule *r)
{
    return r->grade == SW_GRADE_QPS && r->behavior == SW_THROTTLE;
}

/* Keep the stores before it before the stores after it (a process may be killed between any
 * two stores; the compiler must not reorder them: the test hook, being conditional, does not
 * stop it). */
#define STORE_ORDER() atomic_signal_fence(memory_order_seq_cst)

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


#endif /* SW_KEYED_IMPL_H */
