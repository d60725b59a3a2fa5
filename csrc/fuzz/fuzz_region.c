/* fuzz_region.c - mode 4 (first byte 12 mod 16): a crafted limiter region (sw_shm.c).
 *
 * Crafts a limiter's region file: a process uses it, then pairs of fields of its header,
 * state, rings and process slots are set to chosen values (0, -1, INT64_MAX and a bucket start
 * within a window of it, INT64_MIN, the largest ring time and one past it, a dead or live
 * token, any bytes), and a second process attaches (every check of an attach, the repair) and
 * decides, and an observer copies it (as read_region does): a crafted region is refused or
 * works, never a crash, and in-flight is never below 0 nor admitted past a concurrency limit.
 */
#include "fuzz.h"
#include "tests/lim_region.h"

/* Where the fields are, taken from the region as made (crafted fields never move them). */
struct fz_map {
    struct sw_node *node;
    struct sw_leap *rings[3];
    int64_t window_ms[3];
    uint32_t sample_count[3], n_events[3];
    size_t state_words;
};

static void fz_map_of(struct sw_shm *s, struct fz_map *m)
{
    m->node = sw_lstate_node(s->state);
    m->rings[0] = sw_node_sec(m->node);
    m->rings[1] = sw_node_fut(m->node);
    m->rings[2] = sw_node_min(m->node);
    for (int i = 0; i < 3; i++) {
        m->window_ms[i] = m->rings[i]->window_ms;
        m->sample_count[i] = m->rings[i]->sample_count;
        m->n_events[i] = m->rings[i]->n_events;
    }
    m->state_words = (size_t)s->hdr->state_size / 8u;
}

/* Write a crafted value into one field of the region (chosen by the next bytes). */
static void craft_field(struct rd *r, struct sw_shm *s, const struct fz_map *m, int64_t near)
{
    struct sw_shm_header *h = s->hdr;
    struct sw_lstate *st = s->state;
    struct sw_node *node = m->node;
    unsigned f = u8(r), g = u8(r);
    unsigned ri = g % 3u;
    struct sw_leap *l = m->rings[ri];
    uint32_t sc = m->sample_count[ri], nev = m->n_events[ri];
    int64_t *slot = l->slots + (size_t)(g % sc) * (2u + nev);
    int64_t v = crafted_value(r, m->window_ms[ri], near);
    uint64_t dead = ((uint64_t)4194301u << 32) | 7u; /* a pid above the kernel's maximum */
    switch (f % 24u) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4: craft_leap_word(l, f % 24u, v); break; /* a ring's indices */
    case 5: slot[SW_SLOT_START] = v; break;
    case 6: slot[SW_SLOT_COUNTS + (g >> 4) % nev] = v; break;
    case 7: slot[SW_SLOT_MIN_RT] = v; break;
    case 8: l->slots[(size_t)sc * (2u + nev) + (g >> 2) % (2u * nev)] = v; break;
    case 9: craft_leap_word(l, 5u + g % 5u, v); break; /* a ring's layout words */
    case 10: node->in_flight = v; break;
    case 11: node->totals[g % SW_EV_DEFAULT_COUNT] = v; break;
    case 12: st->hot[g % SW_HOT_WORDS] = v; break;
    case 13:
        switch (g % 6u) {
        case 0: st->warm.stored = v; break;
        case 1: st->warm.last_filled_ms = v; break;
        case 2: st->warm.paid_until_ms = v; break;
        case 3: st->thr.last_ns = v; break;
        case 4: st->thr.has_last = (uint32_t)v; break;
        default: st->thr.saturated = (uint32_t)v; break;
        }
        break;
    case 14: st->off_node = (uint32_t)v; break;
    case 15: st->size = (uint32_t)v; break;
    case 16: s->slots[g % s->n_slots].in_flight = v; break;
    case 17: /* a slot's owner: free, dead, or this (live) process */
        atomic_store(&s->slots[g % s->n_slots].token,
                     (g & 3u) == 0 ? 0u : (g & 3u) == 1 ? dead : sw_proc_token());
        break;
    case 18: /* a lock left by a dead owner (a live one is another matter: a wait) */
        atomic_store(&st->lock.word, (g & 1u) ? dead : 0u);
        break;
    case 19: atomic_store(&st->hot_seq, (uint64_t)v); break;
    case 20: /* the header's words */
        switch (g % 8u) {
        case 0: h->interval_ms = v; break;
        case 1: h->sample_count = (uint32_t)v; break;
        case 2: h->n_slots = (uint32_t)v; break;
        case 3: h->off_state = (uint64_t)v; break;
        case 4: h->state_size = (uint64_t)v; break;
        case 5: h->total_size = (uint64_t)v; break;
        case 6: h->kind = (uint32_t)v; break;
        default: h->off_slots = (uint64_t)v; break;
        }
        break;
    case 21: /* another boot's region */
        snprintf(h->boot_id, sizeof h->boot_id, "%08x-0000-0000-0000-000000000000", g);
        break;
    case 22: atomic_store(&h->next_reap_ms, v); break;
    default: { /* any aligned word of the state */
        size_t w = ((size_t)g << 8 | u8(r)) % m->state_words;
        /* not the lock word: one naming a live process (or none) is waited for, which is
         * the lock's business (its timeouts), not a region check's */
        if (w != offsetof(struct sw_lstate, lock) / 8u)
            ((int64_t *)(void *)st)[w] = v;
        break;
    }
    }
}

