/* Plugin workers: starting one (porter_ipc_spawn_worker) and the sandbox a worker puts
 * itself in before it maps a plugin (porter_worker_sandbox). */
#define _GNU_SOURCE
#include "porter_ipc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

int porter_ipc_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

pid_t porter_ipc_spawn_worker(const char *worker, char *const argv[], int sock_fd, int plugin_fd) {
    return porter_ipc_spawn_worker_err(worker, argv, sock_fd, plugin_fd, -1);
}

pid_t porter_ipc_spawn_worker_err(const char *worker, char *const argv[], int sock_fd, int plugin_fd, int err_fd) {
    /* Out of the way of 3 and 4 first, so the two dup2s cannot clobber each other. */
    int s = fcntl(sock_fd, F_DUPFD_CLOEXEC, 10);
    int p = plugin_fd >= 0 ? fcntl(plugin_fd, F_DUPFD_CLOEXEC, 10) : -1;
    int r = err_fd >= 0 ? fcntl(err_fd, F_DUPFD_CLOEXEC, 10) : -1;
    if (s < 0 || (plugin_fd >= 0 && p < 0) || (err_fd >= 0 && r < 0)) {
        int e = errno;
        if (s >= 0) close(s);
        if (p >= 0) close(p);
        if (r >= 0) close(r);
        errno = e;
        return -1;
    }
    size_t n = 0;
    while (environ[n]) n++;
    char **envp = malloc((n + 2) * sizeof *envp);
    if (!envp) {
        close(s);
        if (p >= 0) close(p);
        if (r >= 0) close(r);
        errno = ENOMEM;
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "SWIFT_BACKTRACE=", 16) != 0) envp[k++] = environ[i];
    }
    envp[k++] = "SWIFT_BACKTRACE=enable=no";
    envp[k] = NULL;

    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&actions, s, 3);
    if (p >= 0) posix_spawn_file_actions_adddup2(&actions, p, 4);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    /* Never the host's stderr: it may be the user's terminal, which the plugin could read
     * (through /proc/self/fd/2) or write escape sequences to. A pipe the host copies
     * from, or nothing. */
    if (r >= 0) posix_spawn_file_actions_adddup2(&actions, r, 2);
    else posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&actions, p >= 0 ? 5 : 4);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    /* A session of its own: no controlling terminal (a ^C meant for the program is not the
     * worker's, and /dev/tty is not its to open), its own process group. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, worker, &actions, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    free(envp);
    close(s);
    if (p >= 0) close(p);
    if (r >= 0) close(r);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

/* ---- Landlock (the kernel's headers here may predate the newer fields) ---- */

#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif
#define LL_EXECUTE (1ULL << 0)
#define LL_WRITE_FILE (1ULL << 1)
#define LL_READ_FILE (1ULL << 2)
#define LL_READ_DIR (1ULL << 3)
#define LL_REFER (1ULL << 13)
#define LL_TRUNCATE (1ULL << 14)
#define LL_IOCTL_DEV (1ULL << 15)
#define LL_NET_BIND_TCP (1ULL << 0)
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)

struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct ll_path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

static uint64_t ll_fs_rights(int abi) {
    uint64_t all = (1ULL << 13) - 1; /* ABI 1: bits 0-12 */
    if (abi >= 2) all |= LL_REFER;
    if (abi >= 3) all |= LL_TRUNCATE;
    if (abi >= 5) all |= LL_IOCTL_DEV;
    return all;
}

/* Rights that make sense on a file (not a folder). */
static uint64_t ll_file_only(uint64_t rights, int abi) {
    uint64_t file = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE;
    if (abi >= 3) file |= LL_TRUNCATE;
    if (abi >= 5) file |= LL_IOCTL_DEV;
    return rights & file;
}

static int ll_add(int ruleset, int abi, int fd, uint64_t rights) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    struct ll_path_beneath rule = {
        .allowed_access = S_ISDIR(st.st_mode) ? rights : ll_file_only(rights, abi),
        .parent_fd = fd,
    };
    if (rule.allowed_access == 0) return 0;
    return (int)syscall(SYS_landlock_add_rule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &rule, 0);
}

static int ll_add_path(int ruleset, int abi, const char *path, uint64_t rights) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1; /* a missing path grants nothing */
    int rc = ll_add(ruleset, abi, fd, rights);
    close(fd);
    return rc;
}

