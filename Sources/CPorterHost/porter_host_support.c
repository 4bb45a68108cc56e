#define _GNU_SOURCE
#include "porter_host_support.h"
#include <dlfcn.h>
#include <malloc.h>
#include <sys/auxv.h>

ffi_type *porter_ffi_type(char code) {
    switch (code) {
    case 'v': return &ffi_type_void;
    case 'i': return &ffi_type_sint32;
    case 'q': return &ffi_type_sint64;
    case 'Q': return &ffi_type_uint64;
    case 'd': return &ffi_type_double;
    case 's': return &ffi_type_pointer;
    case 'p': return &ffi_type_pointer;
    default: return NULL;
    }
}

int porter_secure_exec(void) {
    return getauxval(AT_SECURE) != 0;
}

int porter_fix_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

int porter_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

const void *porter_image_base(const void *address, const char **path) {
    Dl_info info;
    if (path) *path = NULL;
    if (dladdr(address, &info) == 0) return NULL;
    if (path) *path = info.dli_fname;
    return info.dli_fbase;
}
