#ifndef PORTER_HOST_SUPPORT_H
#define PORTER_HOST_SUPPORT_H
/* C helpers for the plugin host (PorterPlugins): libffi's type descriptors (global
 * variables Swift should not touch directly) and getauxval. */
#include <ffi.h>

/* The ffi_type for a signature code of porter_plugin.h ('v' 'i' 'q' 'Q' 'd' 's' 'p'),
 * or NULL for any other character. */
ffi_type *porter_ffi_type(char code);

/* Nonzero in a setuid / setgid process or one with file capabilities (AT_SECURE). */
int porter_secure_exec(void);

/* Fixes glibc's mmap threshold at `bytes` (mallopt M_MMAP_THRESHOLD), which also stops
 * glibc from raising it on its own. For programs (the porter CLI), not libraries. */
int porter_fix_mmap_threshold(int bytes);

/* At most `count` malloc arenas (mallopt M_ARENA_MAX): glibc otherwise gives each thread
 * that allocates an arena of its own (up to 8 per core), each with its own free lists and
 * fragmentation. For long-running programs with many threads (porterd), not libraries. */
int porter_limit_malloc_arenas(int count);

/* The load address of the image (shared object or program) that holds `address`, and
 * its path in `*path` (static, or NULL); NULL when dladdr knows none. Event hooks are
 * queued per image: one queue per plugin. */
const void *porter_image_base(const void *address, const char **path);

#endif
