/*
 * gopher:// for Porter, written in plain C against porter_plugin.h — an example of a
 * third-party plugin. Built as libGopherPlugin.so (`swift build --product GopherPlugin`,
 * or `cc -shared -fPIC -I Sources/CPorterPlugin/include -o gopher.so gopher.c -lpthread`).
 *
 * Gopher (RFC 1436) in one paragraph: connect to port 70, send a selector and CRLF, read
 * until the server closes. URLs (RFC 4266) are gopher://host[:port]/<type><selector>,
 * where <type> is one character: 0 text, 1 menu, 7 search (the query follows a %09),
 * 9 / I / g binary or images, h HTML. An empty path is the root menu. Text and menus
 * end with a line holding a single "."; this plugin removes that line.
 *
 * Each load runs on a thread of its own; `pause` / `resume` park that thread, `stop`
 * shuts the socket down, and `destroy` joins the thread.
 */
#include "porter_plugin.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const porter_host *host;

typedef struct gopher_load {
    porter_client *client;
    const porter_request *request;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int paused, stopped;
    int fd;
} gopher_load;

/* Splits a gopher URL. Returns 0 on success, else writes a reason. */
static int parse_url(const char *url, char *hostname, size_t hostcap, char *port, size_t portcap, char *type,
                     char *selector, size_t selcap, char *why, size_t whycap) {
    if (strncmp(url, "gopher://", 9) != 0) { snprintf(why, whycap, "not a gopher URL"); return -1; }
    const char *p = url + 9;
    const char *end = p + strcspn(p, "/?#");
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (at) p = at + 1;   /* gopher has no logins: ignore user info */
    const char *colon = NULL;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (!close) { snprintf(why, whycap, "bad IPv6 address"); return -1; }
        if ((size_t)(close - p - 1) >= hostcap) { snprintf(why, whycap, "host name too long"); return -1; }
        memcpy(hostname, p + 1, (size_t)(close - p - 1));
        hostname[close - p - 1] = 0;
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        const char *hend = colon ? colon : end;
        if ((size_t)(hend - p) >= hostcap || hend == p) { snprintf(why, whycap, "missing or long host name"); return -1; }
        memcpy(hostname, p, (size_t)(hend - p));
        hostname[hend - p] = 0;
    }
    if (colon && colon + 1 < end) {
        size_t n = (size_t)(end - colon - 1);
        if (n >= portcap) { snprintf(why, whycap, "bad port"); return -1; }
        memcpy(port, colon + 1, n);
        port[n] = 0;
        for (size_t i = 0; i < n; i++)
            if (!isdigit((unsigned char)port[i])) { snprintf(why, whycap, "bad port"); return -1; }
    } else {
        snprintf(port, portcap, "70");
    }
    const char *path = *end == '/' ? end + 1 : end;
    if (*path == 0 || *path == '?' || *path == '#') { *type = '1'; selector[0] = 0; return 0; }
    *type = *path++;
    /* Percent-decode the selector; %09 separates a search query (sent as a TAB). */
    size_t o = 0;
    for (; *path && *path != '#'; path++) {
        if (o + 1 >= selcap) { snprintf(why, whycap, "selector too long"); return -1; }
        if (*path == '%' && isxdigit((unsigned char)path[1]) && isxdigit((unsigned char)path[2])) {
            char hex[3] = {path[1], path[2], 0};
            selector[o++] = (char)strtol(hex, NULL, 16);
            path += 2;
        } else {
            selector[o++] = *path;
        }
    }
    selector[o] = 0;
    if (strpbrk(selector, "\r\n")) { snprintf(why, whycap, "a selector cannot hold CR or LF"); return -1; }
    return 0;
}

static const char *mime_for(char type) {
    switch (type) {
    case '0': return "text/plain";
    case '1': case '7': return "text/x-gopher-menu";
    case 'h': return "text/html";
    case 'g': return "image/gif";
    case 'I': return "image/*";
    default: return "application/octet-stream";
    }
}

static int is_stopped(gopher_load *l) {
    pthread_mutex_lock(&l->lock);
    int s = l->stopped;
    pthread_mutex_unlock(&l->lock);
    return s;
}

/* Blocks while paused; returns 0 once stopped. */
static int wait_running(gopher_load *l) {
    pthread_mutex_lock(&l->lock);
    while (l->paused && !l->stopped) pthread_cond_wait(&l->cond, &l->lock);
    int go = !l->stopped;
    pthread_mutex_unlock(&l->lock);
    return go;
}

static void fail(gopher_load *l, int code, const char *message, int err) {
    if (is_stopped(l)) return;
    host->did_fail(l->client, code, message, err ? "errno" : NULL, err);
}

