/*
 * A plugin for the loader and adapter tests, built by the tests with `cc -shared`.
 * Compile-time switches make the bad variants (one per way a plugin can be bad) from
 * the same source, so each refusal test differs from a good plugin in one thing only.
 *
 * Scheme (default "ptest", -DSCHEME="x"): ptest://h/PATH
 *   /hello          200-like response, body "hello from ptest"
 *   /big?N          N bytes ('a'..'z' repeating) in 64 KiB chunks; honours pause
 *   /big-slow?N     the same, 5 ms between chunks (a cancel made mid-body lands mid-body)
 *   /slow           one byte, then waits until stopped
 *   /redirect       redirect to ptest://h/hello
 *   /redirect-http  redirect to the URL in the request property "target"
 *   /auth           password challenge; body "user=U" if the password is "sesame"
 *   /trust          server-trust challenge with a fake identity blob
 *   /missing        fails with PORTER_ERR_FILE_DOES_NOT_EXIST
 *   /upload         reads the request body; body "received N"
 *   /refuse         start() refuses with PORTER_ERR_NO_PERMISSIONS_TO_READ_FILE
 *   /counters       the plugin's counters as text (works in process and in a worker);
 *                   "peak" is the most loads alive at once (started, not destroyed)
 *   /reset-peak     sets that mark to the loads alive now; body "reset"
 *   /linger         body "lingered"; the load's thread lives on for 20 ms after it
 *                   finished, so a destroy (which joins it) waits for it
 *   /hold-destroy?PATH  body "held"; the load's destroy waits until the file PATH exists
 *                   (at most 120 s), so finished loads can be kept awaiting destroy
 *   /events         the event log (see -DEVENTS)
 *   /cookie         Set-Cookie "plugin=baked"; body "cookie=" and the request's Cookie
 *                   field ("-" when it has none)
 *
 * Faults of a plugin at work (issue 13), each the body's doing or the process's end:
 *   /crash-start    SIGSEGV inside start()
 *   /crash-data     a response and 64 KiB, then SIGSEGV on the plugin's thread
 *   /wild-write     writes through a pointer to memory it does not own (SIGSEGV)
 *   /abort          abort() on the plugin's thread
 *   /hang-stop      stop() for this load never returns
 *   /flood?N        N bytes (default 64 MiB) without ever waiting for a resume;
 *                   counts what the host accepted in "flooded"
 *   /fork-bomb      tries fork() 32 times; body "forks=N error=TEXT"
 *   /read?PATH      opens PATH; body "read N" or "read failed: TEXT"
 *   /connect?PORT   TCP connect to 127.0.0.1:PORT; body "connected" or "connect failed: TEXT"
 *   /signal-host    kill(getppid(), SIGCONT); body "signalled" or "signal failed: TEXT"
 *   /tiocsti        ioctl(2, TIOCSTI, "x"); body "typed" or "tiocsti failed: TEXT"
 * Escapes out of the worker's sandbox (issue 21), each reporting what the kernel said:
 *   /unix?PATH      connect to a Unix socket by path: "unix connected" / "unix failed: TEXT"
 *   /io-uring       io_uring_setup: "io_uring ok" / "io_uring failed: TEXT"
 *   /meta?P&F       chmod, chown, xattr and utimes calls on path P and on a descriptor of F
 *   /caps           the Cap* lines of /proc/self/status
 *   /terminal[?P]   isatty(2), then open /proc/self/fd/2 (or P) read-write
 *   /stderr         writes an escape sequence and a 10,000-byte line to stderr
 *   /stderr-burst   writes 40 lines of 1,000 bytes to stderr, the last "burst-end",
 *                   then ends the load at once (body "burst")
 *   /block-pause?N  like /flood, and its pause() never returns (it blocks the thread
 *                   that calls it: in a worker, that load's own queue)
 *
 * -DHOLD subscribes hooks whose task.response hook blocks for a "hold-here" URL (below).
 * -DWRITE_PATH="..." declares one write path (ABI 1.2); -DREAD_PATH one read path.
 *
 * Faults for the out-of-process probe: -DCRASH_CONSTRUCTOR (SIGSEGV while the library
 * is mapped), -DCRASH_ENTRY (SIGSEGV in the entry point), -DABORT_ENTRY (abort() there),
 * -DHANG_ENTRY (the entry point never returns).
 */
#include "porter_plugin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <utime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifdef CRASH_CONSTRUCTOR
/* A null pointer the compiler cannot see through (a literal NULL store is removed as
 * undefined behaviour). */
static volatile int *testplugin_nowhere(void) { return (volatile int *)(void *)getenv("PORTER_TEST_UNSET_VARIABLE"); }

__attribute__((constructor)) static void testplugin_crash_on_load(void) {
    *testplugin_nowhere() = 1;
}
#endif

#ifndef SCHEME
#define SCHEME "ptest"
#endif

static const porter_host *host;

