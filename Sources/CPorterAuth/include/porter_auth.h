/*
 * What the WebSocket handshake's authentication needs from C: message digests and
 * HMAC-MD5 from libcrypto (already linked for TLS), and SPNEGO through GSS-API.
 *
 * libgssapi_krb5.so.2 is opened with dlopen() on the first porter_gss_start, never
 * linked, so building Porter needs no Kerberos headers (the few declarations used are
 * in porter_auth.c); without the library, Negotiate is answered "unavailable".
 */
#ifndef PORTER_AUTH_H
#define PORTER_AUTH_H

#include <stddef.h>

/* The digest of data with OpenSSL's algorithm `name` ("MD5", "SHA256", "SHA512-256").
 * Returns the digest's length (at most 64 bytes written to out), 0 when unavailable. */
unsigned int porter_auth_digest(const char *name, const void *data, size_t length, unsigned char out[64]);

/* HMAC-MD5 of data under key; 1 on success. */
int porter_auth_hmac_md5(const void *key, size_t key_length, const void *data, size_t length, unsigned char out[16]);

typedef struct porter_gss porter_gss;

/* Starts a SPNEGO context for the service HTTP@host with the default credential
 * (KRB5CCNAME), mutual authentication asked for. On success returns 0, *context and a
 * malloc'd *token (free with porter_auth_free); on failure returns -1 and writes why. */
int porter_gss_start(const char *host, porter_gss **context, unsigned char **token, size_t *token_length,
                     char *why, size_t why_size);

/* Feeds the server's token (the mutual-authentication answer) to the context.
 * 0: the server is authenticated; -1: it is not (why written). */
int porter_gss_finish(porter_gss *context, const unsigned char *token, size_t length, char *why, size_t why_size);

void porter_gss_free(porter_gss *context);
void porter_auth_free(void *pointer);

#endif
