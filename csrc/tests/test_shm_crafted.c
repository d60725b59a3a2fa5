/* test_shm_crafted.c - shared regions damaged or crafted by hand (a region is input): checked
 * and repaired on attaching; and regions of another boot, reinitialised or kept. */

#include "shm_lim_util.h"
#include "sw_time.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A region at a fresh path, opened by a first process (checked) with a view of a QPS rule of
 * 10 (v), damaged by hand; then attached by a second (b, vb) that checks and repairs it. */
struct crafted {
    char path[128];
    struct sw_shm_layout lay;
    struct sw_shm a, b;
    struct sw_rule rule;
    struct sw_view v, vb;
};

static void crafted_open(struct crafted *c, const char *tag, uint32_t samples)
{
    tmp_path(c->path, sizeof c->path, tag);
    c->lay = lim_layout(1000, samples);
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&c->a, c->path, &c->lay, &err), SW_OK);
    struct sw_limiter_cfg cfg = cfg_of(SW_GRADE_QPS, SW_REJECT, 10);
    cfg.sample_count = samples;
    CHECK_EQ(sw_rule_init(&c->rule, &cfg), SW_OK);
    view_of(&c->a, &c->rule, &c->v);
}

/* The same with a concurrency rule of 5, 1000 ms in 2 buckets. */
static void crafted_open_concurrency(struct crafted *c, const char *tag)
{
    tmp_path(c->path, sizeof c->path, tag);
    c->lay = lim_layout(1000, 2);
    region_at(&c->a, c->path, &c->lay, &c->rule, SW_GRADE_CONCURRENCY, 5, &c->v);
}

/* The second process attaches after the damage: the check and repair on attaching. */
static void crafted_attach(struct crafted *c)
{
    struct sw_shm_error err;
    CHECK_EQ(sw_shm_open(&c->b, c->path, &c->lay, &err), SW_OK);
    view_of(&c->b, &c->rule, &c->vb);
    sw_lstate_check_repair(&c->vb);
}

static void crafted_close(struct crafted *c)
{
    sw_shm_close(&c->a);
    sw_shm_close(&c->b);
    unlink(c->path);
}

/* A crafted region (an RT deque emptied while head is set) is made consistent on attach: the
 * next add_rt is exact and safe (no out-of-bounds access). */
static void crafted_deque(void)
{
    struct crafted c;
    crafted_open(&c, "dq", 4);
    struct sw_window w;
    sw_view_window(&c.v, &w);
    CHECK_EQ(sw_window_add_rt(&w, 9, MS(300)), SW_OK);
    struct sw_leap *sec = sw_node_sec(sw_lstate_node(c.a.state));
    sec->dq_len = 0;    /* the crafted damage */
    sec->head = MS(1) / 1000 * 0 + 750; /* a slot ahead of head's real bucket: 750 > 250 */
    crafted_attach(&c);
    struct sw_window wb;
    sw_view_window(&c.vb, &wb);
    CHECK_EQ(sw_window_add_rt(&wb, 4, MS(800)), SW_OK);
    int64_t min_rt, rt_sum, success;
    CHECK_EQ(sw_window_rt(&wb, MS(800), &min_rt, &rt_sum, &success), SW_OK);
    CHECK(min_rt == 4 || min_rt == 9);
    crafted_close(&c);
}

/* A region is input: a count below 0 (no operation ever stores one) in a bucket of the
 * window would let the limiter admit that many more than its limit; the repair on attaching
 * puts it back to 0. Before: all 20 admitted, against a limit of 10. */
static void crafted_negative_count(void)
{
    struct crafted c;
    crafted_open(&c, "neg", 2);
    struct sw_decision d;
    CHECK_EQ(sw_decide(&c.v, 1, MS(600), SW_F_TRY, &d), SW_OK);  /* bucket 500 */
    CHECK_EQ(sw_decide(&c.v, 1, MS(1100), SW_F_TRY, &d), SW_OK); /* bucket 1000, the head */
    struct sw_node *node = sw_lstate_node(c.a.state);
    int64_t *old = sw_leap_slot(sw_node_sec(node), sw_leap_index(sw_node_sec(node), 500));
    CHECK_EQ(old[SW_SLOT_START], 500);
    old[SW_SLOT_COUNTS + SW_EV_PASS] = -1000; /* the crafted damage */
    ((struct sw_lstate *)c.a.state)->hot[SW_HOT_SEC] = -1000; /* and on the lock's line */
    crafted_attach(&c);
    /* bucket 500's 1 counted as 0, bucket 1000's 1 */
    CHECK_EQ(tries_passed(&c.vb, 20, MS(1200)), 9);
    crafted_close(&c);
}

/* ---- crafted regions ---- */

/* A bucket start within one window of INT64_MAX. */
static int64_t near_max(int64_t window_ms)
{
    return INT64_MAX - INT64_MAX % window_ms;
}

