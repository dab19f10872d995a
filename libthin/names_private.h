/*
 * names_private.h — a hash index from entry names to entry numbers (open addressing, FNV-1a).
 * Names are borrowed: they must outlive the index.
 */
#ifndef THIN_NAMES_PRIVATE_H
#define THIN_NAMES_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct thin_names {
    const char **key; /* (cap) borrowed names, NULL for an empty slot */
    uint32_t *val;    /* (cap) entry numbers */
    size_t cap;       /* power of two */
    size_t len;
} thin_names;

/* Inserts name -> val. Returns 0, 1 when the name was already present (*old set), -1 on ENOMEM. */
int thin_names_insert(thin_names *t, const char *name, uint32_t val, uint32_t *old);
/* Returns 0 and sets *val when found, else -1. */
int thin_names_find(const thin_names *t, const char *name, uint32_t *val);
void thin_names_free(thin_names *t);

#endif
