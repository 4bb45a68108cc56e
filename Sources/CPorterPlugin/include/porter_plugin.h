/*
 * porter_plugin.h — the C ABI between Porter and a protocol-handler plugin.
 *
 * ABI version 1.3. 1.1 appended `porter_request.cached_response` and
 * `porter_host.cached_response_is_valid`; 1.2 appended the descriptor's `read_paths` /
 * `write_paths` (what a plugin may touch in its sandbox) and PORTER_ERR_PLUGIN_CRASHED,
 * made PORTER_SCHEME_REDIRECT_TARGET count per scheme, made the host enforce
 * PORTER_SCHEME_NEEDS_NETWORK and PORTER_SCHEME_CAN_UPLOAD, and retired
 * PORTER_SCHEME_CREDENTIALS_PER_REQUEST; 1.3 appended the descriptor's `needs`
 * (PORTER_NEED_*), `porter_host.connect_service` (a connection to a local service such as
 * the user's ssh agent, made by the host and handed over as a descriptor: an isolated
 * plugin cannot open a Unix socket itself) and PORTER_ERR_UNSUPPORTED_CONFIGURATION;
 * 1.4 gave each scheme its declarations as curl's handler table has them:
 * `porter_scheme.default_port` (in what was padding after `flags`) and
 * PORTER_SCHEME_CARRIES_COOKIES. A 1.0 to 1.3 plugin loads unchanged (its schemes
 * declare no default port and carry no cookies: the host does not read those bytes).
 *
 * ----------------------------------------------------------------------------------
 * Where a plugin runs
 * ----------------------------------------------------------------------------------
 * A plugin found on the search path runs in a process of its own, a worker
 * (`porter-plugin-worker`), one per plugin, serving all of its loads; the host talks to
 * it over a socket, and every call below crosses that boundary unchanged (the plugin
 * cannot tell). A crash, abort or hang there fails the loads in flight with
 * PORTER_ERR_PLUGIN_CRASHED and never the program; the next load starts a fresh worker.
 * The worker is sandboxed before the plugin's code runs (see `read_paths`). An
 * application may ask for a plugin to run inside its own process instead (faster,
 * unprotected), and a plugin it links in and registers itself always does.
 *
 * A plugin is a shared object that exports ONE function, `porter_plugin_entry`
 * (see PORTER_PLUGIN_ENTRY_SYMBOL). Porter dlopens it (RTLD_NOW | RTLD_LOCAL |
 * RTLD_NODELETE, never unloaded), calls the entry point once with a table of host
 * functions, and receives a descriptor naming the plugin's schemes and a table of
 * handler functions. From then on, each task whose URL has one of those schemes is
 * loaded by calling the handler's `start`, and the plugin reports back through the
 * host table — the same life cycle a built-in Swift handler has (response, data,
 * redirect, challenge, finish or fail; stop; pause and resume for back-pressure).
 *
 * Nothing here is Swift-specific; a plugin may be written in C, C++, Rust or Swift
 * (Swift plugins use PorterPluginKit, a thin layer over this header).
 *
 * ----------------------------------------------------------------------------------
 * General rules
 * ----------------------------------------------------------------------------------
 * Memory.   A `const char *` or pointer the HOST passes to the plugin is owned by the
 *           host. Unless a field says otherwise it is valid only for the duration of
 *           the call that passed it; copy what you keep. Pointers the PLUGIN passes
 *           to the host are read during the call only; the host copies what it keeps.
 *           The descriptor, its scheme array and its handler table are the exception:
 *           they must stay valid for the life of the process (static storage is the
 *           usual way; the plugin is never unloaded).
 * Strings.  NUL-terminated UTF-8. URLs are absolute and percent-encoded.
 * Threads.  Every host function in `porter_host` may be called from any thread,
 *           including threads the plugin creates, and never blocks for long (the
 *           host queues the work). The host calls the handler functions from its own
 *           threads (each load's `start`, `stop`, `pause` and `resume` in order, on a
 *           serial queue of that load's own, in process as in a worker, so a call that
 *           blocks holds back that load only); they must return promptly: do I/O on a
 *           thread, loop or queue of the plugin's own. The host never calls `start`, `stop` and `destroy` of
 *           one load concurrently with each other; `pause` and `resume` may come from
 *           any thread at any time between `start` and `destroy`, including from
 *           inside a host call the plugin is making, so they must only set state
 *           and return.
 * Errors.   No host function traps on bad input from a plugin. A NULL where a
 *           pointer is required, a call on a load that has already finished, or a
 *           second completion is ignored and logged. A plugin must not trap either:
 *           report failure through `fail`.
 *
 * ----------------------------------------------------------------------------------
 * Versioning — how this header may change without breaking old plugins
 * ----------------------------------------------------------------------------------
 * - Every struct that crosses the boundary begins with `uint32_t struct_size`, set by
 *   whoever fills it in to `sizeof` of the struct as it was compiled.
 * - A minor version (1.0 -> 1.1) may only APPEND fields at the end of a struct and
 *   append events, flags and error codes. A reader checks `struct_size` before
 *   touching a field beyond the 1.0 layout, and treats a missing field as 0 / NULL,
 *   which always means "not supported" or "default".
 * - Anything else — reordering, removing, changing a type or a meaning — is a new
 *   major version. The host refuses a plugin whose major differs from its own, or
 *   whose minor is newer than its own (the plugin may rely on something the host
 *   lacks). The first three fields of `porter_plugin_descriptor` (struct_size,
 *   abi_major, abi_minor) never move, in any version.
 * - Event signatures (see "Events") never change once published; a changed event
 *   gets a new name.
 */
