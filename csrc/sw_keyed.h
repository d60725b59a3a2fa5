/* sw_keyed.h - per-key limits (Sentinel's hot parameters) in one bounded table (docs/design.md §11).
 *
 * A keyed table is flat, pointer-free state in caller-owned memory (so it can live in a
 * shared region, kind SW_KIND_KEYED): a header, the statistics of the whole table (one
 * sw_node: PASS, BLOCK, SUCCESS, EXCEPTION, RT over the window, the minute window, the
 * in-flight total), `cap` per-key entries (about 1.3 x max_keys), and (shared tables only) a
 * table of in-flight holdings per (key, process) so that a killed process's counts come back.
 *
 * Keys are 64-bit fingerprints (sw_keyed_hash: XXH3 over the key's encoding, seeded with the
 * table's seed, its top byte xor-ed with the key's type tag). The seed is drawn at random for
 * each table (sw_keyed_init) and kept in its header, so every process attached to a shared
 * table uses the same one, and nobody who cannot read the table can compute keys that land
 * next to each other in it. A fingerprint is never 0 (0 marks a free entry).
 *
 * The entries are the hash table itself (open addressing, linear probing over at most
 * SW_KEYED_PROBE entries from a key's home): the entry a lookup probes is the key's, so a
 * decision on a key not in cache costs one memory miss (plus the next line at most). An
 * entry never moves while its key has requests in flight (holdings name entries by number;
 * an idle key may move up into the hole an eviction left before it). A free entry is
 * empty (ends a probe) or marked SW_KE_TOMB (probes go past it: a key lay beyond it).
 *
 * A per-key entry holds only what admission needs:
 *   fp, in_flight, last_use (LRU tick), flags (controller mode, throttle bits),
 *   a   (window mode: the newest bucket start held, ms; pacing mode: the throttle's last_ns),
 *   counts[sample_count] (window mode: passes per bucket, slot of a start s =
 *   (s / window_ms) % sample_count, the buckets held being the sample_count ones ending at
 *   `a`), then, when sample_count > SW_KEYED_SUM_MAX, the passes of all of them (else that
 *   total is summed when needed).
 * 32 + 8 * sample_count bytes (+ 8 for the total): 48 for the default 2 x 500 ms window,
 * 1.3 entries a key: 62.4 bytes a key. Every count is 64 bits, as a private limiter's.
 *
 * Settings are per process (`struct sw_krule`: a limiter rule plus per-key overrides); every
 * decision, with the same settings, is exactly a private Limiter's decision for that key
 * (the same window clamp, reject check and retry time, throttle pacing, concurrency check).
 *
 * Full table (max_keys keys held), or a key whose probe window has no free entry: a new key
 * replaces a victim. The candidates are the first SW_KEYED_EVICT_SAMPLE keys without requests
 * in flight from the new key's home on (further in its probe window while fewer have been
 * seen; every key of the window when max_keys <= SW_KEYED_SAMPLE: the window is then the
 * whole table, exact LRU). Never one with requests in flight; the least recently used one
 * whose window is empty, else the least recently used one (approximate LRU, as Redis samples
 * keys). The new key takes the victim's entry when it lies on the new key's path (before
 * its first empty entry), else the path's first free entry (the victim's entry is freed).
 * When every key of the window has requests in flight the new key is refused (BLOCK).
 */
#ifndef SW_KEYED_H
#define SW_KEYED_H

#include "sw_limiter.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_KEYED_MAX_KEYS (UINT32_C(1) << 24) /* keys a table may hold */
#define SW_KEYED_PROBE 256u   /* entries scanned at most per lookup */
#define SW_KEYED_SAMPLE 64u   /* up to this many keys, eviction is exact LRU */
#define SW_KEYED_EVICT_SAMPLE 8u /* keys an eviction compares (not in flight) */
#define SW_KEYED_HOLD_PROBE 64u
#define SW_KEYED_SWEEP 4u     /* free marks an eviction checks in turn */
#define SW_KEYED_SUM_MAX 2u   /* up to this many buckets an entry sums its counts */
#define SW_KEYED_STRIPE_KEYS 256u /* a shared table has a stripe per this many keys... */
#define SW_KEYED_MAX_STRIPES 64u  /* ...up to this many */

