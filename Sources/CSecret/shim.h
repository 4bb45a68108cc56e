/* libsecret and GLib (Debian: libsecret-1-dev), for CPorterSecret only: Swift code
 * imports CPorterSecret, whose header names no GLib type. */
#include <libsecret/secret.h>
