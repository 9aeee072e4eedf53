/* The safetensors container: see safetensors.h. Nothing is read before its bounds are known. */
#include "safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "mlaverify_internal.h"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

size_t mlav_st_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (dtype && strcmp(st_dtypes[i].name, dtype) == 0)
            return st_dtypes[i].size;
    return 0;
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

void mlav_st_free(mlav_st_file *f)
{
    if (!f)
        return;
    for (int32_t i = 0; i < f->num_tensors; i++) {
        free(f->tensors[i].name);
        free(f->tensors[i].data);
    }
    for (int32_t i = 0; i < f->num_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->tensors);
    free(f->meta);
    memset(f, 0, sizeof *f);
}

mlav_st_tensor *mlav_st_find(const mlav_st_file *f, const char *name)
{
    for (int32_t i = 0; i < f->num_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *mlav_st_meta_get(const mlav_st_file *f, const char *key)
{
    for (int32_t i = 0; i < f->num_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* nbytes = product(shape) * esize, or 0 with *overflow set when it does not fit 64 bits. */
static uint64_t shape_bytes(int32_t rank, const int64_t *shape, size_t esize, int *overflow)
{
    uint64_t n = esize;
    *overflow = 0;
    for (int32_t i = 0; i < rank; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > UINT64_MAX / d) {
            *overflow = 1;
            return 0;
        }
        n *= d;
    }
    return n;
}

/* "[9, 16, 576]" */
static void shape_str(int32_t rank, const int64_t *shape, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int32_t i = 0; i < rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

mlav_status mlav_st_add_tensor(mlav_st_file *f, const char *name, const char *dtype, int32_t rank,
                               const int64_t *shape, void *data)
{
    size_t esize = mlav_st_dtype_size(dtype);
    if (!esize || rank < 0 || rank > MLAV_ST_MAX_RANK) {
        free(data);
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "tensor '%s': bad dtype '%s' or rank %d", name,
                              dtype ? dtype : "(null)", rank);
    }
    int overflow;
    for (int32_t i = 0; i < rank; i++)
        if (shape[i] < 0) {
            free(data);
            return mlav_set_error(MLAV_ERR_INVALID_ARG, "tensor '%s': negative dimension", name);
        }
    uint64_t nbytes = shape_bytes(rank, shape, esize, &overflow);
    if (overflow || nbytes > (uint64_t)SIZE_MAX) {
        free(data);
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "tensor '%s' is too large", name);
    }
    mlav_st_tensor *grown = realloc(f->tensors, sizeof *grown * (size_t)(f->num_tensors + 1));
    if (!grown) {
        free(data);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory adding tensor '%s'", name);
    }
    f->tensors = grown;
    mlav_st_tensor *t = &f->tensors[f->num_tensors];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name);
    if (!data)
        data = calloc(nbytes ? (size_t)nbytes : 1, 1);
    if (!t->name || !data) {
        free(t->name);
        free(data);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory adding tensor '%s'", name);
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
    t->rank = rank;
    for (int32_t i = 0; i < rank; i++)
        t->shape[i] = shape[i];
    t->nbytes = nbytes;
    t->data = data;
    f->num_tensors++;
    return MLAV_OK;
}

mlav_status mlav_st_add_meta(mlav_st_file *f, const char *key, const char *value)
{
    mlav_st_meta *grown = realloc(f->meta, sizeof *grown * (size_t)(f->num_meta + 1));
    if (!grown)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory adding metadata");
    f->meta = grown;
    mlav_st_meta *m = &f->meta[f->num_meta];
    m->key = dup_str(key);
    m->value = dup_str(value);
    if (!m->key || !m->value) {
        free(m->key);
        free(m->value);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory adding metadata");
    }
    f->num_meta++;
    return MLAV_OK;
}

/* ---- reading ------------------------------------------------------------------------------ */

/* A JSON number that is an exact non-negative integer a double can hold (cJSON keeps numbers as
 * doubles; 2^53 is far past any file size or dimension we accept). */
static int json_uint(const cJSON *item, uint64_t *v)
{
    if (!cJSON_IsNumber(item))
        return 0;
    double d = item->valuedouble;
    if (!(d >= 0.0 && d <= 9007199254740992.0) || d != floor(d))
        return 0;
    *v = (uint64_t)d;
    return 1;
}

/* One tensor entry of the header: dtype, shape and data_offsets, checked against each other
 * and against the data section's size. */
static mlav_status parse_tensor(const cJSON *entry, uint64_t data_size, mlav_st_tensor *t,
                                uint64_t *begin, uint64_t *end)
{
    const char *name = t->name;
    if (!cJSON_IsObject(entry))
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor '%s': header entry is not a JSON object",
                              name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(dtype))
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor '%s': missing or non-string \"dtype\"",
                              name);
    size_t esize = mlav_st_dtype_size(dtype->valuestring);
    if (!esize)
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor '%s': unknown dtype \"%.20s\"", name,
                              dtype->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype->valuestring);
    if (!cJSON_IsArray(shape))
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor '%s': missing or non-array \"shape\"", name);
    int rank = cJSON_GetArraySize(shape);
    if (rank > MLAV_ST_MAX_RANK)
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor '%s': rank %d exceeds %d", name, rank,
                              MLAV_ST_MAX_RANK);
    t->rank = rank;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        uint64_t v;
        if (!json_uint(d, &v))
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "tensor '%s': shape entry %d is not a non-negative integer", name,
                                  k);
        t->shape[k] = (int64_t)v;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_uint(cJSON_GetArrayItem(offs, 0), begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), end))
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor '%s': \"data_offsets\" must be [begin, end], two "
                              "non-negative integers",
                              name);
    if (*begin > *end)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                              (unsigned long long)*begin, (unsigned long long)*end);
    if (*end > data_size)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor '%s': data_offsets [%llu, %llu] run past the end of the "
                              "data section (%llu bytes): the file is truncated or the offsets "
                              "are wrong",
                              name, (unsigned long long)*begin, (unsigned long long)*end,
                              (unsigned long long)data_size);
    int overflow;
    uint64_t nbytes = shape_bytes(t->rank, t->shape, esize, &overflow);
    char sh[160];
    shape_str(t->rank, t->shape, sh, sizeof sh);
    if (overflow || nbytes != *end - *begin)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor '%s': dtype %s and shape %s make %s%llu bytes but "
                              "data_offsets [%llu, %llu] hold %llu",
                              name, t->dtype, sh, overflow ? "more than " : "",
                              (unsigned long long)(overflow ? UINT64_MAX : nbytes),
                              (unsigned long long)*begin, (unsigned long long)*end,
                              (unsigned long long)(*end - *begin));
    t->nbytes = nbytes;
    return MLAV_OK;
}