/* Key type tags of the encoding hashed by sw_keyed_hash. */
enum { SW_KEY_STR = 's', SW_KEY_BYTES = 'b', SW_KEY_INT = 'i', SW_KEY_BIGINT = 'I' };

/** The 64-bit fingerprint of a key: XXH3-64 of the data, seeded with the table's seed whose
 * top byte is xor-ed with the tag; never 0.
 * @param seed the table's (st->seed) @param tag SW_KEY_* @param data the key's bytes (UTF-8
 * for str, 8 little-endian bytes of an int64, the hex digits of a larger int) @param len
 * bytes @return the fingerprint */
uint64_t sw_keyed_hash(uint64_t seed, int tag, const void *data, size_t len);
/** A random seed (getrandom(2) without waiting for the pool, else /dev/urandom; never 0).
 * @return SW_OK or SW_EOS */
int sw_keyed_random_seed(uint64_t *out);
/** Tests: when set, sw_keyed_random_seed returns what this returns (a failing source). */
extern int (*volatile sw_test_random_seed)(uint64_t *out);

/* One per-key threshold (a process's setting). */
struct sw_kover {
    uint64_t fp;
    double count;   /* qps or concurrency */
    double limit;   /* count * interval_ms / 1000 (qps) */
};

/* A process's settings: the rule every key uses, and per-key overrides sorted by fp. */
struct sw_krule {
    struct sw_rule base;
    const struct sw_kover *over; /* sorted by fp, unique, or NULL */
    uint32_t n_over;
};

/* Entry flags. */
#define SW_KE_WINDOW 1u     /* `a`, total, counts hold a window */
#define SW_KE_PACING 2u     /* `a` holds a throttle's last_ns */
#define SW_KE_SATURATED 4u  /* the throttle's last_ns hit INT64_MAX */
#define SW_KE_HAS_LAST 8u   /* the throttle has admitted a request */
#define SW_KE_TOMB 16u      /* a free entry (fp 0) that probes go past */

struct sw_kentry {
    uint64_t fp;          /* 0: free */
    int64_t in_flight;
    uint32_t last_use;    /* the table's tick at the last use (age = tick - last_use) */
    uint32_t flags;       /* SW_KE_* */
    int64_t a;            /* window: newest bucket start (ms); pacing: last_ns */
    int64_t counts[];     /* window: sample_count bucket counts (then the total, see above) */
};

/* A holding (shared tables): entry index + 1 (0 free, UINT32_MAX deleted), process slot. */
struct sw_khold {
    uint32_t entry;
    uint32_t slot;
    int64_t count;
};

/* One stripe of a table (the whole table when it has one stripe): its own lock, statistics
 * node, entries and holdings. A table is n_stripes stripes `stride` bytes apart (each on its
 * own cache lines), the first one's header at the table's start; a key lives in stripe
 * fp % n_stripes, so that decisions on keys of different stripes share no lock and no line.
 * A private table, or a shared one of fewer than 2 x SW_KEYED_STRIPE_KEYS keys, has one.
 * Every stripe's header holds the table's layout fields (the same in each) and its own
 * counts; the first stripe's `live` counts the keys of the whole table. */
struct sw_kstate {
    /* the layout (written by init only, but the seed by sw_keyed_set_seed): read by every
     * decision, on lines no lock shares */
    uint32_t max_keys;    /* keys this stripe may hold */
    uint32_t n_stripes;   /* stripes of the table: a power of 2 */
    uint32_t cap;         /* entries */
    uint32_t entry_size;  /* bytes of one entry */
    uint32_t sample_count;
    uint32_t hold_cap;    /* holding cells (0: private) */
    uint32_t stripe;      /* this stripe's number */
    uint32_t max_total;   /* keys the whole table may hold (len()) */
    int64_t interval_ms;
    int64_t window_ms;
    uint64_t size;        /* bytes of this stripe */
    uint64_t off_node;
    uint64_t seed;        /* the key hash's seed: random per table (never 0), see above */
    uint64_t off_entries, off_hold;
    uint64_t stride;      /* bytes from one stripe to the next (a multiple of 64) */
    uint64_t pad0_[4];
    /* the stripe's lock, and what changes under it */
    sw_lock lock;
    uint32_t n_live;      /* entries holding a key, at most max_keys */
    uint32_t pending;     /* several stripes: 1 + n_live while a key taken into a free entry
                             holds a place in `live` not yet in n_live, else 0 (repair) */
    uint64_t tick;        /* LRU clock, bumped by every use */
    uint64_t sweep;       /* the next entry whose free mark an eviction checks */
    int64_t evicted;      /* keys evicted so far */
    /* the PASS counts of the node's head buckets (second window, minute window) and its
     * lifetime PASS total, as absolute values (SW_KHOT_*): the true count is the larger of
     * the node's word and this. A decision passing at both heads raises these only, so that
     * it writes one line of the stripe's, the lock's; every other use of the node raises the
     * node's words to them and zeroes them first (sw_kt_enter), then loads them back
     * (sw_kt_leave). Each step only raises a word to a maximum or lowers one to a value held
     * elsewhere: a process killed anywhere leaves the maximum exact (the repair redoes them) */
    int64_t hot[3];
    /* the first stripe's (several stripes): keys held by the whole table, at most max_total,
     * on a line of its own (changed only as a key is taken into a free entry) */
    _Atomic uint32_t live;
    /* non-zero while `live` may be ahead of the keys held (a process killed between
     * counting a key there and noting it in `pending`): recounted with every lock held */
    _Atomic uint32_t recount;
    uint32_t pad2_[14];
};

