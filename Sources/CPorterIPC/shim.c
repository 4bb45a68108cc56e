#define _GNU_SOURCE
#include "porter_ipc.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int fill_address(struct sockaddr_un *a, const char *path) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof a->sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(a->sun_path, path, n + 1);
    return 0;
}

int porter_ipc_listen(const char *path, int backlog) {
    struct sockaddr_un a;
    if (fill_address(&a, path) != 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    umask(old);
    if (rc != 0 || listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int porter_ipc_connect(const char *path) {
    struct sockaddr_un a;
    if (fill_address(&a, path) != 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int porter_ipc_accept(int listener) {
    return accept4(listener, NULL, NULL, SOCK_CLOEXEC);
}

int porter_ipc_peer(int fd, pid_t *pid, uid_t *uid, gid_t *gid) {
    struct ucred c;
    socklen_t n = sizeof c;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &n) != 0 || n != sizeof c) return -1;
    *pid = c.pid;
    *uid = c.uid;
    *gid = c.gid;
    return 0;
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* The pid a pidfd names, from /proc/self/fdinfo (-1: exited; 0: in another pid
 * namespace); -1 when it cannot be read. */
static pid_t pidfd_pid(int pidfd) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return -1;
    ssize_t n = read(f, buf, sizeof buf - 1);
    close(f);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strstr(buf, "\nPid:");
    if (p == NULL) return -1;
    return (pid_t)strtol(p + 5, NULL, 10);
}

/* The process's start time in clock ticks after boot (/proc/PID/stat field 22), or 0. */
static unsigned long long start_ticks(pid_t pid) {
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return 0;
    ssize_t n = read(f, buf, sizeof buf - 1);
    close(f);
    if (n <= 0) return 0;
    buf[n] = 0;
    /* The command name (field 2) may hold spaces and parentheses: count from the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL) return 0;
    int field = 2;
    for (; *p && field < 22; p++) if (*p == ' ') field++;
    return strtoull(p, NULL, 10);
}

static int pidfd_alive(int pidfd) {
    return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
}

int porter_ipc_peer_pidfd(int fd, pid_t *pid) {
    int pidfd = -1;
    socklen_t n = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &n) == 0 && n == sizeof pidfd && pidfd >= 0) {
        *pid = pidfd_pid(pidfd);
        if (*pid > 0) return pidfd;
        close(pidfd);
        errno = ESRCH;
        return -1;
    }
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    unsigned long long now_ticks = (unsigned long long)now.tv_sec * (unsigned long long)sysconf(_SC_CLK_TCK)
        + (unsigned long long)now.tv_nsec / (1000000000ULL / (unsigned long long)sysconf(_SC_CLK_TCK)) + 1;
    struct ucred c;
    n = sizeof c;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &n) != 0 || n != sizeof c || c.pid <= 0) return -1;
    pidfd = (int)syscall(SYS_pidfd_open, c.pid, 0);
    if (pidfd < 0) return -1;
    fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    unsigned long long started = start_ticks(c.pid);
    if (started == 0 || started > now_ticks || !pidfd_alive(pidfd)) {
        close(pidfd);
        errno = ESRCH;
        return -1;
    }
    *pid = c.pid;
    return pidfd;
}

static int read_confinement(const char *path, porter_ipc_confinement *out) {
    char buf[8192];
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return -1;
    size_t got = 0;
    for (;;) {
        ssize_t n = read(f, buf + got, sizeof buf - 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
        if (got == sizeof buf - 1) break;
    }
    close(f);
    buf[got] = 0;
    out->seccomp = out->seccomp_filters = out->no_new_privs = -1;
    for (char *line = buf; line && *line; ) {
        char *next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (strncmp(line, "Seccomp:", 8) == 0) out->seccomp = atoi(line + 8);
        else if (strncmp(line, "Seccomp_filters:", 16) == 0) out->seccomp_filters = atoi(line + 16);
        else if (strncmp(line, "NoNewPrivs:", 11) == 0) out->no_new_privs = atoi(line + 11);
        line = next;
    }
    if (out->seccomp < 0 || out->no_new_privs < 0) {
        errno = EPROTO;
        return -1;
    }
    if (out->seccomp_filters < 0) out->seccomp_filters = 0;
    return 0;
}

int porter_ipc_pidfd_confinement(int pidfd, porter_ipc_confinement *out) {
    pid_t pid = pidfd_pid(pidfd);
    if (pid <= 0) {
        errno = ESRCH;
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (read_confinement(path, out) != 0) return -1;
    /* Still alive after the read: the pid was its own all along (a pid is not reused
     * while its process lives). */
    if (!pidfd_alive(pidfd)) {
        errno = ESRCH;
        return -1;
    }
    return 0;
}

int porter_ipc_self_confinement(porter_ipc_confinement *out) {
    return read_confinement("/proc/self/status", out);
}

int porter_ipc_pidfd_exe(int pidfd, char *out, size_t cap) {
    pid_t pid = pidfd_pid(pidfd);
    if (pid <= 0 || cap < 2) {
        errno = ESRCH;
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, out, cap - 1);
    if (n < 0) return -1;
    if ((size_t)n >= cap - 1) {
        errno = ENAMETOOLONG;
        return -1;
    }
    out[n] = 0;
    if (!pidfd_alive(pidfd)) {
        errno = ESRCH;
        return -1;
    }
    return 0;
}

int porter_ipc_socketpair(int fds[2]) {
    return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds);
}

extern char **environ;

int porter_ipc_spawn_detached(const char *path, char *const argv[]) {
    return porter_ipc_spawn_detached_env(path, argv, environ);
}

int porter_ipc_spawn_detached_env(const char *path, char *const argv[], char *const envp[]) {
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        /* Only async-signal-safe calls from here: the parent may have threads. */
        if (setsid() < 0) _exit(1);
        /* A clean slate: no inherited blocked signals and no ignored ones (the CLI
         * ignores SIGINT, SIGTERM and SIGHUP while it handles them itself, and an ignored
         * disposition survives execve: a porterd it started could not be stopped with
         * SIGTERM, nor the apps porterd launches; SIGCHLD ignored would keep the daemon
         * from waiting for what it starts), and no hold on the caller's working folder. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; sig++) {
            if (sig != SIGKILL && sig != SIGSTOP) (void)sigaction(sig, &dfl, NULL);
        }
        if (chdir("/") != 0) _exit(1);
        pid_t grandchild = fork();
        if (grandchild < 0) _exit(1);
        if (grandchild > 0) _exit(0);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            if (null > 2) close(null);
        }
        /* Nothing else of the caller's leaks into the daemon (a pipe it inherited would
         * keep the caller's reader waiting for an end of file). */
        if (syscall(SYS_close_range, 3, ~0U, 0) != 0) {
            for (int fd = 3; fd < 4096; fd++) close(fd);
        }
        execve(path, argv, envp);
        _exit(127);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        errno = EIO;
        return -1;
    }
    return 0;
}

int porter_ipc_start_writeback(int fd, long long offset, long long length) {
    return sync_file_range(fd, (off_t)offset, (off_t)length, SYNC_FILE_RANGE_WRITE);
}

int porter_ipc_probe_plugin(const char *worker, const char *marker, int plugin_fd, char *out, size_t cap,
                            int timeout_ms) {
    int p[2];
    if (cap > 0) out[0] = 0;
    /* The worker's environment: ours, with Swift's crash backtracer off, so a plugin's
     * crash ends the worker by its signal (which the host reports), not by the
     * backtracer's own exit. Built before fork: the child may only call async-signal-safe
     * functions. */
    size_t n = 0;
    while (environ[n]) n++;
    char **envp = malloc((n + 2) * sizeof *envp);
    if (!envp) return -1000;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "SWIFT_BACKTRACE=", 16) != 0) envp[k++] = environ[i];
    }
    envp[k++] = "SWIFT_BACKTRACE=enable=no";
    envp[k] = NULL;
    if (pipe2(p, O_CLOEXEC) != 0) {
        free(envp);
        return -1000;
    }
    pid_t child = fork();
    if (child < 0) {
        close(p[0]);
        close(p[1]);
        free(envp);
        return -1000;
    }
    if (child == 0) {
        /* Async-signal-safe calls only. A session of its own: no controlling terminal
         * for the plugin's constructor to open as /dev/tty. */
        (void)setsid();
        /* Out of the way first: the plugin's or the pipe's number may be 1 or 3 already
         * (dup2 onto itself would keep close-on-exec, onto the other would clobber it). */
        int pf = fcntl(plugin_fd, F_DUPFD, 10), wf = fcntl(p[1], F_DUPFD, 10);
        if (pf < 0 || wf < 0 || dup2(pf, 3) < 0 || dup2(wf, 1) < 0) _exit(126);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) { dup2(null, 0); dup2(null, 2); }
        if (syscall(SYS_close_range, 4, ~0U, 0) != 0) {
            for (int fd = 4; fd < 4096; fd++) close(fd);
        }
        char *const plain[] = { "porter-plugin-worker", "--probe", "3", NULL };
        char *const marked[] = { "porter-plugin-worker", (char *)marker, "--probe", "3", NULL };
        char *const *argv = marker ? marked : plain;
        execve(worker, argv, envp);
        _exit(127);
    }
    free(envp);
    close(p[1]);
    size_t used = 0;
    int killed = 0;
    for (;;) {
        struct pollfd f = { .fd = p[0], .events = POLLIN };
        int n = poll(&f, 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) { kill(child, SIGKILL); killed = 1; break; }
        char buf[512];
        ssize_t r = read(p[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i < r && used + 1 < cap; i++) out[used++] = buf[i];
        if (cap > 0) out[used] = 0;
    }
    close(p[0]);
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) return -1000;
    }
    if (killed) return -SIGKILL;
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1000;
}