static void note(char *report, size_t cap, const char *text) {
    if (!report || cap == 0) return;
    size_t used = strnlen(report, cap);
    if (used + 1 >= cap) return;
    snprintf(report + used, cap - used, "%s%s", used ? "; " : "", text);
}

/* What a grant must go around: folders none of whose contents may be granted (the home
 * folder, Porter's own folders), as real paths. */
typedef struct ll_walk {
    int ruleset, abi;
    const char *closed[80];
    size_t closed_count;
    /* Grant /dev entry by entry (only the harmless devices, never a terminal). */
    int devices;
} ll_walk;

/* `inner` is `outer` or below it (both real paths). */
static int ll_within(const char *inner, const char *outer) {
    size_t n = strlen(outer);
    if (strcmp(outer, "/") == 0) return 1;
    return strncmp(inner, outer, n) == 0 && (inner[n] == 0 || inner[n] == '/');
}

static int ll_is_closed(const ll_walk *w, const char *path) {
    for (size_t i = 0; i < w->closed_count; i++) if (ll_within(path, w->closed[i])) return 1;
    return 0;
}

/* Some closed folder (or /dev, when devices are split) lies strictly below `path`. */
static int ll_holds_closed(const ll_walk *w, const char *path) {
    for (size_t i = 0; i < w->closed_count; i++)
        if (strcmp(path, w->closed[i]) != 0 && ll_within(w->closed[i], path)) return 1;
    return w->devices && strcmp(path, "/dev") != 0 && ll_within("/dev", path);
}

/* The devices a plugin may read (and /dev/null write): no terminal (/dev/pts, /dev/tty*,
 * /dev/console, /dev/ptmx, /dev/vcs*), no input device, nothing else. */
static const char *const ll_devices[] = { "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom" };

/* Grants `rights` on `path` and everything below it except the closed folders: where one
 * lies below, entry by entry (symbolic links grant nothing: their targets are covered or
 * not). */
static void ll_grant_around(const ll_walk *w, const char *path, uint64_t rights, int depth) {
    if (ll_is_closed(w, path) || depth > 64) return;
    if (w->devices && strcmp(path, "/dev") == 0) {
        for (size_t i = 0; i < sizeof ll_devices / sizeof ll_devices[0]; i++)
            (void)ll_add_path(w->ruleset, w->abi, ll_devices[i], rights & (LL_READ_FILE | LL_WRITE_FILE));
        return;
    }
    if (!ll_holds_closed(w, path)) {
        int fd = open(path, O_PATH | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) return;
        struct stat st;
        if (fstat(fd, &st) == 0 && !S_ISLNK(st.st_mode)) (void)ll_add(w->ruleset, w->abi, fd, rights);
        close(fd);
        return;
    }
    DIR *d = opendir(path);
    if (!d) return; /* e.g. /home at 0711: nothing below it is granted (stricter, not looser) */
    struct dirent *e;
    char child[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int n = snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") == 0 ? "" : path, e->d_name);
        if (n <= 0 || (size_t)n >= sizeof child) continue;
        ll_grant_around(w, child, rights, depth + 1);
    }
    closedir(d);
}

/* Adds the real path of `path` to the closed folders (a missing one has nothing to hide). */
static const char *ll_close(ll_walk *w, const char *path) {
    if (!path || path[0] != '/' || w->closed_count >= sizeof w->closed / sizeof w->closed[0]) return NULL;
    char *real = realpath(path, NULL);
    if (!real) return NULL;
    if (strcmp(real, "/") == 0) {
        free(real);
        return NULL;
    }
    w->closed[w->closed_count++] = real;
    return real;
}

/* A declared path may be granted unless it is or holds a closed folder, or is inside one
 * of Porter's folders (inside the home folder is what declaring is for), or a device. */
static int ll_may_grant(const ll_walk *w, const char *path, const char *home) {
    char *real = realpath(path, NULL);
    if (!real) return 1; /* missing: ll_add_path grants nothing */
    int ok = strcmp(real, "/") != 0 && !ll_within(real, "/dev") && !ll_within(real, "/proc");
    for (size_t i = 0; ok && i < w->closed_count; i++) {
        if (ll_within(w->closed[i], real)) ok = 0;
        else if ((!home || strcmp(w->closed[i], home) != 0) && ll_within(real, w->closed[i])) ok = 0;
    }
    free(real);
    return ok;
}

