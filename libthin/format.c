/*
 * format.c — encoding and decoding of the fixed-size structures of SPEC.md §1, §2 and §4: the file
 * header, record headers and the trailer; codec names; small helpers for messages.
 */
#include <stdio.h>
#include <string.h>

#include "thin_private.h"

const uint8_t thin_file_magic[8] = {0x89, 'T', 'H', 'N', '\r', '\n', 0x1A, '\n'};
static const char rec_magic[4] = {'T', 'R', 'E', 'C'};
static const char trailer_magic[8] = {'T', 'H', 'N', 'T', 'R', 'A', 'I', 'L'};

void thin_header_encode(uint8_t out[64])
{
    memset(out, 0, 64);
    memcpy(out, thin_file_magic, 8);
    thin_put16(out + 8, THIN_VERSION_MAJOR);
    thin_put16(out + 10, THIN_VERSION_MINOR);
    thin_put32(out + 12, 0);
    thin_put32(out + 16, THIN_HEADER_SIZE);
    thin_put32(out + 20, THIN_RECORD_ALIGN);
    thin_put32(out + 24, THIN_DATA_ALIGN);
    thin_put32(out + 60, thin_crc32c(out, 60));
}

thin_status thin_header_decode(const uint8_t in[64], uint16_t *major, uint16_t *minor,
                               const char **why)
{
    if (memcmp(in, thin_file_magic, 8) != 0) {
        int mangled = in[0] == 0x89 && memcmp(in + 1, "THN", 3) == 0;
        *why = mangled ? "bad magic: the file was mangled by a text-mode transfer (CR/LF changed)"
                       : "not a .thin file (bad magic)";
        return THIN_E_BAD_MAGIC;
    }
    *major = thin_get16(in + 8);
    *minor = thin_get16(in + 10);
    if (*major != THIN_VERSION_MAJOR) {
        *why = "unsupported format major version (this library reads version 1)";
        return THIN_E_VERSION;
    }
    if (thin_get32(in + 60) != thin_crc32c(in, 60)) {
        *why = "file header CRC-32C mismatch";
        return THIN_E_BAD_HEADER;
    }
    if (thin_get32(in + 12) != 0) {
        *why = "file header: unknown flags";
        return THIN_E_BAD_HEADER;
    }
    if (thin_get32(in + 16) != THIN_HEADER_SIZE || thin_get32(in + 20) != THIN_RECORD_ALIGN ||
        thin_get32(in + 24) != THIN_DATA_ALIGN) {
        *why = "file header: unsupported header size or alignment";
        return THIN_E_BAD_HEADER;
    }
    if (!thin_all_zero(in + 28, 32)) {
        *why = "file header: reserved bytes are not zero";
        return THIN_E_PADDING;
    }
    return THIN_OK;
}

void thin_record_encode(const thin_record *r, uint8_t out[64])
{
    memset(out, 0, 64);
    memcpy(out, rec_magic, 4);
    thin_put16(out + 4, r->type);
    thin_put16(out + 6, r->codec);
    thin_put32(out + 8, r->entry);
    thin_put32(out + 12, r->chunk);
    thin_put64(out + 16, r->offset);
    thin_put64(out + 24, r->stored);
    thin_put64(out + 32, r->raw);
    memcpy(out + 40, r->sha, 16);
    out[56] = r->kind;
    thin_put32(out + 60, thin_crc32c(out, 60));
}

thin_status thin_record_decode(const uint8_t in[64], thin_record *r, const char **why)
{
    if (memcmp(in, rec_magic, 4) != 0) {
        *why = "record header: bad magic";
        return THIN_E_BAD_RECORD;
    }
    if (thin_get32(in + 60) != thin_crc32c(in, 60)) {
        *why = "record header: CRC-32C mismatch";
        return THIN_E_BAD_RECORD;
    }
    r->type = thin_get16(in + 4);
    r->codec = thin_get16(in + 6);
    r->entry = thin_get32(in + 8);
    r->chunk = thin_get32(in + 12);
    r->offset = thin_get64(in + 16);
    r->stored = thin_get64(in + 24);
    r->raw = thin_get64(in + 32);
    memcpy(r->sha, in + 40, 16);
    r->kind = in[56];
    if (r->type < THIN_REC_ENTRY || r->type > THIN_REC_MANIFEST) {
        *why = "record header: unknown record type";
        return THIN_E_BAD_RECORD;
    }
    if (r->kind > THIN_KIND_BLOB) {
        *why = "record header: unknown entry kind";
        return THIN_E_BAD_RECORD;
    }
    if (in[57] | in[58] | in[59]) {
        *why = "record header: reserved bytes are not zero";
        return THIN_E_PADDING;
    }
    return THIN_OK;
}

void thin_trailer_encode(const thin_trailer *t, uint8_t out[64])
{
    memset(out, 0, 64);
    memcpy(out, trailer_magic, 8);
    thin_put64(out + 8, t->manifest_offset);
    thin_put64(out + 16, t->manifest_size);
    memcpy(out + 24, t->digest, 32);
    thin_put32(out + 60, thin_crc32c(out, 60));
}

thin_status thin_trailer_decode(const uint8_t in[64], thin_trailer *t, const char **why)
{
    if (memcmp(in, trailer_magic, 8) != 0) {
        *why = "no trailer at the end: the file is truncated or was not finished";
        return THIN_E_TRUNCATED;
    }
    if (thin_get32(in + 60) != thin_crc32c(in, 60)) {
        *why = "trailer CRC-32C mismatch";
        return THIN_E_BAD_TRAILER;
    }
    if (thin_get32(in + 56) != 0) {
        *why = "trailer: reserved bytes are not zero";
        return THIN_E_PADDING;
    }
    t->manifest_offset = thin_get64(in + 8);
    t->manifest_size = thin_get64(in + 16);
    memcpy(t->digest, in + 24, 32);
    return THIN_OK;
}

const char *thin_codec_name(thin_codec c)
{
    return c == THIN_CODEC_ZSTD ? "zstd" : c == THIN_CODEC_NONE ? "none" : "unknown";
}

int thin_codec_from_name(const char *s)
{
    if (!strcmp(s, "none")) return THIN_CODEC_NONE;
    if (!strcmp(s, "zstd")) return THIN_CODEC_ZSTD;
    return -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int thin_hex32_parse(const char *s, uint8_t out[32])
{
    if (strlen(s) != 64) return -1;
    for (int i = 0; i < 32; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void thin_verrf(char *err, const char *label, const char *fmt, va_list ap)
{
    int n = snprintf(err, THIN_ERR_LEN, "%s: ", label ? label : "(unnamed)");
    if (n < 0 || n >= THIN_ERR_LEN) n = 0;
    vsnprintf(err + n, THIN_ERR_LEN - (size_t)n, fmt, ap);
}

thin_status thin_errf(char *err, const char *label, thin_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    thin_verrf(err, label, fmt, ap);
    va_end(ap);
    return s;
}

int thin_all_zero(const uint8_t *p, size_t n)
{
    uint64_t acc = 0;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        acc |= v;
        p += 8;
        n -= 8;
    }
    while (n--) acc |= *p++;
    return acc == 0;
}