#ifndef PORTER_PLUGIN_H
#define PORTER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PORTER_PLUGIN_ABI_MAJOR 1
#define PORTER_PLUGIN_ABI_MINOR 4

/* The name of the one exported function. */
#define PORTER_PLUGIN_ENTRY_SYMBOL "porter_plugin_entry"

/* ---------------------------------------------------------------------------------
 * Error codes (`fail`, challenge errors). The numbers are Porter's stable
 * PorterError.Code values; a code the host does not know becomes "unknown" (1).
 * --------------------------------------------------------------------------------- */
enum {
    PORTER_ERR_UNKNOWN = 1,
    PORTER_ERR_CANCELLED = 2,
    PORTER_ERR_BAD_URL = 3,
    PORTER_ERR_UNSUPPORTED_URL = 4,
    PORTER_ERR_TIMED_OUT = 5,
    PORTER_ERR_CANNOT_FIND_HOST = 6,
    PORTER_ERR_CANNOT_CONNECT_TO_HOST = 7,
    PORTER_ERR_NETWORK_CONNECTION_LOST = 8,
    PORTER_ERR_BAD_SERVER_RESPONSE = 9,
    PORTER_ERR_USER_AUTHENTICATION_REQUIRED = 12,
    PORTER_ERR_USER_CANCELLED_AUTHENTICATION = 13,
    PORTER_ERR_SERVER_CERTIFICATE_UNTRUSTED = 14, /* also: an unknown SSH host key */
    PORTER_ERR_SECURE_CONNECTION_FAILED = 15,
    PORTER_ERR_FILE_DOES_NOT_EXIST = 17,
    PORTER_ERR_FILE_IS_DIRECTORY = 18,
    PORTER_ERR_NO_PERMISSIONS_TO_READ_FILE = 19,
    PORTER_ERR_CANNOT_WRITE_TO_FILE = 20,
    PORTER_ERR_CANNOT_CREATE_FILE = 21,
    PORTER_ERR_RESOURCE_UNAVAILABLE = 26,
    PORTER_ERR_CANNOT_PARSE_RESPONSE = 27,
    /* 1.3. Raised by the host: e.g. `connect_service` for a service the descriptor did
     * not declare in `needs`, or one the host does not know. */
    PORTER_ERR_UNSUPPORTED_CONFIGURATION = 29,
    PORTER_ERR_CANNOT_OPEN_FILE = 32,
    PORTER_ERR_RESUME_FAILED = 33,
    PORTER_ERR_PROTOCOL_VIOLATION = 34,
    PORTER_ERR_AUTHENTICATION_FAILED = 35,   /* credentials were offered and refused */
    PORTER_ERR_SERVER_IDENTITY_CHANGED = 36, /* e.g. an SSH host key that changed */
    /* 1.2. Raised by the host, never by a plugin: the plugin's worker process died (a
     * crash, an abort, a limit, or a kill because it did not honour `stop` in time)
     * while the load was in flight, or the plugin was disabled after crashing again and
     * again. */
    PORTER_ERR_PLUGIN_CRASHED = 38
};