/* ---- descriptors over a Unix socket (SCM_RIGHTS) ---- */

ssize_t porter_ipc_send_with_fd(int sock, const void *buf, size_t len, int pass, int flags) {
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    union {
        char bytes[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    if (pass >= 0) {
        memset(&control, 0, sizeof control);
        m.msg_control = control.bytes;
        m.msg_controllen = sizeof control.bytes;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass, sizeof(int));
    }
    return sendmsg(sock, &m, flags);
}

ssize_t porter_ipc_recv_with_fds(int sock, void *buf, size_t len, int *fds, int max, int *nfds) {
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    union {
        char bytes[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    m.msg_control = control.bytes;
    m.msg_controllen = sizeof control.bytes;
    *nfds = 0;
    ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0)) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*nfds < max) fds[(*nfds)++] = fd;
            else close(fd);
        }
    }
    return n;
}

int porter_ipc_connect_now(const char *path) {
    struct sockaddr_un a;
    if (fill_address(&a, path) != 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int porter_ipc_release_free_memory(void) {
    return malloc_trim(0);
}

int porter_ipc_wait_exit(pid_t pid, int timeout_ms, int *status) {
    /* The exit is an event: a pidfd becomes readable when the process ends. Without one
     * (an old kernel), poll waitpid every 10 ms up to the same deadline. */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct timespec now, end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += timeout_ms / 1000;
    end.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) { end.tv_sec += 1; end.tv_nsec -= 1000000000L; }
    int result = 0;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) { result = 1; break; }
        if (r < 0 && errno != EINTR) { result = -1; break; }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left = (long long)(end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
        if (left <= 0) break;
        if (pidfd >= 0) {
            struct pollfd p = { .fd = pidfd, .events = POLLIN, .revents = 0 };
            (void)poll(&p, 1, left > 1000 ? 1000 : (int)left);
        } else {
            usleep(10000);
        }
    }
    if (pidfd >= 0) close(pidfd);
    return result;
}
