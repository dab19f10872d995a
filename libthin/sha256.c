/*
 * sha256.c — SHA-256 through libcrypto's EVP interface (uses SHA-NI where the CPU has it), and the
 * whole-file digest of SPEC.md §5.
 */
#include <openssl/evp.h>

#include "thin_private.h"

thin_status thin_sha256(const void *data, size_t n, uint8_t out[32])
{
    unsigned len = 32;
    return EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) == 1 ? THIN_OK : THIN_E_INTERNAL;
}

thin_status thin_sha256_init(thin_sha256_ctx *c)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    c->md = md;
    if (!md) return THIN_E_NOMEM;
    return EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? THIN_OK : THIN_E_INTERNAL;
}

thin_status thin_sha256_update(thin_sha256_ctx *c, const void *data, size_t n)
{
    if (n == 0) return THIN_OK;
    return EVP_DigestUpdate(c->md, data, n) == 1 ? THIN_OK : THIN_E_INTERNAL;
}

thin_status thin_sha256_final(thin_sha256_ctx *c, uint8_t out[32])
{
    unsigned len = 32;
    thin_status s = EVP_DigestFinal_ex(c->md, out, &len) == 1 ? THIN_OK : THIN_E_INTERNAL;
    if (s == THIN_OK) s = EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) == 1 ? THIN_OK
                                                                           : THIN_E_INTERNAL;
    return s;
}

void thin_sha256_free(thin_sha256_ctx *c)
{
    EVP_MD_CTX_free(c->md);
    c->md = NULL;
}

/* Domain tag: the ASCII bytes "thin-digest-v1" and one zero byte. */
static const char digest_tag[15] = "thin-digest-v1";

thin_status thin_digest_compute(const char *manifest, size_t manifest_len,
                                const uint8_t (*chunk_sha)[32], size_t n_chunks, uint8_t out[32])
{
    uint8_t mh[32];
    thin_status s = thin_sha256(manifest, manifest_len, mh);
    if (s) return s;
    thin_sha256_ctx c;
    s = thin_sha256_init(&c);
    if (!s) s = thin_sha256_update(&c, digest_tag, sizeof digest_tag);
    if (!s) s = thin_sha256_update(&c, mh, 32);
    if (!s && n_chunks) s = thin_sha256_update(&c, chunk_sha, n_chunks * 32);
    if (!s) s = thin_sha256_final(&c, out);
    thin_sha256_free(&c);
    return s;
}
