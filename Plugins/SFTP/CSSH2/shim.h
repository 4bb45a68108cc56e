/* libssh2 for the sftp plugin (Debian: libssh2-1-dev). Swift calls the *_ex forms of
 * the functions libssh2.h defines as macros. */
#include <libssh2.h>
#include <libssh2_sftp.h>
