/* ktable.h - a keyed table's entries read directly, for the keyed tests and the fuzzer: an
 * entry by index, the entry holding a key, and whether the table is sound. */
#ifndef SW_TEST_KTABLE_H
#define SW_TEST_KTABLE_H

#include "sw_keyed.h"

#include <stdbool.h>
#include <stdio.h>

static inline struct sw_kentry *kentry_of(struct sw_kstate *st, uint32_t i)
{
    return (struct sw_kentry *)(void *)((char *)st + st->off_entries + (size_t)i * st->entry_size);
}

/* The index of the entry holding fp, or -1. */
static inline int kentry_find(struct sw_kstate *st, uint64_t fp)
{
    for (uint32_t i = 0; i < st->cap; i++)
        if (kentry_of(st, i)->fp == fp)
            return (int)i;
    return -1;
}

/* Whether every key held is where a lookup finds it (no empty entry between its home and it,
 * within the probe window, no earlier copy) and n_live counts them; if not, why (in why[len],
 * when why is not NULL). */
static inline bool ktable_sound(struct sw_kstate *st, char *why, size_t len)
{
    uint32_t plen = st->cap < SW_KEYED_PROBE ? st->cap : SW_KEYED_PROBE, live = 0;
    for (uint32_t i = 0; i < st->cap; i++) {
        uint64_t fp = kentry_of(st, i)->fp;
        if (fp == 0)
            continue;
        live++;
        uint32_t p = (uint32_t)(((unsigned __int128)fp * st->cap) >> 64), d = 0;
        for (; d < plen && p != i; d++) {
            const struct sw_kentry *e = kentry_of(st, p);
            if (e->fp == fp) {
                if (why != NULL)
                    snprintf(why, len, "key held twice (entries %u, %u)", p, i);
                return false;
            }
            if (e->fp == 0 && !(e->flags & SW_KE_TOMB)) {
                if (why != NULL)
                    snprintf(why, len, "key at %u behind an empty entry %u", i, p);
                return false;
            }
            if (++p == st->cap)
                p = 0;
        }
        if (d == plen) {
            if (why != NULL)
                snprintf(why, len, "key at %u beyond its probe window", i);
            return false;
        }
    }
    if (live != st->n_live) {
        if (why != NULL)
            snprintf(why, len, "n_live: got %u, expected %u", st->n_live, live);
        return false;
    }
    return true;
}

#endif