/* An observer's copy (read_region): read without the lock, validated, repaired, read. */
static int mem_read(void *ctx, size_t off, size_t len, void *dst)
{
    memcpy(dst, (const char *)ctx + off, len);
    return 0;
}

static void observe_copy(struct sw_shm *s, const struct sw_shm_layout *lay, int64_t now)
{
    struct sw_shm_header hcopy;
    struct sw_shm_error err;
    memcpy(&hcopy, s->hdr, sizeof hcopy);
    if (sw_shm_check_header(&hcopy, s->size, "fuzz", &err) != SW_OK)
        return;
    size_t need = sw_lstate_size(hcopy.interval_ms, hcopy.sample_count);
    if (need == 0 || need != hcopy.state_size)
        return;
    struct sw_lstate *copy = malloc(need);
    struct sw_proc_slot *slots = calloc(hcopy.n_slots + 1u, sizeof *slots);
    if (copy == NULL || slots == NULL)
        abort();
    bool hot_ok;
    struct sw_lstate_src src = {mem_read, s->base, (size_t)hcopy.off_state,
                                (size_t)hcopy.off_slots, hcopy.n_slots};
    if (sw_lstate_copy(copy, need, &src, slots, 2, &hot_ok) == 0 &&
        sw_lstate_validate(copy, need, hcopy.interval_ms, hcopy.sample_count) == SW_OK) {
        struct sw_node *node = sw_lstate_node(copy);
        sw_node_repair(node);
        sw_lstate_settle_copy(copy, hot_ok, slots, hcopy.n_slots);
        struct sw_stats stats;
        struct sw_totals tot;
        sw_node_stats(node, now, &stats);
        sw_node_totals(node, &tot);
        if (stats.in_flight < 0)
            FAIL("observer: in flight %lld", (long long)stats.in_flight);
    }
    free(slots);
    free(copy);
    (void)lay;
}

