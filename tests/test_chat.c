/*
 * test_chat.c — the --chat prompt: SmolLM3's template for one turn (default thinking, /no_think,
 * a system message, /system_override), ChatML, Llama 3, Mistral (v0.1, v0.3, v7), Gemma, and template detection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../tools/thin-run/chat.h"

#define HEAD(mode) "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n" \
                   "Today Date: 16 August 2026\nReasoning Mode: " mode "\n\n## Custom Instructions\n\n"

static char *render(chat_format f, const char *sys, chat_think think, const char *user)
{
    chat_opts o = {.format = f, .system = sys, .think = think, .today = "16 August 2026"};
    char *out, err[128];
    size_t len;
    assert_int_equal(chat_render(&o, user, &out, &len, err, sizeof err), 0);
    assert_int_equal(len, strlen(out));
    return out;
}

static void test_chat_smollm3_no_think_with_system(void **state)
{
    char *s = render(CHAT_FORMAT_SMOLLM3, "SYS", CHAT_THINK_OFF, "USER");
    assert_string_equal(s, HEAD("/no_think") "SYS\n\n\n\n<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n");
    free(s);
}

static void test_chat_smollm3_defaults(void **state)
{
    char *s = render(CHAT_FORMAT_SMOLLM3, NULL, CHAT_THINK_DEFAULT, "Hi");
    const char *head = HEAD("/think") "You are a helpful AI assistant named SmolLM, trained by "
                                      "Hugging Face. Your role";
    assert_true(!strncmp(s, head, strlen(head)));
    const char *tail = "the conclusion.\n\n\n\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n";
    assert_string_equal(s + strlen(s) - strlen(tail), tail);
    free(s);
    s = render(CHAT_FORMAT_SMOLLM3, NULL, CHAT_THINK_OFF, "Hi");
    assert_string_equal(s, HEAD("/no_think") "You are a helpful AI assistant named SmolLM, trained by "
                           "Hugging Face.\n\n\n\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n");
    free(s);
}

static void test_chat_smollm3_system_flags(void **state)
{
    /* "/no_think" in the system message wins over the option and is removed */
    char *s = render(CHAT_FORMAT_SMOLLM3, "Be brief. /no_think  ", CHAT_THINK_ON, "Q");
    assert_string_equal(s, HEAD("/no_think") "Be brief.\n\n\n\n<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n");
    free(s);
    /* only a flag: the default persona of that mode */
    s = render(CHAT_FORMAT_SMOLLM3, "/no_think", CHAT_THINK_DEFAULT, "Q");
    assert_non_null(strstr(s, "## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, "
                              "trained by Hugging Face.\n\n\n\n<|im_end|>"));
    free(s);
    s = render(CHAT_FORMAT_SMOLLM3, "Pirate talk. /system_override", CHAT_THINK_DEFAULT, "Q");
    assert_string_equal(s, "<|im_start|>system\nPirate talk.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
}

