/* fuzz_adapt.c - mode 7 (first byte 6 mod 16): an adaptive concurrency limit (sw_adapt.c).
 *
 * Feeds an adaptive concurrency rule (sw_adapt.c; bbr and gradient, random min <= initial <=
 * max, a second view with other bounds on the same state) decisions, exits with any RT (0,
 * huge, INT64_MAX), CPU readings, clock jumps and crafted adapt-state bytes: the limit in
 * force stays in [min_limit, max_limit] (the learned one too while only one rule's bounds were
 * used and nothing was crafted), in flight is counted exactly and never above the limit that
 * admitted, and UBSan sees no UB.
 */
#include "fuzz.h"

static uint32_t a_bound(struct rd *r)
{
    static const uint32_t k[] = {1, 2, 3, 5, 10, 20, 100, SW_ADAPT_MAX_LIMIT};
    unsigned b = u8(r);
    return (b & 0x80u) ? 1u + (uint32_t)u16(r) : k[b & 7u];
}

/* An adaptive rule with random bounds min <= initial <= max; false when refused. */
static bool a_rule(struct rd *r, struct sw_rule *rule, const struct sw_limiter_cfg *c,
                   struct sw_adapt_cfg *ac)
{
    uint32_t x[3] = {a_bound(r), a_bound(r), a_bound(r)};
    for (int i = 0; i < 2; i++) /* sort */
        for (int j = 0; j < 2 - i; j++)
            if (x[j] > x[j + 1]) {
                uint32_t t = x[j];
                x[j] = x[j + 1];
                x[j + 1] = t;
            }
    unsigned b = u8(r);
    memset(ac, 0, sizeof *ac);
    ac->algo = (b & 1u) ? SW_ADAPT_GRADIENT : SW_ADAPT_BBR;
    ac->min_limit = x[0];
    ac->initial_limit = x[1];
    ac->max_limit = x[2];
    ac->cpu_threshold = (b & 6u) == 0 ? (int32_t)(u16(r) % 1001u) : SW_ADAPT_NO_CPU;
    if (sw_rule_init(rule, c) != SW_OK)
        FAIL("adaptive base rule refused");
    const char *param = NULL;
    if (sw_rule_set_adapt(rule, ac, &param) != SW_OK)
        FAIL("adaptive rule refused: %s", param != NULL ? param : "?");
    return true;
}

static void craft_adapt(struct rd *r, struct sw_adapt_state *s, int64_t near_ms)
{
    unsigned f = u8(r);
    int64_t v = crafted_value(r, 1000, near_ms);
    static const float kf[] = {0.0f, -1.0f, 1.0f, 0.5f, 1e6f, 1000001.0f, 3.4e38f, 1e-40f,
                               2.5f, 7.0f, 16777217.0f, -3.4e38f};
    float fv;
    switch ((f >> 4) % 4u) {
    case 0: fv = kf[v & 7]; break;
    case 1: fv = kf[8u + (unsigned)(v & 3)]; break;
    case 2: fv = (f & 1u) ? NAN : ((f & 2u) ? INFINITY : -INFINITY); break;
    default: {
        uint32_t bits = (uint32_t)v;
        memcpy(&fv, &bits, sizeof fv);
        break;
    }
    }
    switch (f % 11u) {
    case 0: s->next_ms = v; break;
    case 1: s->mark_ms = v; break;
    case 2: s->probe_ms = v; break;
    case 3: s->rt_sum_us = v; break;
    case 4: s->limit = fv; break;
    case 5: s->base_us = fv; break;
    case 6: s->samples = (uint32_t)v; break;
    case 7: s->cpu = (uint16_t)v; break;
    case 8: s->flags = (uint8_t)v; break;
    case 9: s->floors = (uint8_t)v; break;
    default: /* any bytes */
        for (size_t k = 0; k < sizeof *s; k++)
            if (u8(r) & 1u)
                ((uint8_t *)s)[k] = (uint8_t)u8(r);
        break;
    }
}