enum { SW_KHOT_SEC = 0, SW_KHOT_MIN = 1, SW_KHOT_LIFE = 2 };

/* What one object of a process holds in flight per key of a shared table (process memory,
 * never shared): an open-addressing map fingerprint -> count (> 0), changed with the
 * process's holdings under the key's stripe's lock, its cells freed as counts reach 0 (bounded by
 * what the object holds). Zeroed: empty. */
struct sw_kheld {
    sw_lock lock;   /* (private) the stripes of a table are locked apart: the object's
                       threads change its cells under this too */
    uint64_t *fp;   /* cells: 0 free */
    int64_t *count;
    uint32_t cap;   /* cells: 0 or a power of 2 */
    uint32_t n;     /* cells used */
};

/* How one process uses a table (process-local, never shared). */
struct sw_kview {
    struct sw_kstate *st;
    const struct sw_krule *rule;
    uint64_t token;             /* SW_LOCK_PRIVATE or SW_LOCK_PROCESS */
    struct sw_proc_slot *slots; /* shared: the region's process slots, else NULL */
    uint32_t n_slots;
    int32_t my_slot;
    struct sw_kheld *held;      /* shared: what the view's object holds (given back when it
                                   goes), or NULL; changed with the slot, under the lock */
};

/** Bytes a table needs (0 when too large or invalid).
 * @param shared with the holdings table of a shared region */
size_t sw_keyed_size(int64_t interval_ms, uint32_t sample_count, uint32_t max_keys, bool shared);
/** Initialise a table in caller-owned zeroed memory of sw_keyed_size() bytes, with a random
 * seed (sw_keyed_random_seed). @return SW_OK, SW_EINVAL, SW_ERANGE, or SW_EOS (no random) */
int sw_keyed_init(struct sw_kstate *st, int64_t interval_ms, uint32_t sample_count,
                  uint32_t max_keys, bool shared);
/** Give an empty table another seed (tests: a table whose seed an attacker knows).
 * @return SW_OK, SW_EINVAL (seed 0) or SW_ESTATE (the table holds keys) */
int sw_keyed_set_seed(const struct sw_kview *v, uint64_t seed);
/** Check a table read from a shared region: the layout init gives, every index in range
 * (holdings, the node's rings). @return SW_OK, SW_EINVAL, SW_ENOMEM */
int sw_keyed_validate(struct sw_kstate *st, size_t size, int64_t interval_ms,
                      uint32_t sample_count, uint32_t max_keys, bool shared);
struct sw_shm_layout;
/** A shared table's region callbacks (struct sw_shm_layout's init_state, check_state and
 * state_lock: sw_keyed_init, sw_keyed_validate and the lock of the table in the region, with
 * the layout's interval_ms, sample_count and max_keys, shared). */
int sw_keyed_region_init(void *state, const struct sw_shm_layout *lay);
int sw_keyed_region_check(void *state, const struct sw_shm_layout *lay);
sw_lock *sw_keyed_region_lock(void *state);
/** The header part of sw_keyed_validate (the layout fields only; reads nothing else): the
 * header of every stripe, so st is the whole table (size bytes), never a copy of one header.
 * @param size the bytes the whole table occupies @return SW_OK or SW_EINVAL */