/* Event log, read by the tests through testplugin_events(). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char event_log[65536];
static size_t event_log_len;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void note(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    pthread_mutex_lock(&log_lock);
    if (event_log_len + (size_t)n + 2 < sizeof event_log) {
        memcpy(event_log + event_log_len, line, (size_t)n);
        event_log_len += (size_t)n;
        event_log[event_log_len++] = '\n';
        event_log[event_log_len] = 0;
    }
    pthread_mutex_unlock(&log_lock);
}

/* For the tests: copies the event log. */
__attribute__((visibility("default"))) size_t testplugin_events(char *buffer, size_t capacity) {
    pthread_mutex_lock(&log_lock);
    size_t n = event_log_len < capacity - 1 ? event_log_len : capacity - 1;
    memcpy(buffer, event_log, n);
    buffer[n] = 0;
    pthread_mutex_unlock(&log_lock);
    return n;
}

/* Loads of /cacheable that sent the body, and that let the host serve its cached copy. */
static int full_loads, validations;
__attribute__((visibility("default"))) int testplugin_full_loads(void) { return __atomic_load_n(&full_loads, __ATOMIC_SEQ_CST); }
__attribute__((visibility("default"))) int testplugin_validations(void) { return __atomic_load_n(&validations, __ATOMIC_SEQ_CST); }

/* Counts loads alive (started, not destroyed), for leak checks. */
static int live_loads, peak_loads;
__attribute__((visibility("default"))) int testplugin_live_loads(void) {
    return __atomic_load_n(&live_loads, __ATOMIC_SEQ_CST);
}

typedef struct load {
    porter_client *client;
    const porter_request *request;
    pthread_t thread;
    int has_thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int paused, stopped;
    /* challenge answer */
    int answered;
    int disposition;
    char user[128], password[128];
    int trust;
} load_t;

