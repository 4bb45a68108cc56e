#ifndef PORTER_FILE_COPY_H
#define PORTER_FILE_COPY_H

#include <sys/types.h>

/* copy_file_range(2) from `in`'s offset to `out`'s offset (both advance), which glibc
 * declares only under _GNU_SOURCE and Swift's Glibc module does not carry. -1 with errno
 * as the call left it. */
ssize_t porter_copy_file_range(int in, int out, size_t length);

#endif
