/* fuzz_main.c - the fuzz harness's entry point: the first byte of a program picks the mode
 * (FUZZ_MODE=<name> routes every input to one mode instead, for a run on that mode alone),
 * and, built with -DSW_FUZZ_MAIN, the replay binary (`fuzz_replay [file|dir]...`, then
 * FUZZ_RANDOM pseudo-random programs).
 */
#include "fuzz.h"

typedef void (*mode_fn)(struct rd *r);

static const struct {
    const char *name;
    mode_fn run;
} k_modes[] = {
    {"window", run_window}, {"limiter", run_limiter}, {"keyed", run_keyed},
    {"region", run_region}, {"breaker", run_breaker}, {"group", run_group},
    {"adapt", run_adapt},
};

/* The mode a first byte picks (the table in fuzz.h). */
static mode_fn mode_of_byte(unsigned mode)
{
    switch (mode % 16u) {
    case 14u: return run_keyed;
    case 12u: return run_region;
    case 10u: return run_breaker;
    case 8u: return run_group;
    case 6u: return run_adapt;
    default: return (mode & 1u) ? run_limiter : run_window;
    }
}

/* FUZZ_MODE's mode, read once; NULL: the first byte picks. An unknown name is an error. */
static mode_fn forced_mode(void)
{
    static int read;
    static mode_fn forced;
    if (!read) {
        const char *env = getenv("FUZZ_MODE");
        read = 1;
        if (env != NULL && env[0] != '\0') {
            for (size_t i = 0; i < sizeof k_modes / sizeof k_modes[0]; i++)
                if (strcmp(env, k_modes[i].name) == 0)
                    forced = k_modes[i].run;
            if (forced == NULL) {
                fprintf(stderr, "fuzz_core: FUZZ_MODE=%s is not one of window, limiter, keyed, "
                                "region, breaker, group, adapt\n", env);
                exit(2);
            }
        }
    }
    return forced;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rd r = {data, size, 0};
    g_trace = getenv("FUZZ_TRACE") != NULL;
    if (size < 1)
        return 0;
    unsigned mode = u8(&r);
    mode_fn forced = forced_mode();
    (forced != NULL ? forced : mode_of_byte(mode))(&r);
    return 0;
}

#ifdef SW_FUZZ_MAIN
#include <dirent.h>
#include <sys/stat.h>

/* The per-input deadline: a hang (a loop over crafted data that never ends) is a failure. */
static const char *g_input = "";
static unsigned g_deadline_s = 10;

static void on_deadline(int sig)
{
    static const char msg[] = "fuzz_core: an input ran past its deadline (a hang): ";
    (void)sig;
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, g_input, strlen(g_input)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(3);
    abort();
}

static void run_one(const char *name, const uint8_t *buf, size_t n)
{
    g_input = name;
    alarm(g_deadline_s);
    LLVMFuzzerTestOneInput(buf, n);
    alarm(0);
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = malloc(1 << 20);
    if (buf == NULL)
        abort();
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    run_one(path, buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, errors = 0;
    const char *dl = getenv("FUZZ_DEADLINE_S");
    if (dl != NULL && atoi(dl) > 0)
        g_deadline_s = (unsigned)atoi(dl);
    signal(SIGALRM, on_deadline);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_replay: no such file %s\n", argv[i]);
            errors++;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            while (d != NULL && (e = readdir(d)) != NULL) {
                if (e->d_name[0] == '.')
                    continue;
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
                errors += run_file(p);
                files++;
            }
            if (d != NULL)
                closedir(d);
        } else {
            errors += run_file(argv[i]);
            files++;
        }
    }
    /* plus pseudo-random programs, so the replay binary explores without clang */
    const char *env = getenv("FUZZ_RANDOM");
    long nrand = env != NULL ? strtol(env, NULL, 10) : 3000;
    uint64_t s = 0x853c49e6748fea9bull;
    uint8_t buf[2048];
    for (long k = 0; k < nrand; k++) {
        size_t len = 16 + (size_t)(k % 2000);
        for (size_t j = 0; j < len; j++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[j] = (uint8_t)(s >> 24);
        }
        char name[64];
        snprintf(name, sizeof name, "(pseudo-random program %ld)", k);
        if (getenv("FUZZ_SAVE") != NULL && k == strtol(getenv("FUZZ_SAVE"), NULL, 10)) {
            FILE *f = fopen("fuzz_input.bin", "wb"); /* FUZZ_SAVE=k: that program, to a file */
            if (f != NULL) {
                fwrite(buf, 1, len, f);
                fclose(f);
            }
        }
        run_one(name, buf, len);
    }
    printf("fuzz replay: %d files, %ld random programs, %d unreadable\n", files, nrand, errors);
    return errors != 0;
}
#endif
