#include "porter_curl.h"
#include <sys/prctl.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

CURLcode porter_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
CURLcode porter_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
CURLcode porter_easy_setopt_ptr(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}
CURLcode porter_easy_setopt_data_cb(CURL *handle, CURLoption option, porter_curl_data_cb cb) {
    return curl_easy_setopt(handle, option, cb);
}
CURLcode porter_easy_setopt_debug_cb(CURL *handle, porter_curl_debug_cb cb) {
    return curl_easy_setopt(handle, CURLOPT_DEBUGFUNCTION, (curl_debug_callback)(void *)cb);
}
CURLcode porter_easy_setopt_xferinfo_cb(CURL *handle, porter_curl_xferinfo_cb cb) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, cb);
}
CURLcode porter_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
CURLcode porter_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}
CURLcode porter_easy_getinfo_string(CURL *handle, CURLINFO info, const char **value) {
    return curl_easy_getinfo(handle, info, value);
}
CURLcode porter_easy_getinfo_certinfo(CURL *handle, struct curl_certinfo **value) {
    return curl_easy_getinfo(handle, CURLINFO_CERTINFO, value);
}
CURLMcode porter_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}
CURLcode porter_curlmsg_result(const CURLMsg *msg) {
    return msg->data.result;
}

int porter_spki_sha256(const unsigned char *der, long length, unsigned char *out) {
    const unsigned char *p = der;
    X509 *cert = d2i_X509(NULL, &p, length);
    if (!cert) return -1;
    unsigned char *spki = NULL;
    int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &spki);
    int rc = -1;
    if (n > 0) {
        unsigned int len = 0;
        rc = EVP_Digest(spki, (size_t)n, out, &len, EVP_sha256(), NULL) == 1 && len == 32 ? 0 : -1;
    }
    OPENSSL_free(spki);
    X509_free(cert);
    return rc;
}

/* ---- content decoding ---- */
#include <zlib.h>
#include <stdlib.h>
#include <string.h>

struct porter_inflater {
    z_stream s;
    int gzip;
    int started;    /* some output came (or the header was accepted) */
    int raw;        /* switched to raw deflate */
    int done;
};

porter_inflater *porter_inflater_new(int gzip) {
    porter_inflater *z = calloc(1, sizeof *z);
    if (!z) return NULL;
    z->gzip = gzip;
    /* 15 + 32: a gzip or zlib header, detected. */
    if (inflateInit2(&z->s, 15 + 32) != Z_OK) { free(z); return NULL; }
    return z;
}

int porter_inflater_run(porter_inflater *z, const void *in, size_t in_len, size_t *in_used,
                        void *out, size_t out_cap, size_t *out_len) {
    *in_used = 0;
    *out_len = 0;
    if (z->done) { *in_used = in_len; return 1; }
    z->s.next_in = (Bytef *)in;
    z->s.avail_in = (uInt)(in_len > 0x7fffffff ? 0x7fffffff : in_len);
    z->s.next_out = (Bytef *)out;
    z->s.avail_out = (uInt)(out_cap > 0x7fffffff ? 0x7fffffff : out_cap);
    uInt before_in = z->s.avail_in;
    int rc = inflate(&z->s, Z_NO_FLUSH);
    if (rc == Z_DATA_ERROR && !z->gzip && !z->started && !z->raw) {
        /* "deflate" that is raw deflate, not zlib: start again without a header. */
        inflateEnd(&z->s);
        memset(&z->s, 0, sizeof z->s);
        if (inflateInit2(&z->s, -15) != Z_OK) return -1;
        z->raw = 1;
        return porter_inflater_run(z, in, in_len, in_used, out, out_cap, out_len);
    }
    *in_used = before_in - z->s.avail_in;
    *out_len = (size_t)(z->s.next_out - (Bytef *)out);
    if (*out_len > 0) z->started = 1;
    if (rc == Z_STREAM_END) {
        /* Another gzip member may follow (concatenated gzip files). */
        const unsigned char *rest = (const unsigned char *)in + *in_used;
        size_t left = in_len - *in_used;
        if (z->gzip && left >= 2 && rest[0] == 0x1f && rest[1] == 0x8b) {
            inflateReset(&z->s);
            return 0;
        }
        z->done = 1;
        *in_used = in_len;
        return 1;
    }
    if (rc == Z_OK || rc == Z_BUF_ERROR) return 0;
    return -1;
}

