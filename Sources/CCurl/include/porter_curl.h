/*
 * Typed wrappers for libcurl's variadic calls, which Swift cannot call directly.
 * Each takes exactly the argument type libcurl documents for that option class.
 */
#ifndef PORTER_CURL_H
#define PORTER_CURL_H

#include <curl/curl.h>

typedef size_t (*porter_curl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*porter_curl_xferinfo_cb)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);

CURLcode porter_easy_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode porter_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
/* Strings (copied by libcurl), struct curl_slist *, and userdata pointers. */
CURLcode porter_easy_setopt_ptr(CURL *handle, CURLoption option, const void *value);
/* CURLOPT_WRITEFUNCTION, CURLOPT_HEADERFUNCTION, CURLOPT_READFUNCTION. */
CURLcode porter_easy_setopt_data_cb(CURL *handle, CURLoption option, porter_curl_data_cb cb);
CURLcode porter_easy_setopt_xferinfo_cb(CURL *handle, porter_curl_xferinfo_cb cb);
/* CURLOPT_DEBUGFUNCTION (with CURLOPT_DEBUGDATA and CURLOPT_VERBOSE set by the caller):
 * what libcurl sends and receives, as curl -v / --trace show it. */
typedef int (*porter_curl_debug_cb)(CURL *handle, int type, char *data, size_t size, void *userdata);
CURLcode porter_easy_setopt_debug_cb(CURL *handle, porter_curl_debug_cb cb);

CURLcode porter_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode porter_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value);
CURLcode porter_easy_getinfo_string(CURL *handle, CURLINFO info, const char **value);
CURLcode porter_easy_getinfo_certinfo(CURL *handle, struct curl_certinfo **value);

CURLMcode porter_multi_setopt_long(CURLM *multi, CURLMoption option, long value);

/* The CURLMsg's result for a CURLMSG_DONE message (a union in C). */
CURLcode porter_curlmsg_result(const CURLMsg *msg);

/* SHA-256 of the SubjectPublicKeyInfo of a DER certificate, into out[32] (OpenSSL).
   Returns 0 on success, -1 when the certificate cannot be parsed. */
int porter_spki_sha256(const unsigned char *der, long length, unsigned char *out);

/* Streaming inflate for gzip and deflate content codings (zlib), so that Porter, not
   libcurl, decodes bodies: libcurl buffers the whole decoded output of one socket read
   while a transfer is paused (up to 64 MiB, then "Out of memory"), while Porter pauses
   with only compressed bytes waiting. `gzip`: 1 for gzip (or zlib, detected), 0 for
   deflate (zlib, or raw deflate as some servers send). */
typedef struct porter_inflater porter_inflater;
porter_inflater *porter_inflater_new(int gzip);
/* Inflates from `in` into `out`. Sets *in_used and *out_len. Returns 0 to go on, 1 at
   the end of the stream (trailing bytes are ignored), -1 on damaged data. */
int porter_inflater_run(porter_inflater *z, const void *in, size_t in_len, size_t *in_used,
                        void *out, size_t out_cap, size_t *out_len);
void porter_inflater_free(porter_inflater *z);

/* Every content coding Porter decodes (gzip and deflate on zlib, br on libbrotlidec,
   zstd on libzstd with RFC 9659's 8 MiB window limit), behind one streaming interface.
   run: as porter_inflater_run (0 go on, 1 the stream ended and trailing bytes are
   ignored, -1 damaged). finished: the input so far ends at a clean end of the stream
   (for zstd: of a frame; more frames may follow). */
enum { PORTER_CODING_DEFLATE = 0, PORTER_CODING_GZIP = 1, PORTER_CODING_BROTLI = 2, PORTER_CODING_ZSTD = 3 };
typedef struct porter_decoder porter_decoder;
porter_decoder *porter_decoder_new(int coding);
int porter_decoder_run(porter_decoder *d, const void *in, size_t in_len, size_t *in_used,
                       void *out, size_t out_cap, size_t *out_len);
