/*
 * fuzz_thin_fix.h — makes mutated .thin bytes self-consistent again so that the fuzzer gets past
 * the checksums into the structure and manifest checks: recomputes the file header CRC, each
 * record's payload SHA-256 prefix (when the payload lies in the buffer) and CRC, and the trailer
 * CRC. The whole-file digest and the manifest's chunk hashes are left as they are (verify still
 * sees those). Included by the .thin fuzz targets only.
 */
#ifndef FUZZ_THIN_FIX_H
#define FUZZ_THIN_FIX_H

#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t fuzz_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static uint64_t fuzz_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void fuzz_put_crc(uint8_t *h)
{
    uint32_t c = fuzz_crc32c(h, 60);
    for (int i = 0; i < 4; i++) h[60 + i] = (uint8_t)(c >> (8 * i));
}

/* Returns a fixed-up malloc'd copy of data (size bytes), or NULL. */
static uint8_t *fuzz_thin_fix(const uint8_t *data, size_t size)
{
    uint8_t *b = malloc(size ? size : 1);
    if (!b) return NULL;
    memcpy(b, data, size);
    if (size < 128) return b;
    fuzz_put_crc(b);
    for (size_t off = 64; off + 64 <= size - 64; off += 64) {
        uint8_t *h = b + off;
        if (memcmp(h, "TREC", 4) != 0) continue;
        uint64_t poff = fuzz_le64(h + 16), stored = fuzz_le64(h + 24);
        if (poff <= size && stored <= size - poff && stored <= ((uint64_t)16 << 20)) {
            unsigned char md[32];
            unsigned mdlen = 0;
            if (EVP_Digest(b + poff, (size_t)stored, md, &mdlen, EVP_sha256(), NULL) == 1)
                memcpy(h + 40, md, 16);
        }
        fuzz_put_crc(h);
    }
    if (memcmp(b + size - 64, "THNTRAIL", 8) == 0) fuzz_put_crc(b + size - 64);
    return b;
}

#endif /* FUZZ_THIN_FIX_H */