/* Log levels for `porter_host.log`. */
enum {
    PORTER_LOG_TRACE = 0,
    PORTER_LOG_DEBUG = 1,
    PORTER_LOG_INFO = 2,
    PORTER_LOG_WARNING = 3,
    PORTER_LOG_ERROR = 4
};

/* ---------------------------------------------------------------------------------
 * Capability flags of a scheme (porter_scheme.flags).
 * --------------------------------------------------------------------------------- */
/* The scheme talks to other machines. Enforced (1.2): a worker whose plugin declares
 * this on none of its schemes may not make TCP connections or bind ports (Landlock). */
#define PORTER_SCHEME_NEEDS_NETWORK          (1u << 0)
/* A redirect from another scheme (e.g. http) may lead to THIS scheme if the
 * application allows it. Per scheme (1.2; 1.0 and 1.1 hosts looked at any scheme of the
 * plugin). Without this flag Porter never follows a redirect into the scheme. */
#define PORTER_SCHEME_REDIRECT_TARGET        (1u << 1)
/* Retired in 1.2: the host ignores it (it never changed how challenges are answered).
 * Kept so old sources compile; do not use in new plugins. */
#define PORTER_SCHEME_CREDENTIALS_PER_REQUEST (1u << 2)
/* The handler can upload (request bodies through `read_body`). Enforced (1.2): a task
 * with a body to a scheme without this flag fails with PORTER_ERR_UNSUPPORTED_URL before
 * `start` is called. */
#define PORTER_SCHEME_CAN_UPLOAD             (1u << 3)
/* 1.4. Loads of the scheme carry the session's cookies, as HTTP's do: the host puts
 * the cookies for the request's URL in its "Cookie" header field before `start`, and
 * stores the Set-Cookie fields of each response (and redirect response) the plugin
 * reports, as the session's cookie settings allow. Without it (and always from a
 * plugin built for 1.3 or older) a load neither sends nor stores cookies. */
#define PORTER_SCHEME_CARRIES_COOKIES        (1u << 4)

/* ---------------------------------------------------------------------------------
 * Local services (1.3): what a plugin may ask the host to connect it to with
 * `porter_host.connect_service`, each only when its need is declared in the descriptor's
 * `needs`. The host finds and connects to the service itself (from its own environment,
 * never from anything the plugin says) and hands over a connected descriptor; an
 * isolated plugin's sandbox refuses Unix sockets of its own (socket(AF_UNIX) fails), so
 * this is the only way it reaches one.
 * --------------------------------------------------------------------------------- */
enum {
    /* The user's ssh agent: the Unix socket named by the HOST's $SSH_AUTH_SOCK. The
     * descriptor speaks the agent protocol (draft-miller-ssh-agent). */
    PORTER_SERVICE_SSH_AGENT = 1
};
/* porter_plugin_descriptor.needs: bit (1 << (service - 1)) for each service. */
#define PORTER_NEED_SSH_AGENT                (1u << 0)

/* ---------------------------------------------------------------------------------
 * Values the host hands to the plugin
 * --------------------------------------------------------------------------------- */