void run_adapt(struct rd *r)
{
    unsigned c1 = u8(r);
    struct sw_limiter_cfg c;
    sw_limiter_cfg_default(&c);
    c.grade = SW_GRADE_CONCURRENCY;
    c.behavior = SW_REJECT;
    c.count = 1;
    window_cfg_of(c1, k_interval, 2, &c.interval_ms, &c.sample_count);
    struct sw_rule rules[2];
    struct sw_adapt_cfg ac[2];
    a_rule(r, &rules[0], &c, &ac[0]);
    a_rule(r, &rules[1], &c, &ac[1]); /* another process's bounds on the same state */
    size_t size = sw_limiter_size(&c);
    struct sw_limiter *lim = malloc(size);
    if (lim == NULL)
        abort();
    EXPECT_EQ(sw_limiter_init(lim, &c), SW_OK, "limiter init");
    lim->rule = rules[0];
    struct sw_view v[2];
    sw_limiter_view(lim, &v[0]);
    v[1] = v[0];
    v[1].rule = &rules[1];
    struct sw_node *node = sw_limiter_node(lim);
    int64_t w_ms = c.interval_ms / (int64_t)c.sample_count;
    int64_t now = (int64_t)u32(r) * 1000;
    int64_t held = 0;    /* in flight, by the decisions and exits made */
    bool foreign = false; /* the state was crafted or learned under the other bounds */

    for (g_op = 0; r->i < r->n && g_op < 4000; g_op++) {
        unsigned op = u8(r), a = u8(r);
        unsigned w = (op & 0x80u) != 0; /* the view deciding */
        const struct sw_adapt_cfg *cf = &ac[w];
        if (w)
            foreign = true;
        switch (op % 10u) {
        case 0: case 1: case 2: case 3: { /* decide */
            int64_t n = (a & 0xc0u) == 0xc0u ? (int64_t)cf->max_limit + (a & 3u)
                                              : (int64_t)(a & 3u) + 1;
            unsigned flags = (a >> 2) & (SW_F_TRY | SW_F_NO_BLOCK | SW_F_ENTRY | SW_F_RETRY);
            struct sw_decision d;
            EXPECT_EQ(sw_decide(&v[w], n, now, flags, &d), SW_OK, "decide");
            double cap = sw_adapt_cap(cf, &node->adapt);
            if (cap < cf->min_limit || cap > cf->max_limit)
                FAIL("cap %g outside [%u, %u]", cap, cf->min_limit, cf->max_limit);
            if ((double)n > (double)cf->max_limit && d.verdict != SW_NEVER)
                FAIL("%lld above max_limit %u: verdict %d", (long long)n, cf->max_limit,
                     d.verdict);
            if (d.verdict == SW_PASS) {
                held += n;
                if ((double)held > cap)
                    FAIL("%lld in flight, the limit in force %g", (long long)held, cap);
            }
            if (!foreign && (node->adapt.flags & SW_ADAPT_PHASE) != SW_ADAPT_FRESH) {
                float l = node->adapt.limit;
                if (!(l >= (float)cf->min_limit && l <= (float)cf->max_limit))
                    FAIL("learned limit %g outside [%u, %u]", (double)l, cf->min_limit,
                         cf->max_limit);
            }
            break;
        }
        case 4: case 5: case 6: { /* an exit with any RT */
            int64_t n = 1 + (int64_t)(a & 3u);
            int64_t rt;
            switch ((a >> 2) & 7u) {
            case 0: rt = 0; break;
            case 1: rt = (int64_t)u8(r) * 1000000; break;
            case 2: rt = (int64_t)u16(r) * 1000; break;
            case 3: rt = INT64_MAX - (int64_t)u8(r); break;
            case 4: rt = (int64_t)u32(r) * 1000000; break;
            case 5: rt = -1 - (int64_t)u8(r); break;
            default: rt = (int64_t)u16(r) * 100000; break;
            }
            int outcome = (int)((a >> 5) % 3u);
            int rc = sw_exit_rt(&v[w], n, rt, outcome, now);
            if (rt < 0) {
                EXPECT_EQ(rc, SW_EINVAL, "exit of a negative RT");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "exit");
            held = held > n ? held - n : 0;
            break;
        }
        case 7: { /* the CPU use, any permille */
            static const int64_t k_cpu[] = {0, 500, 800, 1000, 1001, -1, INT64_MAX, INT64_MIN};
            sw_view_set_cpu(&v[w], (a & 8u) ? (int64_t)u16(r) : k_cpu[a & 7u]);
            break;
        }
        case 8: /* crafted adapt-state bytes (a region is input), or a read */
            if (a & 1u) {
                craft_adapt(r, &node->adapt, ms_of(now));
                foreign = true;
            } else {
                int64_t l = sw_adapt_limit_now(&v[w], (a & 2u) ? SW_NOW : now);
                if (l < cf->min_limit || l > cf->max_limit)
                    FAIL("limit_now %lld outside [%u, %u]", (long long)l, cf->min_limit,
                         cf->max_limit);
                l = sw_adapt_limit_of(cf, node);
                if (l < cf->min_limit || l > cf->max_limit)
                    FAIL("limit_of %lld outside [%u, %u]", (long long)l, cf->min_limit,
                         cf->max_limit);
            }
            break;
        default:
            now = move_time(r, now, w_ms);
            break;
        }
        if (g_trace)
            fprintf(stderr, "adapt op %d (%u) now=%lld: in flight %lld, limit %g, phase %u\n",
                    g_op, op % 10u, (long long)now, (long long)held, (double)node->adapt.limit,
                    node->adapt.flags & SW_ADAPT_PHASE);
        EXPECT_EQ(sw_in_flight(&v[0]), held, "in flight");
    }
    free(lim);
}
