/*
 * gguf_vocab.h — recognise and check a vocab-only GGUF file for `thin-pack --tokenizer`.
 *
 * GGUF layout (little-endian): magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 KV count,
 * then KV pairs: key (u64 length + bytes), u32 value type, value. Types: 0 u8, 1 i8, 2 u16, 3 i16,
 * 4 u32, 5 i32, 6 f32, 7 bool, 8 string (u64 length + bytes), 9 array (u32 item type, u64 count,
 * items), 10 u64, 11 i64, 12 f64. The file is kept whole as a blob; this only validates it.
 */
#ifndef THIN_PACK_GGUF_VOCAB_H
#define THIN_PACK_GGUF_VOCAB_H

#include <stddef.h>
#include <stdint.h>

/* 1 when data starts with the GGUF magic. */
int gguf_is_gguf(const void *data, size_t size);

/* Walks the header and every KV pair, checking each length against the file and against
 * overflow, and requires "tokenizer.ggml.tokens" to be an array of strings. Sets *n_tokens.
 * Returns 0, or -1 with a message in err. */
int gguf_vocab_check(const void *data, size_t size, uint64_t *n_tokens, char *err, size_t errlen);

#endif /* THIN_PACK_GGUF_VOCAB_H */
