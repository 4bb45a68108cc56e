#define _GNU_SOURCE
#include "porter_ipc.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
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
        /* A clean slate: no inherited blocked signals or ignored SIGCHLD (the daemon
         * waits for what it starts), and no hold on the caller's working folder. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
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

int porter_ipc_route_watch(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl a;
    memset(&a, 0, sizeof a);
    a.nl_family = AF_NETLINK;
    a.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int porter_ipc_route_wait(int fd, int timeout_ms) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int n = poll(&p, 1, timeout_ms);
    if (n <= 0) return n;
    char buf[8192];
    int got = 0;
    /* Drain: one change often comes as several messages. ENOBUFS: the kernel dropped
       messages for want of room, so something changed that we did not hear. */
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) { got = 1; continue; }
        if (n < 0 && errno == ENOBUFS) { got = 1; continue; }
        break;
    }
    return got;
}

int porter_ipc_probe_plugin(const char *worker, int plugin_fd, char *out, size_t cap, int timeout_ms) {
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
        char *const argv[] = { "porter-plugin-worker", "--probe", "3", NULL };
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
