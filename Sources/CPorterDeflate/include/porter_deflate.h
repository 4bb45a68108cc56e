#ifndef PORTER_DEFLATE_H
#define PORTER_DEFLATE_H
#include <stddef.h>

/* Raw DEFLATE (RFC 1951) streams for WebSocket's permessage-deflate (RFC 7692): no zlib
   or gzip header, a sync flush at each message's end. zlib does the work; this shim
   keeps z_stream (whose layout Swift need not know) behind an opaque pointer. */
typedef struct porter_deflate_stream porter_deflate_stream;

/* An inflater (window_bits 8...15; 15 decodes any window a peer may use). NULL when out
   of memory. */
porter_deflate_stream *porter_inflater_raw_new(int window_bits);
/* A deflater whose window is at most 2^window_bits bytes (9...15: zlib cannot make an
   8-bit window for raw streams). */
porter_deflate_stream *porter_deflater_raw_new(int window_bits);

/* Runs the stream over `in`, writing at most `out_cap` bytes to `out`; `*in_used` and
   `*out_made` say how far it got. `flush` (deflater only): 1 to end with a sync flush.
   Returns 0 to go on (call again while out was filled), 1 when a deflater's flush is done,
   -1 on corrupt input or a zlib error. */
int porter_deflate_stream_run(porter_deflate_stream *z, const void *in, size_t in_len, size_t *in_used,
                              void *out, size_t out_cap, size_t *out_made, int flush);
/* Forgets the window (no context takeover). */
void porter_deflate_stream_reset(porter_deflate_stream *z);
void porter_deflate_stream_free(porter_deflate_stream *z);

#endif