static int meta_key_cmp(const void *a, const void *b)
{
    return strcmp(((const mlav_st_meta *)a)->key, ((const mlav_st_meta *)b)->key);
}

/* Linear in the number of keys but for one sort: the keys are copied into an array sized once,
 * and a repeated key is found as two equal neighbours of a sorted copy (a lookup per key in the
 * growing list made a header of 80k keys take 10 s). */
static mlav_status parse_metadata(const cJSON *meta, mlav_st_file *f)
{
    if (!cJSON_IsObject(meta))
        return mlav_set_error(MLAV_ERR_FORMAT, "\"__metadata__\" is not a JSON object");
    size_t count = 0;
    for (const cJSON *m = meta->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "metadata \"%.64s\" is not a string (safetensors metadata maps "
                                  "strings to strings)",
                                  m->string ? m->string : "");
        count++;
    }
    if (count == 0)
        return MLAV_OK;
    /* views into the cJSON tree, sorted to find a repeated key before anything is copied */
    mlav_st_meta *sorted = malloc(sizeof *sorted * count);
    f->meta = calloc(count, sizeof *f->meta);
    if (!sorted || !f->meta) {
        free(sorted);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory for %zu metadata keys",
                              count);
    }
    size_t k = 0;
    for (const cJSON *m = meta->child; m; m = m->next, k++) {
        sorted[k].key = m->string;
        sorted[k].value = m->valuestring;
    }
    qsort(sorted, count, sizeof *sorted, meta_key_cmp);
    for (k = 1; k < count; k++)
        if (strcmp(sorted[k - 1].key, sorted[k].key) == 0) {
            mlav_status s =
                mlav_set_error(MLAV_ERR_FORMAT, "metadata \"%.64s\" appears twice", sorted[k].key);
            free(sorted);
            return s;
        }
    free(sorted);
    for (const cJSON *m = meta->child; m; m = m->next) {
        mlav_st_meta *e = &f->meta[f->num_meta];
        e->key = dup_str(m->string);
        e->value = dup_str(m->valuestring);
        if (!e->key || !e->value) {
            free(e->key);
            free(e->value);
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory adding metadata");
        }
        f->num_meta++;
    }
    return MLAV_OK;
}

