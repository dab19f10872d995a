/*
 * tok_utf8.c — UTF-8 validation and GPT-2's byte <-> unicode map.
 *
 * GPT-2's byte-level BPE writes each byte as one printable character: the bytes '!'..'~',
 * 0xA1..0xAC and 0xAE..0xFF stand for themselves (as code points), the other 68 bytes take the
 * code points 256.. in byte order (0x00..0x20 -> 256..288, 0x7F..0xA0 -> 289..322, 0xAD -> 323).
 */
#include "tok_private.h"

size_t tok_utf8_lead_len(unsigned char c)
{
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

size_t tok_utf8_valid_len(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

static int byte_is_self(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

size_t tok_bytelevel_char(unsigned char b, char out[2])
{
    unsigned cp;
    if (byte_is_self(b))
        cp = b;
    else if (b <= 0x20)
        cp = 256 + b;
    else if (b >= 0x7F && b <= 0xA0)
        cp = 289 + (b - 0x7F);
    else
        cp = 323; /* 0xAD */
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* The byte a GPT-2 code point stands for, or -1. */
static int bytelevel_byte(unsigned cp)
{
    if (cp < 256)
        return byte_is_self(cp) ? (int)cp : -1;
    if (cp <= 288)
        return (int)(cp - 256);
    if (cp <= 322)
        return (int)(0x7F + cp - 289);
    if (cp == 323)
        return 0xAD;
    return -1;
}

long tok_bytelevel_decode(const char *s, size_t len, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    long n = 0;
    while (i < len) {
        size_t l = tok_utf8_valid_len(u + i, len - i);
        unsigned cp;
        if (l == 1)
            cp = u[i];
        else if (l == 2)
            cp = ((unsigned)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
        else
            return -1; /* invalid, or a code point the map never uses */
        int b = bytelevel_byte(cp);
        if (b < 0)
            return -1;
        out[n++] = (char)b;
        i += l;
    }
    return n;
}
