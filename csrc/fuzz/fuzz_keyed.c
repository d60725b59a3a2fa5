/* fuzz_keyed.c - mode 3 (first byte 14 mod 16): a keyed table (sw_keyed.c).
 *
 * Drives a keyed table (sw_keyed.c) with keys crowded on a few homes: while it has room for
 * every key, each decision equals a private limiter's for that key (the limiter being the
 * reference, itself checked by fuzz_limiter.c); always, every key held is where a lookup finds
 * it, len() and `evicted` add up, no key in flight is evicted; and programs may write any
 * bytes into entries and holdings (a region is untrusted): nothing crashes or overflows, and a
 * repair leaves a sound table.
 */
#include "fuzz.h"
#include "tests/ktable.h"

#define K_KEYS 24

/* Every key held is reachable from its home and held once; n_live counts them. */
static void k_check_sound(struct sw_kstate *st)
{
    char why[96];
    if (!ktable_sound(st, why, sizeof why))
        FAIL("%s", why);
    if (st->n_live > st->max_keys)
        FAIL("%u keys held, max %u", st->n_live, st->max_keys);
}

void run_keyed(struct rd *r)
{
    static const int modes[4][2] = {{SW_GRADE_QPS, SW_REJECT},
                                    {SW_GRADE_CONCURRENCY, SW_REJECT},
                                    {SW_GRADE_QPS, SW_THROTTLE},
                                    {SW_GRADE_QPS, SW_REJECT}};
    unsigned c0 = u8(r), c1 = u8(r), c2 = u8(r);
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = modes[c0 & 3u][0];
    c.behavior = modes[c0 & 3u][1];
    c.count = k_count[(c0 >> 2) & 15u];
    window_cfg_of(c1, k_interval, 2, &c.interval_ms, &c.sample_count);
    c.max_queueing_ms = k_queue[(c1 >> 6) & 3u];
    uint32_t max_keys = 1u + (c2 & 15u) + ((c2 & 0x80u) ? 16u : 0u);
    uint32_t n_keys = 1u + (u8(r) % K_KEYS), homes = 1u + (u8(r) & 3u);
    struct sw_krule rule;
    if (sw_krule_init(&rule, &c) != SW_OK)
        return;
    size_t size = sw_keyed_size(c.interval_ms, c.sample_count, max_keys, false);
    if (size == 0)
        return;
    struct sw_kstate *st = calloc(1, size);
    struct sw_limiter *lim[K_KEYS] = {0};
    if (st == NULL)
        abort();
    EXPECT_EQ(sw_keyed_init(st, c.interval_ms, c.sample_count, max_keys, false), SW_OK, "init");
    struct sw_kview v = {st, &rule, SW_LOCK_PRIVATE, NULL, 0, -1, NULL};
    /* keys crowded on `homes` homes just before the table's end (runs wrap around) */
    uint64_t fps[K_KEYS];
    for (uint32_t j = 0; j < n_keys; j++) {
        uint32_t h = (st->cap - 2u + (u8(r) % homes)) % st->cap;
        fps[j] = (uint64_t)((((unsigned __int128)h << 64) + st->cap - 1u) / st->cap) + 1u + j;
    }
    bool model = n_keys <= max_keys; /* room for every key: private limiters decide alike */
    if (model)
        for (uint32_t j = 0; j < n_keys; j++) {
            lim[j] = malloc(sw_limiter_size(&c));
            if (lim[j] == NULL)
                abort();
            EXPECT_EQ(sw_limiter_init(lim[j], &c), SW_OK, "limiter init");
        }
    int64_t now = (int64_t)u32(r) * 1000, w_ms = c.interval_ms / (int64_t)c.sample_count;
    long inserted = 0;
    bool trusted = true; /* no byte written from outside */
    for (g_op = 0; r->i < r->n && g_op < 3000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        uint32_t j = a % n_keys;
        switch (op % 8u) {
        case 0: case 1: case 2: {
            int64_t n = (int64_t)(a >> 6) + 1;
            unsigned flags = u8(r) & (SW_F_TRY | SW_F_RETRY | SW_F_ENTRY | SW_F_NO_BLOCK);
            bool was = kentry_find(st, fps[j]) >= 0;
            int64_t before = was ? kentry_of(st, (uint32_t)kentry_find(st, fps[j]))->in_flight : 0;
            uint32_t len0 = st->n_live;
            struct sw_decision d, e;
            EXPECT_EQ(sw_keyed_decide(&v, fps[j], n, now, flags, &d), SW_OK, "keyed decide");
            int at = kentry_find(st, fps[j]);
            inserted += !was && at >= 0;
            if (!was && at >= 0 && st->n_live == len0 && len0 == max_keys && model)
                FAIL("evicted with room for every key");
            if (model) {
                EXPECT_EQ(sw_limiter_decide(lim[j], n, now, flags, &e), SW_OK, "decide");
                EXPECT_EQ(d.verdict, e.verdict, "keyed verdict");
                EXPECT_EQ(d.wait_ns, e.wait_ns, "keyed wait");
                EXPECT_EQ(d.retry_ns, e.retry_ns, "keyed retry");
            }
            if (trusted && at >= 0 && d.verdict == SW_PASS &&
                (c.grade == SW_GRADE_CONCURRENCY || (flags & SW_F_ENTRY)))
                EXPECT_EQ(kentry_of(st, (uint32_t)at)->in_flight, sw_sat_add(before, n),
                          "in flight taken");
            break;
        }
        case 3: {
            int64_t n = (int64_t)(a >> 6);
            int out = (int)(u8(r) % 3u);
            if (model && kentry_find(st, fps[j]) < 0)
                break; /* an exit follows an entry (a private limiter would see its time) */
            EXPECT_EQ(sw_keyed_exit(&v, fps[j], n, 5, out, now), SW_OK, "keyed exit");
            if (model)
                sw_limiter_exit(lim[j], n, 5, out, now);
            break;
        }
        case 4: {
            int64_t have = sw_keyed_in_flight(&v, fps[j]);
            if (model)
                EXPECT_EQ(have, sw_limiter_in_flight(lim[j]), "keyed in flight");
            if (have > 0) {
                EXPECT_EQ(sw_keyed_release(&v, fps[j], 1), SW_OK, "keyed release");
                if (model)
                    EXPECT_EQ(sw_limiter_release(lim[j], 1), SW_OK, "release");
            }
            break;
        }
        case 5:
            now = move_time(r, now, w_ms);
            break;
        case 6: {
            /* untrusted bytes: any field of any entry (the model is off from here) */
            struct sw_kentry *e = kentry_of(st, u16(r) % st->cap);
            uint64_t x = (uint64_t)u32(r) << 32 | u32(r);
            switch (a % 7u) {
            case 0: e->fp = (a & 0x80u) ? fps[j] : x; break;
            case 1: e->flags = (uint32_t)x; break;
            case 2: e->in_flight = (int64_t)x; break;
            case 3: e->a = (int64_t)x; break;
            case 4: e->counts[x % c.sample_count] = (int64_t)(x * 0x9e3779b97f4a7c15u); break;
            case 5: e->last_use = (uint32_t)x; break;
            default: st->sweep = x; st->tick = x >> 7; break;
            }
            if ((a % 7u) < 5u)
                model = trusted = false;
            break;
        }
        default: {
            sw_keyed_lock(&v);
            sw_keyed_repair(&v);
            sw_keyed_unlock(&v);
            k_check_sound(st);
            uint32_t len = sw_keyed_len(&v);
            sw_keyed_lock(&v);
            sw_keyed_repair(&v);
            sw_keyed_unlock(&v);
            EXPECT_EQ(sw_keyed_len(&v), len, "a second repair keeps every key");
            break;
        }
        }
        if (trusted) {
            k_check_sound(st);
            EXPECT_EQ(st->evicted, inserted - (long)st->n_live, "evicted");
        }
    }
    for (uint32_t j = 0; j < n_keys; j++)
        free(lim[j]);
    free(st);
}