void porter_inflater_free(porter_inflater *z) {
    if (!z) return;
    inflateEnd(&z->s);
    free(z);
}

/* ---- every content coding Porter decodes, behind one interface ---- */
#include <brotli/decode.h>
#include <zstd.h>

struct porter_decoder {
    int coding;
    int finished;
    porter_inflater *z;
    BrotliDecoderState *br;
    ZSTD_DStream *zs;
};

porter_decoder *porter_decoder_new(int coding) {
    porter_decoder *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->coding = coding;
    switch (coding) {
    case PORTER_CODING_DEFLATE:
    case PORTER_CODING_GZIP:
        d->z = porter_inflater_new(coding == PORTER_CODING_GZIP);
        if (!d->z) { free(d); return NULL; }
        return d;
    case PORTER_CODING_BROTLI:
        /* The large-window extension stays off: windows of at most 16 MiB (RFC 7932). */
        d->br = BrotliDecoderCreateInstance(NULL, NULL, NULL);
        if (!d->br) { free(d); return NULL; }
        return d;
    case PORTER_CODING_ZSTD:
        d->zs = ZSTD_createDStream();
        if (!d->zs) { free(d); return NULL; }
        /* RFC 9659 §3: a zstd content coding's window is at most 8 MiB; a frame that asks
           for more is refused (it would make the decoder allocate up to 2 GiB). */
        if (ZSTD_isError(ZSTD_DCtx_setParameter(d->zs, ZSTD_d_windowLogMax, 23))) {
            ZSTD_freeDStream(d->zs);
            free(d);
            return NULL;
        }
        return d;
    default:
        free(d);
        return NULL;
    }
}

int porter_decoder_run(porter_decoder *d, const void *in, size_t in_len, size_t *in_used,
                       void *out, size_t out_cap, size_t *out_len) {
    *in_used = 0;
    *out_len = 0;
    switch (d->coding) {
    case PORTER_CODING_DEFLATE:
    case PORTER_CODING_GZIP: {
        int rc = porter_inflater_run(d->z, in, in_len, in_used, out, out_cap, out_len);
        if (rc == 1) d->finished = 1;
        return rc;
    }
    case PORTER_CODING_BROTLI: {
        if (d->finished) { *in_used = in_len; return 1; }
        size_t avail_in = in_len, avail_out = out_cap;
        const uint8_t *next_in = (const uint8_t *)in;
        uint8_t *next_out = (uint8_t *)out;
        BrotliDecoderResult r = BrotliDecoderDecompressStream(d->br, &avail_in, &next_in, &avail_out, &next_out, NULL);
        *in_used = in_len - avail_in;
        *out_len = out_cap - avail_out;
        switch (r) {
        case BROTLI_DECODER_RESULT_SUCCESS:
            d->finished = 1;
            *in_used = in_len;   /* trailing bytes are ignored, as after gzip */
            return 1;
        case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT:
        case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT:
            return 0;
        default:
            return -1;
        }
    }
    case PORTER_CODING_ZSTD: {
        ZSTD_inBuffer ib = { in, in_len, 0 };
        ZSTD_outBuffer ob = { out, out_cap, 0 };
        size_t r = ZSTD_decompressStream(d->zs, &ob, &ib);
        if (ZSTD_isError(r)) return -1;
        *in_used = ib.pos;
        *out_len = ob.pos;
        /* 0: a frame ended and everything is flushed; another frame may follow
           (concatenated frames are one zstd stream). A call that took and gave nothing
           (asked again after the end, for more output) leaves the state as it was: after
           a frame, zstd asks for the next one's header. */
        if (ib.pos > 0 || ob.pos > 0) d->finished = (r == 0);
        return 0;
    }
    default:
        return -1;
    }
}

int porter_decoder_finished(const porter_decoder *d) { return d->finished; }

void porter_decoder_free(porter_decoder *d) {
    if (!d) return;
    if (d->z) porter_inflater_free(d->z);
    if (d->br) BrotliDecoderDestroyInstance(d->br);
    if (d->zs) ZSTD_freeDStream(d->zs);
    free(d);
}

/* ---- TLS facts of a finished transfer ---- */
#include <openssl/ssl.h>
#include <stdio.h>

