#include "porter_curl.h"
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
