#ifndef PORTER_IPC_H
#define PORTER_IPC_H

#include <sys/types.h>

/* Unix-domain stream sockets for PorterIPC (sockaddr_un is awkward from Swift). Each
 * returns a descriptor (close-on-exec) or -1 with errno set. */

/* Binds and listens on `path` (at most 107 bytes); the socket file is made with
 * permissions 0600 (umask 0177 around bind). */
int porter_ipc_listen(const char *path, int backlog);
/* Connects to `path`. */
int porter_ipc_connect(const char *path);
/* Connects to `path` without waiting: a listener whose backlog is full fails at once
 * (EAGAIN) instead of blocking the caller. The descriptor returned is blocking. */
int porter_ipc_connect_now(const char *path);
/* Accepts one connection (close-on-exec); -1 on error. */
int porter_ipc_accept(int listener);
/* The peer's pid, uid and gid (SO_PEERCRED); 0 on success, -1 on error. */
int porter_ipc_peer(int fd, pid_t *pid, uid_t *uid, gid_t *gid);
/* The peer of a connected Unix socket as a pidfd (close-on-exec), so that what is read
 * about it later is about that process and no other that reuses its pid: SO_PEERPIDFD
 * (Linux 6.5); on older kernels SO_PEERCRED's pid through pidfd_open, kept only when
 * that process started no later than this call (a process started after the connection
 * was accepted cannot be its peer). `*pid` gets the pid. Returns the pidfd or -1. */
int porter_ipc_peer_pidfd(int fd, pid_t *pid);

/* How the process is confined, from /proc/PID/status: Seccomp (0 none, 1 strict,
 * 2 filter), Seccomp_filters (how many filters; 0 when the kernel does not say) and
 * NoNewPrivs. */
typedef struct porter_ipc_confinement {
    int seccomp;
    int seccomp_filters;
    int no_new_privs;
} porter_ipc_confinement;
/* The confinement of the process behind `pidfd`; the pidfd is checked to still name a
 * live process after /proc was read (so the pid was not reused meanwhile). 0, or -1
 * with errno (ESRCH: it is gone or not visible in this pid namespace). */
int porter_ipc_pidfd_confinement(int pidfd, porter_ipc_confinement *out);
/* The calling process's own confinement. 0 or -1. */
int porter_ipc_self_confinement(porter_ipc_confinement *out);
/* The program the process behind `pidfd` runs (/proc/PID/exe, resolved by the kernel),
 * NUL-ended in `out`; checked after reading as above. 0, or -1 with errno. */
int porter_ipc_pidfd_exe(int pidfd, char *out, size_t cap);

/* Sends up to `len` bytes of `buf` on the Unix socket `sock` with one sendmsg, with the
 * descriptor `pass` attached (SCM_RIGHTS) when it is >= 0; `flags` as for sendmsg. The
 * descriptor travels with the first byte sent. Returns the bytes sent or -1 (errno). */
ssize_t porter_ipc_send_with_fd(int sock, const void *buf, size_t len, int pass, int flags);
/* Receives up to `len` bytes (one recvmsg); descriptors that came with them (SCM_RIGHTS,
 * made close-on-exec) go to `fds`, at most `max` (any more are closed), their number to
 * `*nfds`. Returns the bytes received (0: end of stream) or -1 (errno). */
ssize_t porter_ipc_recv_with_fds(int sock, void *buf, size_t len, int *fds, int max, int *nfds);

/* A connected pair of stream sockets, both close-on-exec; 0 or -1. */
int porter_ipc_socketpair(int fds[2]);

/* Starts `path` with `argv` (NULL-terminated) as a daemon: in a new session, its own
 * process group, stdin/stdout/stderr on /dev/null, not a child of the caller (double
 * fork, the intermediate child reaped here). The environment is inherited. Returns 0
 * once the intermediate child exited with 0, else -1 (errno, or EIO when exec failed in
 * the intermediate child before it could report). */
int porter_ipc_spawn_detached(const char *path, char *const argv[]);
/* The same with the environment `envp` (NULL-terminated). */
int porter_ipc_spawn_detached_env(const char *path, char *const argv[], char *const envp[]);

/* Starts writing `length` bytes of `fd` from `offset` to disk without waiting for them
 * (sync_file_range with SYNC_FILE_RANGE_WRITE), so a later fdatasync has little left. */
int porter_ipc_start_writeback(int fd, long long offset, long long length);

/* Hands the allocator's free memory back to the system (glibc's malloc_trim over every
 * arena); a long-lived process calls it after a burst. Returns 1 when memory was released. */
int porter_ipc_release_free_memory(void);

/* Runs `worker` with argv {"porter-plugin-worker", [marker,] "--probe", "3", NULL} (`marker`:
 * NULL for porter-plugin-worker, "--porter-plugin-worker" for an application that is its
 * own worker), the plugin file descriptor `plugin_fd` as its fd 3 and its stdout into
 * `out` (at most cap-1 bytes, NUL ended), for at most `timeout_ms`. Returns the exit
 * status (>= 0), -signal when a signal ended it (-SIGKILL after the timeout), or -1000
 * when it could not start. */