static int landlock(const porter_sandbox *box, char *report, size_t cap) {
    int abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) {
        note(report, cap, "landlock: not available in this kernel");
        return 0;
    }
    int result = 4;
    struct ll_ruleset_attr attr = { .handled_access_fs = ll_fs_rights(abi) };
    size_t size = offsetof(struct ll_ruleset_attr, handled_access_net);
    if (abi >= 4) {
        size = offsetof(struct ll_ruleset_attr, scoped);
        if (!box->network) {
            attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
            result |= 8;
        }
    } else if (!box->network) {
        note(report, cap, "landlock: no network rules before ABI 4");
    }
    if (abi >= 6) {
        size = sizeof attr;
        attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
        result |= 16;
    }
    int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0) return -1;
    uint64_t read = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR;
    uint64_t write = ll_fs_rights(abi);
    ll_walk w = { .ruleset = ruleset, .abi = abi, .devices = 1 };
    /* Porter's own folders first: never granted, whatever else is (the cookie database,
     * credentials, the cache, porterd's state and socket). */
    unsigned closed_porter = 0;
    for (unsigned i = 0; i < box->closed_path_count; i++)
        if (box->closed_paths[i] && ll_close(&w, box->closed_paths[i])) closed_porter++;
    const char *home = NULL;
    if (box->legacy) {
        note(report, cap, "landlock: legacy plugin (ABI before 1.2): the home folder is readable");
    } else {
        home = ll_close(&w, box->home);
        if (!home) note(report, cap, "landlock: no home folder to protect (HOME unset or unresolvable)");
    }
    char line[160];
    snprintf(line, sizeof line, "landlock: closed: %s%u of Porter's folders, terminals and devices but null/zero/full/random",
             home ? "the home folder, " : "", closed_porter);
    note(report, cap, line);
    ll_grant_around(&w, "/", read, 0);
    for (unsigned i = 0; i < box->read_path_count; i++) {
        const char *p = box->read_paths[i];
        if (!p) continue;
        if (!ll_may_grant(&w, p, home)) {
            note(report, cap, "landlock: a read path that holds Porter's folders or a device was not granted");
            continue;
        }
        /* One it cannot open (no longer privileged, say) grants nothing: stricter. */
        if (ll_add_path(ruleset, abi, p, read) != 0) note(report, cap, "landlock: a declared read path could not be opened: not granted");
    }
    for (unsigned i = 0; i < box->write_path_count; i++) {
        const char *p = box->write_paths[i];
        if (!p) continue;
        if (!ll_may_grant(&w, p, home)) {
            note(report, cap, "landlock: a write path that holds Porter's folders or a device was not granted");
            continue;
        }
        /* One it cannot open (no longer privileged, say) grants nothing: stricter. */
        if (ll_add_path(ruleset, abi, p, write) != 0) note(report, cap, "landlock: a declared write path could not be opened: not granted");
    }
    int rc = ll_add_path(ruleset, abi, "/dev/null", LL_READ_FILE | LL_WRITE_FILE | (abi >= 3 ? LL_TRUNCATE : 0));
    /* /tmp for writing, around the closed folders that may lie in it (then /tmp itself
     * takes no new entries: its grant would reach into them). */
    w.devices = 0;
    char *tmp = realpath("/tmp", NULL);
    if (tmp) {
        if (ll_holds_closed(&w, tmp)) note(report, cap, "landlock: Porter's or the home folder is under /tmp: only what /tmp holds is writable, not /tmp itself");
        if (ll_is_closed(&w, tmp)) note(report, cap, "landlock: /tmp is not writable");
        ll_grant_around(&w, tmp, write, 0);
        free(tmp);
    }
    if (rc == 0 && box->plugin_fd >= 0) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", box->plugin_fd);
        int fd = open(self, O_PATH | O_CLOEXEC);
        rc = fd >= 0 ? ll_add(ruleset, abi, fd, LL_EXECUTE | LL_READ_FILE) : -1;
        if (fd >= 0) close(fd);
    }
    for (size_t i = 0; i < w.closed_count; i++) free((void *)w.closed[i]);
    if (rc == 0) rc = (int)syscall(SYS_landlock_restrict_self, ruleset, 0);
    int e = errno;
    close(ruleset);
    errno = e;
    return rc == 0 ? result : -1;
}

