/* safetensors.c — strict SafeTensors header parser (see safetensors.h). */
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static const struct {
    const char *name;
    thin_dtype dtype;
    size_t size;
} st_dtypes[] = {
    {"F64", THIN_DTYPE_F64, 8},   {"F32", THIN_DTYPE_F32, 4},
    {"F16", THIN_DTYPE_F16, 2},   {"BF16", THIN_DTYPE_BF16, 2},
    {"F8_E4M3", THIN_DTYPE_F8_E4M3, 1}, {"F8_E5M2", THIN_DTYPE_F8_E5M2, 1},
    {"I64", THIN_DTYPE_I64, 8},   {"I32", THIN_DTYPE_I32, 4},
    {"I16", THIN_DTYPE_I16, 2},   {"I8", THIN_DTYPE_I8, 1},
    {"U8", THIN_DTYPE_U8, 1},     {"BOOL", THIN_DTYPE_BOOL, 1},
    {"U16", THIN_DTYPE_U16, 2},   {"U32", THIN_DTYPE_U32, 4},
    {"U64", THIN_DTYPE_U64, 8},
};
#define N_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

thin_dtype st_dtype_from_name(const char *name)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(name, st_dtypes[i].name) == 0)
            return st_dtypes[i].dtype;
    return THIN_DTYPE_INVALID;
}

size_t st_dtype_size(thin_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (st_dtypes[i].dtype == t)
            return st_dtypes[i].size;
    return 0;
}


static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int st_parse_prefix(const uint8_t prefix[8], uint64_t file_size, uint64_t *header_len, char *err,
                    size_t errlen)
{
    uint64_t n = le64(prefix);
    if (n > ST_MAX_HEADER)
        return cli_fail(err, errlen, "header length %llu exceeds the %llu-byte limit",
                    (unsigned long long)n, ST_MAX_HEADER);
    if (n < 2)
        return cli_fail(err, errlen, "header length %llu is too small for a JSON object",
                    (unsigned long long)n);
    if (file_size != ST_SIZE_UNKNOWN && n > file_size - 8)
        return cli_fail(err, errlen, "truncated: header length %llu but only %llu bytes follow",
                    (unsigned long long)n, (unsigned long long)(file_size - 8));
    *header_len = n;
    return 0;
}

/* Offset of the first byte that breaks strict UTF-8 (no overlongs, surrogates, > U+10FFFF),
 * or len when the text is valid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return i;
        if (len - i <= n)
            return i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
        i += n + 1;
    }
    return len;
}

static int parse_u64_array(const json_t *a, uint64_t *out, size_t max, size_t *n)
{
    if (!json_is_array(a) || json_array_size(a) > max)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return -1;
        out[i] = (uint64_t)json_integer_value(v);
    }
    *n = json_array_size(a);
    return 0;
}

static int parse_metadata(const json_t *m, const char *label, char *err, size_t errlen)
{
    const char *k;
    const json_t *v;
    if (!json_is_object(m))
        return cli_fail(err, errlen, "%s: __metadata__ is not an object", label);
    json_object_foreach((json_t *)m, k, v)
        if (!json_is_string(v))
            return cli_fail(err, errlen, "%s: __metadata__ member '%s' is not a string", label, k);
    return 0;
}

/* Fills t from one header member; checks fields, dtype, shape × size against the offsets. */
static int parse_tensor(const char *name, const json_t *v, const char *label, st_tensor *t,
                        char *err, size_t errlen)
{
    if (strlen(name) == 0 || strlen(name) > THIN_MAX_NAME)
        return cli_fail(err, errlen, "%s: tensor name of %zu bytes (must be 1..%d)", label,
                    strlen(name), THIN_MAX_NAME);
    if (!json_is_object(v))
        return cli_fail(err, errlen, "%s: tensor '%s': description is not an object", label, name);
    const char *k;
    const json_t *m;
    json_object_foreach((json_t *)v, k, m)
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return cli_fail(err, errlen, "%s: tensor '%s': unknown member '%s'", label, name, k);
    const json_t *dt = json_object_get(v, "dtype");
    if (!json_is_string(dt))
        return cli_fail(err, errlen, "%s: tensor '%s': missing or non-string dtype", label, name);
    t->dtype = st_dtype_from_name(json_string_value(dt));
    if (t->dtype == THIN_DTYPE_INVALID)
        return cli_fail(err, errlen, "%s: tensor '%s': unknown dtype '%s'", label, name,
                    json_string_value(dt));
    size_t rank, n_off;
    const json_t *sh = json_object_get(v, "shape");
    if (json_is_array(sh) && json_array_size(sh) > THIN_MAX_RANK)
        return cli_fail(err, errlen, "%s: tensor '%s': rank %zu exceeds the limit of %d", label,
                    name, json_array_size(sh), THIN_MAX_RANK);
    if (parse_u64_array(sh, t->shape, THIN_MAX_RANK, &rank))
        return cli_fail(err, errlen, "%s: tensor '%s': shape is not an array of non-negative integers",
                    label, name);
    t->rank = (uint32_t)rank;
    uint64_t off[2];
    if (parse_u64_array(json_object_get(v, "data_offsets"), off, 2, &n_off) || n_off != 2)
        return cli_fail(err, errlen, "%s: tensor '%s': data_offsets is not [begin, end]", label, name);
    if (off[0] > off[1])
        return cli_fail(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] has begin > end",
                    label, name, (unsigned long long)off[0], (unsigned long long)off[1]);
    t->begin = off[0];
    t->end = off[1];
    uint64_t nbytes = st_dtype_size(t->dtype);
    for (size_t i = 0; i < rank; i++) {
        if (t->shape[i] != 0 && nbytes > UINT64_MAX / t->shape[i])
            return cli_fail(err, errlen, "%s: tensor '%s': shape overflows a 64-bit byte count",
                        label, name);
        nbytes *= t->shape[i];
    }
    if (nbytes != t->end - t->begin)
        return cli_fail(err, errlen,
                    "%s: tensor '%s': size mismatch: shape and dtype %s give %llu bytes but "
                    "data_offsets [%llu, %llu] span %llu", label, name, json_string_value(dt),
                    (unsigned long long)nbytes, (unsigned long long)t->begin,
                    (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
    t->name = strdup(name);
    return t->name ? 0 : cli_fail(err, errlen, "%s: out of memory", label);
}

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    /* empty tensors first, so that a zero-size tensor never hides an overlap */
    return (x->end > y->end) - (x->end < y->end);
}

