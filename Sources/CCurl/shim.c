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