/* A ring head (and newest bucket, and its slot) within a window of INT64_MAX: refused on
 * attaching, as damaged, in time. Before: the attach's repair stepped `s += window_ms` past
 * INT64_MAX and never ended, holding the state's lock (killed here by the alarm). The same
 * for the borrow ring and the minute ring, and a head that is not a bucket start. */
static void crafted_head_near_max(void)
{
    for (int which = 0; which < 4; which++) {
        struct crafted c;
        crafted_open(&c, "max", 2);
        struct sw_decision d;
        CHECK_EQ(sw_decide(&c.v, 1, MS(600), SW_F_TRY, &d), SW_OK);
        struct sw_node *node = sw_lstate_node(c.a.state);
        struct sw_leap *l = which == 1 ? sw_node_fut(node) : which == 2 ? sw_node_min(node)
                                                                        : sw_node_sec(node);
        int64_t h = which == 3 ? 501 : near_max(l->window_ms);
        if (which != 1) {
            int64_t *slot = sw_leap_slot(l, (uint32_t)l->newest_idx);
            slot[SW_SLOT_START] = h;
        }
        l->head = h;
        l->newest = h;
        l->newest_idx = (int64_t)(((uint64_t)h / (uint64_t)l->window_ms) % l->sample_count);
        alarm(60); /* a hang fails (SIGALRM) instead of wedging the run */
        struct sw_shm_error err;
        int rc = sw_shm_open(&c.b, c.path, &c.lay, &err);
        if (rc == SW_OK) { /* attached: the repair must end */
            view_of(&c.b, &c.rule, &c.vb);
            sw_lstate_check_repair(&c.vb);
            sw_shm_close(&c.b);
        }
        alarm(0);
        CHECK_EQ(rc, SW_EINVAL);
        CHECK(strstr(err.msg, "damaged state") != NULL);
        /* a private ring with such a head is started afresh by a repair, in time */
        alarm(60);
        sw_leap_repair(l);
        alarm(0);
        CHECK(l->head == SW_LEAP_EMPTY || l->head <= SW_LEAP_T_MAX);
        sw_shm_close(&c.a);
        unlink(c.path);
    }
}

/* A process slot below 0 (no release leaves the slots' sum below 0): on attaching, the
 * total is not below 0, so a concurrency limit of 5 admits 5. Before: the slot's -100 went
 * into the total, read as 0 while each admission raised it: 105 admitted. And a dead
 * process's negative slot, reaped, adds nothing in flight (before: +100, nothing admitted). */
static void crafted_negative_in_flight(void)
{
    for (int dead = 0; dead < 2; dead++) {
        struct crafted c;
        crafted_open_concurrency(&c, "nif");
        CHECK(c.v.my_slot >= 0);
        if (!dead) {
            c.a.slots[c.v.my_slot].in_flight = -100; /* the crafted damage, a live process's */
        } else {
            uint64_t gone = ((uint64_t)4194301u << 32) | 7u;
            if (kill(4194301, 0) == 0) { /* that pid exists here: skip */
                sw_shm_close(&c.a);
                unlink(c.path);
                continue;
            }
            atomic_store(&c.a.slots[c.v.my_slot].token, gone);
            c.a.slots[c.v.my_slot].in_flight = -100;
            sw_lstate_node(c.a.state)->in_flight = -100; /* the sum of the slots */
        }
        struct sw_shm_error err;
        CHECK_EQ(sw_shm_open(&c.b, c.path, &c.lay, &err), SW_OK);
        view_of(&c.b, &c.rule, &c.vb);
        if (dead)
            CHECK_EQ(sw_lstate_reap(&c.vb), 1);
        else
            sw_lstate_check_repair(&c.vb);
        CHECK_EQ(tries_passed(&c.vb, 20, MS(100)), 5);
        CHECK_EQ(sw_in_flight(&c.vb), 5);
        crafted_close(&c);
    }
}

/* Write a boot id that is not this boot's into a region's header. */
static void fake_boot_id(struct sw_shm *s)
{
    memset(s->hdr->boot_id, 0, sizeof s->hdr->boot_id);
    snprintf(s->hdr->boot_id, sizeof s->hdr->boot_id, "00000000-0000-0000-0000-000000000000");
}

struct attacher {
    const char *path;
    const struct sw_shm_layout *lay;
    struct sw_shm shm;
    int rc;
    _Atomic int done;
};

static void *attach_thread(void *arg)
{
    struct attacher *t = arg;
    struct sw_shm_error err;
    t->rc = sw_shm_open(&t->shm, t->path, t->lay, &err);
    atomic_store(&t->done, 1);
    return NULL;
}

/* A limiter region at a fresh path for tag (qps 10) that no live process holds a slot in: c->v
 * is a view of it whose own slot's token was cleared. */
static void open_unheld_region(struct crafted *c, const char *tag)
{
    tmp_path(c->path, sizeof c->path, tag);
    c->lay = lim_layout(1000, 2);
    region_at(&c->a, c->path, &c->lay, &c->rule, SW_GRADE_QPS, 10, &c->v);
    atomic_store(&c->a.slots[c->v.my_slot].token, 0);
}