int sw_keyed_validate_header(const struct sw_kstate *st, size_t size, int64_t interval_ms,
                             uint32_t sample_count, uint32_t max_keys, bool shared);
/** Bytes of a table's node (its statistics), at st->off_node. */
size_t sw_keyed_node_size(int64_t interval_ms, uint32_t sample_count);
/** Check a copy of a table's node (as sw_node_validate). @return SW_OK, SW_EINVAL, SW_ENOMEM */
int sw_keyed_node_validate(struct sw_node *node, int64_t interval_ms, uint32_t sample_count);
/** Restore what a process that died inside a critical section of stripe v->st may have left
 * half-written: per-key derived fields, free-entry marks, keys a lookup would not find
 * (damage only), the holdings, the node, the in-flight totals, the table's count of keys.
 * O(keys of the stripe). The stripe's lock held by the caller. */
void sw_keyed_repair(const struct sw_kview *v);
/** Fold a stripe's counts kept on its lock's line (hdr->hot, a copy of its header) into a
 * copy of its node (an observer reading a region without the lock). */
void sw_keyed_settle_copy(const struct sw_kstate *hdr, struct sw_node *node);
/** Give back the in-flight counts (per key) of the dead processes of a shared table.
 * @return the number of process slots freed */
uint32_t sw_keyed_reap(const struct sw_kview *v);
/** Free this process's slot when it holds nothing in flight. */
void sw_keyed_detach(const struct sw_kview *v);

/** What an object holds in flight of a key (0 when nothing). */
int64_t sw_kheld_get(const struct sw_kheld *h, uint64_t fp);
/** Forget everything (a fork() child's copy: the counts are the parent's); frees the cells. */
void sw_kheld_clear(struct sw_kheld *h);
/** Give back what a view's object still holds in flight as it goes, lock held (sw_keyed_lock):
 * per key, its count, at most what this process's holding of the key keeps beyond
 * `others(fp, ctx)` (what the process's other live objects hold of it: their counts stay),
 * and at most what the key's count keeps beyond every other process's holding and those
 * (counts released for it by another object or process are not given back twice); out of
 * the key, the process's holding and slot, and the total. Then *v->held is cleared. Gives
 * back nothing when this process no longer owns its slot, or without memory for the walk.
 * @return the count given back */
int64_t sw_keyed_give_back_locked(const struct sw_kview *v,
                                  int64_t (*others)(uint64_t fp, void *ctx), void *ctx);

/** Fill a rule from a limiter configuration (warm-up behaviors: SW_EINVAL). */
int sw_krule_init(struct sw_krule *r, const struct sw_limiter_cfg *cfg);
/** The threshold of a key under a rule: its override, else the rule's count.
 * @param limit receives the window limit @return the count */
double sw_krule_count(const struct sw_krule *r, uint64_t fp, double *limit);

/** Decide for a key, as sw_decide does for a private limiter (flags SW_F_TRY, SW_F_NO_BLOCK,
 * SW_F_ENTRY, SW_F_RETRY; prioritized is not supported). A new key takes a free entry or
 * evicts; when none can be evicted it is refused (BLOCK, retry_ns -1).
 * @return SW_OK, or SW_EINVAL for n < 1 */
int sw_keyed_decide(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns,
                    unsigned flags, struct sw_decision *out);
/* A key's decision made and not yet counted (sw_group.h; as struct sw_plan): a key not in
 * the table is not taken (nor a victim evicted) until the plan is committed. */
struct sw_kplan {
    struct sw_decision d;   /* the verdict, before shadow mode */
    uint64_t fp;
    int64_t n;
    int64_t t_ms;           /* the decision's ms */
    int64_t tn;             /* the table window's clamped ms */
    uint32_t entry;         /* the key's entry, or UINT32_MAX: taken on commit */
    int conc;
    int has_thr;
    unsigned flags;
    struct sw_throttle thr; /* throttle: the key's state after the reservation (has_thr) */
};
/** Plan a key's decision, the key's stripe's lock held (sw_keyed_lock_key_or_give_up, or all
 * of them: sw_keyed_lock):
 * as sw_keyed_decide (flags SW_F_TRY, SW_F_NO_BLOCK, kept by a shadow rule, SW_F_ENTRY,
 * SW_F_RETRY), counting and
 * taking nothing (the key's window may roll). End it before the lock is released.
 * @return SW_OK, or SW_EINVAL for n < 1 (nothing to end then) */
