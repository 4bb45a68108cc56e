#include "porter_deflate.h"
#include <stdlib.h>
#include <zlib.h>

struct porter_deflate_stream {
    z_stream s;
    int deflating;
};

porter_deflate_stream *porter_inflater_raw_new(int window_bits) {
    if (window_bits < 8 || window_bits > 15) return NULL;
    porter_deflate_stream *z = calloc(1, sizeof *z);
    if (!z) return NULL;
    /* Negative bits: a raw stream, no header or trailer. */
    if (inflateInit2(&z->s, -window_bits) != Z_OK) { free(z); return NULL; }
    return z;
}

porter_deflate_stream *porter_deflater_raw_new(int window_bits) {
    if (window_bits < 9 || window_bits > 15) return NULL;
    porter_deflate_stream *z = calloc(1, sizeof *z);
    if (!z) return NULL;
    z->deflating = 1;
    /* Memory level 8 is zlib's default; a smaller window also shrinks the hash table. */
    if (deflateInit2(&z->s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(z);
        return NULL;
    }
    return z;
}

int porter_deflate_stream_run(porter_deflate_stream *z, const void *in, size_t in_len, size_t *in_used,
                              void *out, size_t out_cap, size_t *out_made, int flush) {
    /* zlib counts in uInt: take at most 1 GiB a call, the caller loops. */
    const size_t step = (size_t)1 << 30;
    z->s.next_in = (Bytef *)in;
    z->s.avail_in = (uInt)(in_len < step ? in_len : step);
    z->s.next_out = (Bytef *)out;
    z->s.avail_out = (uInt)(out_cap < step ? out_cap : step);
    uInt in_start = z->s.avail_in, out_start = z->s.avail_out;
    int rc;
    if (z->deflating) {
        int mode = (flush && in_len <= step) ? Z_SYNC_FLUSH : Z_NO_FLUSH;
        rc = deflate(&z->s, mode);
        *in_used = in_start - z->s.avail_in;
        *out_made = out_start - z->s.avail_out;
        if (rc != Z_OK && rc != Z_BUF_ERROR) return -1;
        /* A sync flush is complete when all input was taken and output room is left. */
        if (mode == Z_SYNC_FLUSH && z->s.avail_in == 0 && z->s.avail_out > 0) return 1;
        return 0;
    }
    rc = inflate(&z->s, Z_SYNC_FLUSH);
    *in_used = in_start - z->s.avail_in;
    *out_made = out_start - z->s.avail_out;
    /* Z_STREAM_END: a final block (BFINAL) — allowed; a later message starts a new stream. */
    if (rc == Z_STREAM_END) { inflateReset(&z->s); return 0; }
    if (rc == Z_OK || rc == Z_BUF_ERROR) return 0;
    return -1;
}

void porter_deflate_stream_reset(porter_deflate_stream *z) {
    if (z->deflating) deflateReset(&z->s); else inflateReset(&z->s);
}

void porter_deflate_stream_free(porter_deflate_stream *z) {
    if (!z) return;
    if (z->deflating) deflateEnd(&z->s); else inflateEnd(&z->s);
    free(z);
}