static const char *path_of(const char *url) {
    const char *p = strstr(url, "://");
    if (!p) return url;
    p += 3;
    const char *slash = strchr(p, '/');
    return slash ? slash : "/";
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static const char *property(const porter_request *r, const char *name) {
    for (size_t i = 0; i < r->property_count; i++)
        if (strcmp(r->properties[i].name, name) == 0) return r->properties[i].value;
    return NULL;
}

static void respond(load_t *l, const char *mime, int64_t length) {
    porter_response r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.mime_type = mime;
    r.expected_length = length;
    r.status_code = -1;
    r.resume_offset = -1;
    porter_field headers[1] = {{"X-Plugin", "ptest"}};
    r.headers = headers;
    r.header_count = 1;
    host->did_receive_response(l->client, &r);
}

/* Waits while paused; returns 0 once stopped. */
static int wait_running(load_t *l) {
    pthread_mutex_lock(&l->lock);
    while (l->paused && !l->stopped) pthread_cond_wait(&l->cond, &l->lock);
    int go = !l->stopped;
    pthread_mutex_unlock(&l->lock);
    return go;
}

static void on_reply(void *context, const porter_challenge_reply *reply) {
    load_t *l = context;
    pthread_mutex_lock(&l->lock);
    l->answered = 1;
    l->disposition = reply->disposition;
    if (reply->user) snprintf(l->user, sizeof l->user, "%s", reply->user);
    if (reply->password) snprintf(l->password, sizeof l->password, "%s", reply->password);
    l->trust = reply->trust;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

/* Raises a challenge and waits for the answer; returns 0 if stopped meanwhile. */
static int ask(load_t *l, porter_challenge *c) {
    l->answered = 0;
    uint64_t id = host->challenge(l->client, c, on_reply, l);
    if (id == 0) return 0;
    pthread_mutex_lock(&l->lock);
    while (!l->answered && !l->stopped) pthread_cond_wait(&l->cond, &l->lock);
    int ok = l->answered;
    pthread_mutex_unlock(&l->lock);
    if (!ok) host->cancel_challenge(l->client, id);
    return ok;
}

static void body_text(load_t *l, const char *text) {
    respond(l, "text/plain", (int64_t)strlen(text));
    host->did_load_data(l->client, text, strlen(text));
    host->did_finish(l->client);
}

static int flooded;
static int pauses;
static int late_calls;
int testplugin_pauses(void);
static volatile int *nowhere(void) { return (volatile int *)(void *)getenv("PORTER_TEST_UNSET_VARIABLE"); }

/* Appends " name=ok" or " name=ERRNO" for a call that returned rc. */
static void meta(char *text, size_t cap, const char *name, int rc) {
    int e = errno;
    const char *err = rc == 0 ? "ok" : e == EPERM ? "EPERM" : e == EACCES ? "EACCES" : e == EOPNOTSUPP ? "ENOTSUP"
        : e == ENOENT ? "ENOENT" : e == ENODATA ? "ENODATA" : e == ENOSYS ? "ENOSYS" : e == EBADF ? "EBADF" : "other";
    size_t used = strlen(text);
    if (used < cap) snprintf(text + used, cap - used, "%s%s=%s", used ? " " : "", name, err);
}

static void *run(void *arg) {
    load_t *l = arg;
    const char *path = path_of(l->request->url);
    char host_part[256] = "h";
    {
        const char *p = strstr(l->request->url, "://");
        if (p) {
            p += 3;
            size_t n = strcspn(p, "/:");
            if (n < sizeof host_part) { memcpy(host_part, p, n); host_part[n] = 0; }
        }
    }
    if (strcmp(path, "/hello") == 0) {
        body_text(l, "hello from " SCHEME);
    } else if (strcmp(path, "/cookie") == 0) {
        /* Every Cookie field, joined (the host may split the header into crumbs, one
         * cookie each, as HTTP/2 does). */
        char text[512] = "cookie=";
        size_t used = strlen(text), start = used;
        for (size_t i = 0; i < l->request->header_count; i++) {
            if (strcasecmp(l->request->headers[i].name, "Cookie") != 0) continue;
            snprintf(text + used, sizeof text - used, "%s%s", used > start ? "; " : "", l->request->headers[i].value);
            used = strlen(text);
        }
        if (used == start) snprintf(text + used, sizeof text - used, "-");
        porter_response r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        r.mime_type = "text/plain";
        r.expected_length = (int64_t)strlen(text);
        r.status_code = -1;
        r.resume_offset = -1;
        porter_field headers[1] = {{"Set-Cookie", "plugin=baked; Path=/"}};
        r.headers = headers;
        r.header_count = 1;
        host->did_receive_response(l->client, &r);
        host->did_load_data(l->client, text, strlen(text));
        host->did_finish(l->client);
    } else if (strcmp(path, "/counters") == 0) {
        char text[256];
        snprintf(text, sizeof text, "full_loads=%d validations=%d pauses=%d live=%d late=%d flooded=%d peak=%d",
                 __atomic_load_n(&full_loads, __ATOMIC_SEQ_CST), __atomic_load_n(&validations, __ATOMIC_SEQ_CST),
                 testplugin_pauses(), __atomic_load_n(&live_loads, __ATOMIC_SEQ_CST) - 1,
                 __atomic_load_n(&late_calls, __ATOMIC_SEQ_CST), __atomic_load_n(&flooded, __ATOMIC_SEQ_CST),
                 __atomic_load_n(&peak_loads, __ATOMIC_SEQ_CST));
        body_text(l, text);
    } else if (strcmp(path, "/reset-peak") == 0) {
        __atomic_store_n(&peak_loads, __atomic_load_n(&live_loads, __ATOMIC_SEQ_CST), __ATOMIC_SEQ_CST);
        body_text(l, "reset");
    } else if (strcmp(path, "/linger") == 0) {
        body_text(l, "lingered");
        usleep(20000);
    } else if (starts_with(path, "/hold-destroy?")) {
        body_text(l, "held");
    } else if (strcmp(path, "/events") == 0) {
        static char log_copy[65536];
        size_t n = testplugin_events(log_copy, sizeof log_copy - 1);
        log_copy[n] = 0;
        body_text(l, log_copy);
    } else if (strcmp(path, "/crash-data") == 0) {
        respond(l, "application/octet-stream", -1);
        static char chunk[65536];
        host->did_load_data(l->client, chunk, sizeof chunk);
        usleep(100000);
        *nowhere() = 1;
    } else if (strcmp(path, "/wild-write") == 0) {
        respond(l, "application/octet-stream", -1);
        volatile char *p = (volatile char *)(uintptr_t)0xdead0000;
        for (int i = 0; i < 4096; i++) p[i] = 1;
        body_text(l, "wrote");
    } else if (strcmp(path, "/abort") == 0) {
        respond(l, "text/plain", -1);
        abort();
    } else if (strcmp(path, "/hang-stop") == 0) {
        respond(l, "text/plain", -1);
        host->did_load_data(l->client, "x", 1);
        pthread_mutex_lock(&l->lock);
        while (!l->stopped) pthread_cond_wait(&l->cond, &l->lock);
        pthread_mutex_unlock(&l->lock);
    } else if (strcmp(path, "/tiocsti") == 0) {
        char text[256];
        char c = 'x';
        if (ioctl(2, TIOCSTI, &c) != 0) snprintf(text, sizeof text, "tiocsti failed: %s", strerror(errno));
        else snprintf(text, sizeof text, "typed");
        body_text(l, text);
    } else if (starts_with(path, "/unix")) {
        /* Connects to a Unix socket by path (porterd's, say); "unix connected" or "unix
         * failed: TEXT". */
        const char *q = strchr(l->request->url, '?');
        char text[256];
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof a.sun_path, "%s", q ? q + 1 : "");
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) snprintf(text, sizeof text, "unix failed: %s", strerror(errno));
        else snprintf(text, sizeof text, "unix connected");
        if (fd >= 0) close(fd);
        body_text(l, text);
    } else if (strcmp(path, "/io-uring") == 0) {
        char params[120];
        memset(params, 0, sizeof params);
        long fd = syscall(SYS_io_uring_setup, 4, params);
        char text[128];
        if (fd < 0) snprintf(text, sizeof text, "io_uring failed: %s", strerror(errno));
        else { snprintf(text, sizeof text, "io_uring ok"); close((int)fd); }
        body_text(l, text);
    } else if (starts_with(path, "/meta")) {
        /* /meta?PATH&FDPATH: every metadata change on PATH (by path) and on FDPATH (by a
         * descriptor opened for reading); each "name=ok" or "name=ERRNO". */
        const char *q = strchr(l->request->url, '?');
        char target[1024] = "", other[1024] = "";
        if (q) {
            snprintf(target, sizeof target, "%s", q + 1);
            char *bar = strchr(target, '&');
            if (bar) { *bar = 0; snprintf(other, sizeof other, "%s", bar + 1); }
        }
        uid_t to_uid = getuid() == 0 ? 65534 : getuid();
        gid_t to_gid = getuid() == 0 ? 65534 : getgid();
        static char text[4096];
        text[0] = 0;
        struct timespec times[2] = {{1000000, 0}, {1000000, 0}};
        struct timeval tv[2] = {{1000000, 0}, {1000000, 0}};
        struct utimbuf ub = {1000000, 1000000};
        meta(text, sizeof text, "chmod", chmod(target, 0644));
        meta(text, sizeof text, "fchmodat", fchmodat(AT_FDCWD, target, 0644, 0));
        meta(text, sizeof text, "fchmodat2", (int)syscall(452, AT_FDCWD, target, 0644, 0));
        meta(text, sizeof text, "chown", chown(target, to_uid, to_gid));
        meta(text, sizeof text, "lchown", lchown(target, to_uid, to_gid));
        meta(text, sizeof text, "fchownat", fchownat(AT_FDCWD, target, to_uid, to_gid, 0));
        meta(text, sizeof text, "setxattr", setxattr(target, "user.porter", "x", 1, 0));
        meta(text, sizeof text, "lsetxattr", lsetxattr(target, "user.porter", "x", 1, 0));
        meta(text, sizeof text, "removexattr", removexattr(target, "user.porter-none"));
        meta(text, sizeof text, "lremovexattr", lremovexattr(target, "user.porter-none"));
        char value[64];
        meta(text, sizeof text, "getxattr", getxattr(target, "user.porter", value, sizeof value) < 0 ? -1 : 0);
        meta(text, sizeof text, "listxattr", listxattr(target, value, sizeof value) < 0 ? -1 : 0);
        meta(text, sizeof text, "utime", utime(target, &ub));
        meta(text, sizeof text, "utimes", utimes(target, tv));
#ifdef SYS_futimesat
        meta(text, sizeof text, "futimesat", (int)syscall(SYS_futimesat, AT_FDCWD, target, tv));
#endif
        meta(text, sizeof text, "utimensat", utimensat(AT_FDCWD, target, times, 0));
        int fd = other[0] ? open(other, O_RDONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            meta(text, sizeof text, "fchmod", fchmod(fd, 0666));
            meta(text, sizeof text, "fchown", fchown(fd, to_uid, to_gid));
            meta(text, sizeof text, "fsetxattr", fsetxattr(fd, "user.porter", "x", 1, 0));
            meta(text, sizeof text, "fremovexattr", fremovexattr(fd, "user.porter-none"));
            meta(text, sizeof text, "futimens", futimens(fd, times));
            close(fd);
        } else if (other[0]) {
            meta(text, sizeof text, "open", -1);
        }
        body_text(l, text);
    } else if (strcmp(path, "/caps") == 0) {
        /* The capability lines of /proc/self/status, one per line. */
        static char text[1024];
        text[0] = 0;
        FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            if (strncmp(line, "Cap", 3) == 0 && strlen(text) + strlen(line) + 1 < sizeof text) strcat(text, line);
        }
        if (f) fclose(f);
        body_text(l, f ? text : "caps failed");
    } else if (starts_with(path, "/terminal")) {
        /* Whether descriptor 2 is a terminal; then opens /proc/self/fd/2 (or the path
         * given) for reading and writing: "fd2-tty=N open=ok tty=N" or "open=TEXT". */
        const char *q = strchr(l->request->url, '?');
        const char *target = q ? q + 1 : "/proc/self/fd/2";
        char text[512];
        int fd = open(target, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) fd = open(target, O_RDONLY | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) snprintf(text, sizeof text, "fd2-tty=%d open=%s", isatty(2), strerror(errno));
        else { snprintf(text, sizeof text, "fd2-tty=%d open=ok tty=%d", isatty(2), isatty(fd)); close(fd); }
        body_text(l, text);
    } else if (strcmp(path, "/stderr") == 0) {
        /* A title-setting escape sequence and a line far too long, on stderr. */
        static const char seq[] = "\x1b]0;pwned\x07 stderr-from-plugin\n";
        (void)!write(2, seq, sizeof seq - 1);
        static char longline[10000];
        memset(longline, 'L', sizeof longline - 1);
        longline[sizeof longline - 2] = '\n';
        (void)!write(2, longline, sizeof longline - 1);
        body_text(l, "wrote");
    } else if (strcmp(path, "/stderr-burst") == 0) {
        /* Much for the host to copy, written just before the load ends. */
        static char burst[1001];
        memset(burst, 'b', sizeof burst - 2);
        burst[sizeof burst - 2] = '\n';
        for (int i = 0; i < 40; i++) (void)!write(2, burst, sizeof burst - 1);
        static const char end[] = "burst-end\n";
        (void)!write(2, end, sizeof end - 1);
        body_text(l, "burst");
    } else if (starts_with(path, "/flood") || starts_with(path, "/block-pause")) {
        const char *q = strchr(path, '?');
        int64_t total = q ? atoll(q + 1) : (64 << 20);
        respond(l, "application/octet-stream", total);
        static char chunk[65536];
        memset(chunk, 'f', sizeof chunk);
        int64_t sent = 0;
        while (sent < total) {
            pthread_mutex_lock(&l->lock);
            int stopped = l->stopped;
            pthread_mutex_unlock(&l->lock);
            if (stopped) return NULL;
            size_t n = (size_t)(total - sent < (int64_t)sizeof chunk ? total - sent : (int64_t)sizeof chunk);
            host->did_load_data(l->client, chunk, n);
            sent += (int64_t)n;
            __atomic_add_fetch(&flooded, (int)n, __ATOMIC_SEQ_CST);
        }
        host->did_finish(l->client);
    } else if (strcmp(path, "/fork-bomb") == 0) {
        int forks = 0, error = 0;
        for (int i = 0; i < 32; i++) {
            pid_t child = fork();
            if (child == 0) _exit(0);
            if (child < 0) { error = errno; break; }
            forks++;
            waitpid(child, NULL, 0);
        }
        char text[128];
        snprintf(text, sizeof text, "forks=%d error=%s", forks, error ? strerror(error) : "none");
        body_text(l, text);
    } else if (starts_with(path, "/read")) {
        const char *q = strchr(l->request->url, '?');
        char text[512];
        int fd = q ? open(q + 1, O_RDONLY | O_CLOEXEC) : -1;
        if (fd < 0) {
            snprintf(text, sizeof text, "read failed: %s", strerror(errno));
        } else {
            char buf[4096];
            ssize_t n = read(fd, buf, sizeof buf);
            close(fd);
            snprintf(text, sizeof text, "read %zd", n);
        }
        body_text(l, text);
    } else if (starts_with(path, "/connect")) {
        const char *q = strchr(l->request->url, '?');
        char text[256];
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)(q ? atoi(q + 1) : 1));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            snprintf(text, sizeof text, "connect failed: %s", strerror(errno));
        } else {
            snprintf(text, sizeof text, "connected");
        }
        if (fd >= 0) close(fd);
        body_text(l, text);
    } else if (strcmp(path, "/signal-host") == 0) {
        char text[256];
        if (kill(getppid(), SIGCONT) != 0) snprintf(text, sizeof text, "signal failed: %s", strerror(errno));
        else snprintf(text, sizeof text, "signalled");
        body_text(l, text);
    } else if (starts_with(path, "/big")) {
        const char *q = strchr(path, '?');
        int64_t total = q ? atoll(q + 1) : 1000000;
        int64_t offset = l->request->resume_offset > 0 ? l->request->resume_offset : 0;
        if (offset > total) offset = total;
        porter_response r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        r.mime_type = "application/octet-stream";
        r.expected_length = total - offset;
        r.status_code = -1;
        r.resume_offset = l->request->resume_offset >= 0 ? offset : -1;
        r.validator = "v1";
        host->did_receive_response(l->client, &r);
        int64_t sent = offset;
        while (sent < total) {
            if (!wait_running(l)) return NULL;
            char buf[65536];
            size_t n = (size_t)(total - sent < (int64_t)sizeof buf ? total - sent : (int64_t)sizeof buf);
            for (size_t i = 0; i < n; i++) buf[i] = (char)('a' + (sent + (int64_t)i) % 26);
            host->did_load_data(l->client, buf, n);
            sent += (int64_t)n;
            if (starts_with(path, "/big-slow")) usleep(5000);
        }
        host->did_finish(l->client);
    } else if (strcmp(path, "/slow") == 0) {
        respond(l, "text/plain", -1);
        host->did_load_data(l->client, "x", 1);
        pthread_mutex_lock(&l->lock);
        while (!l->stopped) pthread_cond_wait(&l->cond, &l->lock);
        pthread_mutex_unlock(&l->lock);
    } else if (strcmp(path, "/redirect") == 0) {
        char target[512];
        snprintf(target, sizeof target, SCHEME "://%s/hello", host_part);
        host->was_redirected(l->client, target, NULL);
    } else if (strcmp(path, "/redirect-http") == 0) {
        const char *target = property(l->request, "target");
        host->was_redirected(l->client, target ? target : "http://127.0.0.1:1/", NULL);
    } else if (strcmp(path, "/auth") == 0) {
        for (int failures = 0;; failures++) {
            porter_challenge c;
            memset(&c, 0, sizeof c);
            c.struct_size = sizeof c;
            c.method = PORTER_AUTH_PASSWORD;
            c.host = host_part;
            c.port = 0;
            c.realm = "ptest realm";
            c.previous_failure_count = failures;
            if (!ask(l, &c)) return NULL;
            if (l->disposition == PORTER_DISPOSITION_CANCEL) {
                host->did_fail(l->client, PORTER_ERR_USER_CANCELLED_AUTHENTICATION, "cancelled", NULL, 0);
                return NULL;
            }
            if (l->disposition != PORTER_DISPOSITION_USE_CREDENTIAL) {
                host->did_fail(l->client, PORTER_ERR_USER_AUTHENTICATION_REQUIRED, "a password is required", NULL, 0);
                return NULL;
            }
            if (strcmp(l->password, "sesame") == 0) {
                char text[200];
                snprintf(text, sizeof text, "user=%s", l->user);
                body_text(l, text);
                return NULL;
            }
            if (failures >= 2) {
                host->did_fail(l->client, PORTER_ERR_AUTHENTICATION_FAILED, "wrong password", "ptest", 42);
                return NULL;
            }
        }
    } else if (strcmp(path, "/trust") == 0) {
        static const uint8_t blob[] = {0x00, 0x00, 0x00, 0x0b, 's', 's', 'h', '-', 'e', 'd', '2', '5', '5', '1', '9'};
        const uint8_t *ids[1] = {blob};
        size_t lens[1] = {sizeof blob};
        porter_challenge c;
        memset(&c, 0, sizeof c);
        c.struct_size = sizeof c;
        c.method = PORTER_AUTH_SERVER_TRUST;
        c.host = host_part;
        c.port = 22;
        c.identity = ids;
        c.identity_lengths = lens;
        c.identity_count = 1;
        c.failure_reason = "unknown host key";
        if (!ask(l, &c)) return NULL;
        if (l->disposition == PORTER_DISPOSITION_USE_CREDENTIAL && l->trust) body_text(l, "trusted");
        else host->did_fail(l->client, PORTER_ERR_SERVER_CERTIFICATE_UNTRUSTED, "host key not trusted", NULL, 0);
    } else if (strcmp(path, "/cacheable") == 0) {
        /* ABI 1.1: a stored response whose validator still matches is served by the host. */
        const struct porter_response *cached = NULL;
        if (l->request->struct_size >= offsetof(porter_request, cached_response) + sizeof(void *))
            cached = l->request->cached_response;
        if (cached && cached->validator && strcmp(cached->validator, "\"v1\"") == 0 &&
            host->struct_size >= offsetof(porter_host, cached_response_is_valid) + sizeof(void *) &&
            host->cached_response_is_valid) {
            __atomic_add_fetch(&validations, 1, __ATOMIC_SEQ_CST);
            host->cached_response_is_valid(l->client, 1);
            return NULL;
        }
        __atomic_add_fetch(&full_loads, 1, __ATOMIC_SEQ_CST);
        porter_response r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        r.mime_type = "text/plain";
        r.expected_length = 14;
        r.status_code = 200;
        r.resume_offset = -1;
        r.validator = "\"v1\"";
        porter_field headers[2] = {{"ETag", "\"v1\""}, {"Cache-Control", "no-cache"}};
        r.headers = headers;
        r.header_count = 2;
        host->did_receive_response(l->client, &r);
        host->did_load_data(l->client, "cacheable body", 14);
        host->did_finish(l->client);
    } else if (strcmp(path, "/missing") == 0) {
        host->did_fail(l->client, PORTER_ERR_FILE_DOES_NOT_EXIST, "no such thing", "ptest", 2);
    } else if (strcmp(path, "/upload") == 0) {
        char buf[4096];
        int64_t total = 0, n;
        while ((n = host->read_body(l->client, buf, sizeof buf)) > 0) {
            total += n;
            host->did_send_body_data(l->client, n, total, l->request->body_length);
        }
        if (n < 0) {
            host->did_fail(l->client, PORTER_ERR_CANNOT_OPEN_FILE, "cannot read the body", NULL, 0);
            return NULL;
        }
        char text[64];
        snprintf(text, sizeof text, "received %lld", (long long)total);
        body_text(l, text);
    } else {
        host->did_fail(l->client, PORTER_ERR_FILE_DOES_NOT_EXIST, "unknown path", NULL, 0);
    }
    return NULL;
}