int porter_ipc_probe_plugin(const char *worker, const char *marker, int plugin_fd, char *out, size_t cap,
                            int timeout_ms);

/* Starts a plugin worker: `worker` with `argv` (NULL-terminated), `sock_fd` as its fd 3
 * and `plugin_fd` as its fd 4 (both without close-on-exec there), stdin and stdout on
 * /dev/null (a plugin's printf must not mix into the host's output), stderr on `err_fd`
 * (the write end of a pipe the host copies from) or on /dev/null when it is -1 — never
 * the host's own stderr, which may be the user's terminal — in a session of its own (no
 * controlling terminal), every other descriptor closed, signals at their defaults and
 * unblocked, and SWIFT_BACKTRACE=enable=no so a crash ends the worker by its signal.
 * Returns the pid, or -1 with errno set. The caller reaps it (waitpid). */
pid_t porter_ipc_spawn_worker_err(const char *worker, char *const argv[], int sock_fd, int plugin_fd, int err_fd);
/* A pipe, both ends close-on-exec (pipe2 with O_CLOEXEC); 0 or -1. */
int porter_ipc_pipe(int fds[2]);
/* The same with stderr on /dev/null. */
pid_t porter_ipc_spawn_worker(const char *worker, char *const argv[], int sock_fd, int plugin_fd);

/* What a plugin worker may do (porter_worker_sandbox). */
typedef struct porter_sandbox {
    /* Address-space limit in bytes (RLIMIT_AS); 0: none. */
    unsigned long long memory_bytes;
    /* CPU seconds (RLIMIT_CPU, soft; SIGXCPU ends the worker); 0: none. */
    unsigned long long cpu_seconds;
    /* 1: the plugin may make TCP connections and bind ports (a scheme declared
     * PORTER_SCHEME_NEEDS_NETWORK); 0: Landlock refuses both. */
    int network;
    /* The user's home folder (its contents are not readable unless listed below), or
     * NULL. */
    const char *home;
    /* Extra paths the plugin may read (files or folders), and paths it may also write. */
    const char *const *read_paths;
    unsigned read_path_count;
    const char *const *write_paths;
    unsigned write_path_count;
    /* The plugin file's descriptor: readable and mappable whatever folder it is in. */
    int plugin_fd;
    /* 1 for a plugin built before ABI 1.2, which could not declare paths: the home
     * folder stays readable (never writable). */
    int legacy;
    /* Folders nothing is granted in, whatever the walk or a declared path would grant:
     * Porter's own (data, state, cache, config, runtime). Missing ones are skipped. */
    const char *const *closed_paths;
    unsigned closed_path_count;
} porter_sandbox;

/* Confines the calling process for good, before it runs a plugin's code:
 * - no core dumps, not ptrace-attachable by the user's other processes (dumpable 0),
 *   the limits above, PR_SET_NO_NEW_PRIVS;
 * - no capabilities: a worker started by root drops effective, permitted, inheritable,
 *   ambient and bounding sets and locks the securebits (SECBIT_NOROOT...);
 * - Landlock (when the kernel has it): reading everywhere except inside `home` and the
 *   closed paths (but the listed paths, unless one holds a closed path), in /dev only
 *   null, zero, full, random and urandom (no terminal: /dev/pts, /dev/tty*, /dev/console,
 *   /dev/ptmx); writing only to the listed write paths, /dev/null and /tmp (around the
 *   closed paths, should any lie in /tmp); with Landlock ABI 4, no TCP unless `network`;
 *   with ABI 6, no signals to processes outside the sandbox and no abstract Unix sockets
 *   outside it;
 * - seccomp (all threads): fork, vfork, clone of a new process, execve, ptrace,
 *   process_vm_readv/writev, pidfd_getfd, pidfd_send_signal and tkill fail with EPERM
 *   (threads still start); kill and tgkill only reach the process itself; ioctl
 *   TIOCSTI / TIOCLINUX fail; socket(AF_UNIX) fails (socketpair stays), and io_uring,
 *   open_by_handle_at, keyrings, unshare and setns; the chmod, chown, setxattr,
 *   removexattr and utimes families fail with EPERM, getxattr / listxattr with
 *   EOPNOTSUPP. So a plugin can neither fork-bomb, run programs, touch another process,
 *   reach porterd or any other Unix socket by path, change a file's mode, owner,
 *   attributes or times, nor type into a terminal.
 * Must be called while the process has one thread (else -1, EBUSY).
 * Returns a bit set of what is in force (1 limits, 2 no_new_privs, 4 landlock filesystem,
 * 8 landlock network, 16 landlock scopes, 32 seccomp, 64 no capabilities, 128 no terminal
 * among descriptors 0-4), or -1 when a step that must not
 * fail did (errno set). `report` receives a short text of what was skipped and why. */
int porter_worker_sandbox(const porter_sandbox *box, char *report, size_t report_capacity);

/* Waits up to `timeout_ms` for the child `pid` to exit and reaps it: 1 with its wait
 * status in `status`, 0 when it still runs at the deadline, -1 when it cannot be waited
 * for (errno set). Woken by the exit itself (a pidfd), not by a polling period. */
int porter_ipc_wait_exit(pid_t pid, int timeout_ms, int *status);

#endif
