/* source.c — input classification, shard listing, mapping and hashed reading (see source.h). */
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "cli.h"

const char *const source_side_names[] = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "chat_template.jinja", "chat_template.json", NULL,
};

int source_side_index(const char *base)
{
    for (int i = 0; source_side_names[i]; i++)
        if (strcmp(base, source_side_names[i]) == 0)
            return i;
    return -1;
}


const char *source_base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int source_map_open(source_map *m, const char *path, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return cli_fail(err, errlen, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cli_fail(err, errlen, "%s: not a regular file", path);
    }
    m->size = (uint64_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return cli_fail(err, errlen, "%s: mmap: %s", path, strerror(e));
        }
        madvise(p, (size_t)m->size, MADV_SEQUENTIAL);
        m->data = p;
    }
    close(fd);
    m->path = strdup(path);
    if (!m->path) {
        source_map_close(m);
        return cli_fail(err, errlen, "out of memory");
    }
    return 0;
}

void source_map_close(source_map *m)
{
    if (m->data)
        munmap((void *)m->data, (size_t)m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}

int source_read_file(const char *path, uint8_t **data, size_t *size, char *err, size_t errlen)
{
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? 1 : cli_fail(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > SOURCE_MAX_SIDE) {
        fclose(f);
        return cli_fail(err, errlen, "%s: not a regular file of at most %zu MiB", path,
                    SOURCE_MAX_SIDE >> 20);
    }
    uint8_t *p = malloc((size_t)st.st_size + 1);
    size_t n = p ? fread(p, 1, (size_t)st.st_size, f) : 0;
    int bad = !p || n != (size_t)st.st_size || ferror(f);
    fclose(f);
    if (bad) {
        free(p);
        return cli_fail(err, errlen, "%s: read failed", path);
    }
    p[n] = 0;
    *data = p;
    *size = n;
    return 0;
}

int source_looks_safetensors(const uint8_t *p, size_t n)
{
    if (n < 9)
        return 0;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | p[i];
    return len >= 2 && len <= ST_MAX_HEADER && p[8] == '{';
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int source_classify(const char *path, source_kind *kind, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        *kind = SOURCE_FOLDER;
        return 0;
    }
    if (ends_with(path, ".json")) {
        *kind = SOURCE_INDEX;
        return 0;
    }
    uint8_t head[16];
    FILE *f = fopen(path, "rb");
    if (!f)
        return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (n >= 4 && memcmp(head, "GGUF", 4) == 0)
        *kind = SOURCE_GGUF;
    else if (source_looks_safetensors(head, n) || ends_with(path, ".safetensors"))
        *kind = SOURCE_SAFETENSORS;
    else
        *kind = SOURCE_ARCHIVE;
    return 0;
}

int source_parse_index(const char *label, const uint8_t *data, size_t size, json_t **weight_map,
                       char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cli_fail(err, errlen, "%s: not valid JSON: %s (line %d)", label, je.text, je.line);
    json_t *wm = json_object_get(root, "weight_map");
    const char *k;
    json_t *v;
    int ok = json_is_object(wm) && json_object_size(wm) > 0;
    json_object_foreach(ok ? wm : NULL, k, v) {
        const char *s = json_string_value(v);
        if (!s || !*s || strchr(s, '/') || strcmp(s, "..") == 0 || strcmp(s, ".") == 0) {
            json_decref(root);
            return cli_fail(err, errlen, "%s: weight_map entry '%s' is not a file name", label, k);
        }
    }
    if (!ok) {
        json_decref(root);
        return cli_fail(err, errlen, "%s: no weight_map object", label);
    }
    *weight_map = json_incref(wm);
    json_decref(root);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends "folder/base" to the list unless already there. */
static int list_add(char ***list, size_t *n, const char *folder, const char *base)
{
    char *p;
    if (asprintf(&p, "%s/%s", folder, base) < 0)
        return -1;
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i], p) == 0) {
            free(p);
            return 0;
        }
    char **l = realloc(*list, (*n + 1) * sizeof *l);
    if (!l) {
        free(p);
        return -1;
    }
    l[(*n)++] = p;
    *list = l;
    return 0;
}

