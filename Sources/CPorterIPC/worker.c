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

pid_t porter_ipc_spawn_worker(const char *worker, char *const argv[], int sock_fd, int plugin_fd) {
    /* Out of the way of 3 and 4 first, so the two dup2s cannot clobber each other. */
    int s = fcntl(sock_fd, F_DUPFD_CLOEXEC, 10);
    int p = plugin_fd >= 0 ? fcntl(plugin_fd, F_DUPFD_CLOEXEC, 10) : -1;
    if (s < 0 || (plugin_fd >= 0 && p < 0)) {
        int e = errno;
        if (s >= 0) close(s);
        if (p >= 0) close(p);
        errno = e;
        return -1;
    }
    size_t n = 0;
    while (environ[n]) n++;
    char **envp = malloc((n + 2) * sizeof *envp);
    if (!envp) {
        close(s);
        if (p >= 0) close(p);
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

/* Read rights on every entry of `folder` except `skip` (a name in it). */
static int ll_read_all_but(int ruleset, int abi, const char *folder, const char *skip, uint64_t read) {
    DIR *d = opendir(folder);
    if (!d) return 0; /* e.g. /home at 0711: nothing below it is granted (stricter, not looser) */
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (skip && strcmp(e->d_name, skip) == 0) continue;
        int n = snprintf(path, sizeof path, "%s/%s", strcmp(folder, "/") == 0 ? "" : folder, e->d_name);
        if (n <= 0 || (size_t)n >= sizeof path) continue;
        int fd = open(path, O_PATH | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        struct stat st;
        /* A symbolic link grants nothing by itself (its target is covered or not). */
        if (fstat(fd, &st) == 0 && !S_ISLNK(st.st_mode)) (void)ll_add(ruleset, abi, fd, read);
        close(fd);
    }
    closedir(d);
    return 0;
}

/* Reading everywhere but inside `home`: at each folder on the way from / to home, every
 * entry except the next step. */
static void note(char *report, size_t cap, const char *text);

static int ll_read_outside(int ruleset, int abi, const char *home, uint64_t read, char *report, size_t cap) {
    char *real = home ? realpath(home, NULL) : NULL;
    if (!real || strcmp(real, "/") == 0) {
        free(real);
        note(report, cap, "landlock: no home folder to protect (HOME unset or unresolvable)");
        return ll_add_path(ruleset, abi, "/", read);
    }
    if (strncmp(real, "/tmp/", 5) == 0) {
        /* /tmp is open to every worker for writing: a home inside it cannot be closed. */
        free(real);
        note(report, cap, "landlock: the home folder is under /tmp, which workers may use: not protected");
        return ll_add_path(ruleset, abi, "/", read);
    }
    char folder[4096] = "/";
    const char *rest = real + 1;
    int rc = 0;
    while (*rest) {
        const char *slash = strchr(rest, '/');
        size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
        char name[256];
        if (len == 0 || len >= sizeof name) break;
        memcpy(name, rest, len);
        name[len] = 0;
        if (ll_read_all_but(ruleset, abi, folder, name, read) != 0) rc = -1;
        size_t used = strlen(folder);
        if (used + len + 2 >= sizeof folder) break;
        if (used > 1) folder[used++] = '/';
        memcpy(folder + used, name, len + 1);
        rest = slash ? slash + 1 : rest + len;
    }
    free(real);
    return rc;
}

static void note(char *report, size_t cap, const char *text) {
    if (!report || cap == 0) return;
    size_t used = strnlen(report, cap);
    if (used + 1 >= cap) return;
    snprintf(report + used, cap - used, "%s%s", used ? "; " : "", text);
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
    int rc = box->legacy ? ll_add_path(ruleset, abi, "/", read) : ll_read_outside(ruleset, abi, box->home, read, report, cap);
    if (box->legacy) note(report, cap, "landlock: legacy plugin (ABI before 1.2): the home folder is readable");
    for (unsigned i = 0; rc == 0 && i < box->read_path_count; i++)
        if (box->read_paths[i]) rc = ll_add_path(ruleset, abi, box->read_paths[i], read);
    for (unsigned i = 0; rc == 0 && i < box->write_path_count; i++)
        if (box->write_paths[i]) rc = ll_add_path(ruleset, abi, box->write_paths[i], write);
    if (rc == 0) rc = ll_add_path(ruleset, abi, "/dev/null", LL_READ_FILE | LL_WRITE_FILE | (abi >= 3 ? LL_TRUNCATE : 0));
    if (rc == 0) rc = ll_add_path(ruleset, abi, "/tmp", write);
    if (rc == 0 && box->plugin_fd >= 0) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", box->plugin_fd);
        int fd = open(self, O_PATH | O_CLOEXEC);
        rc = fd >= 0 ? ll_add(ruleset, abi, fd, LL_EXECUTE | LL_READ_FILE) : -1;
        if (fd >= 0) close(fd);
    }
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

#include <sys/ioctl.h>

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
#endif
        DENY(__NR_execve, EPERM),
        DENY(__NR_execveat, EPERM),
        DENY(__NR_ptrace, EPERM),
        DENY(__NR_process_vm_readv, EPERM),
        DENY(__NR_process_vm_writev, EPERM),
        DENY(__NR_pidfd_getfd, EPERM),
        DENY(__NR_pidfd_send_signal, EPERM),
        DENY(__NR_tkill, EPERM),
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
    int ll = landlock(box, report, cap);
    if (ll < 0) return -1;
    in_force |= ll;
    int sc = seccomp_filter(report, cap);
    if (sc < 0) return -1;
    return in_force | sc;
}
