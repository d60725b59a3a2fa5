/* fuzz.h - the shared harness of the slidewin C core's fuzzer, checked against reference models.
 *
 * The input bytes are a program: the first byte picks the mode, the next bytes its
 * configuration, the rest a sequence of operations interleaved with clock moves that go
 * forward, backward and jump. One file per mode (fuzz_main.c dispatches on the first byte):
 *
 *   first byte          mode                                             file
 *   odd                 a whole limiter                                  fuzz_limiter.c
 *   14 mod 16           a keyed table                                    fuzz_keyed.c
 *   12 mod 16           a crafted limiter region                         fuzz_region.c
 *   10 mod 16           a circuit breaker                                fuzz_breaker.c
 *   8 mod 16            all or nothing over a group                      fuzz_group.c
 *   6 mod 16            an adaptive concurrency limit                    fuzz_adapt.c
 *   any other even      a standalone window with an optional borrow ring fuzz_window.c
 *
 * fuzz_common.c holds what several modes use: the reference model of a ring, the checks of
 * the running totals, clock moves, crafted values and the configuration tables.
 *
 * Every input has a deadline (libFuzzer's -timeout; alarm() in the replay binary,
 * FUZZ_DEADLINE_S, 10 s): a hang is a failure.
 *
 * Build with clang -fsanitize=fuzzer (make fuzz), or with any C compiler and -DSW_FUZZ_MAIN
 * as a replay binary (make fuzz-replay): `fuzz_replay [file|dir]...`, or with no argument a
 * fixed number of pseudo-random programs. FUZZ_MODE=<limiter|keyed|region|breaker|group|
 * adapt|window> routes every input to that one mode (its first byte is still read).
 */
#ifndef SW_FUZZ_H
#define SW_FUZZ_H

#include "sw_breaker.h"
#include "sw_group.h"
#include "sw_keyed.h"
#include "sw_limiter.h"
#include "sw_proc.h"
#include "sw_shm.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the operation being run (for messages) and FUZZ_TRACE's switch */
extern int g_op;
extern int g_trace;

#define FAIL(...)                                                                           \
    do {                                                                                    \
        fprintf(stderr, "fuzz_core: %s:%d (op %d): ", __FILE__, __LINE__, g_op);            \
        fprintf(stderr, __VA_ARGS__);                                                       \
        fputc('\n', stderr);                                                                \
        abort();                                                                            \
    } while (0)
#define EXPECT_EQ(got, exp, what)                                                           \
    do {                                                                                    \
        long long g_ = (long long)(got), e_ = (long long)(exp);                             \
        if (g_ != e_)                                                                       \
            FAIL("%s: got %lld, expected %lld", what, g_, e_);                              \
    } while (0)

/* ---- input reader: past the end every read is 0 ---- */

struct rd {
    const uint8_t *p;
    size_t n, i;
};
static inline unsigned u8(struct rd *r)
{
    return r->i < r->n ? r->p[r->i++] : 0u;
}
static inline uint32_t u16(struct rd *r)
{
    uint32_t a = u8(r);
    return a | (uint32_t)u8(r) << 8;
}
static inline uint32_t u32(struct rd *r)
{
    uint32_t a = u16(r);
    return a | u16(r) << 16;
}

/* ---- the modes (one file each) ---- */

void run_window(struct rd *r);
void run_limiter(struct rd *r);
void run_keyed(struct rd *r);
void run_region(struct rd *r);
void run_breaker(struct rd *r);
void run_group(struct rd *r);
void run_adapt(struct rd *r);

/* ---- reference model of a ring (fuzz_common.c) ---- */

#define M_EMPTY INT64_MIN
#define M_MAXB 160
#define M_MAXSC 64

struct mbucket {
    int64_t start, min_rt;
    int64_t borrowed; /* PASS granted ahead and transferred when the bucket started */
    int64_t c[SW_MAX_EVENTS];
};
struct mleap {
    int64_t interval, w;
    uint32_t sc, nev;
    bool future;
    int64_t newest;
    struct mbucket b[M_MAXB]; /* created buckets, ascending start */
    int nb;
    int64_t fstart[M_MAXSC], fcount[M_MAXSC]; /* the latest grant per future slot */
};

int64_t sat_add(int64_t a, int64_t b);
void m_init(struct mleap *m, int64_t interval, uint32_t sc, uint32_t nev, bool future);
void m_reset(struct mleap *m);
int64_t m_start(const struct mleap *m, int64_t t);
int64_t m_clamp(struct mleap *m, int64_t t);
const struct mbucket *m_held(struct mleap *m, int64_t start);
struct mbucket *m_touch(struct mleap *m, int64_t t);
bool m_in_window(const struct mleap *m, int64_t start, int64_t t);
int64_t m_sum_peek(struct mleap *m, uint32_t ev, int64_t t);
int64_t m_sum(struct mleap *m, uint32_t ev, int64_t t);
int64_t m_current(struct mleap *m, uint32_t ev, int64_t t);
int64_t m_previous(struct mleap *m, uint32_t ev, int64_t t);
int64_t m_min_rt(struct mleap *m, int64_t t);
void m_add(struct mleap *m, uint32_t ev, int64_t n, int64_t t);
void m_add_rt(struct mleap *m, int64_t rt, int64_t t);
int64_t m_waiting(const struct mleap *m, int64_t t);
void m_grant(struct mleap *m, int64_t T, int64_t n);
int64_t ms_of(int64_t ns);

/* The core's running totals against a brute-force re-sum of its own slots, and
 * sw_borrow_waiting against every future slot. */
void check_totals(const struct sw_leap *l);
void check_waiting(const struct sw_leap *fut, int64_t t);

#define T_MAX (INT64_MAX / 2) /* keeps every model value (ms * 1e6 + costs) in range */

/* The clock after a move read from the program (w_ms: the bucket to land just before or
 * after), within [-T_MAX, T_MAX]. */
int64_t move_time(struct rd *r, int64_t now, int64_t w_ms);

/* A value to write into a region: the edges of every range the code checks (near: a time
 * close to the region's own). */
int64_t crafted_value(struct rd *r, int64_t window_ms, int64_t near);

/* v written into one of a ring's ten words, `word` (0 .. 9): head, newest, newest_idx,
 * dq_first, dq_len, then its layout: interval_ms, window_ms, sample_count, n_events, stride. */
void craft_leap_word(struct sw_leap *l, unsigned word, int64_t v);

/* ---- configurations the modes pick from (by bits of the configuration bytes) ---- */

/* A limiter's settings from three configuration bytes: grade and behavior, count,
 * interval, samples, warm-up, cold factor, queue and occupy timeout. */
void limiter_cfg_of(unsigned c0, unsigned c1, unsigned c2, struct sw_limiter_cfg *out);

/* A window from one configuration byte: its interval from the low three bits (intervals: a
 * table of 8), its samples from the next three (k_samples); samples that do not divide the
 * interval become `fallback`. */
void window_cfg_of(unsigned byte, const int64_t intervals[8], uint32_t fallback,
                   int64_t *interval_ms, uint32_t *sample_count);

extern const double k_count[16];
extern const int64_t k_interval[8];
extern const uint32_t k_samples[8];
extern const double k_warm[4];
extern const double k_cf[4];
extern const int64_t k_queue[4];

#endif
