/* fuzz_window.c - mode 1 (an even first byte no other mode takes): a standalone window
 *
 * (sw_leap.c) with an optional borrow ring (sw_borrow.c).
 *
 * The configuration picks the bucket width and sample count; the operations (adds with and
 * without an RT, reads of the current / previous bucket and the window sum, min RT, grants
 * into the future ring, waiting) are interleaved with clock moves. Every result is compared
 * with the ring model of fuzz_common.c; besides: no lost count (while nothing slid out, the
 * window holds every add), counts never negative, and the running totals and the future ring's
 * waiting sum equal a re-sum of the slots after every call.
 */
#include "fuzz.h"

/* Account an add that landed in the model's newest bucket (for the no-lost-count check). */
static void note_add(int64_t *added, int64_t *first, int64_t *last_add, const struct mleap *m,
                     uint32_t ev, int64_t n)
{
    int64_t b = m->newest;
    if (*first == M_EMPTY || b - *last_add >= m->interval) {
        memset(added, 0, sizeof(int64_t) * SW_MAX_EVENTS); /* every earlier add slid out */
        *first = b;
    }
    *last_add = b;
    added[ev] += n;
}

static const int64_t k_w[] = {1, 7, 100, 250, 500, 1000, 3, 60};
static const uint32_t k_sc[] = {1, 2, 3, 4, 5, 8, 10, 2};

