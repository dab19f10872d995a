/*
 * status.c — names of status codes and roles, hex formatting, core count.
 */
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "thin_private.h"

static const char *const status_names[] = {
    "THIN_OK", "THIN_E_IO", "THIN_E_NOMEM", "THIN_E_INVALID_ARG", "THIN_E_BAD_MAGIC",
    "THIN_E_VERSION", "THIN_E_TRUNCATED", "THIN_E_BAD_HEADER", "THIN_E_BAD_RECORD",
    "THIN_E_BAD_TRAILER", "THIN_E_BAD_MANIFEST", "THIN_E_LIMIT", "THIN_E_RANGE", "THIN_E_ALIGN",
    "THIN_E_CHECKSUM", "THIN_E_DIGEST", "THIN_E_CODEC", "THIN_E_NOT_FOUND", "THIN_E_DTYPE",
    "THIN_E_SHAPE", "THIN_E_STATE", "THIN_E_UNSUPPORTED", "THIN_E_INTERNAL", "THIN_E_PADDING",
};

const char *thin_status_name(thin_status s)
{
    int i = -(int)s;
    if (i < 0 || i >= (int)(sizeof status_names / sizeof status_names[0])) return "THIN_E_UNKNOWN";
    return status_names[i];
}

static const char *const role_names[THIN_ROLE_COUNT_] = {
    [THIN_ROLE_OTHER] = "other",         [THIN_ROLE_EMBEDDING] = "embedding",
    [THIN_ROLE_Q] = "q",                 [THIN_ROLE_K] = "k",
    [THIN_ROLE_V] = "v",                 [THIN_ROLE_O] = "o",
    [THIN_ROLE_QKV] = "qkv",             [THIN_ROLE_GATE] = "gate",
    [THIN_ROLE_UP] = "up",               [THIN_ROLE_GATE_UP] = "gate_up",
    [THIN_ROLE_DOWN] = "down",           [THIN_ROLE_ATTN_NORM] = "attn_norm",
    [THIN_ROLE_FFN_NORM] = "ffn_norm",   [THIN_ROLE_Q_NORM] = "q_norm",
    [THIN_ROLE_K_NORM] = "k_norm",       [THIN_ROLE_FINAL_NORM] = "final_norm",
    [THIN_ROLE_LM_HEAD] = "lm_head",     [THIN_ROLE_SCALE] = "scale",
    [THIN_ROLE_Q_BIAS] = "q_bias",       [THIN_ROLE_K_BIAS] = "k_bias",
    [THIN_ROLE_V_BIAS] = "v_bias",       [THIN_ROLE_ATTN_POST_NORM] = "attn_post_norm",
    [THIN_ROLE_FFN_POST_NORM] = "ffn_post_norm",
    [THIN_ROLE_ROUTER] = "router",
};

const char *thin_role_name(thin_role r)
{
    if ((int)r < 0 || r >= THIN_ROLE_COUNT_) return "other";
    return role_names[r];
}

thin_status thin_role_from_name(const char *name, thin_role *out)
{
    if (!name || !out) return THIN_E_INVALID_ARG;
    for (int i = 0; i < THIN_ROLE_COUNT_; i++) {
        if (!strcmp(name, role_names[i])) {
            *out = (thin_role)i;
            return THIN_OK;
        }
    }
    return THIN_E_NOT_FOUND;
}

void thin_hex32(const uint8_t d[32], char out[65])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = '\0';
}

unsigned thin_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    if (n > 1024) return 1024;
    return (unsigned)n;
}
