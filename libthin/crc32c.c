/*
 * crc32c.c — CRC-32C (Castagnoli) for record headers, the file header and the trailer.
 * Uses the SSE4.2 crc32 instruction when the CPU has it, else a table (built once).
 */
#include <pthread.h>
#include <string.h>

#include "thin_private.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define THIN_CRC_HW 1
#endif

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n)
{
    pthread_once(&crc_once, crc_table_init);
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#ifdef THIN_CRC_HW
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

uint32_t thin_crc32c(const void *data, size_t n)
{
    const uint8_t *p = data;
#ifdef THIN_CRC_HW
    if (__builtin_cpu_supports("sse4.2")) return ~crc_hw(~0u, p, n);
#endif
    return ~crc_sw(~0u, p, n);
}
