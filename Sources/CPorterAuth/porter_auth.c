#define _GNU_SOURCE
#include "porter_auth.h"
#include <dlfcn.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned int porter_auth_digest(const char *name, const void *data, size_t length, unsigned char out[64]) {
    EVP_MD *md = EVP_MD_fetch(NULL, name, NULL);
    if (!md) return 0;
    unsigned int size = 0;
    if ((size_t)EVP_MD_get_size(md) > 64 || !EVP_Digest(data, length, out, &size, md, NULL)) size = 0;
    EVP_MD_free(md);
    return size;
}

int porter_auth_hmac_md5(const void *key, size_t key_length, const void *data, size_t length, unsigned char out[16]) {
    unsigned int size = 0;
    if (key_length > INT32_MAX) return 0;
    return HMAC(EVP_md5(), key, (int)key_length, data, length, out, &size) != NULL && size == 16;
}

/* ---- GSS-API (RFC 2744's C binding), the part used ---- */

typedef uint32_t gss_uint32;
typedef struct { gss_uint32 length; void *elements; } gss_oid_desc;
typedef struct { size_t length; void *value; } gss_buffer_desc;

#define GSS_S_COMPLETE 0u
#define GSS_S_CONTINUE_NEEDED 1u
#define GSS_ERROR(x) ((x) & 0xffff0000u)
#define GSS_C_MUTUAL_FLAG 2u
#define GSS_C_REPLAY_FLAG 4u
#define GSS_C_SEQUENCE_FLAG 8u
#define GSS_C_GSS_CODE 1
#define GSS_C_MECH_CODE 2

static struct {
    gss_uint32 (*import_name)(gss_uint32 *, gss_buffer_desc *, gss_oid_desc *, void **);
    gss_uint32 (*init_sec_context)(gss_uint32 *, void *, void **, void *, gss_oid_desc *, gss_uint32, gss_uint32, void *,
                                   gss_buffer_desc *, gss_oid_desc **, gss_buffer_desc *, gss_uint32 *, gss_uint32 *);
    gss_uint32 (*release_buffer)(gss_uint32 *, gss_buffer_desc *);
    gss_uint32 (*release_name)(gss_uint32 *, void **);
    gss_uint32 (*delete_sec_context)(gss_uint32 *, void **, gss_buffer_desc *);
    gss_uint32 (*display_status)(gss_uint32 *, gss_uint32, int, gss_oid_desc *, gss_uint32 *, gss_buffer_desc *);
} gss;
static pthread_once_t gss_once = PTHREAD_ONCE_INIT;
static char gss_failure[256];

#define GSS_LIBRARY "libgssapi_krb5.so.2"

static void gss_load(void) {
    void *handle = dlopen(GSS_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle) {
        const char *e = dlerror();
        snprintf(gss_failure, sizeof gss_failure, "%s cannot be loaded (%s)", GSS_LIBRARY, e ? e : "not found");
        return;
    }
    struct { const char *name; void *slot; } symbols[] = {
        { "gss_import_name", &gss.import_name }, { "gss_init_sec_context", &gss.init_sec_context },
        { "gss_release_buffer", &gss.release_buffer }, { "gss_release_name", &gss.release_name },
        { "gss_delete_sec_context", &gss.delete_sec_context }, { "gss_display_status", &gss.display_status },
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *symbol = dlsym(handle, symbols[i].name);
        if (!symbol) {
            snprintf(gss_failure, sizeof gss_failure, "%s lacks %s", GSS_LIBRARY, symbols[i].name);
            return;
        }
        memcpy(symbols[i].slot, &symbol, sizeof symbol);
    }
}

/* 1.2.840.113554.1.2.1.4 (GSS_C_NT_HOSTBASED_SERVICE) and 1.3.6.1.5.5.2 (SPNEGO). */
static gss_oid_desc hostbased = { 10, (void *)"\x2a\x86\x48\x86\xf7\x12\x01\x02\x01\x04" };
static gss_oid_desc spnego = { 6, (void *)"\x2b\x06\x01\x05\x05\x02" };