/* ---- seccomp ---- */

#if defined(__x86_64__)
#define PORTER_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define PORTER_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define DENY(nr, err) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((err) & SECCOMP_RET_DATA))

/* Newer calls the kernel headers here may not name (x86_64 numbers; the same on every
 * architecture since 403's unified table). */
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_setxattrat
#define __NR_setxattrat 463
#endif
#ifndef __NR_getxattrat
#define __NR_getxattrat 464
#endif
#ifndef __NR_listxattrat
#define __NR_listxattrat 465
#endif
#ifndef __NR_removexattrat
#define __NR_removexattrat 466
#endif

#include <sys/ioctl.h>
#include <sys/socket.h>

static int seccomp_filter(char *report, size_t cap) {
#ifndef PORTER_AUDIT_ARCH
    note(report, cap, "seccomp: no filter for this architecture");
    return 0;
#else
    uint32_t self = (uint32_t)getpid();
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PORTER_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
        /* x32 numbers reach the same calls: refuse them all. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        DENY(__NR_fork, EPERM),
        DENY(__NR_vfork, EPERM),
        /* Path-based metadata calls this architecture still has (aarch64 has only the
         * *at forms). */
        DENY(__NR_chmod, EPERM),
        DENY(__NR_chown, EPERM),
        DENY(__NR_lchown, EPERM),
        DENY(__NR_utime, EPERM),
        DENY(__NR_utimes, EPERM),
        DENY(__NR_futimesat, EPERM),
#endif
        DENY(__NR_execve, EPERM),
        DENY(__NR_execveat, EPERM),
        DENY(__NR_ptrace, EPERM),
        DENY(__NR_process_vm_readv, EPERM),
        DENY(__NR_process_vm_writev, EPERM),
        DENY(__NR_pidfd_getfd, EPERM),
        DENY(__NR_pidfd_send_signal, EPERM),
        DENY(__NR_tkill, EPERM),
        /* File metadata: Landlock does not cover modes, owners, extended attributes or
         * times, so a plugin that cannot open ~/secret could still chmod it 0644 (or the
         * home folder 0755) for another user to read. On paths and descriptors alike. */
        DENY(__NR_fchmod, EPERM),
        DENY(__NR_fchmodat, EPERM),
        DENY(__NR_fchmodat2, EPERM),
        DENY(__NR_fchown, EPERM),
        DENY(__NR_fchownat, EPERM),
        DENY(__NR_setxattr, EPERM),
        DENY(__NR_lsetxattr, EPERM),
        DENY(__NR_fsetxattr, EPERM),
        DENY(__NR_setxattrat, EPERM),
        DENY(__NR_removexattr, EPERM),
        DENY(__NR_lremovexattr, EPERM),
        DENY(__NR_fremovexattr, EPERM),
        DENY(__NR_removexattrat, EPERM),
        DENY(__NR_utimensat, EPERM),
        /* Reading attributes of files it may not open (user.* notes, where a file came
         * from): "not supported", as on a file system without them. */
        DENY(__NR_getxattr, EOPNOTSUPP),
        DENY(__NR_lgetxattr, EOPNOTSUPP),
        DENY(__NR_fgetxattr, EOPNOTSUPP),
        DENY(__NR_getxattrat, EOPNOTSUPP),
        DENY(__NR_listxattr, EOPNOTSUPP),
        DENY(__NR_llistxattr, EOPNOTSUPP),
        DENY(__NR_flistxattr, EOPNOTSUPP),
        DENY(__NR_listxattrat, EOPNOTSUPP),
        /* Opening by file handle passes by every path rule. */
        DENY(__NR_open_by_handle_at, EPERM),
        /* io_uring runs socket, connect and open requests where this filter never sees
         * their arguments. */
        DENY(__NR_io_uring_setup, EPERM),
        DENY(__NR_io_uring_enter, EPERM),
        DENY(__NR_io_uring_register, EPERM),
        /* The user's kernel keyrings; new namespaces. */
        DENY(__NR_add_key, EPERM),
        DENY(__NR_request_key, EPERM),
        DENY(__NR_keyctl, EPERM),
        DENY(__NR_unshare, EPERM),
        DENY(__NR_setns, EPERM),
        /* No Unix-domain socket of its own: connecting to one by path (porterd's, the
         * session bus, an ssh agent) is not something Landlock refuses here, and porterd
         * acts for whoever has the user's uid. socketpair stays (it reaches nobody). On
         * x86_64 there is no socketcall; 32-bit calls are killed by the arch check. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* Signals only to itself: kill(own pid | 0 | -own pid), tgkill(own pid, ...). */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_kill, 0, 6),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, self, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(-(int32_t)self), 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_tgkill, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, self, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* No typing into a terminal it may hold (TIOCSTI, TIOCLINUX). */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        /* glibc starts threads with clone3 and falls back to clone on ENOSYS. */
        DENY(__NR_clone3, ENOSYS),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = { .len = (unsigned short)(sizeof code / sizeof code[0]), .filter = code };
    /* TSYNC: every thread of the process, should the runtime have started any. */
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) != 0) return -1;
    return 32;