int porter_tls_info(CURL *handle, char *version, char *cipher, size_t capacity) {
    struct curl_tlssessioninfo *info = NULL;
    if (capacity == 0) return -1;
    version[0] = cipher[0] = 0;
    if (curl_easy_getinfo(handle, CURLINFO_TLS_SSL_PTR, &info) != CURLE_OK || !info) return -1;
    if (info->backend != CURLSSLBACKEND_OPENSSL || !info->internals) return -1;
    SSL *ssl = (SSL *)info->internals;
    const char *v = SSL_get_version(ssl);
    const char *c = SSL_get_cipher_name(ssl);
    snprintf(version, capacity, "%s", v ? v : "");
    snprintf(cipher, capacity, "%s", c ? c : "");
    return 0;
}

void porter_name_this_thread(const char *name) {
    char shortened[16];
    snprintf(shortened, sizeof shortened, "%s", name);
    prctl(PR_SET_NAME, (unsigned long)shortened, 0, 0, 0);
}

CURLcode porter_easy_getinfo_socket(CURL *handle, curl_socket_t *socket) {
    return curl_easy_getinfo(handle, CURLINFO_ACTIVESOCKET, socket);
}

/* ---- TLS started on an open stream (stream tasks' startSecureConnection) ---- */

#include <openssl/ssl.h>
#include <openssl/err.h>
#include <arpa/inet.h>
#include <string.h>

struct porter_tls {
    SSL_CTX *ctx;
    SSL *ssl;
    char *pin;          /* "sha256//base64[;sha256//base64...]" or NULL */
    int pin_checked;
};

static void porter_tls_error(char *err, size_t cap, const char *what) {
    if (!err || cap == 0) return;
    unsigned long e = ERR_get_error();
    char detail[256] = "";
    if (e) ERR_error_string_n(e, detail, sizeof detail);
    snprintf(err, cap, "%s%s%s", what, detail[0] ? ": " : "", detail);
    ERR_clear_error();
}

static int porter_is_ip_literal(const char *name) {
    unsigned char buf[16];
    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

porter_tls *porter_tls_new(int fd, const char *server_name, const porter_tls_settings *settings,
                           char *err, size_t errcap) {
    ERR_clear_error();
    porter_tls *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, errcap, "out of memory"); return NULL; }
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) { porter_tls_error(err, errcap, "SSL_CTX_new"); free(t); return NULL; }
    SSL_CTX_set_min_proto_version(t->ctx, settings->minimum_version ? settings->minimum_version : TLS1_2_VERSION);
    if (settings->maximum_version) SSL_CTX_set_max_proto_version(t->ctx, settings->maximum_version);
    /* A write retried after WANT_WRITE may come from another buffer (the caller's Data
       moves); partial writes let a large write go out as the socket drains. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    if (settings->verify) {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
        int loaded = settings->ca_file && settings->ca_file[0]
            ? SSL_CTX_load_verify_locations(t->ctx, settings->ca_file, NULL)
            : SSL_CTX_set_default_verify_paths(t->ctx);
        if (loaded != 1) { porter_tls_error(err, errcap, "cannot load the CA certificates"); porter_tls_free(t); return NULL; }
    }
    if (settings->certificate && settings->certificate[0]) {
        const char *key = settings->key && settings->key[0] ? settings->key : settings->certificate;
        if (SSL_CTX_use_certificate_chain_file(t->ctx, settings->certificate) != 1
            || SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
            porter_tls_error(err, errcap, "cannot use the client certificate");
            porter_tls_free(t);
            return NULL;
        }
    }
    if (settings->pinned_key && settings->pinned_key[0]) {
        if (strncmp(settings->pinned_key, "sha256//", 8) != 0) {
            snprintf(err, errcap, "a pinned key for startSecureConnection must be given as sha256//BASE64");
            porter_tls_free(t);
            return NULL;
        }
        t->pin = strdup(settings->pinned_key);
        if (!t->pin) { snprintf(err, errcap, "out of memory"); porter_tls_free(t); return NULL; }
    }
    t->ssl = SSL_new(t->ctx);
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) { porter_tls_error(err, errcap, "SSL_new"); porter_tls_free(t); return NULL; }
    if (server_name && server_name[0]) {
        /* SNI names a host; an address is not sent (RFC 6066 §3). */
        if (!porter_is_ip_literal(server_name)) SSL_set_tlsext_host_name(t->ssl, server_name);
        if (settings->verify && SSL_set1_host(t->ssl, server_name) != 1) {
            porter_tls_error(err, errcap, "SSL_set1_host"); porter_tls_free(t); return NULL;
        }
    }
    SSL_set_connect_state(t->ssl);
    return t;
}