typedef struct span {
    uint64_t begin, end;
    int32_t index;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Length of the UTF-8 sequence at p (at most `left` bytes), or 0 if it is not well formed:
 * no overlong forms, no surrogates, nothing past U+10FFFF (what a Rust str holds). */
static size_t utf8_len(const unsigned char *p, size_t left)
{
    unsigned c = p[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (left < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (p[k] < 0x80 || p[k] > 0xBF)
            return 0;
    return len;
}

static int hex4(const char *p, const char *end, unsigned *v)
{
    *v = 0;
    if (end - p < 4)
        return 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d > 15)
            return 0;
        *v = *v << 4 | d;
    }
    return 1;
}

/* One pass over the raw header for what cJSON lets through but safetensors' parser (serde_json
 * over a Rust str) rejects: raw control bytes, bytes that are not UTF-8, and escapes that make
 * no character (a lone surrogate) or NUL, which a C string would silently cut a name at
 * ("kv_cache\u0000junk" read as kv_cache). Counts the members (':' outside strings) so the
 * parse's allocations are bounded before it runs, and notes in *float_at the first number
 * written with a fraction or an exponent (cJSON makes 512e0 the integer 512, serde refuses it
 * as a usize); that one is reported after the tensors, whose own sentences say more. JSON
 * syntax is left to cJSON. */
static mlav_status header_lex(const char *hdr, size_t n, size_t *members, size_t *float_at)
{
    const unsigned char *u = (const unsigned char *)hdr;
    const char *end = hdr + n;
    int in_str = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        if (c < 0x20 && (in_str || (c != '\t' && c != '\n' && c != '\r')))
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "the header is not valid JSON: control byte 0x%02x at byte %zu",
                                  (unsigned)c, i);
        if (c >= 0x80) {
            size_t len = utf8_len(u + i, n - i);
            if (!len)
                return mlav_set_error(MLAV_ERR_FORMAT,
                                      "the header is not valid UTF-8 (byte 0x%02x at byte %zu): "
                                      "safetensors headers are UTF-8 JSON",
                                      (unsigned)c, i);
            i += len;
            continue;
        }
        if (in_str) {
            if (c == '"') {
                in_str = 0;
            } else if (c == '\\' && i + 1 < n && hdr[i + 1] == 'u') {
                unsigned v, w;
                if (!hex4(hdr + i + 2, end, &v)) {
                    i += 2; /* a bad escape: cJSON says where */
                    continue;
                }
                if (v == 0)
                    return mlav_set_error(MLAV_ERR_FORMAT,
                                          "the header has an escaped NUL (\\u0000) in a string at "
                                          "byte %zu: a tensor name or metadata key with NUL in "
                                          "it cannot be told from the name before the NUL",
                                          i);
                if (v >= 0xDC00 && v <= 0xDFFF)
                    return mlav_set_error(MLAV_ERR_FORMAT,
                                          "the header has a lone low surrogate \\u%04x at byte "
                                          "%zu: not a character",
                                          v, i);
                if (v >= 0xD800 && v <= 0xDBFF) {
                    if (i + 7 >= n || hdr[i + 6] != '\\' || hdr[i + 7] != 'u' ||
                        !hex4(hdr + i + 8, end, &w) || w < 0xDC00 || w > 0xDFFF)
                        return mlav_set_error(MLAV_ERR_FORMAT,
                                              "the header has a high surrogate \\u%04x at byte "
                                              "%zu without its low half: not a character",
                                              v, i);
                    i += 12;
                    continue;
                }
                i += 6;
                continue;
            } else if (c == '\\') {
                i += 2; /* the escaped byte is never a quote that ends the string */
                continue;
            }
            i++;
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == ':') {
            (*members)++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i + 1;
            while (j < n && ((u[j] >= '0' && u[j] <= '9') || u[j] == '.' || u[j] == 'e' ||
                             u[j] == 'E' || u[j] == '+' || u[j] == '-')) {
                if ((u[j] == '.' || u[j] == 'e' || u[j] == 'E') && *float_at == SIZE_MAX)
                    *float_at = i;
                j++;
            }
            i = j;
            continue;
        }
        i++;
    }
    return MLAV_OK;
}