#endif
}

/* ---- capabilities ---- */

#include <linux/capability.h>
#include <linux/securebits.h>

/* A worker started by root (or with file capabilities) gives up every capability before
 * a plugin's code runs: effective, permitted, inheritable, ambient and the bounding set,
 * and (when it may) locks the securebits so no uid-0 rule gives them back. Returns 64
 * when the process holds none afterwards, -1 when it could not drop them. */
static int drop_capabilities(char *report, size_t cap) {
    struct __user_cap_header_struct head = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &head, data) != 0) return -1;
    int held = 0;
    for (int i = 0; i < 2; i++) held |= data[i].effective | data[i].permitted | data[i].inheritable;
    /* The bounding set: needs CAP_SETPCAP; without it (an ordinary user) it only limits
     * what exec could give, and exec is refused anyway. */
    if (data[CAP_SETPCAP / 32].effective & (1U << (CAP_SETPCAP % 32))) {
        for (int c = 0; c <= 63; c++) {
            if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) return -1;
        }
        int bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED;
#ifdef SECBIT_NO_CAP_AMBIENT_RAISE
        bits |= SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
#endif
        if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return -1;
    }
    (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    memset(data, 0, sizeof data);
    if (held && syscall(SYS_capset, &head, data) != 0) return -1;
    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &head, data) != 0) return -1;
    for (int i = 0; i < 2; i++) {
        if (data[i].effective | data[i].permitted | data[i].inheritable) {
            note(report, cap, "capabilities: some remain");
            errno = EPERM;
            return -1;
        }
    }
    if (held) note(report, cap, "capabilities: all dropped (started with some)");
    return 64;
}

/* Threads of this process (Landlock confines the calling thread and those it starts). */
static int thread_count(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

int porter_worker_sandbox(const porter_sandbox *box, char *report, size_t cap) {
    if (report && cap) report[0] = 0;
    int in_force = 0;
    if (thread_count() > 1) {
        note(report, cap, "the worker already runs other threads");
        errno = EBUSY;
        return -1;
    }
    struct rlimit none = { 0, 0 };
    if (setrlimit(RLIMIT_CORE, &none) != 0) return -1;
    if (box->memory_bytes) {
        struct rlimit m = { box->memory_bytes, box->memory_bytes };
        if (setrlimit(RLIMIT_AS, &m) != 0) return -1;
    }
    if (box->cpu_seconds) {
        struct rlimit c = { box->cpu_seconds, box->cpu_seconds + 5 };
        if (setrlimit(RLIMIT_CPU, &c) != 0) return -1;
    }
    in_force |= 1;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    in_force |= 2;
    int caps = drop_capabilities(report, cap);
    if (caps < 0) return -1;
    in_force |= caps;
    /* No descriptor on a terminal (the host gives stdin, stdout and stderr elsewhere). */
    int tty = 0;
    for (int fd = 0; fd < 5; fd++) tty |= isatty(fd);
    if (!tty) in_force |= 128;
    else note(report, cap, "a terminal is open in the worker");
    int ll = landlock(box, report, cap);
    if (ll < 0) return -1;
    in_force |= ll;
    int sc = seccomp_filter(report, cap);
    if (sc < 0) return -1;
    return in_force | sc;
}