static int32_t t_can_handle(void *ctx, const porter_request *r) {
    (void)ctx;
    return strstr(r->url, "/not-mine") == NULL;
}

/* A careless plugin: it keeps using a client the header says is dead (after a refused
 * start, or after destroy) from a thread of its own. The host must ignore the calls. */
__attribute__((visibility("default"))) int testplugin_late_calls(void) {
    return __atomic_load_n(&late_calls, __ATOMIC_SEQ_CST);
}
static void *call_late(void *arg) {
    porter_client *client = arg;
    usleep(50000);
    char buffer[16];
    host->did_load_data(client, "late", 4);
    host->log(client, PORTER_LOG_INFO, "a late call");
    (void)host->read_body(client, buffer, sizeof buffer);
    host->did_send_body_data(client, 1, 1, 1);
    host->did_fail(client, PORTER_ERR_UNKNOWN, "late", NULL, 0);
    host->did_finish(client);
    __atomic_add_fetch(&late_calls, 1, __ATOMIC_SEQ_CST);
    return NULL;
}
static void call_late_from_a_thread(porter_client *client) {
    pthread_t t;
    if (pthread_create(&t, NULL, call_late, client) == 0) pthread_detach(t);
}

static int32_t t_start(void *ctx, const porter_request *r, porter_client *client, void **out, char *error, size_t cap) {
    (void)ctx;
    if (strcmp(path_of(r->url), "/late-after-refuse") == 0) {
        call_late_from_a_thread(client);
        snprintf(error, cap, "refused, but calls anyway");
        return PORTER_ERR_NO_PERMISSIONS_TO_READ_FILE;
    }
    if (strcmp(path_of(r->url), "/crash-start") == 0) {
        *nowhere() = 1;
    }
    if (strcmp(path_of(r->url), "/refuse") == 0) {
        snprintf(error, cap, "refused by the plugin");
        return PORTER_ERR_NO_PERMISSIONS_TO_READ_FILE;
    }
    load_t *l = calloc(1, sizeof *l);
    if (!l) { snprintf(error, cap, "out of memory"); return PORTER_ERR_UNKNOWN; }
    l->client = client;
    l->request = r;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    int now = __atomic_add_fetch(&live_loads, 1, __ATOMIC_SEQ_CST);
    for (int peak = __atomic_load_n(&peak_loads, __ATOMIC_SEQ_CST);
         now > peak && !__atomic_compare_exchange_n(&peak_loads, &peak, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);) {}
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        __atomic_sub_fetch(&live_loads, 1, __ATOMIC_SEQ_CST);
        free(l);
        snprintf(error, cap, "cannot start a thread");
        return PORTER_ERR_RESOURCE_UNAVAILABLE;
    }
    l->has_thread = 1;
    *out = l;
    return 0;
}

