/* Benchmarks/profile-isolation.sh only: lets porter-plugin-worker run under valgrind by
   pretending that the sandbox calls valgrind cannot emulate (seccomp filters, landlock,
   RLIMIT_AS and RLIMIT_CPU) worked. Never for anything but counting instructions. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <errno.h>
long syscall(long n, ...) {
    va_list ap; va_start(ap, n);
    long a[6]; for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_seccomp) return 0;
    if (n == 444 /* landlock_create_ruleset */) { errno = ENOSYS; return -1; }
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
int setrlimit(__rlimit_resource_t r, const struct rlimit *l) {
    static int (*real)(__rlimit_resource_t, const struct rlimit *);
    if (!real) real = (int (*)(__rlimit_resource_t, const struct rlimit *))dlsym(RTLD_NEXT, "setrlimit");
    if (r == RLIMIT_AS || r == RLIMIT_CPU) return 0;
    return real(r, l);
}