/* Parse the header into `f` (names, dtypes, shapes) and `spans`, checking that the spans tile
 * the data section exactly. */
static mlav_status parse_header(const char *hdr, size_t n, uint64_t data_size, mlav_st_file *f,
                                span **spans_out)
{
    *spans_out = NULL;
    if (n == 0 || hdr[0] != '{')
        return mlav_set_error(MLAV_ERR_FORMAT, "the header does not start with '{': not a "
                                               "safetensors file");
    /* what cJSON would let through but safetensors' own parser (serde_json over a Rust str)
     * rejects, and the count of members that bounds what the parse allocates */
    size_t members = 0, float_at = SIZE_MAX;
    mlav_status s = header_lex(hdr, n, &members, &float_at);
    if (s != MLAV_OK)
        return s;
    if (members > MLAV_ST_MAX_MEMBERS)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "the header holds %zu JSON members (names and metadata keys), more "
                              "than the %d a bundle reader accepts",
                              members, MLAV_ST_MAX_MEMBERS);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + n ? (size_t)(end - hdr) : 0;
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "the header is not valid JSON (error near byte "
                              "%zu of %zu)",
                              at, n);
    }
    for (const char *p = end; p && p < hdr + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = mlav_set_error(MLAV_ERR_FORMAT,
                               "the header has non-space bytes after its JSON object (at byte "
                               "%zu of %zu)",
                               (size_t)(p - hdr), n);
            break;
        }
    if (s == MLAV_OK && !cJSON_IsObject(root))
        s = mlav_set_error(MLAV_ERR_FORMAT, "the header is not a JSON object");
    int count = 0;
    for (const cJSON *c = s == MLAV_OK ? root->child : NULL; c; c = c->next)
        count++;
    if (s == MLAV_OK && count > MLAV_ST_MAX_TENSORS)
        s = mlav_set_error(MLAV_ERR_FORMAT, "the header lists %d entries, more than %d", count,
                           MLAV_ST_MAX_TENSORS);
    span *spans = NULL;
    if (s == MLAV_OK) {
        spans = malloc(sizeof *spans * (size_t)(count ? count : 1));
        f->tensors = calloc((size_t)(count ? count : 1), sizeof *f->tensors);
        if (!spans || !f->tensors)
            s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory parsing the header");
    }
    int seen_meta = 0;
    for (const cJSON *c = s == MLAV_OK ? root->child : NULL; c && s == MLAV_OK; c = c->next) {
        if (!c->string) {
            s = mlav_set_error(MLAV_ERR_FORMAT, "the header has an entry without a name");
            break;
        }
        if (strcmp(c->string, "__metadata__") == 0) {
            if (seen_meta++)
                s = mlav_set_error(MLAV_ERR_FORMAT, "\"__metadata__\" appears twice");
            else
                s = parse_metadata(c, f);
            continue;
        }
        if (mlav_st_find(f, c->string)) {
            s = mlav_set_error(MLAV_ERR_FORMAT, "tensor '%.64s' appears twice in the header",
                               c->string);
            break;
        }
        mlav_st_tensor *t = &f->tensors[f->num_tensors];
        t->name = dup_str(c->string);
        if (!t->name) {
            s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory parsing the header");
            break;
        }
        f->num_tensors++;
        span *sp = &spans[f->num_tensors - 1];
        sp->index = f->num_tensors - 1;
        s = parse_tensor(c, data_size, t, &sp->begin, &sp->end);
    }
    cJSON_Delete(root);
    if (s == MLAV_OK && float_at != SIZE_MAX)
        s = mlav_set_error(MLAV_ERR_FORMAT,
                           "the header has a number written with a fraction or an exponent (at "
                           "byte %zu): shape and data_offsets entries must be plain non-negative "
                           "integers, as safetensors requires (512, not 512e0 or 512.0)",
                           float_at);
    if (s != MLAV_OK) {
        free(spans);
        return s;
    }

    /* Tile check in offset order: what safetensors itself enforces, so a file we accept is one
     * the Python library accepts too. */
    qsort(spans, (size_t)f->num_tensors, sizeof *spans, span_cmp);
    uint64_t at = 0;
    for (int32_t i = 0; i < f->num_tensors; i++) {
        const span *sp = &spans[i];
        const char *name = f->tensors[sp->index].name;
        if (sp->begin < at) {
            const span *prev = &spans[i - 1];
            mlav_set_error(MLAV_ERR_FORMAT,
                           "tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
                           f->tensors[prev->index].name, (unsigned long long)prev->begin,
                           (unsigned long long)prev->end, name, (unsigned long long)sp->begin,
                           (unsigned long long)sp->end);
            free(spans);
            return MLAV_ERR_FORMAT;
        }
        if (sp->begin > at) {
            mlav_set_error(MLAV_ERR_FORMAT,
                           "tensor '%s' starts at data byte %llu but the tensors before it end at "
                           "%llu: safetensors requires contiguous tensors",
                           name, (unsigned long long)sp->begin, (unsigned long long)at);
            free(spans);
            return MLAV_ERR_FORMAT;
        }
        at = sp->end;
    }
    if (at != data_size) {
        free(spans);
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "the tensors cover %llu data bytes but the file holds %llu after "
                              "the header: safetensors requires them to match",
                              (unsigned long long)at, (unsigned long long)data_size);
    }
    *spans_out = spans;
    return MLAV_OK;
}

