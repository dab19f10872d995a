/*
 * chat.h — the chat prompt of thin-run's --chat mode: one optional system message and one user
 * message rendered as SmolLM3's chat template does (HuggingFaceTB/SmolLM3-3B, tokenizer_config.json
 * chat_template), as ChatML for other <|im_start|> templates (with Qwen2.5's default system
 * message when its template has one), or as Llama 3's header format:
 *   Llama 3.0: "<|begin_of_text|>" [+ "<|start_header_id|>system<|end_header_id|>\n\n" + system +
 *   "<|eot_id|>"] + "<|start_header_id|>user<|end_header_id|>\n\n" + user + "<|eot_id|>" +
 *   "<|start_header_id|>assistant<|end_header_id|>\n\n" (messages trimmed, as |trim does);
 *   Llama 3.1 and later: the system block always, "Cutting Knowledge Date: December 2023\nToday
 *   Date: " + date + "\n\n" + system, the date the template's fixed one ("26 Jul 2024") or, where
 *   it calls strftime_now, today's as "%d %b %Y";
 * or as Mistral's [INST] format: "<s>[INST] " + user + " [/INST]" (" [/INST]" without its space
 * where the template writes "[/INST]" alone, as v0.3's does); a system message goes before the
 * user's, + "\n\n", where the template has a system_message, and is refused where it has none;
 * Mistral v7 (Tekken: Mistral Small 3.x, whose template has [SYSTEM_PROMPT]): "<s>" +
 * "[SYSTEM_PROMPT]" + system + "[/SYSTEM_PROMPT]" + "[INST]" + user + "[/INST]", the system
 * message the template's default_system_message where none is given: string literals joined by +,
 * with names set from strftime_now (today's local date in its format; `today` of chat_opts in
 * its place where set); a default of any other form is refused (--system gives one);
 * or as Gemma's turns: "<bos><start_of_turn>user\n" [+ system + "\n\n"] + user (trimmed) +
 * "<end_of_turn>\n<start_of_turn>model\n" (Gemma 3's template puts a system message at the start of
 * the first user turn).
 *
 * SmolLM3 rendering, for one turn with add_generation_prompt:
 *   "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: DD Month YYYY\n"
 *   "Reasoning Mode: /think|/no_think\n\n## Custom Instructions\n\n" + (system message, or the
 *   template's default persona for the mode) + "\n\n" + "\n\n<|im_end|>\n"
 *   "<|im_start|>user\n" + user + "<|im_end|>\n"
 *   "<|im_start|>assistant\n" (+ "<think>\n\n</think>\n" in /no_think mode).
 * Thinking is on by default (the template's enable_thinking default); "/think" or "/no_think" in
 * the system message switches it and is removed from the text; "/system_override" in the system
 * message replaces the whole metadata block by the message itself. Tools (xml_tools,
 * python_tools) and multi-turn histories are not supported.
 */
#ifndef THIN_CHAT_H
#define THIN_CHAT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum chat_format {
    CHAT_FORMAT_NONE = 0,    /* no known chat template: --chat cannot be used */
    CHAT_FORMAT_CHATML = 1,  /* <|im_start|>role\n...<|im_end|>\n */
    CHAT_FORMAT_SMOLLM3 = 2, /* ChatML with SmolLM3's metadata system block and think tags */
    CHAT_FORMAT_LLAMA3 = 3,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_FORMAT_LLAMA31 = 4, /* the same with Llama 3.1's dated system block */
    CHAT_FORMAT_MISTRAL = 5, /* <s>[INST] user [/INST] */
    CHAT_FORMAT_GEMMA = 6,   /* <bos><start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n */
} chat_format;

typedef enum chat_think {
    CHAT_THINK_DEFAULT = -1, /* the template's default: thinking on */
    CHAT_THINK_OFF = 0,      /* enable_thinking=False: "/no_think" */
    CHAT_THINK_ON = 1,       /* enable_thinking=True: "/think" */
} chat_think;

typedef struct chat_opts {
    chat_format format;
    const char *system;  /* system message, or NULL */
    chat_think think;    /* SmolLM3 reasoning mode */
    const char *today;   /* the date text of SmolLM3's or Llama 3.1's "Today Date"; NULL = the
                            template's fixed date, else the local date in its format */
    const char *default_system; /* the template's system message when none is given, or NULL */
    const char *fixed_date;     /* Llama 3.1's fixed "Today Date", or NULL (the local date) */
    int inst_space;             /* Mistral: " [/INST]" (1) or "[/INST]" (0) */
    int takes_system;           /* Mistral: the template places a system message */
    int system_block;           /* Mistral v7 (Tekken): a system message as "[SYSTEM_PROMPT]" +
                                   text + "[/SYSTEM_PROMPT]", and its template's
                                   default_system_message when none is given */
    const char *tpl;            /* the template's text (Mistral v7's default system message) */
} chat_opts;

/* Picks the format from a chat template's text (NULL gives CHAT_FORMAT_NONE). */
chat_format chat_detect(const char *chat_template);

/* Sets o's format, default_system and fixed_date from a chat template's text. */
void chat_from_template(const char *chat_template, chat_opts *o);

/* Renders the prompt for one user message into a malloc'd, NUL-terminated string (*out, *len),
 * ready to encode with special-token parsing on and no extra BOS. Returns 0, or -1 with a message
 * in err (unknown format, no memory). */
int chat_render(const chat_opts *o, const char *user, char **out, size_t *len, char *err,
                size_t errlen);

/* The text of the token that ends an assistant turn ("<|im_end|>", "<|eot_id|>"). */
const char *chat_stop_text(chat_format format);

#ifdef __cplusplus
}
#endif
#endif /* THIN_CHAT_H */