/* Sorted by begin, the tensors must tile [0, data_size) without gap or overlap. */
static int check_tiling(st_header *h, const char *label, char *err, size_t errlen)
{
    qsort(h->tensors, h->n_tensors, sizeof *h->tensors, by_begin);
    uint64_t pos = 0;
    for (size_t i = 0; i < h->n_tensors; i++) {
        const st_tensor *t = &h->tensors[i];
        if (t->begin < pos)
            return cli_fail(err, errlen, "%s: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' "
                        "(ends at %llu)", label, t->name, (unsigned long long)t->begin,
                        (unsigned long long)t->end, h->tensors[i - 1].name,
                        (unsigned long long)pos);
        if (t->begin > pos)
            return cli_fail(err, errlen, "%s: gap of %llu unused bytes before tensor '%s' (data "
                        "section bytes %llu..%llu)", label,
                        (unsigned long long)(t->begin - pos), t->name,
                        (unsigned long long)pos, (unsigned long long)t->begin);
        pos = t->end;
    }
    h->data_size = pos;
    return 0;
}

static int parse_members(json_t *root, const char *label, st_header *h, char *err, size_t errlen)
{
    size_t cap = json_object_size(root);
    h->tensors = calloc(cap ? cap : 1, sizeof *h->tensors);
    if (!h->tensors)
        return cli_fail(err, errlen, "%s: out of memory", label);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) {
            if (parse_metadata(v, label, err, errlen))
                return -1;
            h->metadata = json_incref(v);
            continue;
        }
        if (parse_tensor(k, v, label, &h->tensors[h->n_tensors], err, errlen))
            return -1;
        h->n_tensors++;
    }
    return 0;
}

int st_parse_header(const char *json, size_t len, const char *label, st_header *out, char *err,
                    size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t bad = utf8_invalid_at((const unsigned char *)json, len);
    if (bad < len)
        return cli_fail(err, errlen, "%s: header is not valid UTF-8 (byte %zu of the header)", label,
                    bad);
    if (len == 0 || json[0] != '{')
        return cli_fail(err, errlen, "%s: header does not start with '{'", label);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cli_fail(err, errlen, "%s: header is not valid JSON: %s (line %d, column %d)", label,
                    je.text, je.line, je.column);
    int rc = -1;
    if (!json_is_object(root))
        cli_fail(err, errlen, "%s: header is not a JSON object", label);
    else if (parse_members(root, label, out, err, errlen) == 0 &&
             check_tiling(out, label, err, errlen) == 0)
        rc = 0;
    json_decref(root);
    if (rc) {
        st_header_free(out);
        return -1;
    }
    out->header_len = len;
    out->data_start = 8 + (uint64_t)len;
    return 0;
}

int st_check_data_size(const st_header *h, uint64_t data_size, const char *label, char *err,
                       size_t errlen)
{
    if (h->data_size > data_size) {
        const st_tensor *t = &h->tensors[h->n_tensors - 1];
        return cli_fail(err, errlen, "%s: tensor '%s' (bytes %llu..%llu) lies past the end of the "
                    "data section (%llu bytes): out of bounds or truncated", label, t->name,
                    (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)data_size);
    }
    if (h->data_size < data_size)
        return cli_fail(err, errlen, "%s: %llu trailing bytes after the last tensor (data ends at "
                    "%llu, the data section is %llu bytes)", label,
                    (unsigned long long)(data_size - h->data_size),
                    (unsigned long long)h->data_size, (unsigned long long)data_size);
    return 0;
}

int st_parse_memory(const void *data, uint64_t size, const char *label, st_header *out,
                    char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (size < 8)
        return cli_fail(err, errlen, "%s: truncated: %llu bytes, too short for the 8-byte header "
                    "length", label, (unsigned long long)size);
    uint64_t n;
    char msg[256];
    if (st_parse_prefix(data, size, &n, msg, sizeof msg))
        return cli_fail(err, errlen, "%s: %s", label, msg);
    if (st_parse_header((const char *)data + 8, (size_t)n, label, out, err, errlen))
        return -1;
    if (st_check_data_size(out, size - 8 - n, label, err, errlen)) {
        st_header_free(out);
        return -1;
    }
    return 0;
}

void st_header_free(st_header *h)
{
    for (size_t i = 0; i < h->n_tensors; i++)
        free(h->tensors[i].name);
    free(h->tensors);
    json_decref(h->metadata);
    memset(h, 0, sizeof *h);
}

long st_header_find(const st_header *h, const char *name)
{
    for (size_t i = 0; i < h->n_tensors; i++)
        if (strcmp(h->tensors[i].name, name) == 0)
            return (long)i;
    return -1;
}
