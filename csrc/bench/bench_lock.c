/* bench_lock.c - the lock of a shared limiter state, measured: today's token lock
 * (sw_lock_acquire_as with a process token) against the plain xchg spinlock it replaced and a
 * robust process-shared pthread mutex, per lock+unlock and per whole decision (sw_decide on
 * a state in a MAP_SHARED mapping), with 1 process and 2 processes contending.
 * Build and run: make -C csrc bench-lock   (BENCH_LOCK_SECONDS, BENCH_LOCK_ROUNDS)
 *
 * Every measurement forks its processes, which start together on a flag in the mapping and
 * run their operation for a fixed time; the figure is operations per second summed over the
 * processes. Variants and process counts are measured round-robin, the order rotated every
 * round; each cell is the median of the rounds. */
#include "sw_limiter.h"
#include "sw_proc.h"
#include "sw_time.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS 2
#define CHUNK 256

/* The old lock (before the token lock): xchg, then spin with pause, then yield. */
static inline void xchg_acquire(_Atomic uint32_t *w)
{
    if (atomic_exchange_explicit(w, 1u, memory_order_acquire) == 0u)
        return;
    unsigned spins = 0;
    for (;;) {
        if (atomic_exchange_explicit(w, 1u, memory_order_acquire) == 0u)
            return;
        while (atomic_load_explicit(w, memory_order_relaxed) != 0u) {
            if (++spins < 64u)
                sw_cpu_relax();
            else
                sched_yield();
        }
    }
}
static inline void xchg_release(_Atomic uint32_t *w)
{
    atomic_store_explicit(w, 0u, memory_order_release);
}

static inline void mutex_acquire(pthread_mutex_t *m)
{
    if (pthread_mutex_lock(m) == EOWNERDEAD)
        pthread_mutex_consistent(m);
}

/* What lives in the MAP_SHARED mapping; each lock on its own cache line. */
struct shared {
    _Alignas(64) sw_lock token_lock;
    _Alignas(64) _Atomic uint32_t xchg_lock;
    _Alignas(64) pthread_mutex_t mutex;
    _Alignas(64) _Atomic int go;
    _Alignas(64) int64_t counter; /* the critical section of the lock-only rows */
    _Alignas(64) uint64_t ops[MAX_PROCS];
    int64_t end_ns[MAX_PROCS];
    _Alignas(64) unsigned char state[]; /* struct sw_lstate */
};

enum variant {
    L_TOKEN, L_XCHG, L_MUTEX,                /* lock + ++counter + unlock */
    D_SHIPPED,                               /* sw_decide as it is (its token lock inside) */
    D_TOKEN, D_XCHG, D_MUTEX,                /* that lock around sw_decide */
    N_VARIANTS
};
static const char *const NAMES[N_VARIANTS] = {
    "token lock (sw_lock_acquire_as, process token)",
    "xchg spinlock (the old sw_lock)",
    "robust process-shared pthread mutex",
    "sw_decide as shipped (token lock inside)",
    "token lock around sw_decide",
    "xchg spinlock around sw_decide",
    "robust pthread mutex around sw_decide",
};

static struct shared *sh;
static struct sw_rule rule;
static struct sw_view view;

static void child(int idx, enum variant v, int64_t seconds_ns)
{
    struct sw_decision d;
    uint64_t ops = 0;
    while (!atomic_load_explicit(&sh->go, memory_order_acquire))
        sw_cpu_relax();
    int64_t t = sw_time_ns();
    int64_t end = t + seconds_ns;
    while (t < end) {
        for (int i = 0; i < CHUNK; i++) {
            switch (v) {
            case L_TOKEN:
                (void)sw_lock_acquire_as(&sh->token_lock, sw_token_resolve(SW_LOCK_PROCESS));
                sh->counter++;
                sw_lock_release(&sh->token_lock);
                break;
            case L_XCHG:
                xchg_acquire(&sh->xchg_lock);
                sh->counter++;
                xchg_release(&sh->xchg_lock);
                break;
            case L_MUTEX:
                mutex_acquire(&sh->mutex);
                sh->counter++;
                pthread_mutex_unlock(&sh->mutex);
                break;
            case D_SHIPPED:
                sw_decide(&view, 1, SW_NOW, SW_F_TRY, &d);
                break;
            case D_TOKEN:
                (void)sw_lock_acquire_as(&sh->token_lock, sw_token_resolve(SW_LOCK_PROCESS));
                sw_decide(&view, 1, SW_NOW, SW_F_TRY, &d);
                sw_lock_release(&sh->token_lock);
                break;
            case D_XCHG:
                xchg_acquire(&sh->xchg_lock);
                sw_decide(&view, 1, SW_NOW, SW_F_TRY, &d);
                xchg_release(&sh->xchg_lock);
                break;
            case D_MUTEX:
                mutex_acquire(&sh->mutex);
                sw_decide(&view, 1, SW_NOW, SW_F_TRY, &d);
                pthread_mutex_unlock(&sh->mutex);
                break;
            default:
                break;
            }
        }
        ops += CHUNK;
        t = sw_time_ns();
    }
    sh->ops[idx] = ops;
    sh->end_ns[idx] = t;
    _exit(0);
}