struct porter_gss { void *context; void *name; };

static void explain(const char *what, gss_uint32 major, gss_uint32 minor, char *why, size_t why_size) {
    size_t used = (size_t)snprintf(why, why_size, "%s failed", what);
    for (int round = 0; round < 2; round++) {
        gss_uint32 code = round == 0 ? major : minor, more = 0, ignored;
        int kind = round == 0 ? GSS_C_GSS_CODE : GSS_C_MECH_CODE;
        if (round == 1 && minor == 0) break;
        do {
            gss_buffer_desc text = { 0, NULL };
            if (GSS_ERROR(gss.display_status(&ignored, code, kind, NULL, &more, &text))) break;
            if (used < why_size)
                used += (size_t)snprintf(why + used, why_size - used, ": %.*s", (int)text.length, (const char *)text.value);
            gss.release_buffer(&ignored, &text);
        } while (more);
    }
}

int porter_gss_start(const char *host, porter_gss **out, unsigned char **token, size_t *token_length,
                     char *why, size_t why_size) {
    pthread_once(&gss_once, gss_load);
    if (gss_failure[0]) { snprintf(why, why_size, "%s", gss_failure); return -1; }
    char service[1100];
    if (snprintf(service, sizeof service, "HTTP@%s", host) >= (int)sizeof service) {
        snprintf(why, why_size, "the host name is too long");
        return -1;
    }
    porter_gss *g = calloc(1, sizeof *g);
    if (!g) { snprintf(why, why_size, "out of memory"); return -1; }
    gss_uint32 minor = 0;
    gss_buffer_desc name = { strlen(service), service };
    gss_uint32 major = gss.import_name(&minor, &name, &hostbased, &g->name);
    if (GSS_ERROR(major)) {
        explain("gss_import_name", major, minor, why, why_size);
        free(g);
        return -1;
    }
    gss_buffer_desc output = { 0, NULL };
    gss_uint32 flags = 0;
    major = gss.init_sec_context(&minor, NULL, &g->context, g->name, &spnego,
                                 GSS_C_MUTUAL_FLAG | GSS_C_REPLAY_FLAG | GSS_C_SEQUENCE_FLAG, 0, NULL, NULL, NULL,
                                 &output, &flags, NULL);
    if (GSS_ERROR(major) || output.length == 0) {
        if (GSS_ERROR(major)) explain("gss_init_sec_context", major, minor, why, why_size);
        else snprintf(why, why_size, "gss_init_sec_context gave no token");
        gss.release_buffer(&minor, &output);
        porter_gss_free(g);
        return -1;
    }
    *token = malloc(output.length);
    if (!*token) {
        gss.release_buffer(&minor, &output);
        porter_gss_free(g);
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    memcpy(*token, output.value, output.length);
    *token_length = output.length;
    gss.release_buffer(&minor, &output);
    *out = g;
    return 0;
}

int porter_gss_finish(porter_gss *g, const unsigned char *token, size_t length, char *why, size_t why_size) {
    gss_uint32 minor = 0, flags = 0;
    gss_buffer_desc input = { length, (void *)token }, output = { 0, NULL };
    gss_uint32 major = gss.init_sec_context(&minor, NULL, &g->context, g->name, &spnego,
                                            GSS_C_MUTUAL_FLAG | GSS_C_REPLAY_FLAG | GSS_C_SEQUENCE_FLAG, 0, NULL, &input, NULL,
                                            &output, &flags, NULL);
    gss.release_buffer(&minor, &output);
    if (GSS_ERROR(major)) { explain("gss_init_sec_context (the server's answer)", major, minor, why, why_size); return -1; }
    if (major != GSS_S_COMPLETE) { snprintf(why, why_size, "the server's answer did not complete the context"); return -1; }
    return 0;
}

void porter_gss_free(porter_gss *g) {
    if (!g) return;
    gss_uint32 minor = 0;
    if (g->context) gss.delete_sec_context(&minor, &g->context, NULL);
    if (g->name) gss.release_name(&minor, &g->name);
    free(g);
}

void porter_auth_free(void *pointer) { free(pointer); }
