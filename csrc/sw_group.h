/* sw_group.h - all or nothing across limiters (docs/design.md §14): one decision over several
 * limiters and keys of keyed limiters, admitted by all of them or charged to none.
 *
 * A product above sw_limiter and sw_keyed. A group decision takes the members' locks in one
 * global order (so that threads and processes deciding on overlapping groups, in any order,
 * never deadlock), plans every member's decision without counting (sw_plan_locked,
 * sw_keyed_plan_locked), then commits every plan or none (a commit cannot fail), then
 * releases the locks. A refused group counts BLOCK on the members that refused it only.
 *
 * The order: shared regions first, by their identity as every process sees it (the caller
 * gives it: a file's device and inode; an anonymous region's address, which the processes
 * forked after it share), then private states by their lock's address.
 */
#ifndef SW_GROUP_H
#define SW_GROUP_H

#include "sw_keyed.h"
#include "sw_limiter.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_GROUP_MAX 64u /* members of a group */

enum sw_gkind { SW_GM_LIMITER = 0, SW_GM_KEYED = 1 };

struct sw_gmember {
    /* in */
    int kind;                   /* enum sw_gkind */
    const struct sw_view *v;    /* SW_GM_LIMITER */
    const struct sw_kview *kv;  /* SW_GM_KEYED */
    uint64_t fp;                /* SW_GM_KEYED: the key's fingerprint */
    int64_t n;                  /* >= 1 */
    uint64_t order[2];          /* the lock order (sw_gmember_order_*) */
    /* out (sw_group_decide) */
    struct sw_decision *d;      /* this member's own decision (shadow mode applied), in the
                                   member's own memory (valid until it is decided again) */
    int refused;                /* it refused the request (a shadow's would-be refusal is not
                                   one: it admits) */
    /* the plan, while the locks are held */
    union {
        struct sw_plan l;
        struct sw_kplan k;
    } plan_;
};

/** The order of a private member: after every shared region, by its lock's address. */
void sw_gmember_order_private(struct sw_gmember *m);
/** The order of a member in a shared region: its identity, the same in every process
 * (a file's {device, inode}; an anonymous region's {0, address}). */
void sw_gmember_order_shared(struct sw_gmember *m, uint64_t id_hi, uint64_t id_lo);

/** Decide a group: all members admit (each counts PASS, takes its throttle slot, warm-up
 * payback, in-flight count as its own decision would), or none is charged (the members that
 * refused count BLOCK, unless SW_F_NO_BLOCK; the others count nothing).
 * @param m the members (kind, view, fp, n, order filled; d and refused are written)
 * @param count members, 1..SW_GROUP_MAX
 * @param now_ns the time, or SW_NOW (the clock, read once all the locks are held)
 * @param flags SW_F_TRY, SW_F_NO_BLOCK, SW_F_ENTRY, SW_F_RETRY (SW_F_PRIORITIZED: limiters
 *        with reject only, as sw_decide)
 * @param out verdict: SW_PASS when every member admits (a shadow's would-be refusal
 *        admits), SW_NEVER when a member can never admit the request, else SW_BLOCK;
 *        wait_ns: the largest of the members' waits; retry_ns (SW_F_RETRY): the largest of
 *        the refusing members', -1 when one of them does not know; now_ns the time
 * @return SW_OK; SW_EINVAL (count out of range, n < 1, a null view, two members on one
 *         state: nothing done); SW_EBUSY (gave up waiting for a region's lock: nothing done) */
int sw_group_decide(struct sw_gmember *m, uint32_t count, int64_t now_ns, unsigned flags,
                    struct sw_decision *out);

/** sw_group_decide for members the caller keeps checked and ordered (a binding's group,
 * checked once when made): m[0..count) already in strictly increasing lock order, count
 * 1..SW_GROUP_MAX, every n >= 1, every view set (order is not read). Nothing is checked.
 * @return SW_OK or SW_EBUSY, as sw_group_decide */
int sw_group_decide_ordered(struct sw_gmember *m, uint32_t count, int64_t now_ns,
                            unsigned flags, struct sw_decision *out);

#ifdef __cplusplus
}
#endif
#endif /* SW_GROUP_H */