void run_region(struct rd *r)
{
    static char path[64];
    if (path[0] == '\0')
        snprintf(path, sizeof path, "/tmp/sw-fuzz-region-%ld", (long)getpid());
    unlink(path);
    unsigned c0 = u8(r), c1 = u8(r);
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = (c0 & 1u) ? SW_GRADE_CONCURRENCY : SW_GRADE_QPS;
    c.behavior = c.grade == SW_GRADE_CONCURRENCY ? SW_REJECT : (int)((c0 >> 1) & 3u);
    c.count = k_count[(c0 >> 3) & 15u];
    window_cfg_of(c1, k_interval, 2, &c.interval_ms, &c.sample_count);
    struct sw_rule rule;
    if (sw_limiter_check(&c) != SW_OK || sw_rule_init(&rule, &c) != SW_OK)
        return;
    struct sw_shm_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.kind = SW_KIND_LIMITER;
    lay.interval_ms = c.interval_ms;
    lay.sample_count = c.sample_count;
    lay.n_slots = 8; /* few slots: crafted ones are hit often */
    lay.state_size = sw_lstate_size(c.interval_ms, c.sample_count);
    lay.init_state = lim_init_state;
    lay.check_state = lim_check_state;
    lay.state_lock = lim_state_lock;
    struct sw_shm a, b;
    struct sw_shm_error err;
    if (sw_shm_open(&a, path, &lay, &err) != SW_OK)
        FAIL("cannot create %s: %s", path, err.msg);
    struct sw_view va = {a.state, &rule, SW_LOCK_PROCESS, a.slots, a.n_slots, -1, NULL, false};
    va.my_slot = sw_shm_claim_slot(&a, sw_proc_token());
    struct fz_map map;
    fz_map_of(&a, &map);
    /* a process uses it */
    int64_t now = (int64_t)u32(r) * 1000000 + 1;
    struct sw_decision d;
    for (unsigned k = u8(r) % 16u; k > 0; k--) {
        now += (int64_t)u8(r) * 3000000;
        (void)sw_decide(&va, 1 + (int64_t)(u8(r) & 3u), now, SW_F_TRY | SW_F_ENTRY, &d);
    }
    /* pairs of fields crafted, then a second process attaches, decides, an observer reads */
    for (g_op = 0; r->i < r->n && g_op < 8; g_op++) {
        int64_t near = sw_ms_of_ns(now);
        craft_field(r, &a, &map, near);
        craft_field(r, &a, &map, near);
        observe_copy(&a, &lay, now);
        int rc = sw_shm_open(&b, path, &lay, &err);
        if (rc != SW_OK) {
            if (rc != SW_EINVAL && rc != SW_EOS)
                FAIL("attach: %d %s", rc, err.msg);
            break; /* refused: the region stays as crafted */
        }
        struct sw_view vb = {b.state, &rule, SW_LOCK_PROCESS, b.slots, b.n_slots, -1, NULL, false};
        vb.my_slot = sw_shm_claim_slot(&b, sw_proc_token());
        sw_lstate_check_repair(&vb);
        int64_t held = sw_in_flight(&vb);
        if (held < 0)
            FAIL("in flight %lld after the repair", (long long)held);
        int64_t passed = 0;
        for (unsigned k = 0; k < 4u; k++) {
            now += (int64_t)u8(r) * 1000000;
            EXPECT_EQ(sw_decide(&vb, 1, now, SW_F_TRY | SW_F_ENTRY, &d), SW_OK, "decide");
            passed += d.verdict == SW_PASS;
        }
        if (c.grade == SW_GRADE_CONCURRENCY && !rule.shadow) {
            double room = c.count - (double)held;
            if ((double)passed > (room < 0 ? 0 : room))
                FAIL("%lld admitted with %lld in flight, limit %g", (long long)passed,
                     (long long)held, c.count);
        }
        if (sw_in_flight(&vb) < 0)
            FAIL("in flight below 0");
        (void)sw_exit(&vb, 1, 1, SW_OUT_SUCCESS, now);
        (void)sw_lstate_reap(&vb);
        struct sw_stats stats;
        sw_stats_read(&vb, now, &stats);
        if (stats.in_flight < 0)
            FAIL("stats: in flight below 0");
        sw_shm_close(&b);
    }
    sw_shm_close(&a);
    unlink(path);
}