/* The outcome of an SSL call that did not succeed, decided from SSL_get_error before
   anything clears the error queue: 1 wants readable, 2 writable, 3 the peer's
   close_notify, -2 a certificate that did not verify, -1 any other failure (an alert,
   a damaged record, a connection cut without close_notify: never a clean end). */
static int porter_tls_outcome(porter_tls *t, int rc, char *err, size_t errcap, const char *what) {
    int e = SSL_get_error(t->ssl, rc);
    if (e == SSL_ERROR_WANT_READ) return 1;
    if (e == SSL_ERROR_WANT_WRITE) return 2;
    if (e == SSL_ERROR_ZERO_RETURN) return 3;
    long v = SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK) {
        if (err && errcap) snprintf(err, errcap, "%s: certificate verification failed: %s", what, X509_verify_cert_error_string(v));
        ERR_clear_error();
        return -2;
    }
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        if (err && errcap) snprintf(err, errcap, "%s: the connection ended without a TLS close", what);
        return -1;
    }
    porter_tls_error(err, errcap, what);
    return -1;
}

/* After the handshake: the server's key against the pins. 0 when it matches (or no pin). */
static int porter_tls_check_pin(porter_tls *t, char *err, size_t errcap) {
    if (!t->pin || t->pin_checked) return 0;
    X509 *cert = SSL_get1_peer_certificate(t->ssl);
    unsigned char *der = NULL;
    int n = cert ? i2d_X509(cert, &der) : -1;
    unsigned char digest[32];
    int ok = n > 0 && porter_spki_sha256(der, n, digest) == 0;
    OPENSSL_free(der);
    X509_free(cert);
    if (!ok) { snprintf(err, errcap, "cannot read the server's public key"); return -1; }
    unsigned char encoded[64];
    EVP_EncodeBlock(encoded, digest, 32);
    char *list = strdup(t->pin), *save = NULL;
    if (!list) { snprintf(err, errcap, "out of memory"); return -1; }
    int matched = 0;
    for (char *item = strtok_r(list, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        if (strncmp(item, "sha256//", 8) == 0 && strcmp(item + 8, (const char *)encoded) == 0) matched = 1;
    }
    free(list);
    if (!matched) { snprintf(err, errcap, "the server's public key does not match the pinned key"); return -2; }
    t->pin_checked = 1;
    return 0;
}

int porter_tls_handshake(porter_tls *t, char *err, size_t errcap) {
    ERR_clear_error();
    int rc = SSL_do_handshake(t->ssl);
    if (rc == 1) return porter_tls_check_pin(t, err, errcap);
    int w = porter_tls_outcome(t, rc, err, errcap, "TLS handshake");
    return w == 3 ? -1 : w;
}

long porter_tls_read(porter_tls *t, void *buffer, size_t length, char *err, size_t errcap) {
    ERR_clear_error();
    size_t n = 0;
    int rc = SSL_read_ex(t->ssl, buffer, length, &n);
    if (rc == 1) return (long)n;
    switch (porter_tls_outcome(t, rc, err, errcap, "TLS read")) {
    case 3: return 0;
    case 1: return -1;
    case 2: return -2;
    default: return -3;
    }
}

long porter_tls_write(porter_tls *t, const void *buffer, size_t length, char *err, size_t errcap) {
    ERR_clear_error();
    size_t n = 0;
    int rc = SSL_write_ex(t->ssl, buffer, length, &n);
    if (rc == 1) return (long)n;
    switch (porter_tls_outcome(t, rc, err, errcap, "TLS write")) {
    case 1: return -1;
    case 2: return -2;
    default: return -3;
    }
}

int porter_tls_pending(porter_tls *t) { return SSL_pending(t->ssl); }

void porter_tls_shutdown(porter_tls *t) { SSL_shutdown(t->ssl); }

void porter_tls_free(porter_tls *t) {
    if (!t) return;
    if (t->ssl) SSL_free(t->ssl);
    if (t->ctx) SSL_CTX_free(t->ctx);
    free(t->pin);
    free(t);
}

#include <signal.h>
#include <pthread.h>

void porter_block_sigpipe_on_this_thread(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}