/* One header field, or one request property (name = key).
 *
 * Frozen: `porter_field` and `porter_scheme` are array elements without a struct_size,
 * so their size never changes (1.4 only named `porter_scheme`'s padding, read from 1.4
 * plugins only). Should either ever need more, the struct that holds the array gains
 * an element-size field first (e.g. `scheme_size` in the descriptor) in a minor
 * version, and readers step through the array by that size. */
typedef struct porter_field {
    const char *name;
    const char *value;
} porter_field;

struct porter_response;   /* below */

/* The request one load is for. Owned by the host; valid (with every string and array
 * it points to) from `start` until `destroy` returns for that load — unlike other
 * host values, a handler may keep pointers into it for the whole load. */
typedef struct porter_request {
    uint32_t struct_size;
    const char *url;              /* absolute, percent-encoded */
    const char *method;           /* "GET", "PUT", ...: upload tasks use "PUT" or "POST" */
    const porter_field *headers;  /* header_count entries */
    size_t header_count;
    /* String-valued request properties (Request.setProperty with a String), for
     * per-request options such as a key file; property_count entries. */
    const porter_field *properties;
    size_t property_count;
    /* Resume: load from this byte offset (-1: from the start). When >= 0 the
     * handler reports the offset in porter_response.resume_offset, or -1 if it
     * had to restart from byte 0. */
    int64_t resume_offset;
    const char *resume_validator; /* the validator of the earlier response, or NULL */
    /* Request body: 1 when the task uploads (read it with `read_body`). */
    int32_t has_body;
    int64_t body_length;          /* -1 when unknown (a stream) */
    double timeout_interval;      /* idle timeout, seconds; the host enforces it too */
    /* 1 when the session turned verification of the server's identity off
     * (the CLI's --insecure). A handler may then accept an unknown host without a
     * challenge — but never a host whose identity CHANGED. */
    int32_t insecure;

    /* --- ABI 1.1 (check struct_size before reading) --- */

    /* The session's cache holds a response for this request: its head (NULL when
     * none). A handler that can tell it is still good (its `validator` matches, or
     * the scheme's own freshness rules say so) calls `cached_response_is_valid`
     * instead of loading; otherwise it loads as usual and its response replaces the
     * stored one. Responses are stored when they have a status code and the rules of
     * RFC 9111 allow it (e.g. status 200 with a Cache-Control header). */
    const struct porter_response *cached_response;
} porter_request;

/* The response head a handler reports. Filled in by the plugin; read by the host
 * during `did_receive_response` / `was_redirected` only. */
typedef struct porter_response {
    uint32_t struct_size;
    const char *url;              /* NULL: the request's URL */
    const char *mime_type;        /* NULL: application/octet-stream */
    const char *text_encoding;    /* charset or NULL */
    int64_t expected_length;      /* -1 when unknown */
    int32_t status_code;          /* protocol status, or -1 when the scheme has none */
    const porter_field *headers;  /* may be NULL */
    size_t header_count;
    int64_t resume_offset;        /* see porter_request.resume_offset; -1 otherwise */
    const char *validator;        /* a value that changes when the resource does, or NULL */
} porter_response;

/* Opaque: one load's link back to the host. Valid from `start` until `destroy`
 * returns; the plugin must make sure none of its threads uses it after that.
 * The client dies when `start` returns nonzero, or when `destroy` returns. It is a
 * token, not a pointer to host memory: each load gets a number never used again in the
 * process (a generation), so a call made with a dead client is recognised and ignored
 * (a challenge returns 0, read_body returns -1, the rest do nothing) even when a newer
 * load is live, and a late call cannot crash the host. The request handed to `start`
 * is freed at the same moment and must not be read afterwards. */
typedef struct porter_client porter_client;

/* ---------------------------------------------------------------------------------
 * Challenges (authentication and server trust)
 * --------------------------------------------------------------------------------- */