int sw_keyed_plan_locked(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns,
                         unsigned flags, struct sw_kplan *p);
/** End a key's plan, lock still held (as sw_plan_end_locked): commit takes the key's entry
 * (evicting as sw_keyed_decide would), its window count or throttle slot, its in-flight
 * count; a refusal counts BLOCK (unless SW_F_NO_BLOCK). Cannot fail. */
void sw_keyed_plan_end_locked(const struct sw_kview *v, const struct sw_kplan *p, bool commit);

/** End an entry of a key: SUCCESS + RT, EXCEPTION, or nothing; release n (never below 0). */
int sw_keyed_exit(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms, int outcome,
                  int64_t now_ns);
/** sw_keyed_exit from a call site that can give up waiting for the lock (sw_lock_wait_hook; a
 * stuck owner). @return SW_OK, SW_EINVAL, or SW_EBUSY when it gave up (nothing counted,
 * nothing given back: the exit may be retried) */
int sw_keyed_exit_or_give_up(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t rt_ms,
                             int outcome, int64_t now_ns);
/** Give back n in flight of a key. @return SW_OK, SW_ESTATE when fewer are in flight, or
 * SW_EBUSY when the wait for the lock gave up (sw_lock_wait_hook: nothing given back) */
int sw_keyed_release(const struct sw_kview *v, uint64_t fp, int64_t n);
/** In flight of one key (0 when absent). */
int64_t sw_keyed_in_flight(const struct sw_kview *v, uint64_t fp);
/** Count n more as admitted for a key now, without a decision (as sw_charge): PASS in the
 * key's window and the table's, or a throttle key's queue moved by the cost of n. A key not
 * held is taken (evicting as a decision would). @return SW_OK, SW_EINVAL (n < 0) or
 * SW_ESTATE (n > 0 on a concurrency table) */
int sw_keyed_charge(const struct sw_kview *v, uint64_t fp, int64_t n, int64_t now_ns);
/** Count n of event ev for the whole table (a retried request's final BLOCK). */
int sw_keyed_count(const struct sw_kview *v, uint32_t ev, int64_t n, int64_t now_ns);
/** sw_count_shadow_block on the table. @return SW_OK or SW_EINVAL */
int sw_keyed_count_shadow_block(const struct sw_kview *v, int64_t n, int64_t now_ns);
/** Statistics of the whole table (as sw_stats_read); `evicted` and `keys` too. */
void sw_keyed_stats(const struct sw_kview *v, int64_t now_ns, struct sw_stats *out,
                    int64_t *evicted, int64_t *keys);
/** Lifetime totals of the whole table (as sw_totals_read). */
void sw_keyed_totals(const struct sw_kview *v, struct sw_totals *out);
/** Take / release the table's locks (every stripe's, in order). Settings change under
 * them: a decision reads the rule (and its overrides) under its key's stripe's lock only, so
 * swapping `rule`'s fields (and freeing old overrides after the unlock) is safe. */
void sw_keyed_lock(const struct sw_kview *v);
/** sw_keyed_lock for a caller that can give up (sw_lock_wait_hook; a destructor).
 * @return false when it gave up (the lock is not held) */
bool sw_keyed_lock_or_give_up(const struct sw_kview *v);
void sw_keyed_unlock(const struct sw_kview *v);
/** Take the lock of the stripe that holds key fp (a group's member: sw_keyed_plan_locked and
 * sw_keyed_plan_end_locked of that key under it); repairs the stripe when taken over from a
 * dead process. @return false when the wait gave up (sw_lock_wait_hook; not held) */
bool sw_keyed_lock_key_or_give_up(const struct sw_kview *v, uint64_t fp);
void sw_keyed_unlock_key(const struct sw_kview *v, uint64_t fp);
/** The table's identity as a private group member orders it (its first lock's address). */
const void *sw_keyed_lock_id(const struct sw_kview *v);
/** Keys held now. */
uint32_t sw_keyed_len(const struct sw_kview *v);

/** The table's node (statistics). */
static inline struct sw_node *sw_keyed_node(struct sw_kstate *st)
{
    return (struct sw_node *)(void *)((char *)st + st->off_node);
}

#ifdef __cplusplus
}
#endif
#endif /* SW_KEYED_H */
