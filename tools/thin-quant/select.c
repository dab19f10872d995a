/*
 * select.c — thin-quant's profiles and tensor selection (see select.h for the rules).
 */
#include "select.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

#define ROLE_BIT(r) (1u << (r))

/* The quality profile keeps down in BF16 in this many layers at each end of the model, where a
 * layer's error weighs most on the output (the first layers feed every later one; the last ones
 * reach the logits almost unmixed). */
#define QUALITY_DOWN_EDGE 2

/* Roles that are linear layers inside a layer. */
static const uint32_t LAYER_LINEAR = ROLE_BIT(THIN_ROLE_Q) | ROLE_BIT(THIN_ROLE_K) |
    ROLE_BIT(THIN_ROLE_V) | ROLE_BIT(THIN_ROLE_O) | ROLE_BIT(THIN_ROLE_QKV) |
    ROLE_BIT(THIN_ROLE_GATE) | ROLE_BIT(THIN_ROLE_UP) | ROLE_BIT(THIN_ROLE_GATE_UP) |
    ROLE_BIT(THIN_ROLE_DOWN);

/* Roles whose rank-2 tensors may become FP8 (rows are output features, or embedding rows). */
static const uint32_t MATRIX_ROLES = ROLE_BIT(THIN_ROLE_Q) | ROLE_BIT(THIN_ROLE_K) |
    ROLE_BIT(THIN_ROLE_V) | ROLE_BIT(THIN_ROLE_O) | ROLE_BIT(THIN_ROLE_QKV) |
    ROLE_BIT(THIN_ROLE_GATE) | ROLE_BIT(THIN_ROLE_UP) | ROLE_BIT(THIN_ROLE_GATE_UP) |
    ROLE_BIT(THIN_ROLE_DOWN) | ROLE_BIT(THIN_ROLE_LM_HEAD) | ROLE_BIT(THIN_ROLE_EMBEDDING);

void tq_selection_init(tq_selection *s)
{
    memset(s, 0, sizeof *s);
}

static const char *const PROFILE_NAMES[] = {"none", "quality", "fp8-all", "bf16"};

int tq_profile_parse(const char *name, tq_profile *out)
{
    for (int p = TQ_PROFILE_QUALITY; p <= TQ_PROFILE_BF16; p++)
        if (strcmp(name, PROFILE_NAMES[p]) == 0) {
            *out = (tq_profile)p;
            return 0;
        }
    return -1;
}

const char *tq_profile_name(tq_profile p)
{
    return (int)p >= 0 && p <= TQ_PROFILE_BF16 ? PROFILE_NAMES[p] : "none";
}

/* Parses a comma-separated role list into a bitmask. */
static int parse_role_list(const char *arg, size_t len, uint32_t *mask, char *err, size_t errlen)
{
    *mask = 0;
    const char *p = arg, *end = arg + len;
    while (p <= end) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        size_t n = (size_t)((c ? c : end) - p);
        char name[32];
        thin_role r;
        if (n == 0 || n >= sizeof name) {
            snprintf(err, errlen, "empty or overlong role in '%.*s'", (int)len, arg);
            return -1;
        }
        memcpy(name, p, n);
        name[n] = 0;
        if (thin_role_from_name(name, &r) != THIN_OK || r == THIN_ROLE_SCALE ||
            r == THIN_ROLE_OTHER) {
            snprintf(err, errlen, "unknown role '%s' (roles: q k v o qkv gate up gate_up down "
                     "lm_head embedding)", name);
            return -1;
        }
        if (!(MATRIX_ROLES & ROLE_BIT(r))) {
            snprintf(err, errlen, "role '%s' is not a matrix that can be quantized", name);
            return -1;
        }
        *mask |= ROLE_BIT(r);
        if (!c)
            break;
        p = c + 1;
    }
    return 0;
}

int tq_selection_roles(tq_selection *s, const char *arg, char *err, size_t errlen)
{
    return parse_role_list(arg, strlen(arg), &s->roles, err, errlen);
}

int tq_selection_layers(tq_selection *s, const char *arg, char *err, size_t errlen)
{
    if (cli_parse_ranges(arg, s->layers, TQ_MAX_LAYERS) != 0) {
        snprintf(err, errlen, "bad layer ranges '%s' (e.g. 2-33,35 or 30-)", arg);
        return -1;
    }
    s->layers_given = 1;
    return 0;
}

int tq_selection_select(tq_selection *s, const char *arg, char *err, size_t errlen)
{
    const char *colon = strchr(arg, ':');
    size_t rlen = colon ? (size_t)(colon - arg) : strlen(arg);
    uint32_t mask;
    if (parse_role_list(arg, rlen, &mask, err, errlen) != 0)
        return -1;
    tq_role_rule rule;
    memset(&rule, 0, sizeof rule);
    rule.given = 1;
    if (!colon)
        rule.all = 1;
    else if (strcmp(colon + 1, "none") != 0 &&
             cli_parse_ranges(colon + 1, rule.layers, TQ_MAX_LAYERS) != 0) {
        snprintf(err, errlen, "bad layer ranges in --select '%s' (e.g. down:9-26)", arg);
        return -1;
    }
    for (int r = 0; r < THIN_ROLE_COUNT_; r++)
        if (mask & ROLE_BIT(r))
            s->rule[r] = rule;
    return 0;
}