int porter_decoder_finished(const porter_decoder *d);
void porter_decoder_free(porter_decoder *d);

/* The TLS version and cipher of the connection `handle` used (OpenSSL backend), into
   `version` and `cipher` (NUL-terminated, at most `capacity` bytes). 0, or -1 when the
   transfer did not use TLS or the backend is not OpenSSL. */
int porter_tls_info(CURL *handle, char *version, char *cipher, size_t capacity);

/* Macro constants Swift cannot import (casts, shifts, or-ed macros). */
static const long porter_curlauth_basic = (long)CURLAUTH_BASIC;
static const long porter_curlauth_digest = (long)CURLAUTH_DIGEST;
static const long porter_curlauth_ntlm = (long)CURLAUTH_NTLM;
static const long porter_curlauth_negotiate = (long)CURLAUTH_NEGOTIATE;
static const long porter_curlauth_any = (long)CURLAUTH_ANY;
static const int porter_curlpause_cont = CURLPAUSE_CONT;
static const int porter_curlpause_recv = CURLPAUSE_RECV;
static const size_t porter_writefunc_pause = CURL_WRITEFUNC_PAUSE;
static const size_t porter_readfunc_pause = CURL_READFUNC_PAUSE;
static const size_t porter_readfunc_abort = CURL_READFUNC_ABORT;
static const long porter_global_default = CURL_GLOBAL_DEFAULT;
static const long porter_altsvc_readonlyfile = CURLALTSVC_READONLYFILE;
static const long porter_altsvc_h1 = CURLALTSVC_H1;
static const long porter_altsvc_h2 = CURLALTSVC_H2;
static const long porter_altsvc_h3 = CURLALTSVC_H3;

/* CURLINFO_ACTIVESOCKET: the socket of a connect-only handle. */
CURLcode porter_easy_getinfo_socket(CURL *handle, curl_socket_t *socket);

/* TLS started on an open socket (OpenSSL), for a stream task's startSecureConnection,
   which libcurl cannot do on a connect-only connection. The settings mirror the
   session's: `verify` checks the chain (against `ca_file`, or the system's CAs when
   NULL) and the name; `pinned_key` ("sha256//BASE64[;...]") is checked after the
   handshake; a client certificate (PEM, with `key` or in the same file); protocol
   versions as OpenSSL numbers (0: default, at least TLS 1.2). Results of handshake: 0
   done, 1 wants the socket readable, 2 writable, -1/-2 failed (-2: the certificate did
   not verify or the pin did not match), with a message in `err`. read / write: bytes,
   0 at the peer's close_notify (read), -1 wants readable, -2 wants writable, -3 failed
   (a connection cut without close_notify is a failure: it may be a truncation). */
typedef struct porter_tls porter_tls;
typedef struct {
    int verify;
    const char *ca_file;
    const char *pinned_key;
    const char *certificate;
    const char *key;
    int minimum_version;
    int maximum_version;
} porter_tls_settings;
porter_tls *porter_tls_new(int fd, const char *server_name, const porter_tls_settings *settings,
                           char *err, size_t errcap);
int porter_tls_handshake(porter_tls *t, char *err, size_t errcap);
long porter_tls_read(porter_tls *t, void *buffer, size_t length, char *err, size_t errcap);
long porter_tls_write(porter_tls *t, const void *buffer, size_t length, char *err, size_t errcap);
int porter_tls_pending(porter_tls *t);
void porter_tls_shutdown(porter_tls *t);
void porter_tls_free(porter_tls *t);

/* Blocks SIGPIPE on the calling thread: a write to a socket the peer closed (OpenSSL's,
   for a stream's TLS, uses write(), not send with MSG_NOSIGNAL) then fails with EPIPE
   instead of killing the program. The signal stays pending on that thread, unseen. */
void porter_block_sigpipe_on_this_thread(void);

/* Names the calling thread for ps and /proc (prctl is variadic); at most 15 bytes are kept. */
void porter_name_this_thread(const char *name);

#endif
