/*
 * A hostile plugin for the boundary tests (issue 21, items 3, 4 and 14), built by the
 * tests with `cc -shared`. Scheme "phish" (-DSCHEME="x" for another); -DNEEDS=... sets the
 * descriptor's needs (none by default).
 *
 *   /steal?host=H&port=P&realm=R&method=M
 *        raises one challenge naming host H, port P, realm R and PORTER_AUTH_* method M
 *        (not the URL's) and reports what it was handed:
 *        "disposition=D user=U password=P"
 *   /wire?load=L&scheme=S&host=H&port=P&realm=R
 *        in a worker only: writes a `challenge` message of its own on the worker's
 *        socket (fd 3) for load L, naming scheme S, host H, port P and realm R, with the
 *        number the worker gives its next challenge (found by raising and withdrawing
 *        one); then raises a harmless challenge that gets that number, so the host's
 *        answer to the forged one reaches the plugin. Reports as /steal does.
 *   /agent?setenv=P&quiet=1
 *        (issue 21, item 1) sets its own SSH_AUTH_SOCK to P when given (in a worker: the
 *        worker's environment only), then asks the host for the ssh agent
 *        (connect_service) and reports "fd=-1 code=C reason=R", or, with a descriptor,
 *        asks the agent for its keys: "fd=ok answer=T keys=K comment=<first key's>"
 *        (with quiet: only "fd=ok").
 *   /forge-agent?load=L&n=N&path=P
 *        in a worker only: writes N `connectService` messages of its own on the worker's
 *        socket for load L, each also naming a path P, then asks as /agent?quiet=1 does.
 *   /whoami  "exe=<the worker's executable> pid=<its pid>"
 *   /sigpipe writes to a pipe whose reading end it closed: "write=R errno=E"
 *   /crash   SIGSEGV on the plugin's thread
 */
#include "porter_plugin.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SCHEME
#define SCHEME "phish"
#endif
#ifndef NEEDS
#define NEEDS 0
#endif

static const porter_host *host;

typedef struct load {
    porter_client *client;
    char url[2048];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stopped, answered, disposition;
    char user[256], password[256];
} load_t;

static const char *path_of(const char *url) {
    const char *p = strstr(url, "://");
    if (!p) return url;
    p += 3;
    const char *slash = strchr(p, '/');
    return slash ? slash : "/";
}

/* The value of `name` in the URL's query, copied into `out` ("" when absent). */
static const char *query(const char *url, const char *name, char *out, size_t cap) {
    out[0] = 0;
    const char *q = strchr(url, '?');
    size_t n = strlen(name);
    while (q) {
        q++;
        if (strncmp(q, name, n) == 0 && q[n] == '=') {
            size_t len = strcspn(q + n + 1, "&");
            if (len >= cap) len = cap - 1;
            memcpy(out, q + n + 1, len);
            out[len] = 0;
            return out;
        }
        q = strchr(q, '&');
    }
    return out;
}

static void body_text(load_t *l, const char *text) {
    porter_response r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.mime_type = "text/plain";
    r.expected_length = (int64_t)strlen(text);
    r.status_code = -1;
    r.resume_offset = -1;
    host->did_receive_response(l->client, &r);
    host->did_load_data(l->client, text, strlen(text));
    host->did_finish(l->client);
}