static int any_rule(const tq_selection *s)
{
    for (int r = 0; r < THIN_ROLE_COUNT_; r++)
        if (s->rule[r].given)
            return 1;
    return 0;
}

int tq_selection_check(const tq_selection *s, char *err, size_t errlen)
{
    if (s->profile != TQ_PROFILE_NONE && (s->roles || s->layers_given)) {
        snprintf(err, errlen, "--roles/--layers choose tensors instead of a profile; use "
                 "--select ROLE:RANGES to adjust a profile");
        return -1;
    }
    if (s->profile == TQ_PROFILE_NONE && !s->roles && !s->layers_given && !any_rule(s)) {
        snprintf(err, errlen, "nothing to do: give --profile, --roles, --layers or --select");
        return -1;
    }
    return 0;
}

int tq_selection_needs_layer_count(const tq_selection *s)
{
    return s->profile == TQ_PROFILE_QUALITY && !s->rule[THIN_ROLE_DOWN].given;
}

int tq_selection_runtime_bf16(const tq_selection *s)
{
    return s->profile == TQ_PROFILE_QUALITY;
}

static int in_layers(const unsigned char *bitmap, int32_t layer)
{
    return layer >= 0 && layer < TQ_MAX_LAYERS && bitmap[layer];
}

/* Whether the profile's own rule chooses t for FP8. */
static int profile_wants(const tq_selection *s, const thin_tensor_info *t, uint32_t n_layers)
{
    uint32_t bit = ROLE_BIT(t->role);
    switch (s->profile) {
    case TQ_PROFILE_QUALITY:
        if (t->role == THIN_ROLE_GATE || t->role == THIN_ROLE_UP || t->role == THIN_ROLE_GATE_UP)
            return 1;
        if (t->role == THIN_ROLE_DOWN)
            return t->layer >= QUALITY_DOWN_EDGE &&
                   (uint64_t)t->layer + QUALITY_DOWN_EDGE < (uint64_t)n_layers;
        return 0;
    case TQ_PROFILE_FP8_ALL:
        return (LAYER_LINEAR & bit) || t->role == THIN_ROLE_LM_HEAD;
    case TQ_PROFILE_BF16:
        return 0;
    default:
        break;
    }
    uint32_t roles = s->roles ? s->roles : (s->layers_given ? LAYER_LINEAR : 0);
    if (!(roles & bit))
        return 0;
    if (t->layer < 0 || !s->layers_given)
        return 1;
    return in_layers(s->layers, t->layer);
}

static int wants_fp8(const tq_selection *s, const thin_tensor_info *t, uint32_t n_layers)
{
    if ((int)t->role < 0 || t->role >= THIN_ROLE_COUNT_)
        return 0;
    const tq_role_rule *r = &s->rule[t->role];
    if (r->given)
        return r->all || in_layers(r->layers, t->layer);
    return profile_wants(s, t, n_layers);
}

/* NULL when t can become FP8, else the reason it cannot. */
static const char *fp8_obstacle(const thin_tensor_info *t)
{
    if (t->tied_to)
        return "tied to another tensor";
    if (!(MATRIX_ROLES & ROLE_BIT(t->role)))
        return "not a matrix role";
    if (t->dtype == THIN_DTYPE_F8_E4M3 || t->dtype == THIN_DTYPE_F8_E5M2)
        return "already FP8";
    if (t->dtype != THIN_DTYPE_F32 && t->dtype != THIN_DTYPE_F16 && t->dtype != THIN_DTYPE_BF16)
        return "source dtype is not F32, F16 or BF16";
    if (t->rank < 2 || t->rank > 3 || t->shape[0] == 0 || t->shape[1] == 0 || t->shape[t->rank - 1] == 0)
        return "not a non-empty matrix or stack of matrices (rank 2 or 3)";
    return NULL;
}

tq_action tq_select(const tq_selection *s, const thin_tensor_info *t, uint32_t n_layers,
                    const char **why)
{
    if (why)
        *why = NULL;
    if (t->tied_to || t->role == THIN_ROLE_SCALE)
        return TQ_ACTION_COPY;
    if (wants_fp8(s, t, n_layers)) {
        const char *obstacle = fp8_obstacle(t);
        if (!obstacle)
            return TQ_ACTION_FP8;
        if (why)
            *why = obstacle;
    }
    int narrow = s->profile == TQ_PROFILE_QUALITY || s->profile == TQ_PROFILE_BF16;
    if (narrow && t->rank >= 2 &&
        (t->dtype == THIN_DTYPE_F64 || t->dtype == THIN_DTYPE_F32 || t->dtype == THIN_DTYPE_F16))
        return TQ_ACTION_BF16;
    return TQ_ACTION_COPY;
}

void tq_format_ranges(const unsigned char *sel, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    if (cap == 0)
        return;
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (!sel[i])
            continue;
        size_t j = i;
        while (j + 1 < n && sel[j + 1])
            j++;
        int w = j == i ? snprintf(out + len, cap - len, "%s%zu", len ? "," : "", i)
                       : snprintf(out + len, cap - len, "%s%zu-%zu", len ? "," : "", i, j);
        if (w < 0 || (size_t)w >= cap - len) {
            out[len] = 0;
            return;
        }
        len += (size_t)w;
        i = j;
    }
}