void run_window(struct rd *r)
{
    unsigned c0 = u8(r), c1 = u8(r);
    uint32_t sc = k_sc[c0 & 7u];
    int64_t w = k_w[(c0 >> 3) & 7u];
    bool has_rt = (c1 & 1u) != 0;
    uint32_t nev = has_rt ? SW_EV_DEFAULT_COUNT : 1u + ((c1 >> 1) & 7u);
    bool borrow = (c1 & 0x10u) != 0;
    struct sw_leap_cfg cfg = {w * (int64_t)sc, sc, nev, has_rt}, fcfg;
    if (sw_leap_check(&cfg) != SW_OK)
        FAIL("window cfg refused");
    sw_borrow_cfg(&cfg, &fcfg);
    struct sw_leap *leap = malloc(sw_leap_size(&cfg));
    struct sw_leap *fut = borrow ? malloc(sw_leap_size(&fcfg)) : NULL;
    if (leap == NULL || (borrow && fut == NULL))
        abort();
    EXPECT_EQ(sw_leap_init(leap, &cfg), SW_OK, "leap init");
    if (fut != NULL)
        EXPECT_EQ(sw_leap_init(fut, &fcfg), SW_OK, "future init");
    sw_lock lock;
    sw_lock_init(&lock);
    struct sw_window win = {&lock, leap, fut, SW_LOCK_PRIVATE, NULL, NULL, NULL, NULL, NULL};
    struct mleap *m = malloc(sizeof *m);
    if (m == NULL)
        abort();
    m_init(m, cfg.interval_ms, sc, nev, borrow);

    /* no lost count: the adds since `first`, the bucket of the first add after the window
     * was last empty; while start(t) - first < interval nothing of them slid out */
    int64_t added[SW_MAX_EVENTS] = {0}, first = M_EMPTY, last_add = M_EMPTY;
    int64_t now = (int64_t)u32(r) * 1000;
    int64_t *out = malloc(sizeof(int64_t) * sc * (2u + nev));
    if (out == NULL)
        abort();
    for (g_op = 0; r->i < r->n && g_op < 4000; g_op++) {
        unsigned op = u8(r);
        uint32_t ev = u8(r) % (nev + 1u); /* nev: an unknown event */
        int64_t n = (int64_t)(u8(r) & 0x3fu);
        switch (op % 10u) {
        case 0: case 1: case 2: {
            int rc = sw_window_add(&win, ev, n, now);
            if (ev >= nev) {
                EXPECT_EQ(rc, SW_EEVENT, "add unknown event");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "add");
            m_add(m, ev, n, ms_of(now));
            note_add(added, &first, &last_add, m, ev, n);
            break;
        }
        case 3: case 4: {
            int which = (int)(op >> 4) % 3;
            int64_t v = -1;
            int rc = sw_window_read(&win, which, ev, now, &v);
            if (ev >= nev) {
                EXPECT_EQ(rc, SW_EEVENT, "read unknown event");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "read");
            int64_t e = which == SW_READ_SUM       ? m_sum(m, ev, ms_of(now))
                        : which == SW_READ_CURRENT ? m_current(m, ev, ms_of(now))
                                                   : m_previous(m, ev, ms_of(now));
            if (v < 0)
                FAIL("negative count %lld", (long long)v);
            EXPECT_EQ(v, e, which == 0 ? "sum" : which == 1 ? "current" : "previous");
            /* (granted passes join PASS when their bucket starts: not adds) */
            if (which == SW_READ_SUM && first != M_EMPTY && !(borrow && ev == SW_EV_PASS) &&
                m_start(m, m_clamp(m, ms_of(now))) - first < m->interval)
                EXPECT_EQ(v, added[ev], "no lost count: sum == adds");
            break;
        }
        case 5: {
            int64_t rt = (int64_t)u8(r) * ((op & 0x80u) ? 40 : 1);
            int rc = sw_window_add_rt(&win, rt, now);
            if (!has_rt) {
                EXPECT_EQ(rc, SW_ENORT, "add_rt without RT");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "add_rt");
            m_add_rt(m, rt, ms_of(now));
            note_add(added, &first, &last_add, m, SW_EV_RT, rt);
            break;
        }
        case 6: {
            int64_t mn = -1, rs = -1, su = -1;
            int rc = sw_window_rt(&win, now, &mn, &rs, &su);
            if (!has_rt) {
                EXPECT_EQ(rc, SW_ENORT, "rt without RT");
                break;
            }
            EXPECT_EQ(rc, SW_OK, "rt");
            EXPECT_EQ(mn, m_min_rt(m, ms_of(now)), "min_rt");
            EXPECT_EQ(rs, m_sum(m, SW_EV_RT, ms_of(now)), "rt sum");
            EXPECT_EQ(su, m_sum(m, SW_EV_SUCCESS, ms_of(now)), "success");
            break;
        }
        case 7: {
            uint32_t k = sw_window_buckets(&win, now, out);
            int64_t t = m_clamp(m, ms_of(now));
            m_touch(m, t);
            int64_t cur = m_start(m, t);
            uint32_t j = 0;
            for (int64_t q = (int64_t)sc - 1; q >= 0; q--) {
                int64_t s = cur - q * w;
                if (s < 0)
                    continue;
                const int64_t *o = out + (size_t)j * (2u + nev);
                const struct mbucket *b = m_held(m, s);
                EXPECT_EQ(o[SW_SLOT_START], s, "bucket start");
                EXPECT_EQ(o[SW_SLOT_MIN_RT], b ? b->min_rt : SW_MIN_RT_INIT, "bucket min_rt");
                for (uint32_t e = 0; e < nev; e++)
                    EXPECT_EQ(o[SW_SLOT_COUNTS + e], b ? b->c[e] : 0, "bucket count");
                j++;
            }
            EXPECT_EQ(k, j, "bucket count returned");
            break;
        }
        case 8:
            if (fut != NULL && (op & 0x10u)) {
                /* grant ahead for the next bucket, as try-occupy does */
                sw_lock_acquire(&lock);
                int64_t t = sw_leap_clamp(leap, ms_of(now));
                int64_t T = t + (w - t % w);
                sw_borrow_add(fut, T, n);
                int64_t wt = sw_borrow_waiting(fut, t);
                sw_lock_release(&lock);
                int64_t mt = m_clamp(m, ms_of(now));
                EXPECT_EQ(t, mt, "clamp");
                m_grant(m, T, n);
                EXPECT_EQ(wt, m_waiting(m, mt), "waiting");
            } else if ((op & 0x70u) == 0x70u) {
                sw_window_reset(&win);
                m_reset(m);
                memset(added, 0, sizeof added);
                first = last_add = M_EMPTY;
            }
            break;
        default:
            now = move_time(r, now, w);
            break;
        }
        check_totals(leap);
        if (fut != NULL) {
            int64_t t = leap->newest == SW_LEAP_EMPTY ? 0 : leap->newest;
            check_waiting(fut, t);
            check_waiting(fut, t + w - 1);
            check_waiting(fut, t - (int64_t)(op & 7u) * w);
            check_waiting(fut, ms_of(now));
        }
    }
    free(out);
    free(m);
    free(leap);
    free(fut);
}