enum {
    PORTER_AUTH_DEFAULT = 0,
    PORTER_AUTH_PASSWORD = 1,          /* user + password */
    PORTER_AUTH_CLIENT_CERTIFICATE = 2,/* a certificate / key file (ssh: a private key) */
    PORTER_AUTH_SERVER_TRUST = 3,      /* accept the server's identity? */
    PORTER_AUTH_CUSTOM = 4             /* method named by `method_name` */
};

/* The protection space the application sees (and its stored credentials, netrc logins and
 * `-u` answer) is built by the host from the URL of the load that raises the challenge:
 * its scheme, host and port (the scheme's default port when it names none). A plugin
 * chooses only the realm and the method, which select among that one origin's credentials;
 * `host` and `port` are not read (an isolated plugin's worker cannot name them either). */
typedef struct porter_challenge {
    uint32_t struct_size;
    int32_t method;                /* PORTER_AUTH_*; PASSWORD reaches the application as .password */
    const char *method_name;       /* for PORTER_AUTH_CUSTOM (e.g. "ssh-keyboard-interactive"); else NULL */
    const char *host;              /* not read: the load's URL's host */
    int32_t port;                  /* not read: the load's URL's port */
    const char *realm;             /* or NULL (control characters dropped, at most 256 bytes) */
    int32_t previous_failure_count;/* how many answers for this space already failed */
    const char *proposed_user;     /* e.g. the user from the URL, or NULL */
    /* Server trust only: the server's identity (DER certificates leaf first, or an
     * SSH host key blob), and why it is not trusted ("unknown host key"). */
    const uint8_t *const *identity;
    const size_t *identity_lengths;
    size_t identity_count;
    const char *failure_reason;
} porter_challenge;

enum {
    PORTER_DISPOSITION_USE_CREDENTIAL = 0,
    PORTER_DISPOSITION_DEFAULT = 1,        /* do what you would without a delegate */
    PORTER_DISPOSITION_CANCEL = 2,         /* the task fails: user cancelled authentication */
    PORTER_DISPOSITION_REJECT_SPACE = 3    /* try another method if you have one */
};

/* The answer to a challenge. Owned by the host; valid during the reply call only. */
typedef struct porter_challenge_reply {
    uint32_t struct_size;
    int32_t disposition;          /* PORTER_DISPOSITION_* */
    /* With USE_CREDENTIAL, exactly one kind is set: */
    const char *user;             /* password credential */
    const char *password;
    const char *certificate_path; /* certificate credential (ssh: public key file or NULL) */
    const char *key_path;
    const char *passphrase;
    int32_t trust;                /* 1: accept the server identity as presented */
} porter_challenge_reply;

/* Called by the host exactly once per challenge, from any thread, unless the plugin
 * withdrew it first with `cancel_challenge` (then never). `context` is the pointer the
 * plugin passed to `challenge`. */
typedef void (*porter_challenge_reply_fn)(void *context, const porter_challenge_reply *reply);

/* ---------------------------------------------------------------------------------
 * The host function table
 * --------------------------------------------------------------------------------- */
