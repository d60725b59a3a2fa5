/* bench_keyed.c - the floor under a keyed decision at 1M keys: a raw DRAM random access
 * (a dependent pointer chase through 1 GiB of huge-page memory, one miss a step), the same
 * chase touching two lines in a row (what an entry spanning a line pair costs), and
 * sw_keyed_decide over 1M keys visited in a shuffled order next to a private limiter's
 * decision (fingerprints precomputed: no Python, no hashing).
 * Build and run: make -C csrc bench-keyed */
#include "sw_keyed.h"
#include "sw_limiter.h"
#include "sw_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHASE_BYTES (UINT64_C(1) << 30)
#define LINE 64u
#define STEPS 4000000u
#define KEYS 1000000u
#define CALLS 1000000u
#define ROUNDS 11

static uint64_t rng = UINT64_C(0x2545f4914f6cdd1d);

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *huge_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    (void)madvise(p, bytes, MADV_HUGEPAGE);
    memset(p, 0, bytes);
    return p;
}

/* ns per step of a dependent chase through the lines of buf in a random cyclic order;
 * `pair`: each step also reads the next line (an entry spanning two lines). */
static double chase(uint64_t *buf, size_t lines, int pair)
{
    uint32_t *order = malloc(lines * sizeof *order);
    if (order == NULL)
        return -1;
    for (uint32_t i = 0; i < lines; i++)
        order[i] = i;
    /* pair mode: even lines only, so that line+1 is never another step's line */
    size_t n = pair ? lines / 2 : lines;
    if (pair)
        for (uint32_t i = 0; i < n; i++)
            order[i] = 2u * i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(next_rand() % (i + 1));
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    const size_t w = LINE / 8u;
    for (size_t i = 0; i < n; i++)
        buf[(size_t)order[i] * w] = (uint64_t)order[(i + 1) % n] * w;
    free(order);
    uint64_t p = 0, sink = 0;
    int64_t t0 = sw_time_ns();
    for (uint32_t s = 0; s < STEPS; s++) {
        if (pair)
            sink += buf[p + w]; /* independent of the chase: the second line */
        p = buf[p];
    }
    int64_t t1 = sw_time_ns();
    return (double)(t1 - t0) / STEPS + (double)((p + sink) & 1u) * 1e-12;
}

int main(void)
{
    uint64_t *buf = huge_alloc(CHASE_BYTES);
    if (buf == NULL)
        return 1;
    size_t lines = CHASE_BYTES / LINE;
    for (int r = 0; r < (getenv("BENCH_KEYED_NO_DRAM") ? 0 : 3); r++)
        printf("DRAM: dependent random line reads (1 GiB, THP): %.1f ns a step; "
               "two adjacent lines a step: %.1f ns\n",
               chase(buf, lines, 0), chase(buf, lines, 1));
    munmap(buf, CHASE_BYTES);

    struct sw_limiter_cfg cfg;
    sw_limiter_cfg_default(&cfg);
    cfg.count = 1e9; /* every call admitted */
    size_t sz = sw_keyed_size(cfg.interval_ms, cfg.sample_count, KEYS, false);
    struct sw_kstate *st = huge_alloc(sz);
    struct sw_krule rule;
    struct sw_limiter *lim = calloc(1, sw_limiter_size(&cfg));
    uint64_t *fps = malloc(KEYS * sizeof *fps);
    if (st == NULL || lim == NULL || fps == NULL || sw_limiter_init(lim, &cfg) != SW_OK ||
        sw_keyed_init(st, cfg.interval_ms, cfg.sample_count, KEYS, false) != SW_OK ||
        sw_krule_init(&rule, &cfg) != SW_OK)
        return 1;
    struct sw_kview v = {st, &rule, SW_LOCK_PRIVATE, NULL, 0, -1, NULL};
    struct sw_decision d;
    int64_t now = INT64_C(5000000000);
    for (uint32_t i = 0; i < KEYS; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "user-%u", i);
        fps[i] = sw_keyed_hash(st->seed, SW_KEY_STR, key, (size_t)len);
        sw_keyed_decide(&v, fps[i], 1, now, SW_F_TRY, &d); /* inserted in id order */
    }
    for (size_t i = KEYS - 1; i > 0; i--) {
        size_t j = (size_t)(next_rand() % (i + 1));
        uint64_t t = fps[i];
        fps[i] = fps[j];
        fps[j] = t;
    }
    printf("table: %zu bytes, %.1f bytes a key\n", sz, (double)sz / KEYS);
    double kt[ROUNDS], pt[ROUNDS];
    int64_t pass = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int64_t t0 = sw_time_ns();
        for (uint32_t c = 0; c < CALLS; c++) {
            sw_keyed_decide(&v, fps[c % KEYS], 1, now, SW_F_TRY, &d);
            pass += d.verdict == SW_PASS;
        }
        int64_t t1 = sw_time_ns();
        for (uint32_t c = 0; c < CALLS; c++) {
            (void)fps[c % KEYS];
            sw_limiter_decide(lim, 1, now, SW_F_TRY, &d);
            pass += d.verdict == SW_PASS;
        }
        int64_t t2 = sw_time_ns();
        kt[r] = (double)(t1 - t0) / CALLS;
        pt[r] = (double)(t2 - t1) / CALLS;
        now += INT64_C(1000000000);
    }
    qsort(kt, ROUNDS, sizeof kt[0], cmp_double);
    qsort(pt, ROUNDS, sizeof pt[0], cmp_double);
    printf("sw_keyed_decide at 1M keys (shuffled): median %.1f ns (min %.1f); private "
           "sw_limiter_decide: median %.1f ns (min %.1f); %d rounds (passes %lld)\n",
           kt[ROUNDS / 2], kt[0], pt[ROUNDS / 2], pt[0], ROUNDS, (long long)pass);
    return 0;
}