static int list_index(const char *index, const char *folder, char ***list, size_t *n,
                      json_t **weight_map, char *err, size_t errlen)
{
    uint8_t *data;
    size_t size;
    int rc = source_read_file(index, &data, &size, err, errlen);
    if (rc)
        return rc > 0 ? cli_fail(err, errlen, "%s: no such file", index) : -1;
    rc = source_parse_index(index, data, size, weight_map, err, errlen);
    free(data);
    const char *k;
    json_t *v;
    json_object_foreach(rc ? NULL : *weight_map, k, v)
        if (list_add(list, n, folder, json_string_value(v)))
            return cli_fail(err, errlen, "out of memory");
    return rc;
}

static int list_folder(const char *folder, char ***list, size_t *n, json_t **weight_map,
                       char *err, size_t errlen)
{
    char *p;
    struct stat st;
    if (asprintf(&p, "%s/model.safetensors.index.json", folder) < 0)
        return cli_fail(err, errlen, "out of memory");
    int has_index = stat(p, &st) == 0;
    int rc = has_index ? list_index(p, folder, list, n, weight_map, err, errlen) : 0;
    free(p);
    if (has_index)
        return rc;
    if (asprintf(&p, "%s/model.safetensors", folder) < 0)
        return cli_fail(err, errlen, "out of memory");
    int has_single = stat(p, &st) == 0;
    free(p);
    if (has_single)
        return list_add(list, n, folder, "model.safetensors") ? cli_fail(err, errlen, "out of memory")
                                                               : 0;
    DIR *d = opendir(folder);
    if (!d)
        return cli_fail(err, errlen, "%s: %s", folder, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && ends_with(e->d_name, ".safetensors") &&
            list_add(list, n, folder, e->d_name)) {
            closedir(d);
            return cli_fail(err, errlen, "out of memory");
        }
    closedir(d);
    if (*n == 0)
        return cli_fail(err, errlen, "%s: no .safetensors files and no model.safetensors.index.json",
                    folder);
    return 0;
}

int source_list_shards(const char *path, source_kind kind, char ***shards, size_t *n,
                       char **folder, json_t **weight_map, char *err, size_t errlen)
{
    *shards = NULL;
    *n = 0;
    *weight_map = NULL;
    char *dir = strdup(path);
    if (!dir)
        return cli_fail(err, errlen, "out of memory");
    if (kind == SOURCE_FOLDER) {
        size_t l = strlen(dir);
        while (l > 1 && dir[l - 1] == '/')
            dir[--l] = 0;
    } else {
        char *s = strrchr(dir, '/');
        if (s)
            *(s == dir ? s + 1 : s) = 0;
        else
            strcpy(dir, ".");
    }
    int rc;
    if (kind == SOURCE_FOLDER)
        rc = list_folder(dir, shards, n, weight_map, err, errlen);
    else if (kind == SOURCE_INDEX)
        rc = list_index(path, dir, shards, n, weight_map, err, errlen);
    else
        rc = (*shards = malloc(sizeof **shards)) && ((*shards)[0] = strdup(path)) ? (*n = 1, 0)
                                                                                 : -1;
    if (rc) {
        source_free_list(*shards, *n);
        json_decref(*weight_map);
        *weight_map = NULL;
        *shards = NULL;
        *n = 0;
        free(dir);
        return -1;
    }
    qsort(*shards, *n, sizeof **shards, cmp_str);
    *folder = dir;
    return 0;
}

void source_free_list(char **list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        free(list[i]);
    free(list);
}

int source_fd_read(source_fd *s, void *buf, size_t n, size_t *got)
{
    size_t have = 0;
    uint8_t *out = buf;
    while (have < n && s->prefix_pos < s->prefix_len)
        out[have++] = s->prefix[s->prefix_pos++];
    while (have < n) {
        ssize_t r = read(s->fd, out + have, n - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        have += (size_t)r;
    }
    if (s->sha && have)
        EVP_DigestUpdate(s->sha, out, have);
    s->bytes += have;
    *got = have;
    return 0;
}