static void t_stop(void *p) {
    load_t *l = p;
    if (strcmp(path_of(l->request->url), "/hang-stop") == 0) {
        for (;;) pause();
    }
    pthread_mutex_lock(&l->lock);
    l->stopped = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

static void t_destroy(void *p) {
    load_t *l = p;
    t_stop(l);
    if (l->has_thread) pthread_join(l->thread, NULL);
    if (starts_with(path_of(l->request->url), "/hold-destroy?")) {
        const char *file = strchr(l->request->url, '?') + 1;
        for (int i = 0; i < 24000 && access(file, F_OK) != 0; i++) usleep(5000);
    }
    if (strcmp(path_of(l->request->url), "/late-after-destroy") == 0) call_late_from_a_thread(l->client);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
    __atomic_sub_fetch(&live_loads, 1, __ATOMIC_SEQ_CST);
}

__attribute__((visibility("default"))) int testplugin_pauses(void) {
    return __atomic_load_n(&pauses, __ATOMIC_SEQ_CST);
}

static void t_pause(void *p) {
    load_t *l = p;
    if (starts_with(path_of(l->request->url), "/block-pause")) {
        for (;;) pause();
    }
    __atomic_add_fetch(&pauses, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&l->lock);
    l->paused = 1;
    pthread_mutex_unlock(&l->lock);
}

static void t_resume(void *p) {
    load_t *l = p;
    pthread_mutex_lock(&l->lock);
    l->paused = 0;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

#ifdef FORGE_RESULT
/* A plugin that tries to answer for the probe: from its constructor it writes a made-up
 * description (another scheme, a write path into the home folder) to every descriptor
 * that might be the probe's answer. */
#include <unistd.h>
__attribute__((constructor)) static void forge(void) {
    static const char line[] = "RESULT {\"name\":\"forged\",\"version\":\"6.6.6\",\"schemes\":[{\"name\":\"forged\","
        "\"needsNetwork\":true,\"mayBeRedirectTarget\":true,\"credentialsPerRequest\":false,\"canUpload\":true}],"
        "\"readPaths\":[\"~/\"],\"writePaths\":[\"~/.bashrc\"],\"subscriptions\":[],\"abiMinor\":2}\n";
    for (int fd = 1; fd < 16; fd++) (void)!write(fd, line, sizeof line - 1);
}
#endif

#ifdef MARKER_FILE
/* An attacker's object: its constructor leaves a mark the moment it is mapped. */
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void leave_mark(void) {
    int fd = open(MARKER_FILE, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { (void)write(fd, "loaded\n", 7); close(fd); }
}
#endif

static const porter_handler_vtable vtable = {
    sizeof(porter_handler_vtable), t_can_handle, t_start, t_stop, t_destroy, t_pause, t_resume,
};

static const porter_scheme schemes[] = {
#ifdef BAD_SCHEME
    {"Bad Scheme!", PORTER_SCHEME_REDIRECT_TARGET},
#else
#ifndef SCHEME_FLAGS
#define SCHEME_FLAGS (PORTER_SCHEME_REDIRECT_TARGET | PORTER_SCHEME_CAN_UPLOAD)
#endif
#ifndef DEFAULT_PORT
#define DEFAULT_PORT 0
#endif
    {SCHEME, SCHEME_FLAGS, DEFAULT_PORT, 0},
#endif
};

#ifndef ABI_MAJOR
#define ABI_MAJOR PORTER_PLUGIN_ABI_MAJOR
#endif
#ifndef ABI_MINOR
#define ABI_MINOR PORTER_PLUGIN_ABI_MINOR
#endif

#ifdef READ_PATH
static const char *const read_paths[] = { READ_PATH };
#endif
#ifdef WRITE_PATH
static const char *const write_paths[] = { WRITE_PATH };
#endif

static const porter_plugin_descriptor descriptor = {
#ifdef ABI11_SIZE
    offsetof(porter_plugin_descriptor, read_paths),
#elif defined(ABI12_SIZE)
    offsetof(porter_plugin_descriptor, needs),
#else
    sizeof(porter_plugin_descriptor),
#endif
    ABI_MAJOR,
    ABI_MINOR,
    "ptest plugin (" SCHEME ")",
    "1.0.0",
    schemes,
    1,
#ifdef INCOMPLETE
    NULL,
#else
    &vtable,
#endif
    NULL,
#ifdef READ_PATH
    read_paths, 1,
#else
    NULL, 0,
#endif
#ifdef WRITE_PATH
    write_paths, 1,
#else
    NULL, 0,
#endif
};

/* Event hooks: each records its arguments. */
static void ev_created(void *ud, uint64_t id, const char *url) { note("created %s %llu %s", (const char *)ud, (unsigned long long)id, url); }
static void ev_response(void *ud, uint64_t id, const char *url, int32_t status, int64_t length) {
    note("response %s %llu %s %d %lld", (const char *)ud, (unsigned long long)id, url, status, (long long)length);
}
static void ev_redirected(void *ud, uint64_t id, const char *from, const char *to) {
    note("redirected %s %llu %s %s", (const char *)ud, (unsigned long long)id, from, to);
}
static void ev_challenged(void *ud, uint64_t id, const char *h, const char *method, int32_t failures) {
    note("challenged %s %llu %s %s %d", (const char *)ud, (unsigned long long)id, h, method, failures);
}
static void ev_completed(void *ud, uint64_t id, const char *url, int64_t received, int64_t sent, int32_t code) {
    note("completed %s %llu %s %lld %lld %d", (const char *)ud, (unsigned long long)id, url, (long long)received,
         (long long)sent, code);
}

/* -DHOLD: hooks for created, response and completed that log "created|response|completed
 * URL"; the response hook of the first task whose URL contains "hold-here" blocks until
 * testplugin_release() is called (testplugin_holding() says it is blocked there). */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int hold_state; /* 0 not yet, 1 holding, 2 released */

__attribute__((visibility("default"))) int32_t testplugin_holding(void) {
    pthread_mutex_lock(&hold_lock);
    int32_t h = hold_state == 1;
    pthread_mutex_unlock(&hold_lock);
    return h;
}

__attribute__((visibility("default"))) void testplugin_release(void) {
    pthread_mutex_lock(&hold_lock);
    hold_state = 2;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
}

static void hold_created(void *ud, uint64_t id, const char *url) { (void)ud; (void)id; note("created %s", url); }
static void hold_response(void *ud, uint64_t id, const char *url, int32_t status, int64_t length) {
    (void)ud; (void)id; (void)length;
    note("response %s %d", url, status);
    if (!strstr(url, "hold-here")) return;
    pthread_mutex_lock(&hold_lock);
    if (hold_state == 0) {
        hold_state = 1;
        while (hold_state == 1) pthread_cond_wait(&hold_cond, &hold_lock);
    }
    pthread_mutex_unlock(&hold_lock);
}
static void hold_completed(void *ud, uint64_t id, const char *url, int64_t received, int64_t sent, int32_t code) {
    (void)ud; (void)id; (void)sent;
    note("completed %s %lld %d", url, (long long)received, code);
}

#ifdef UNRESOLVED
extern int porter_test_symbol_that_does_not_exist(void);
#endif

__attribute__((visibility("default")))
#ifdef NO_ENTRY
int32_t porter_plugin_entry_misspelt(const porter_host *h, const porter_plugin_descriptor **out, char *error, size_t cap)
#else
int32_t porter_plugin_entry(const porter_host *h, const porter_plugin_descriptor **out, char *error, size_t cap)
#endif
{
#ifdef CRASH_ENTRY
    *(volatile int *)(void *)getenv("PORTER_TEST_UNSET_VARIABLE") = 1;
#endif
#ifdef ABORT_ENTRY
    abort();
#endif
#ifdef HANG_ENTRY
    for (;;) pause();
#endif
#ifdef UNRESOLVED
    if (porter_test_symbol_that_does_not_exist()) return 1;
#endif
#ifdef INIT_FAIL
    snprintf(error, cap, "the test plugin refuses to start");
    (void)h; (void)out;
    return 7;
#else
    host = h;
#ifdef EVENTS
    char why[256];
    if (h->subscribe("task.created", "v(pQs)", (void (*)(void))ev_created, "C", why, sizeof why) != 0) note("refused created: %s", why);
    if (h->subscribe("task.response", "v(pQsiq)", (void (*)(void))ev_response, "R", why, sizeof why) != 0) note("refused response: %s", why);
    if (h->subscribe("task.redirected", "v(pQss)", (void (*)(void))ev_redirected, "D", why, sizeof why) != 0) note("refused redirected: %s", why);
    if (h->subscribe("task.challenged", "v(pQssi)", (void (*)(void))ev_challenged, "A", why, sizeof why) != 0) note("refused challenged: %s", why);
    if (h->subscribe("task.completed", "v(pQsqqi)", (void (*)(void))ev_completed, "F", why, sizeof why) != 0) note("refused completed: %s", why);
    /* Two bad subscriptions: each must be refused, never called. */
    if (h->subscribe("task.exploded", "v(pQs)", (void (*)(void))ev_created, "X", why, sizeof why) != 0) note("refused exploded: %s", why);
    if (h->subscribe("task.completed", "v(pQs)", (void (*)(void))ev_created, "Y", why, sizeof why) != 0) note("refused mismatch: %s", why);
#else
    (void)ev_created; (void)ev_response; (void)ev_redirected; (void)ev_challenged; (void)ev_completed;
#endif
#ifdef HOLD
    char hwhy[256];
    if (h->subscribe("task.created", "v(pQs)", (void (*)(void))hold_created, NULL, hwhy, sizeof hwhy) != 0) note("refused created: %s", hwhy);
    if (h->subscribe("task.response", "v(pQsiq)", (void (*)(void))hold_response, NULL, hwhy, sizeof hwhy) != 0) note("refused response: %s", hwhy);
    if (h->subscribe("task.completed", "v(pQsqqi)", (void (*)(void))hold_completed, NULL, hwhy, sizeof hwhy) != 0) note("refused completed: %s", hwhy);
#else
    (void)hold_created; (void)hold_response; (void)hold_completed;
#endif
    (void)error; (void)cap;
    *out = &descriptor;
    return 0;
#endif
}