static mlav_status read_fail(FILE *fp, char *hdr, span *spans, mlav_st_file *f, mlav_status s)
{
    if (fp)
        fclose(fp);
    free(hdr);
    free(spans);
    mlav_st_free(f);
    return s;
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
                         : "not a regular file";
}

/* Open a regular file for reading, or say why not (MLAV_ERR_IO set). A FIFO with no writer
 * would block fopen forever and a device can be endless, so anything else is refused: stat
 * first, then open with O_NONBLOCK (which never waits for a FIFO's writer) and fstat what was
 * opened, in case the path was replaced in between. */
static FILE *open_regular(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        mlav_set_error(MLAV_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        mlav_set_error(MLAV_ERR_IO, "cannot read '%s': it is %s, and a bundle is a regular file",
                       path, file_kind(sb.st_mode));
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        mlav_set_error(MLAV_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        mlav_set_error(MLAV_ERR_IO, "cannot read '%s': it is %s, and a bundle is a regular file",
                       path, file_kind(sb.st_mode));
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        mlav_set_error(MLAV_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        close(fd);
    }
    return fp;
}

mlav_status mlav_st_read(const char *path, mlav_st_file *f)
{
    memset(f, 0, sizeof *f);
    if (!host_is_little_endian())
        return mlav_set_error(MLAV_ERR_UNSUPPORTED, "safetensors files are little-endian; this "
                                                    "host is not");
    FILE *fp = open_regular(path);
    if (!fp)
        return MLAV_ERR_IO;
    if (fseeko(fp, 0, SEEK_END) != 0)
        return read_fail(
            fp, NULL, NULL, f,
            mlav_set_error(MLAV_ERR_IO, "cannot seek in '%s': %s", path, strerror(errno)));
    off_t size = ftello(fp);
    if (size < 0 || fseeko(fp, 0, SEEK_SET) != 0)
        return read_fail(
            fp, NULL, NULL, f,
            mlav_set_error(MLAV_ERR_IO, "cannot seek in '%s': %s", path, strerror(errno)));
    if (size < 8)
        return read_fail(fp, NULL, NULL, f,
                         mlav_set_error(MLAV_ERR_FORMAT,
                                        "the file is %lld bytes, shorter than the 8-byte header "
                                        "length",
                                        (long long)size));
    unsigned char len8[8];
    if (fread(len8, 1, 8, fp) != 8)
        return read_fail(fp, NULL, NULL, f, mlav_set_error(MLAV_ERR_IO, "cannot read '%s'", path));
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len8[i];
    uint64_t after = (uint64_t)size - 8;
    if (n > after)
        return read_fail(fp, NULL, NULL, f,
                         mlav_set_error(MLAV_ERR_FORMAT,
                                        "header length %llu runs past the end of the file (%llu "
                                        "bytes follow the length field)",
                                        (unsigned long long)n, (unsigned long long)after));
    if (n > MLAV_ST_MAX_HEADER)
        return read_fail(fp, NULL, NULL, f,
                         mlav_set_error(MLAV_ERR_FORMAT,
                                        "header length %llu exceeds safetensors' limit of %llu",
                                        (unsigned long long)n, MLAV_ST_MAX_HEADER));
    char *hdr = malloc((size_t)n + 1);
    if (!hdr)
        return read_fail(fp, NULL, NULL, f,
                         mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory for the header"));
    if (fread(hdr, 1, (size_t)n, fp) != (size_t)n)
        return read_fail(fp, hdr, NULL, f, mlav_set_error(MLAV_ERR_IO, "cannot read '%s'", path));
    hdr[n] = '\0';

    span *spans = NULL;
    mlav_status s = parse_header(hdr, (size_t)n, after - n, f, &spans);
    if (s != MLAV_OK)
        return read_fail(fp, hdr, spans, f, s);

    /* data, in offset order so the reads are sequential */
    for (int32_t i = 0; i < f->num_tensors; i++) {
        mlav_st_tensor *t = &f->tensors[spans[i].index];
        if (t->nbytes > (uint64_t)SIZE_MAX - 1)
            return read_fail(
                fp, hdr, spans, f,
                mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "tensor '%s' is too large", t->name));
        t->data = malloc(t->nbytes ? (size_t)t->nbytes : 1);
        if (!t->data)
            return read_fail(fp, hdr, spans, f,
                             mlav_set_error(MLAV_ERR_OUT_OF_MEMORY,
                                            "out of memory for tensor '%s' (%llu bytes)", t->name,
                                            (unsigned long long)t->nbytes));
        if (fseeko(fp, (off_t)(8 + n + spans[i].begin), SEEK_SET) != 0 ||
            fread(t->data, 1, (size_t)t->nbytes, fp) != (size_t)t->nbytes)
            return read_fail(
                fp, hdr, spans, f,
                mlav_set_error(MLAV_ERR_IO, "cannot read tensor '%s' from '%s'", t->name, path));
    }
    /* keep the tensors in file order: a reader's listing then matches the bytes */
    mlav_st_tensor *ordered =
        malloc(sizeof *ordered * (size_t)(f->num_tensors ? f->num_tensors : 1));
    if (!ordered)
        return read_fail(fp, hdr, spans, f,
                         mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory"));
    for (int32_t i = 0; i < f->num_tensors; i++)
        ordered[i] = f->tensors[spans[i].index];
    free(f->tensors);
    f->tensors = ordered;
    free(spans);
    free(hdr);
    fclose(fp);
    return MLAV_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *g = realloc(b->s, cap);
        if (!g) {
            b->oom = 1;
            return;
        }
        b->s = g;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* A JSON string literal: quotes, backslashes and control characters escaped. */
static void sb_json(strbuf *b, const char *s)
{
    sb_str(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_str(b, esc);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_str(b, "\"");
}

static void sb_u64(strbuf *b, uint64_t v)
{
    char num[32];
    snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    sb_str(b, num);
}

mlav_status mlav_st_write(const char *path, const mlav_st_file *f)
{
    if (!host_is_little_endian())
        return mlav_set_error(MLAV_ERR_UNSUPPORTED, "safetensors files are little-endian; this "
                                                    "host is not");
    strbuf b = {0};
    sb_str(&b, "{");
    int first = 1;
    if (f->num_meta > 0) {
        sb_str(&b, "\"__metadata__\":{");
        for (int32_t i = 0; i < f->num_meta; i++) {
            if (i)
                sb_str(&b, ",");
            sb_json(&b, f->meta[i].key);
            sb_str(&b, ":");
            sb_json(&b, f->meta[i].value);
        }
        sb_str(&b, "}");
        first = 0;
    }
    uint64_t at = 0;
    for (int32_t i = 0; i < f->num_tensors; i++) {
        const mlav_st_tensor *t = &f->tensors[i];
        int overflow;
        uint64_t nbytes = shape_bytes(t->rank, t->shape, mlav_st_dtype_size(t->dtype), &overflow);
        if (overflow || nbytes != t->nbytes || !mlav_st_dtype_size(t->dtype)) {
            free(b.s);
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "tensor '%s': dtype and shape do not match its %llu bytes",
                                  t->name, (unsigned long long)t->nbytes);
        }
        if (!first)
            sb_str(&b, ",");
        first = 0;
        sb_json(&b, t->name);
        sb_str(&b, ":{\"dtype\":");
        sb_json(&b, t->dtype);
        sb_str(&b, ",\"shape\":[");
        for (int32_t k = 0; k < t->rank; k++) {
            if (k)
                sb_str(&b, ",");
            sb_u64(&b, (uint64_t)t->shape[k]);
        }
        sb_str(&b, "],\"data_offsets\":[");
        sb_u64(&b, at);
        sb_str(&b, ",");
        sb_u64(&b, at + nbytes);
        sb_str(&b, "]}");
        at += nbytes;
    }
    sb_str(&b, "}");
    while (!b.oom && b.len % 8 != 0) /* the data then starts 8-byte aligned, as safetensors does */
        sb_str(&b, " ");
    if (b.oom) {
        free(b.s);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory building the header");
    }

    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(b.s);
        return mlav_set_error(MLAV_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(((uint64_t)b.len >> (8 * i)) & 0xffu);
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(b.s, 1, b.len, fp) == b.len;
    for (int32_t i = 0; ok && i < f->num_tensors; i++)
        ok = fwrite(f->tensors[i].data, 1, (size_t)f->tensors[i].nbytes, fp) ==
             (size_t)f->tensors[i].nbytes;
    int err = errno;
    free(b.s);
    if (fclose(fp) != 0)
        ok = 0;
    if (!ok)
        return mlav_set_error(MLAV_ERR_IO, "cannot write '%s': %s", path, strerror(err));
    return MLAV_OK;
}