static void *run(void *arg) {
    gopher_load *l = arg;
    char hostname[256], port[16], selector[4096], type, why[256];
    if (parse_url(l->request->url, hostname, sizeof hostname, port, sizeof port, &type, selector, sizeof selector, why,
                  sizeof why) != 0) {
        fail(l, PORTER_ERR_BAD_URL, why, 0);
        return NULL;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(hostname, port, &hints, &res);
    if (gai != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot find host %s: %s", hostname, gai_strerror(gai));
        fail(l, PORTER_ERR_CANNOT_FIND_HOST, msg, 0);
        return NULL;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) { err = errno; continue; }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot connect to %s port %s: %s", hostname, port, strerror(err));
        fail(l, PORTER_ERR_CANNOT_CONNECT_TO_HOST, msg, err);
        return NULL;
    }
    pthread_mutex_lock(&l->lock);
    l->fd = fd;
    int stopped = l->stopped;
    pthread_mutex_unlock(&l->lock);
    if (stopped) return NULL;

    char line[4200];
    int n = snprintf(line, sizeof line, "%s\r\n", selector);
    for (int sent = 0; sent < n;) {
        ssize_t w = send(fd, line + sent, (size_t)(n - sent), MSG_NOSIGNAL);
        if (w <= 0) { fail(l, PORTER_ERR_NETWORK_CONNECTION_LOST, "the server closed the connection", errno); return NULL; }
        sent += (int)w;
    }

    porter_response r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.mime_type = mime_for(type);
    r.text_encoding = (type == '0' || type == '1' || type == '7') ? "utf-8" : NULL;
    r.expected_length = -1;
    r.status_code = -1;
    r.resume_offset = -1;
    int responded = 0;

    /* Text and menus: hold back the last 3 bytes to drop a final ".\r\n". */
    int textual = type == '0' || type == '1' || type == '7';
    char held[3];
    size_t held_n = 0;
    char buf[65536];
    int timeout_ms = l->request->timeout_interval > 0 ? (int)(l->request->timeout_interval * 1000) : -1;
    for (;;) {
        if (!wait_running(l)) return NULL;
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr == 0) { fail(l, PORTER_ERR_TIMED_OUT, "the server sent nothing for too long", 0); return NULL; }
        if (pr < 0 && errno == EINTR) continue;
        ssize_t got = recv(fd, buf + 3, sizeof buf - 3, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { fail(l, PORTER_ERR_NETWORK_CONNECTION_LOST, "connection lost mid-body", errno); return NULL; }
        if (is_stopped(l)) return NULL;
        if (!responded) { host->did_receive_response(l->client, &r); responded = 1; }
        if (got == 0) break;
        char *start = buf + 3;
        size_t len = (size_t)got;
        if (textual) {
            /* Prepend what was held back, then hold back the new tail. */
            start -= held_n;
            memcpy(start, held, held_n);
            len += held_n;
            held_n = len < 3 ? len : 3;
            memcpy(held, start + len - held_n, held_n);
            len -= held_n;
        }
        if (len > 0) host->did_load_data(l->client, start, len);
    }
    if (textual && held_n > 0) {
        int terminator = held_n == 3 && memcmp(held, ".\r\n", 3) == 0;
        if (!terminator) host->did_load_data(l->client, held, held_n);
    }
    if (!is_stopped(l)) host->did_finish(l->client);
    return NULL;
}

static int32_t g_start(void *ctx, const porter_request *request, porter_client *client, void **out, char *error,
                       size_t cap) {
    (void)ctx;
    if (request->has_body) {
        snprintf(error, cap, "gopher cannot upload");
        return PORTER_ERR_UNSUPPORTED_URL;
    }
    gopher_load *l = calloc(1, sizeof *l);
    if (!l) { snprintf(error, cap, "out of memory"); return PORTER_ERR_RESOURCE_UNAVAILABLE; }
    l->client = client;
    l->request = request;
    l->fd = -1;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        pthread_mutex_destroy(&l->lock);
        pthread_cond_destroy(&l->cond);
        free(l);
        snprintf(error, cap, "cannot start a thread");
        return PORTER_ERR_RESOURCE_UNAVAILABLE;
    }
    *out = l;
    return 0;
}

static void g_stop(void *p) {
    gopher_load *l = p;
    pthread_mutex_lock(&l->lock);
    l->stopped = 1;
    if (l->fd >= 0) shutdown(l->fd, SHUT_RDWR);   /* wakes a blocked poll / recv */
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

static void g_destroy(void *p) {
    gopher_load *l = p;
    g_stop(l);
    pthread_join(l->thread, NULL);
    if (l->fd >= 0) close(l->fd);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
}

static void g_pause(void *p) {
    gopher_load *l = p;
    pthread_mutex_lock(&l->lock);
    l->paused = 1;
    pthread_mutex_unlock(&l->lock);
}

static void g_resume(void *p) {
    gopher_load *l = p;
    pthread_mutex_lock(&l->lock);
    l->paused = 0;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

static const porter_handler_vtable gopher_vtable = {
    .struct_size = sizeof(porter_handler_vtable),
    .can_handle = NULL,
    .start = g_start,
    .stop = g_stop,
    .destroy = g_destroy,
    .pause = g_pause,
    .resume = g_resume,
};

/* The port is declared as well as used above: the host builds protection spaces and
 * reports ports from the declaration (ABI 1.4), never from a table of its own. */
static const porter_scheme gopher_schemes[] = {
    {.name = "gopher", .flags = PORTER_SCHEME_NEEDS_NETWORK, .default_port = 70},
};

static const porter_plugin_descriptor gopher_descriptor = {
    .struct_size = sizeof(porter_plugin_descriptor),
    .abi_major = PORTER_PLUGIN_ABI_MAJOR,
    .abi_minor = PORTER_PLUGIN_ABI_MINOR,
    .name = "gopher (C example)",
    .version = "1.0.0",
    .schemes = gopher_schemes,
    .scheme_count = 1,
    .handler = &gopher_vtable,
    .plugin_context = NULL,
};

__attribute__((visibility("default")))
int32_t porter_plugin_entry(const porter_host *h, const porter_plugin_descriptor **descriptor, char *error, size_t cap) {
    if (h->abi_major != PORTER_PLUGIN_ABI_MAJOR) {
        snprintf(error, cap, "built for ABI %d, host has %d", PORTER_PLUGIN_ABI_MAJOR, h->abi_major);
        return 1;
    }
    host = h;
    *descriptor = &gopher_descriptor;
    return 0;
}
