/* libpsl (Debian: libpsl-dev) with the system's public suffix list (publicsuffix). */
#include <libpsl.h>