typedef struct porter_host {
    uint32_t struct_size;
    uint16_t abi_major;
    uint16_t abi_minor;
    const char *host_version;     /* Porter's version, e.g. "0.1.0"; static */

    /* --- Reporting a load, in this order: challenges, then a response (or a redirect),
     * data, then exactly one of finish / fail. --- */

    /* The response head. May be called once. */
    void (*did_receive_response)(porter_client *client, const porter_response *response);
    /* Body bytes, in order; the host copies them before returning. */
    void (*did_load_data)(porter_client *client, const void *bytes, size_t length);
    /* The resource is elsewhere: the host decides whether to follow (delegate,
     * redirect limit, allowed schemes) and then stops this load. `response` may be
     * NULL. The new request keeps the method, the header fields and the body (as an
     * HTTP 307/308 does); a body is read again from its start by the next load. A plugin
     * that means "fetch this instead with GET" should report the failure or the
     * response it has rather than a redirect. */
    void (*was_redirected)(porter_client *client, const char *new_url, const porter_response *response);
    /* Success. After this the host calls `destroy` (from another thread). */
    void (*did_finish)(porter_client *client);
    /* Failure with a PORTER_ERR_* code, a message for people, and optionally the
     * underlying library's error (domain "libssh2", code -18, ...; domain may be NULL).
     * After this the host calls `destroy`. */
    void (*did_fail)(porter_client *client, int32_t error_code, const char *message,
                     const char *cause_domain, int64_t cause_code);
    /* Upload progress. */
    void (*did_send_body_data)(porter_client *client, int64_t bytes_sent, int64_t total_sent,
                               int64_t total_expected);

    /* --- Challenges --- */

    /* Ask the application for proof. Returns an identifier (> 0) for
     * `cancel_challenge`, or 0 if the challenge could not be raised (bad arguments or
     * the load already ended; `reply` is then never called). */
    uint64_t (*challenge)(porter_client *client, const porter_challenge *challenge,
                          porter_challenge_reply_fn reply, void *reply_context);
    /* Withdraw a challenge (e.g. the connection went away); its reply is not sent. */
    void (*cancel_challenge)(porter_client *client, uint64_t challenge_id);

    /* --- Request body --- */

    /* Read up to `capacity` bytes of the request body into `buffer`. Returns the number
     * of bytes read, 0 at the end of the body (also for a request without a body), or -1
     * when no more can be had: the body's source failed (a file that went away, a stream
     * that threw; the host logged why), the arguments are bad, or the client is dead.
     * After -1 the plugin should fail the load (e.g. PORTER_ERR_CANNOT_OPEN_FILE); a
     * later call returns -1 again. May block while the body's source produces data:
     * call it on the plugin's own thread. */
    int64_t (*read_body)(porter_client *client, void *buffer, size_t capacity);

    /* --- Logging: `client` may be NULL for messages not about one load. --- */
    void (*log)(porter_client *client, int32_t level, const char *message);

    /* --- Events (see below). Returns 0 on success, or -1 and writes a reason (NUL
     * terminated, truncated to `error_capacity`) when the event name is unknown, the
     * signature does not match the event's, or `function` is NULL. May be called from
     * the entry point or later, from any thread. Subscriptions last for the process. */
    int32_t (*subscribe)(const char *event_name, const char *signature, void (*function)(void),
                         void *user_data, char *error, size_t error_capacity);

    /* --- ABI 1.1 (check struct_size, or abi_minor >= 1, before calling) --- */

    /* The request's `cached_response` is still good: the host serves the stored
     * response and body, and the load is over (as after `did_finish`; `destroy`
     * follows). `revalidated`: 1 when the plugin asked its server (metrics say
     * "revalidated"), 0 when it decided alone ("localCache"). Ignored (logged) when the
     * request had no cached response. */
    void (*cached_response_is_valid)(porter_client *client, int32_t revalidated);

    /* --- ABI 1.3 (check struct_size, or abi_minor >= 3, before calling) --- */

    /* A connection to the local service `service` (PORTER_SERVICE_*), for the load
     * behind `client`: returns a connected descriptor (close-on-exec) that the plugin
     * owns and must close, or -1 when there is none — the plugin did not declare the
     * service's PORTER_NEED_* in its descriptor (PORTER_ERR_UNSUPPORTED_CONFIGURATION, and
     * the host never connects), the host knows no such service (the same), the service is
     * not there (e.g. $SSH_AUTH_SOCK unset or nobody listening:
     * PORTER_ERR_RESOURCE_UNAVAILABLE), the client is dead or the load stopped
     * (PORTER_ERR_CANCELLED). On -1 the code goes to `*error_code` and a reason (NUL
     * terminated, truncated to `error_capacity`) to `error`, each when not NULL. Where
     * the service is is the host's to know: a plugin names only the service. The host
     * answers one call of a load at a time and a bounded number in a load's life (16);
     * may block briefly (a round trip to the host when isolated): call it on the
     * plugin's own thread. */
    int32_t (*connect_service)(porter_client *client, int32_t service, int32_t *error_code, char *error,
                               size_t error_capacity);
} porter_host;