/* A thread (returned) that attaches t to the region at path (checked started). */
static pthread_t attach_start(struct attacher *t, const char *path,
                              const struct sw_shm_layout *lay)
{
    *t = (struct attacher){path, lay, {0}, -1, 0};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, attach_thread, t), 0);
    return th;
}

/* The attacher's region and a closed, the file at path removed. */
static void attach_close(struct attacher *t, struct sw_shm *a, const char *path)
{
    sw_shm_close(&t->shm);
    sw_shm_close(a);
    unlink(path);
}

/* The attacher t joined: it attached, and the region's boot id is this boot's again. */
static void attach_joined(struct attacher *t, pthread_t th, const struct sw_shm *a)
{
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(t->rc, SW_OK);
    CHECK(strcmp(a->hdr->boot_id, "00000000-0000-0000-0000-000000000000") != 0);
}

/* A region whose header names another boot is reinitialised under the state's lock: while a
 * user holds the lock, the attacher waits, and the user's state is not touched under it.
 * Before: reinitialised at once under the user (its counts zeroed while it held the lock; a
 * user mid-decision divided by a zeroed window: SIGFPE). */
static void reinit_takes_the_state_lock(void)
{
    struct crafted c;
    open_unheld_region(&c, "boot");
    c.v.slots = NULL; /* no process slot: nothing says a live process uses it */
    c.v.my_slot = -1;
    struct sw_decision d;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sw_decide(&c.v, 1, MS(100), SW_F_TRY, &d), SW_OK);
    fake_boot_id(&c.a);
    sw_view_lock(&c.v); /* a user inside its critical section */
    struct attacher t;
    pthread_t th = attach_start(&t, c.path, &c.lay);
    /* give the attacher ample time to reach the state: it must wait for the lock */
    for (int i = 0; i < 50 && !atomic_load(&t.done); i++)
        usleep(10000);
    CHECK_EQ(atomic_load(&t.done), 0);
    struct sw_lstate *st = c.a.state;
    int64_t life = sw_lstate_node(st)->totals[SW_EV_PASS];
    if (st->hot[SW_HOT_LIFE] > life)
        life = st->hot[SW_HOT_LIFE]; /* the count is the larger (struct sw_lstate) */
    CHECK_EQ(life, 3); /* untouched under the lock */
    sw_view_unlock(&c.v);
    attach_joined(&t, th, &c.a);
    struct sw_totals tot;
    sw_totals_read(&c.v, &tot);
    CHECK_EQ(tot.pass, 0); /* reinitialised after the user let go */
    CHECK_EQ(atomic_load(&st->lock.word), 0); /* and the lock free */
    attach_close(&t, &c.a, c.path);
}

/* A region from another boot whose state lock word names a live process that is not in it
 * (a pid of this boot that matches a token of the other, or a crafted word), and no slot of a
 * live process: the attach forces the word open after SW_LOCK_STUCK_NS and reinitialises.
 * Before: it waited for the word forever (the attach hung). */
static void reinit_forces_a_stale_lock_word(void)
{
    struct crafted c;
    open_unheld_region(&c, "bootw");
    fake_boot_id(&c.a);
    struct sw_lstate *st = c.a.state;
    atomic_store(&st->lock.word, sw_proc_token()); /* live (this process), not holding it */
    struct attacher t;
    pthread_t th = attach_start(&t, c.path, &c.lay);
    for (int i = 0; i < 3000 && !atomic_load(&t.done); i++) /* 30 s: a hang */
        usleep(10000);
    CHECK_EQ(atomic_load(&t.done), 1);
    if (!atomic_load(&t.done))
        return; /* hung: the thread is left behind */
    attach_joined(&t, th, &c.a);
    CHECK_EQ(atomic_load(&st->lock.word), 0); /* reinitialised, the lock free */
    attach_close(&t, &c.a, c.path);
}

/* A region in use by a live process of this boot (it holds a process slot) whose header
 * names another boot: the boot id is what is wrong; the state is kept (before: wiped, the
 * live process's 3 in flight lost: 3 more admitted than the limit). */
static void reinit_keeps_a_live_region(void)
{
    struct crafted c;
    crafted_open_concurrency(&c, "boot2");
    struct sw_decision d;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sw_decide(&c.v, 1, MS(100), SW_F_TRY, &d), SW_OK);
    fake_boot_id(&c.a);
    crafted_attach(&c);
    CHECK(strcmp(c.a.hdr->boot_id, "00000000-0000-0000-0000-000000000000") != 0);
    CHECK_EQ(sw_in_flight(&c.vb), 3);
    CHECK_EQ(tries_passed(&c.vb, 5, MS(100)), 2);
    crafted_close(&c);
}

void test_shm_crafted(void)
{
    crafted_head_near_max();
    crafted_negative_in_flight();
    reinit_takes_the_state_lock();
    reinit_forces_a_stale_lock_word();
    reinit_keeps_a_live_region();
    crafted_negative_count();
    crafted_deque();
}