/* One measurement: nprocs processes for seconds_ns. @return operations per second */
static double last_fair; /* the least served process's ops / an equal share, last measure */

static double measure(enum variant v, int nprocs, int64_t seconds_ns)
{
    pid_t pids[MAX_PROCS];
    atomic_store(&sh->go, 0);
    for (int i = 0; i < nprocs; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            exit(1);
        }
        if (pids[i] == 0)
            child(i, v, seconds_ns);
    }
    struct timespec settle = {0, 20000000}; /* 20 ms: the children are at the flag */
    nanosleep(&settle, NULL);
    int64_t start = sw_time_ns();
    atomic_store_explicit(&sh->go, 1, memory_order_release);
    double per_s = 0.0;
    for (int i = 0; i < nprocs; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child failed\n");
            exit(1);
        }
    }
    uint64_t total = 0, least = UINT64_MAX;
    for (int i = 0; i < nprocs; i++) {
        per_s += (double)sh->ops[i] / ((double)(sh->end_ns[i] - start) / 1e9);
        total += sh->ops[i];
        least = sh->ops[i] < least ? sh->ops[i] : least;
    }
    last_fair = total ? (double)least * nprocs / (double)total : 0.0;
    return per_s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *xs, int n)
{
    qsort(xs, (size_t)n, sizeof *xs, cmp_double);
    return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2.0;
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s != NULL && *s ? strtol(s, NULL, 10) : dflt;
}

int main(void)
{
    double seconds = (double)env_long("BENCH_LOCK_MS", 200) / 1000.0;
    int rounds = (int)env_long("BENCH_LOCK_ROUNDS", 5);
    if (rounds < 1 || rounds > 99)
        rounds = 5;

    struct sw_limiter_cfg cfg;
    sw_limiter_cfg_default(&cfg);
    cfg.count = 1e9; /* reject, qps 10**9: every decision admitted (the admit path) */
    if (sw_rule_init(&rule, &cfg) != SW_OK)
        return 1;
    size_t st_size = sw_lstate_size(cfg.interval_ms, cfg.sample_count);
    size_t size = sizeof(struct shared) + st_size;
    sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(sh, 0, size);
    sw_lock_init(&sh->token_lock);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    if (pthread_mutex_init(&sh->mutex, &ma) != 0)
        return 1;
    struct sw_lstate *st = (struct sw_lstate *)(void *)sh->state;
    if (sw_lstate_init(st, cfg.interval_ms, cfg.sample_count) != SW_OK)
        return 1;
    memset(&view, 0, sizeof view);
    view.st = st;
    view.rule = &rule;
    view.token = SW_LOCK_PROCESS;
    view.slots = NULL;
    view.my_slot = -1;

    static const int procs[] = {1, 2};
    double samples[N_VARIANTS][2][99];
    double fair[N_VARIANTS][99];
    int64_t ns = (int64_t)(seconds * 1e9);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("bench_lock: %d rounds of %.0f ms per cell, %ld CPUs, load average %.2f %.2f %.2f\n",
           rounds, seconds * 1000, ncpu, load[0], load[1], load[2]);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < N_VARIANTS; k++) {
            enum variant v = (enum variant)((k + r) % N_VARIANTS);
            for (int p = 0; p < 2; p++) {
                int pi = (r % 2) ? 1 - p : p;
                samples[v][pi][r] = measure(v, procs[pi], ns);
                if (procs[pi] == 2)
                    fair[v][r] = last_fair;
            }
        }
        fprintf(stderr, "  round %d/%d\n", r + 1, rounds);
    }
    /* per-round 2P/1P ratios, before median() sorts the samples */
    double ratio[N_VARIANTS][99];
    for (int v = 0; v < N_VARIANTS; v++)
        for (int r = 0; r < rounds; r++)
            ratio[v][r] = samples[v][1][r] / samples[v][0][r];

    printf("\n| operation | 1 process: ns/op | 1 process: M ops/s | 2 processes: M ops/s "
           "(sum) | 2 processes: ns/op/process | 2P / 1P | 2 processes: least served / "
           "equal share |\n");
    printf("| :--- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int v = 0; v < N_VARIANTS; v++) {
        double one = median(samples[v][0], rounds);
        double two = median(samples[v][1], rounds);
        double rr = median(ratio[v], rounds);
        double fr = median(fair[v], rounds);
        printf("| %s | %.1f | %.2f | %.2f | %.1f | %.2fx | %.0f%% |\n", NAMES[v], 1e9 / one,
               one / 1e6, two / 1e6, 2e9 / two, rr, fr * 100);
    }
    printf("\nlock+unlock rows: ++ on a shared counter inside. \"around sw_decide\" rows: that "
           "lock serialises the processes, so sw_decide's own token lock inside is never "
           "contended (one uncontended CAS, the same in every such row). Each cell: the median "
           "of the rounds; 2P / 1P: the median of the per-round ratios. counter=%lld\n",
           (long long)sh->counter);
    pthread_mutex_destroy(&sh->mutex);
    munmap(sh, size);
    return 0;
}