/* ---------------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------------------
 * A plugin may watch every task of the process by subscribing a plain C function to a
 * named event. The host calls it through libffi with the arguments the signature
 * names, first `user_data`, after the event happened, on a serial queue of the
 * plugin's own (one per plugin image): a plugin sees events in the order they
 * happened and never two at once, and the host never waits for a hook, so a slow hook
 * delays only that plugin's later hooks, never a transfer. A hook should still return
 * promptly: once 4096 events wait for a plugin, later ones are dropped (and logged)
 * until it catches up. It must not call back into the client of that task.
 *
 * A signature is a return type, then the argument types in parentheses:
 *   v void (return only)   i int32_t   q int64_t   Q uint64_t   d double
 *   s const char * (valid during the call)   p void * (the user_data)
 *
 * event name           signature       arguments after user_data
 * "task.created"       "v(pQs)"        task id, URL
 * "task.response"      "v(pQsiq)"      task id, URL, status code (-1 if none), expected length (-1)
 * "task.redirected"    "v(pQss)"       task id, from URL, to URL
 * "task.challenged"    "v(pQssi)"      task id, host, method name, previous failure count
 * "task.completed"     "v(pQsqqi)"     task id, URL, body bytes received, body bytes sent,
 *                                      error code (0: success; PORTER_ERR_* otherwise)
 *
 * A subscription whose signature is not exactly the event's is refused, never called.
 */
#define PORTER_EVENT_TASK_CREATED    "task.created"
#define PORTER_EVENT_TASK_RESPONSE   "task.response"
#define PORTER_EVENT_TASK_REDIRECTED "task.redirected"
#define PORTER_EVENT_TASK_CHALLENGED "task.challenged"
#define PORTER_EVENT_TASK_COMPLETED  "task.completed"

/* ---------------------------------------------------------------------------------
 * What the plugin provides
 * --------------------------------------------------------------------------------- */

/* The handler functions. `plugin_context` is the descriptor's; `load` is what `start`
 * returned for one load. A NULL optional function means "not supported". */
typedef struct porter_handler_vtable {
    uint32_t struct_size;
    /* Optional: a finer check than the scheme. Return nonzero to take the request.
     * NULL: every request of the scheme. Called on any thread; must not block. */
    int32_t (*can_handle)(void *plugin_context, const porter_request *request);
    /* Required: begin loading. Return 0 and set `*load` (any pointer, may be NULL) to
     * go on; the plugin then reports through `client`. Return nonzero to refuse at
     * once (write a reason into `error`, NUL terminated, at most `error_capacity`
     * bytes): the task fails with that code if it is a PORTER_ERR_* value, else with
     * PORTER_ERR_UNKNOWN, and `destroy` is NOT called. */
    int32_t (*start)(void *plugin_context, const porter_request *request, porter_client *client,
                     void **load, char *error, size_t error_capacity);
    /* Required: stop as soon as possible (cancel, timeout, redirect followed). The host
     * ignores the client from now on. Called at most once, never after `destroy`. */
    void (*stop)(void *load);
    /* Required: free the load. Called exactly once per successful `start`: after the
     * plugin reported finish or fail, or after `stop`. When it returns, no plugin thread
     * may touch `client` or the request again (join or signal your worker first). */
    void (*destroy)(void *load);
    /* Optional back-pressure: stop delivering body bytes until `resume`. NULL: the
     * host buffers what arrives. Only set state; called from any thread. */
    void (*pause)(void *load);
    void (*resume)(void *load);
} porter_handler_vtable;