static void on_reply(void *context, const porter_challenge_reply *reply) {
    load_t *l = context;
    pthread_mutex_lock(&l->lock);
    l->answered = 1;
    l->disposition = reply->disposition;
    snprintf(l->user, sizeof l->user, "%s", reply->user ? reply->user : "");
    snprintf(l->password, sizeof l->password, "%s", reply->password ? reply->password : "");
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

static uint64_t raise_challenge(load_t *l, int method, const char *h, int port, const char *realm) {
    porter_challenge c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.method = method;
    c.host = h;
    c.port = port;
    c.realm = realm;
    l->answered = 0;
    return host->challenge(l->client, &c, on_reply, l);
}

/* Waits for the answer; 0 if stopped first. */
static int wait_answer(load_t *l) {
    pthread_mutex_lock(&l->lock);
    while (!l->answered && !l->stopped) pthread_cond_wait(&l->cond, &l->lock);
    int ok = l->answered;
    pthread_mutex_unlock(&l->lock);
    return ok;
}

static void report(load_t *l) {
    char text[700];
    snprintf(text, sizeof text, "disposition=%d user=%s password=%s", l->disposition, l->user, l->password);
    body_text(l, text);
}

static int read_full(int fd, unsigned char *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* connect_service for the ssh agent, reported as /agent says (`quiet`: "fd=ok" without
 * talking to what it got). */
static void ask_agent(load_t *l, int quiet) {
    char text[1200], reason[512] = "";
    int32_t code = 0;
    if (host->struct_size < offsetof(porter_host, connect_service) + sizeof(void *) || !host->connect_service) {
        body_text(l, "no connect_service in this host");
        return;
    }
    int fd = host->connect_service(l->client, PORTER_SERVICE_SSH_AGENT, &code, reason, sizeof reason);
    if (fd < 0) {
        snprintf(text, sizeof text, "fd=-1 code=%d reason=%s", code, reason);
        body_text(l, text);
        return;
    }
    if (quiet) {
        close(fd);
        body_text(l, "fd=ok");
        return;
    }
    /* SSH2_AGENTC_REQUEST_IDENTITIES; the answer: type, count, then blob and comment. */
    static const unsigned char ask[5] = {0, 0, 0, 1, 11};
    unsigned char head[4], *body = NULL;
    uint32_t n = 0;
    if (write(fd, ask, sizeof ask) != (ssize_t)sizeof ask || read_full(fd, head, 4) != 0 || (n = be32(head)) < 5
        || n > 65536 || !(body = malloc(n)) || read_full(fd, body, n) != 0) {
        snprintf(text, sizeof text, "fd=ok no answer from it");
    } else {
        char comment[256] = "";
        uint32_t keys = be32(body + 1);
        if (keys > 0 && n >= 9) {
            uint32_t blob = be32(body + 5);
            if (blob <= n - 9 && n - 9 - blob >= 4) {
                uint32_t c = be32(body + 9 + blob);
                if (c <= n - 13 - blob && c < sizeof comment) {
                    memcpy(comment, body + 13 + blob, c);
                    comment[c] = 0;
                }
            }
        }
        snprintf(text, sizeof text, "fd=ok answer=%d keys=%u comment=%s", body[0], keys, comment);
    }
    free(body);
    close(fd);
    body_text(l, text);
}

static void *run(void *arg) {
    load_t *l = arg;
    const char *path = path_of(l->url);
    char h[256], port[32], realm[256], method[16], load[32], scheme[64];
    if (strncmp(path, "/steal", 6) == 0) {
        query(l->url, "host", h, sizeof h);
        query(l->url, "port", port, sizeof port);
        query(l->url, "realm", realm, sizeof realm);
        query(l->url, "method", method, sizeof method);
        if (raise_challenge(l, atoi(method), h, atoi(port), realm) == 0 || !wait_answer(l)) return NULL;
        report(l);
    } else if (strncmp(path, "/wire", 5) == 0) {
        struct stat st;
        if (fstat(3, &st) != 0 || !S_ISSOCK(st.st_mode)) {
            body_text(l, "no worker socket");
            return NULL;
        }
        query(l->url, "load", load, sizeof load);
        query(l->url, "scheme", scheme, sizeof scheme);
        query(l->url, "host", h, sizeof h);
        query(l->url, "port", port, sizeof port);
        query(l->url, "realm", realm, sizeof realm);
        /* The worker numbers challenges in order: learn the next number. */
        uint64_t probe = raise_challenge(l, PORTER_AUTH_DEFAULT, "", 0, "probe");
        if (probe == 0) return NULL;
        host->cancel_challenge(l->client, probe);
        char json[1024];
        int n = snprintf(json, sizeof json,
                         "{\"challenge\":{\"load\":%s,\"challenge\":{\"id\":%llu,\"host\":\"%s\",\"port\":%s,"
                         "\"scheme\":\"%s\",\"realm\":\"%s\",\"method\":\"default\",\"previousFailureCount\":0}}}",
                         load, (unsigned long long)(probe + 1), h, port, scheme, realm);
        unsigned char frame[1100];
        uint32_t len = (uint32_t)n + 1;
        frame[0] = (unsigned char)(len >> 24);
        frame[1] = (unsigned char)(len >> 16);
        frame[2] = (unsigned char)(len >> 8);
        frame[3] = (unsigned char)len;
        frame[4] = 2; /* a message */
        memcpy(frame + 5, json, (size_t)n);
        if (write(3, frame, (size_t)n + 5) != n + 5) {
            body_text(l, "the forged message could not be written");
            return NULL;
        }
        /* This one gets number probe + 1: the host's answer to the forged one lands here. */
        if (raise_challenge(l, PORTER_AUTH_DEFAULT, "", 0, "decoy") == 0 || !wait_answer(l)) return NULL;
        report(l);
    } else if (strncmp(path, "/agent", 6) == 0) {
        char value[512];
        if (query(l->url, "setenv", value, sizeof value)[0]) setenv("SSH_AUTH_SOCK", value, 1);
        ask_agent(l, query(l->url, "quiet", value, sizeof value)[0] != 0);
    } else if (strncmp(path, "/forge-agent", 12) == 0) {
        struct stat st;
        if (fstat(3, &st) != 0 || !S_ISSOCK(st.st_mode)) {
            body_text(l, "no worker socket");
            return NULL;
        }
        char count[16], where[512];
        query(l->url, "load", load, sizeof load);
        query(l->url, "n", count, sizeof count);
        query(l->url, "path", where, sizeof where);
        int many = atoi(count);
        if (many < 1 || many > 64) many = 1;
        static unsigned char frames[64 * 700];
        size_t used = 0;
        for (int i = 0; i < many; i++) {
            char json[680];
            int len = snprintf(json, sizeof json,
                               "{\"connectService\":{\"load\":%s,\"request\":%d,\"service\":%d,\"path\":\"%s\"}}",
                               load, 1000 + i, PORTER_SERVICE_SSH_AGENT, where);
            if (len <= 0 || len >= (int)sizeof json) break;
            uint32_t flen = (uint32_t)len + 1;
            unsigned char *f = frames + used;
            f[0] = (unsigned char)(flen >> 24);
            f[1] = (unsigned char)(flen >> 16);
            f[2] = (unsigned char)(flen >> 8);
            f[3] = (unsigned char)flen;
            f[4] = 2; /* a message */
            memcpy(f + 5, json, (size_t)len);
            used += (size_t)len + 5;
        }
        if (write(3, frames, used) != (ssize_t)used) {
            body_text(l, "the forged messages could not be written");
            return NULL;
        }
        /* Answered after the forged ones: the host reads its socket in order. */
        ask_agent(l, 1);
    } else if (strncmp(path, "/badframe", 9) == 0) {
        /* A data frame the host must refuse: `how=oversized` announces 64 MiB (more than
         * the host takes in one frame); `how=truncated` announces 1 MiB, sends 128 KiB of
         * it and ends the worker (the rest never comes). */
        struct stat st;
        if (fstat(3, &st) != 0 || !S_ISSOCK(st.st_mode)) {
            body_text(l, "no worker socket");
            return NULL;
        }
        char how[32];
        query(l->url, "load", load, sizeof load);
        query(l->url, "how", how, sizeof how);
        int oversized = strcmp(how, "oversized") == 0;
        uint64_t id = strtoull(load, NULL, 10);
        static unsigned char frame[13 + (128 << 10)];
        uint32_t len = (oversized ? (64u << 20) : (1u << 20)) + 1;
        frame[0] = (unsigned char)(len >> 24);
        frame[1] = (unsigned char)(len >> 16);
        frame[2] = (unsigned char)(len >> 8);
        frame[3] = (unsigned char)len;
        frame[4] = 3; /* data */
        for (int i = 0; i < 8; i++) frame[5 + i] = (unsigned char)(id >> (56 - 8 * i));
        memset(frame + 13, 'x', sizeof frame - 13);
        size_t n = oversized ? 13 : sizeof frame;
        if (write(3, frame, n) != (ssize_t)n) {
            body_text(l, "the frame could not be written");
            return NULL;
        }
        if (!oversized) _exit(0);
    } else if (strcmp(path, "/sigpipe") == 0) {
        int ends[2];
        if (pipe(ends) != 0) {
            body_text(l, "no pipe");
            return NULL;
        }
        close(ends[0]);
        ssize_t wrote = write(ends[1], "x", 1);
        int saved = errno;
        close(ends[1]);
        char text[64];
        snprintf(text, sizeof text, "write=%zd errno=%d", wrote, wrote < 0 ? saved : 0);
        body_text(l, text);
    } else if (strcmp(path, "/whoami") == 0) {
        char exe[1024];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        char text[1200];
        snprintf(text, sizeof text, "exe=%s pid=%d", exe, (int)getpid());
        body_text(l, text);
    } else if (strcmp(path, "/crash") == 0) {
        volatile int *nowhere = (volatile int *)(void *)getenv("PORTER_TEST_UNSET_VARIABLE");
        *nowhere = 1;
    } else {
        host->did_fail(l->client, PORTER_ERR_FILE_DOES_NOT_EXIST, "no such path", NULL, 0);
    }
    return NULL;
}

static int32_t t_start(void *ctx, const porter_request *r, porter_client *client, void **out, char *error, size_t cap) {
    (void)ctx;
    load_t *l = calloc(1, sizeof *l);
    if (!l) { snprintf(error, cap, "out of memory"); return PORTER_ERR_UNKNOWN; }
    l->client = client;
    snprintf(l->url, sizeof l->url, "%s", r->url);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        free(l);
        snprintf(error, cap, "cannot start a thread");
        return PORTER_ERR_RESOURCE_UNAVAILABLE;
    }
    *out = l;
    return 0;
}

static void t_stop(void *p) {
    load_t *l = p;
    pthread_mutex_lock(&l->lock);
    l->stopped = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

static void t_destroy(void *p) {
    load_t *l = p;
    t_stop(l);
    pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
}

static void t_pause(void *p) { (void)p; }
static void t_resume(void *p) { (void)p; }

static const porter_handler_vtable vtable = {
    sizeof(porter_handler_vtable), NULL, t_start, t_stop, t_destroy, t_pause, t_resume,
};

static const porter_scheme schemes[] = {{SCHEME, PORTER_SCHEME_REDIRECT_TARGET}};

static const porter_plugin_descriptor descriptor = {
    sizeof(porter_plugin_descriptor), PORTER_PLUGIN_ABI_MAJOR, PORTER_PLUGIN_ABI_MINOR,
    "hostile plugin (" SCHEME ")", "1.0.0", schemes, 1, &vtable, NULL, NULL, 0, NULL, 0, NEEDS,
};

__attribute__((visibility("default")))
int32_t porter_plugin_entry(const porter_host *h, const porter_plugin_descriptor **out, char *error, size_t cap) {
    (void)error; (void)cap;
    host = h;
    *out = &descriptor;
    return 0;
}
