/*
 * tokenizer.h — text ↔ token ids for the tokenizers that travel inside a .thin file.
 *
 * Two model types: SentencePiece-style BPE with byte fallback (scores rank merges; Llama-2,
 * stories260K's tokenizer.json) and byte-level BPE with a regular-expression pre-tokenizer
 * (GPT-2 byte map, merges rank pairs; Llama-3, SmolLM3) through PCRE2. Loaded from a Hugging Face
 * tokenizer.json (+ tokenizer_config.json) or from the vocabulary of a vocab-only GGUF file.
 */
#ifndef THIN_TOKENIZER_H
#define THIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tok tok;

typedef enum tok_kind {
    TOK_SPM_BPE = 1,  /* SentencePiece BPE, byte fallback */
    TOK_BYTE_BPE = 2, /* byte-level BPE (GPT-2 style) */
} tok_kind;

/* Loads from tokenizer.json bytes and (optionally, config may be NULL) tokenizer_config.json.
 * Returns 0, or -1 with a one-line message in err. */
int tok_load_hf(tok **out, const char *json, size_t json_len, const char *config,
                size_t config_len, char *err, size_t errlen);
/* Loads from a (vocab-only) GGUF file image: tokenizer.ggml.* keys. */
int tok_load_gguf(tok **out, const void *data, size_t size, char *err, size_t errlen);
void tok_free(tok *t);

tok_kind tok_type(const tok *t);
uint32_t tok_vocab_size(const tok *t);
int32_t tok_bos(const tok *t);          /* -1 if none */
int32_t tok_eos(const tok *t);          /* -1 if none */
int tok_add_bos(const tok *t);          /* whether encode should prepend BOS by default */
/* Looks up the id of an exact token string (e.g. "<|im_end|>"), or -1. */
int32_t tok_find(const tok *t, const char *piece);

/* Encodes text (len bytes, UTF-8; invalid bytes are handled by byte fallback) into a malloc'd
 * array. Special tokens written literally in the text (e.g. "<|im_start|>") become their ids when
 * parse_special is set. BOS is prepended when add_bos is set and the tokenizer has one.
 * Returns 0, or -1 with a message. */
int tok_encode(const tok *t, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, size_t *n_ids, char *err, size_t errlen);

/* The raw bytes of one token as decode would emit them in the middle of a text (byte-fallback and
 * byte-level pieces mapped back to bytes, "▁" to space); special tokens give their text. */
int tok_piece(const tok *t, int32_t id, const char **bytes, size_t *len);

/* Streaming decoder: feed ids one by one, get back only complete UTF-8 (never half a character).
 * Applies the tokenizer's decode rules (leading-space strip after BOS for SentencePiece). */
typedef struct tok_decoder {
    const tok *t;
    int n_out;              /* pieces emitted so far */
    unsigned char pend[8];  /* bytes of an incomplete UTF-8 sequence */
    size_t n_pend;
} tok_decoder;

void tok_decoder_init(tok_decoder *d, const tok *t);
/* Appends the text for id to out (capacity cap); *n receives the bytes written. Returns 0 or -1. */
int tok_decoder_push(tok_decoder *d, int32_t id, char *out, size_t cap, size_t *n);
/* Flushes an incomplete sequence at the end as U+FFFD. */
int tok_decoder_flush(tok_decoder *d, char *out, size_t cap, size_t *n);

/* --- additions --- */

/* Decodes a whole id sequence (the streaming decoder's rules, flushed at the end) into a malloc'd,
 * NUL-terminated string. Returns 0 or -1 (bad id, no memory). */
int tok_decode(const tok *t, const int32_t *ids, size_t n_ids, char **text, size_t *len);
/* The longest piece in bytes: tok_decoder_push needs cap >= 3 * (tok_max_piece(t) + 4). */
size_t tok_max_piece(const tok *t);
/* The chat template text (tokenizer_config.json chat_template or GGUF tokenizer.chat_template, or
 * what tok_set_chat_template set), or NULL. */
const char *tok_chat_template(const tok *t);

/* Replaces the chat template with text (len bytes: a chat_template.jinja file's), or with
 * is_json the "chat_template" string of a chat_template.json file's object. 0, or -1 with a
 * message in err. */
int tok_set_chat_template(tok *t, const char *text, size_t len, int is_json, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* THIN_TOKENIZER_H */