/* One scheme the plugin serves, with what it declares about it (as curl's handler
 * table declares `defport` and flags): the host reads these instead of knowing schemes.
 *
 * 1.4 put `default_port` where a 64-bit build had 4 bytes of padding after `flags`, so
 * the element's size and the array's stride did not change (the static assertion
 * below holds it). The host reads `default_port` only from a plugin built for 1.4 or
 * newer: an older plugin's padding was never written and may hold anything. */
typedef struct porter_scheme {
    const char *name;    /* lower case; RFC 3986: a letter, then letters, digits, + - . */
    uint32_t flags;      /* PORTER_SCHEME_* */
    /* 1.4: the port a URL of this scheme means when it names none (sftp: 22, gopher:
     * 70), or 0 for none. The host builds the protection space of the plugin's
     * challenges with it (so a credential saved for sftp://host/ answers sftp://host:22/),
     * and route checks and telemetry report it. */
    uint16_t default_port;
    uint16_t reserved;   /* 0 */
} porter_scheme;

#if defined(__LP64__) || defined(_LP64)
#ifdef __cplusplus
static_assert(sizeof(porter_scheme) == 16, "porter_scheme must keep the 1.0 stride");
#else
_Static_assert(sizeof(porter_scheme) == 16, "porter_scheme must keep the 1.0 stride");
#endif
#endif

typedef struct porter_plugin_descriptor {
    uint32_t struct_size;   /* sizeof(porter_plugin_descriptor) */
    uint16_t abi_major;     /* PORTER_PLUGIN_ABI_MAJOR the plugin was built with */
    uint16_t abi_minor;     /* PORTER_PLUGIN_ABI_MINOR the plugin was built with */
    const char *name;       /* required, e.g. "sftp (libssh2)" */
    const char *version;    /* required, e.g. "1.2.0" */
    const porter_scheme *schemes;  /* required, scheme_count >= 1 entries */
    size_t scheme_count;
    const porter_handler_vtable *handler; /* required */
    void *plugin_context;   /* passed to can_handle and start; may be NULL */

    /* --- ABI 1.2 (set struct_size to sizeof; an older, smaller descriptor declares
     * nothing here) --- */

    /* What the plugin needs of the file system in its sandbox, besides reading what
     * lies outside the user's home folder (allowed to every plugin): files or folders
     * it reads, and files or folders it also writes (/tmp and /dev/null are writable to
     * all). A leading "~/" means the user's home folder. Anything else inside the home
     * folder cannot be opened (EACCES) in an isolated plugin, e.g. ~/.ssh/id_ed25519
     * for a plugin that did not declare "~/.ssh". Up to 32 entries each. */
    const char *const *read_paths;
    size_t read_path_count;
    const char *const *write_paths;
    size_t write_path_count;

    /* --- ABI 1.3 (an older, smaller descriptor declares no needs) --- */

    /* The local services the plugin may ask for with `connect_service`: PORTER_NEED_*
     * bits (unknown bits are ignored). Shown by `porter plugins`. */
    uint32_t needs;
} porter_plugin_descriptor;

/* The entry point every plugin exports under PORTER_PLUGIN_ENTRY_SYMBOL.
 *
 * Called once, on the thread that loads plugins, before any other call into the
 * plugin. `host` stays valid for the life of the process. On success return 0 and
 * set `*descriptor` (which must stay valid for the life of the process). On failure
 * return nonzero and write a reason into `error` (NUL terminated, at most
 * `error_capacity` bytes); the host then reports the plugin as refused at the "init"
 * stage and never calls it again. A plugin built for a newer host may check
 * `host->abi_major` / `abi_minor` here and refuse politely. */
typedef int32_t (*porter_plugin_entry_fn)(const porter_host *host,
                                          const porter_plugin_descriptor **descriptor,
                                          char *error, size_t error_capacity);

#ifdef __cplusplus
}
#endif

#endif /* PORTER_PLUGIN_H */