static void test_chat_chatml_and_detect(void **state)
{
    char *s = render(CHAT_FORMAT_CHATML, "S", CHAT_THINK_DEFAULT, "U");
    assert_string_equal(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    assert_int_equal(chat_detect(NULL), CHAT_FORMAT_NONE);
    assert_int_equal(chat_detect("{{ bos_token }}"), CHAT_FORMAT_NONE);
    assert_int_equal(chat_detect("{{'<|im_start|>' + role}}"), CHAT_FORMAT_CHATML);
    assert_int_equal(chat_detect("\"<|im_start|>system\\n\" \"Knowledge Cutoff Date: June 2025\\n\" "
                                 "\"Reasoning Mode: \""), CHAT_FORMAT_SMOLLM3);
    assert_string_equal(chat_stop_text(CHAT_FORMAT_SMOLLM3), "<|im_end|>");
    chat_opts o = {.format = CHAT_FORMAT_NONE, .system = NULL, .think = CHAT_THINK_DEFAULT, .today = NULL};
    char *out, err[128];
    size_t len;
    assert_int_equal(chat_render(&o, "x", &out, &len, err, sizeof err), -1);
    /* the local date is used when none is given */
    o.format = CHAT_FORMAT_SMOLLM3;
    assert_int_equal(chat_render(&o, "x", &out, &len, err, sizeof err), 0);
    assert_non_null(strstr(out, "Today Date: "));
    free(out);
}

/* Renders with the options a template gives (today: the date text, or NULL). */
static char *render_tpl(const char *tpl, const char *sys, const char *today, const char *user)
{
    chat_opts o = {.format = CHAT_FORMAT_NONE, .system = sys, .think = CHAT_THINK_DEFAULT, .today = today};
    chat_from_template(tpl, &o);
    char *out, err[128];
    size_t len;
    assert_int_equal(chat_render(&o, user, &out, &len, err, sizeof err), 0);
    return out;
}

/* Rendering "Hi" with the options the template gives fails with a message holding `needle`. */
static void render_tpl_fails(const char *tpl, const char *sys, const char *needle)
{
    chat_opts o = {.format = CHAT_FORMAT_NONE, .system = sys, .think = CHAT_THINK_DEFAULT};
    chat_from_template(tpl, &o);
    char *out, err[128];
    size_t len;
    assert_int_equal(chat_render(&o, "Hi", &out, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, needle));
}

/* Pieces of the Llama 3.0, 3.1 and 3.2 templates (the Instruct models' tokenizer_config.json)
 * and of Qwen2.5's. */
static const char tpl_llama30[] =
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = "
    "bos_token + content %}";
static const char tpl_llama31[] =
    "{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: "
    "December 2023\\n\" }}{{- '<|eot_id|>' }}";
static const char tpl_llama32[] =
    "{%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- else "
    "%}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}{{- \"<|start_header_id|>system"
    "<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}<|eot_id|>";
static const char tpl_qwen25[] =
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\\n' }}{%- endif %}";

static void test_chat_llama3(void **state)
{
    (void)state;
    assert_int_equal(chat_detect(tpl_llama30), CHAT_FORMAT_LLAMA3);
    assert_int_equal(chat_detect(tpl_llama31), CHAT_FORMAT_LLAMA31);
    assert_string_equal(chat_stop_text(CHAT_FORMAT_LLAMA31), "<|eot_id|>");
    char *s = render_tpl(tpl_llama30, NULL, NULL, " Hi \n");
    assert_string_equal(s, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    s = render_tpl(tpl_llama30, "Be brief.", NULL, "Hi");
    assert_string_equal(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
                           "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    /* 3.1: the dated system block always, with the template's fixed date */
    s = render_tpl(tpl_llama31, NULL, NULL, "Hi");
    assert_string_equal(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                           "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                           "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    s = render_tpl(tpl_llama31, "Be brief. ", "05 Dec 2026", "Hi");
    assert_non_null(strstr(s, "Today Date: 05 Dec 2026\n\nBe brief.<|eot_id|>"));
    free(s);
    /* 3.2: today's date, "%d %b %Y" */
    s = render_tpl(tpl_llama32, NULL, NULL, "Hi");
    const char *d = strstr(s, "Today Date: ");
    assert_non_null(d);
    d += strlen("Today Date: ");
    assert_true(d[0] >= '0' && d[0] <= '3' && d[1] >= '0' && d[1] <= '9' && d[2] == ' ' &&
                d[6] == ' ' && !strncmp(d + 11, "\n\n<|eot_id|>", 10));
    free(s);
}

static void test_chat_qwen25_default_system(void **state)
{
    (void)state;
    char *s = render_tpl(tpl_qwen25, NULL, NULL, "Hi");
    assert_string_equal(s, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                           "helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    s = render_tpl(tpl_qwen25, "S", NULL, "Hi");
    assert_string_equal(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    s = render_tpl("{{'<|im_start|>' + role}}", NULL, NULL, "Hi"); /* plain ChatML: none */
    assert_string_equal(s, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(s);
}

/* Pieces of Mistral's templates: v0.1's (no system role) and v0.3's (a system_message before the
 * last user message, no space before [/INST]). */
static const char tpl_mistral01[] =
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ "
    "raise_exception('Only user and assistant roles are supported!') }}{% endif %}";
static const char tpl_mistral03[] =
    "{%- if loop.last and system_message is defined %}{{- \"[INST] \" + system_message + "
    "\"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}{%- else %}{{- \"[INST] \" + "
    "message[\"content\"] + \"[/INST]\" }}";

static void test_chat_mistral(void **state)
{
    (void)state;
    assert_int_equal(chat_detect(tpl_mistral01), CHAT_FORMAT_MISTRAL);
    assert_string_equal(chat_stop_text(CHAT_FORMAT_MISTRAL), "</s>");
    char *s = render_tpl(tpl_mistral01, NULL, NULL, "Hi");
    assert_string_equal(s, "<s>[INST] Hi [/INST]");
    free(s);
    s = render_tpl(tpl_mistral03, NULL, NULL, "Hi");
    assert_string_equal(s, "<s>[INST] Hi[/INST]");
    free(s);
    s = render_tpl(tpl_mistral03, "Be brief.", NULL, "Hi");
    assert_string_equal(s, "<s>[INST] Be brief.\n\nHi[/INST]");
    free(s);
    render_tpl_fails(tpl_mistral01, "S", "no system message");
}

/* Pieces of Mistral Small 3.1's template (v7, Tekken): a default system message with today's date
 * from strftime_now, the system message in [SYSTEM_PROMPT], no spaces inside [INST]. */
static const char tpl_mistral_v7[] =
    "{%- set today = strftime_now(\"%Y-%m-%d\") %}\n{%- set default_system_message = \"You are "
    "Mistral Small 3.\\nThe current date is \" + today + \".\\n\\nSay \\\"I don't know\\\" "
    "when unsure.\" %}\n{{- bos_token }}\n{%- if messages[0]['role'] == 'system' %}{%- set "
    "system_message = messages[0]['content'] %}{%- else %}{%- set system_message = "
    "default_system_message %}{%- endif %}{{- '[SYSTEM_PROMPT]' + system_message + "
    "'[/SYSTEM_PROMPT]' }}{{- '[INST]' + message['content'] + '[/INST]' }}";

static void test_chat_mistral_v7(void **state)
{
    (void)state;
    assert_int_equal(chat_detect(tpl_mistral_v7), CHAT_FORMAT_MISTRAL);
    char *s = render_tpl(tpl_mistral_v7, NULL, "2026-08-16", "Hi");
    assert_string_equal(s, "<s>[SYSTEM_PROMPT]You are Mistral Small 3.\nThe current date is 2026-08-16."
                           "\n\nSay \"I don't know\" when unsure.[/SYSTEM_PROMPT][INST]Hi[/INST]");
    free(s);
    s = render_tpl(tpl_mistral_v7, "Be brief.", NULL, "Hi");
    assert_string_equal(s, "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]");
    free(s);
    /* today's local date in the template's format where no date is given */
    s = render_tpl(tpl_mistral_v7, NULL, NULL, "Hi");
    const char *d = strstr(s, "date is ");
    assert_non_null(d);
    assert_true(d[8] == '2' && d[12] == '-' && d[15] == '-' && d[18] == '.');
    free(s);
    /* without a default: no system block; a default of another form is refused */
    s = render_tpl("{{ '[SYSTEM_PROMPT]' + m + '[/SYSTEM_PROMPT]' + '[INST]' + u + '[/INST]' }}", NULL,
                   NULL, "Hi");
    assert_string_equal(s, "<s>[INST]Hi[/INST]");
    free(s);
    render_tpl_fails("{%- set default_system_message = 'A' + name | upper %}[SYSTEM_PROMPT][INST][/INST]",
                     NULL, "--system");
}

/* Gemma 3's template (its turns, the system message at the start of the first user turn) */
static const char tpl_gemma3[] =
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
    "messages[0]['content'] + '\\n\\n' -%}{%- endif -%}{{ '<start_of_turn>' + role + '\\n' }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{{'<start_of_turn>model\\n'}}";

static void test_chat_gemma(void **state)
{
    (void)state;
    assert_int_equal(chat_detect(tpl_gemma3), CHAT_FORMAT_GEMMA);
    assert_string_equal(chat_stop_text(CHAT_FORMAT_GEMMA), "<end_of_turn>");
    char *s = render_tpl(tpl_gemma3, NULL, NULL, " Hi \n");
    assert_string_equal(s, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    free(s);
    s = render_tpl(tpl_gemma3, "Be brief.", NULL, "Hi");
    assert_string_equal(s, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_smollm3_no_think_with_system),
        cmocka_unit_test(test_chat_smollm3_defaults),
        cmocka_unit_test(test_chat_smollm3_system_flags),
        cmocka_unit_test(test_chat_chatml_and_detect),
        cmocka_unit_test(test_chat_llama3),
        cmocka_unit_test(test_chat_qwen25_default_system),
        cmocka_unit_test(test_chat_mistral),
        cmocka_unit_test(test_chat_mistral_v7),
        cmocka_unit_test(test_chat_gemma),
    };
    return cmocka_run_group_tests_name("chat", tests, NULL, NULL);
}
