/*
 * tok_norm.c — the text passes before the model: the normalizer program (literal and regex
 * replacements, prepend, Unicode normalization forms) and the regex pre-tokenizer (Isolated
 * splits), through PCRE2 in UTF mode with Unicode properties, tolerant of invalid UTF-8 (invalid
 * bytes never match), JIT when the library has it. The normalization forms come from utf8proc,
 * applied to each run of valid UTF-8 (invalid bytes pass through as they are).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_private.h"

/* Llama-3 (and SmolLM3) pre-tokenizer. */
const char tok_re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* GPT-2's pattern, used by ByteLevel(use_regex = true). */
const char tok_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void *tok_regex_compile(const char *pat, size_t len, char *err, size_t errlen)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, len,
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo,
                                     NULL);
    if (!code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        cli_fail(err, errlen, "bad regex at offset %zu: %s", (size_t)eo, (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    return code;
}

void tok_regex_free(void *code)
{
    pcre2_code_free(code);
}

/* Growable byte buffer. */
typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static int buf_add(buf *b, const char *s, size_t len)
{
    if (len > SIZE_MAX - b->n - 1)
        return -1;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + len + 1)
            cap = cap > SIZE_MAX / 2 ? b->n + len + 1 : cap * 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (len)
        memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
    return 0;
}

/* Bytes to step over when a match is empty: one character, or one invalid byte. */
static size_t step_len(const char *s, size_t len, size_t at)
{
    size_t l = tok_utf8_valid_len((const unsigned char *)s + at, len - at);
    return l ? l : 1;
}

static int replace_str(const tok_norm_op *op, const char *s, size_t len, buf *o)
{
    size_t i = 0;
    while (i < len) {
        if (op->pattern_len && len - i >= op->pattern_len &&
            !memcmp(s + i, op->pattern, op->pattern_len)) {
            if (buf_add(o, op->content, op->content_len))
                return -1;
            i += op->pattern_len;
        } else if (buf_add(o, s + i++, 1))
            return -1;
    }
    return 0;
}

static int replace_re(const tok_norm_op *op, const char *s, size_t len, buf *o)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(op->code, NULL);
    if (!md)
        return -1;
    size_t pos = 0, from = 0;
    int rc = 0;
    while (from <= len) {
        int m = pcre2_match(op->code, (PCRE2_SPTR)s, len, from, 0, md, NULL);
        if (m < 0 && m != PCRE2_ERROR_NOMATCH) {
            rc = -1;
            break;
        }
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] > len || ov[1] > len || ov[1] < ov[0] || ov[0] < pos) {
            rc = -1;
            break;
        }
        if (buf_add(o, s + pos, ov[0] - pos) || buf_add(o, op->content, op->content_len)) {
            rc = -1;
            break;
        }
        pos = ov[1];
        from = ov[1] > ov[0] ? ov[1] : (ov[1] < len ? ov[1] + step_len(s, len, ov[1]) : len + 1);
        if (ov[1] == ov[0] && ov[1] < len) { /* keep the character stepped over */
            if (buf_add(o, s + pos, from - pos)) {
                rc = -1;
                break;
            }
            pos = from;
        }
    }
    pcre2_match_data_free(md);
    return rc ? rc : buf_add(o, s + pos, len - pos);
}

/* s in Unicode normalization form f, run by run of valid UTF-8. */
static int unicode_form(tok_uform f, const char *s, size_t len, buf *o)
{
    const utf8proc_option_t opt =
        UTF8PROC_STABLE | (f == TOK_NFC || f == TOK_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
        (f == TOK_NFKC || f == TOK_NFKD ? UTF8PROC_COMPAT : 0);
    size_t i = 0;
    while (i < len) {
        size_t j = i, l;
        while (j < len && (l = tok_utf8_valid_len((const unsigned char *)s + j, len - j)))
            j += l;
        if (j > i) {
            utf8proc_uint8_t *d = NULL;
            const utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s + i,
                                                    (utf8proc_ssize_t)(j - i), &d, opt);
            const int rc = n < 0 ? -1 : buf_add(o, (const char *)d, (size_t)n);
            free(d);
            if (rc)
                return -1;
        }
        if (j < len && buf_add(o, s + j, 1)) /* an invalid byte */
            return -1;
        i = j + 1;
    }
    return 0;
}

static int apply_op(const tok_norm_op *op, const char *s, size_t len, int first, buf *o)
{
    switch (op->kind) {
    case TOK_NORM_REPLACE_STR:
        return replace_str(op, s, len, o);
    case TOK_NORM_REPLACE_RE:
        return replace_re(op, s, len, o);
    case TOK_NORM_PREPEND:
        if (len && (first || !op->first_only) && buf_add(o, op->content, op->content_len))
            return -1;
        return buf_add(o, s, len);
    case TOK_NORM_UNICODE:
        return unicode_form(op->uform, s, len, o);
    }
    return -1;
}

int tok_normalize(const tok *t, const char *s, size_t len, int first, char **out, size_t *out_len)
{
    buf cur = {0};
    if (buf_add(&cur, s, len))
        return -1;
    for (uint32_t i = 0; i < t->n_norm; i++) {
        buf next = {0};
        if (buf_add(&next, "", 0) || apply_op(&t->norm[i], cur.p, cur.n, first, &next)) {
            free(next.p);
            free(cur.p);
            return -1;
        }
        free(cur.p);
        cur = next;
    }
    *out = cur.p;
    *out_len = cur.n;
    return 0;
}

static int split_level(const tok *t, pcre2_match_data **md, uint32_t level, const char *s,
                       size_t len, tok_piece_fn fn, void *ctx)
{
    if (level == t->n_split)
        return len ? fn(ctx, s, len) : 0;
    size_t pos = 0, from = 0;
    while (from < len) {
        int m = pcre2_match(t->split[level], (PCRE2_SPTR)s, len, from, 0, md[level], NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0)
            return -1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md[level]);
        if (ov[0] > len || ov[1] > len || ov[1] < ov[0] || ov[0] < pos)
            return -1;
        if (ov[1] == ov[0]) { /* empty match: not a piece */
            from = ov[0] + step_len(s, len, ov[0]);
            continue;
        }
        if (ov[0] > pos && split_level(t, md, level + 1, s + pos, ov[0] - pos, fn, ctx))
            return -1;
        if (split_level(t, md, level + 1, s + ov[0], ov[1] - ov[0], fn, ctx))
            return -1;
        pos = from = ov[1];
    }
    return pos < len ? split_level(t, md, level + 1, s + pos, len - pos, fn, ctx) : 0;
}

int tok_pretokenize(const tok *t, const char *s, size_t len, tok_piece_fn fn, void *ctx)
{
    pcre2_match_data *md[TOK_MAX_SPLITS] = {0};
    int rc = 0;
    for (uint32_t i = 0; i < t->n_split && !rc; i++)
        if (!(md[i] = pcre2_match_data_create_from_pattern(t->split[i], NULL)))
            rc = -1;
    if (!rc)
        rc = split_level(t, md, 0, s, len, fn, ctx);
    for (uint32_t i = 0; i < t->n_split; i++)
        pcre2_match_data_free(md[i]);
    return rc;
}
