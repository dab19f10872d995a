/* pack_disk.c — a file, index or folder on disk: validate all shards, then write from the maps. */
#include "pack_private.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct disk {
    source_map *maps;
    st_header *hdrs;
    size_t n;
} disk;

/* Hashes the shard files in order while the writer works on them. */
static void *hash_maps(void *arg)
{
    pack *p = ((void **)arg)[0];
    const disk *d = ((void **)arg)[1];
    for (size_t i = 0; i < d->n; i++)
        for (uint64_t off = 0; off < d->maps[i].size;) {
            size_t n = d->maps[i].size - off < ((uint64_t)8 << 20) ? (size_t)(d->maps[i].size - off)
                                                                  : (size_t)8 << 20;
            EVP_DigestUpdate(p->sha, d->maps[i].data + off, n);
            off += n;
        }
    return NULL;
}

static int read_sides(pack *p, const char *folder)
{
    char err[512];
    for (int i = 0; source_side_names[i]; i++) {
        char *path;
        uint8_t *data;
        size_t size;
        if (asprintf(&path, "%s/%s", folder, source_side_names[i]) < 0)
            return pack_fail("out of memory");
        int rc = source_read_file(path, &data, &size, err, sizeof err);
        free(path);
        if (rc < 0)
            return pack_fail("%s", err);
        if (rc == 0 && pack_take_side(p, source_side_names[i], data, size))
            return -1;
    }
    return 0;
}

static int validate(pack *p, disk *d, char **paths)
{
    char err[1024];
    for (size_t i = 0; i < d->n; i++) {
        if (source_map_open(&d->maps[i], paths[i], err, sizeof err) ||
            st_parse_memory(d->maps[i].data, d->maps[i].size, paths[i], &d->hdrs[i], err,
                            sizeof err))
            return pack_fail("%s", err);
        const char *base = source_base(paths[i]);
        if (pack_plan_shard(p, &d->hdrs[i], base) || pack_keep_metadata(p, base, &d->hdrs[i]) ||
            json_array_append_new(p->source_files, json_string(base)))
            return -1;
    }
    return pack_check_weight_map(p);
}

static int write_all(pack *p, disk *d)
{
    pthread_t th;
    void *arg[2] = {p, d};
    if (pthread_create(&th, NULL, hash_maps, arg) != 0)
        return pack_fail("cannot start the hashing thread");
    int rc = 0;
    for (size_t i = 0; !rc && i < d->n; i++)
        for (size_t j = 0; !rc && j < d->hdrs[i].n_tensors; j++)
            rc = pack_write_mem(p, &d->hdrs[i].tensors[j],
                                d->maps[i].data + d->hdrs[i].data_start);
    pthread_join(th, NULL);
    return rc;
}

int pack_disk(pack *p, source_kind kind)
{
    char err[1024], **paths, *folder;
    disk d = {0};
    if (source_list_shards(p->o->input, kind, &paths, &d.n, &folder, &p->weight_map, err,
                           sizeof err))
        return pack_fail("%s", err);
    d.maps = calloc(d.n, sizeof *d.maps);
    d.hdrs = calloc(d.n, sizeof *d.hdrs);
    int rc = !d.maps || !d.hdrs ? pack_fail("out of memory") : 0;
    /* the side files first: config.json's family names the tensors' roles */
    rc = rc || read_sides(p, folder) || validate(p, &d, paths) || pack_open_writer(p) ||
         write_all(p, &d) || pack_finish(p);
    for (size_t i = 0; i < d.n; i++) {
        if (d.maps)
            source_map_close(&d.maps[i]);
        if (d.hdrs)
            st_header_free(&d.hdrs[i]);
    }
    free(d.maps);
    free(d.hdrs);
    free(folder);
    source_free_list(paths, d.n);
    return rc ? -1 : 0;
}
