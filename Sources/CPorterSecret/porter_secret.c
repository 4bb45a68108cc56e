/*
 * The Secret Service through libsecret, on a bus of the caller's choosing, every call
 * bounded in time, no prompt unless asked for.
 *
 * libsecret (and GLib, GObject, GIO with it) is opened with dlopen() on the first
 * porter_secret_open, never linked: a program that never touches the keyring never maps
 * them, and a package that depends on Porter needs neither their headers nor their
 * pkg-config flags (secret_abi.h declares what is used). Without libsecret-1.so.0,
 * porter_secret_open answers PORTER_SECRET_NO_LIBRARY and says why.
 *
 * libsecret's SecretService proxy always connects to the session bus of the process
 * environment (its constructor names G_BUS_TYPE_SESSION). A small subclass hands it
 * the connection made here instead, so one process can hold stores on different buses
 * and never mutates its environment; the subclass also refuses the service's prompts.
 */
#define _GNU_SOURCE
#include "porter_secret.h"
#include "secret_abi.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the library, loaded once ---- */

static struct {
#define PS_MEMBER(ret, name, params) ret (*name) params;
    PS_FUNCTIONS(PS_MEMBER)
#undef PS_MEMBER
} lib;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_failure[512];   /* empty once every function is found */

static void lib_load(void) {
    dlerror();
    /* Never closed: GLib's types and threads cannot be unloaded. */
    void *handle = dlopen(PS_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle) {
        const char *why = dlerror();
        snprintf(lib_failure, sizeof lib_failure, "%s cannot be loaded (%s)", PS_LIBRARY, why ? why : "not found");
        return;
    }
#define PS_LOOKUP(ret, name, params)                                                                       \
    if (!lib_failure[0]) {                                                                                 \
        void *symbol = dlsym(handle, #name);                                                               \
        if (symbol) memcpy(&lib.name, &symbol, sizeof symbol);                                             \
        else snprintf(lib_failure, sizeof lib_failure, "%s (or the GLib it loads) lacks %s", PS_LIBRARY, #name); \
    }
    PS_FUNCTIONS(PS_LOOKUP)
#undef PS_LOOKUP
    if (lib_failure[0]) return;
    /* The subclass below lays out its class and instance on SecretService's. */
    ps_type_query query = { 0 };
    lib.g_type_query(lib.secret_service_get_type(), &query);
    if (query.class_size != sizeof(ps_service_class_layout) || query.instance_size != sizeof(ps_service_layout))
        snprintf(lib_failure, sizeof lib_failure,
                 "%s has a SecretService of an unknown layout (class %u bytes, instance %u; expected %zu, %zu)",
                 PS_LIBRARY, query.class_size, query.instance_size, sizeof(ps_service_class_layout),
                 sizeof(ps_service_layout));
}

/* NULL when libsecret is usable, else why not. */
static const char *lib_ready(void) {
    pthread_once(&lib_once, lib_load);
    return lib_failure[0] ? lib_failure : NULL;
}

/* ---- small helpers GLib has as macros ---- */

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static void clear_error(ps_error **error) {
    if (*error) lib.g_error_free(*error);
    *error = NULL;
}

static ps_error *steal_error(ps_error **error) {
    ps_error *e = *error;
    *error = NULL;
    return e;
}

static void clear_object(void *slot) {
    void **object = slot;
    if (*object) lib.g_object_unref(*object);
    *object = NULL;
}

#define VARIANT_TYPE(s) ((const ps_variant_type *)(s))
#define N_ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))

#define PORTER_SCHEMA_NAME "org.porter.Credential"

static const ps_schema porter_schema = {
    .name = PORTER_SCHEMA_NAME,
    .flags = PS_SCHEMA_NONE,
    .attributes = {
        { "protocol", PS_SCHEMA_ATTRIBUTE_STRING },
        { "host", PS_SCHEMA_ATTRIBUTE_STRING },
        { "port", PS_SCHEMA_ATTRIBUTE_INTEGER },
        { "realm", PS_SCHEMA_ATTRIBUTE_STRING },
        { "authtype", PS_SCHEMA_ATTRIBUTE_STRING },
        { "proxy", PS_SCHEMA_ATTRIBUTE_BOOLEAN },
        { "user", PS_SCHEMA_ATTRIBUTE_STRING },
        { "default", PS_SCHEMA_ATTRIBUTE_BOOLEAN },
        { NULL, 0 },
    },
};

const char *porter_secret_schema_name(void) { return PORTER_SCHEMA_NAME; }

static int in_schema(const char *name) {
    for (size_t i = 0; i < N_ELEMENTS(porter_schema.attributes) && porter_schema.attributes[i].name; i++) {
        if (strcmp(porter_schema.attributes[i].name, name) == 0) return 1;
    }
    return 0;
}

/* ---- errors ---- */

enum { PORTER_SECRET_ERROR_PROMPT_REFUSED = 1 };
static ps_quark porter_secret_error_quark(void) { return lib.g_quark_from_static_string("porter-secret-error"); }

/* ---- deadlines: a thread of our own cancels a call that runs too long ---- */

static ps_main_context *watch_context;

static void *watch_main(void *unused) {
    (void)unused;
    ps_main_loop *loop = lib.g_main_loop_new(watch_context, 0);
    lib.g_main_loop_run(loop);
    return NULL;
}

static void watch_init(void) {
    watch_context = lib.g_main_context_new();
    lib.g_thread_unref(lib.g_thread_new("porter-secret-deadline", watch_main, NULL));
}

static void watch_start(void) {
    static pthread_once_t started = PTHREAD_ONCE_INIT;
    pthread_once(&started, watch_init);
}

/* Shared by the caller and the timer (a reference each), so neither outlives it. */
typedef struct {
    int refs;
    int fired;
    unsigned ms;
    ps_cancellable *cancellable;
    ps_source *source;
} deadline;

static void deadline_unref(void *data) {
    deadline *d = data;
    if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    lib.g_object_unref(d->cancellable);
    free(d);
}

static int deadline_passed(void *data) {
    deadline *d = data;
    __atomic_store_n(&d->fired, 1, __ATOMIC_SEQ_CST);
    lib.g_cancellable_cancel(d->cancellable);
    return PS_SOURCE_REMOVE;
}

/* NULL only when out of memory. */
static deadline *deadline_start(unsigned ms) {
    watch_start();
    deadline *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->refs = 2;
    d->ms = ms;
    d->cancellable = lib.g_cancellable_new();
    d->source = lib.g_timeout_source_new(ms);
    lib.g_source_set_callback(d->source, deadline_passed, d, deadline_unref);
    lib.g_source_attach(d->source, watch_context);
    return d;
}

static void deadline_end(deadline *d) {
    lib.g_source_destroy(d->source);
    lib.g_source_unref(d->source);
    deadline_unref(d);
}

static int deadline_fired(deadline *d) { return __atomic_load_n(&d->fired, __ATOMIC_SEQ_CST) != 0; }

/* ---- the SecretService subclass (what G_DEFINE_TYPE would write) ---- */

typedef struct {
    ps_service_layout parent;
    ps_connection *connection;
} porter_service;

enum { PROP_0, PROP_CONNECTION };

static ps_object_class_layout *service_parent_class;

static void service_set_property(ps_object *object, unsigned id, const ps_value *value, ps_param_spec *pspec) {
    (void)pspec;
    porter_service *self = (porter_service *)object;
    if (id == PROP_CONNECTION) {
        clear_object(&self->connection);
        self->connection = lib.g_value_dup_object(value);
    }
}

static ps_object *service_constructor(ps_gtype type, unsigned n, ps_construct_param *params) {
    ps_object *(*parent)(ps_gtype, unsigned, ps_construct_param *);
    memcpy(&parent, &service_parent_class->constructor, sizeof parent);
    ps_object *object = parent(type, n, params);
    porter_service *self = (porter_service *)object;
    /* Still under construction: the construct-only proxy properties may be set, and
     * override the session bus libsecret's constructor named. */
    lib.g_object_set(object, "g-bus-type", PS_BUS_TYPE_NONE, "g-connection", self->connection, NULL);
    return object;
}

static void service_finalize(ps_object *object) {
    porter_service *self = (porter_service *)object;
    clear_object(&self->connection);
    void (*parent)(ps_object *);
    memcpy(&parent, &service_parent_class->finalize, sizeof parent);
    parent(object);
}

static void dismiss(ps_prompt *prompt) {
    /* The service keeps a prompt object until it is answered: answer it. */
    lib.g_dbus_proxy_call((ps_proxy *)prompt, "Dismiss", NULL, PS_CALL_FLAGS_NO_AUTO_START, 1000, NULL, NULL, NULL);
}

#define PROMPT_REFUSED "the secret service wants to prompt (a locked collection); Porter does not prompt"

/* Prompts are refused, never shown: a prompt waits for a person, and libsecret's
 * cancellation of one depends on the service answering (a stuck prompter kept the
 * caller waiting for ever in a test), so no deadline could bound it. */
static ps_variant *porter_prompt_sync(ps_service *service, ps_prompt *prompt, ps_cancellable *cancellable,
                                      const ps_variant_type *return_type, ps_error **error) {
    (void)service, (void)cancellable, (void)return_type;
    dismiss(prompt);
    lib.g_set_error_literal(error, porter_secret_error_quark(), PORTER_SECRET_ERROR_PROMPT_REFUSED, PROMPT_REFUSED);
    return NULL;
}

static void porter_prompt_async(ps_service *service, ps_prompt *prompt, const ps_variant_type *return_type,
                                ps_cancellable *cancellable, ps_ready_callback callback, void *user_data) {
    (void)return_type, (void)cancellable;
    dismiss(prompt);
    lib.g_task_report_new_error(service, callback, user_data, (void *)porter_prompt_async, porter_secret_error_quark(),
                                PORTER_SECRET_ERROR_PROMPT_REFUSED, "%s", PROMPT_REFUSED);
}

static ps_variant *porter_prompt_finish(ps_service *service, ps_async_result *result, ps_error **error) {
    (void)service;
    return lib.g_task_propagate_pointer((ps_task *)result, error);
}

static void service_class_init(void *klass, void *data) {
    (void)data;
    service_parent_class = lib.g_type_class_peek_parent(klass);
    ps_service_class_layout *service_class = klass;
    ps_object_class_layout *object_class = &service_class->parent_class.parent_class;
    ps_object *(*constructor)(ps_gtype, unsigned, ps_construct_param *) = service_constructor;
    void (*set_property)(ps_object *, unsigned, const ps_value *, ps_param_spec *) = service_set_property;
    void (*finalize)(ps_object *) = service_finalize;
    ps_variant *(*prompt_sync)(ps_service *, ps_prompt *, ps_cancellable *, const ps_variant_type *, ps_error **) =
        porter_prompt_sync;
    void (*prompt_async)(ps_service *, ps_prompt *, const ps_variant_type *, ps_cancellable *, ps_ready_callback,
                         void *) = porter_prompt_async;
    ps_variant *(*prompt_finish)(ps_service *, ps_async_result *, ps_error **) = porter_prompt_finish;
    memcpy(&object_class->constructor, &constructor, sizeof(void *));
    memcpy(&object_class->set_property, &set_property, sizeof(void *));
    memcpy(&object_class->finalize, &finalize, sizeof(void *));
    lib.g_object_class_install_property((ps_object_class *)object_class, PROP_CONNECTION,
        lib.g_param_spec_object("porter-connection", "connection", "the bus connection to use",
                                lib.g_dbus_connection_get_type(),
                                PS_PARAM_WRITABLE | PS_PARAM_CONSTRUCT_ONLY | PS_PARAM_STATIC_STRINGS));
    memcpy(&service_class->prompt_sync, &prompt_sync, sizeof(void *));
    memcpy(&service_class->prompt_async, &prompt_async, sizeof(void *));
    memcpy(&service_class->prompt_finish, &prompt_finish, sizeof(void *));
}

static void service_init(ps_type_instance *instance, void *klass) { (void)instance, (void)klass; }

static ps_gtype service_type;

static void service_register(void) {
    service_type = lib.g_type_register_static_simple(lib.secret_service_get_type(), "PorterSecretService",
                                                     sizeof(ps_service_class_layout), service_class_init,
                                                     sizeof(porter_service), service_init, 0);
}

static ps_gtype porter_secret_service_get_type(void) {
    static pthread_once_t registered = PTHREAD_ONCE_INIT;
    pthread_once(&registered, service_register);
    return service_type;
}

/* ---- the connection ---- */

struct porter_secret {
    ps_connection *connection;
    porter_service *service;
    unsigned timeout_ms;
};

void porter_secret_free_message(char *message) { free(message); }

static const char *service_name(void) {
    const char *name = getenv("SECRET_SERVICE_BUS_NAME");   /* as libsecret itself */
    return name ? name : "org.freedesktop.secrets";
}

/* The status for `error` (consumed), with `*message` "doing: reason". */
static porter_secret_status failure(deadline *d, ps_error *error, const char *doing, char **message) {
    porter_secret_status status = PORTER_SECRET_FAILED;
    if (d && deadline_fired(d)) {
        status = PORTER_SECRET_TIMED_OUT;
        if (message) *message = format("%s: no answer within %u ms", doing, d->ms);
        clear_error(&error);
        return status;
    }
    if (error) {
        ps_quark dbus = lib.g_dbus_error_quark();
        if (lib.g_error_matches(error, porter_secret_error_quark(), PORTER_SECRET_ERROR_PROMPT_REFUSED) ||
            lib.g_error_matches(error, lib.secret_error_get_quark(), PS_ERROR_IS_LOCKED))
            status = PORTER_SECRET_LOCKED;
        else if (lib.g_error_matches(error, lib.g_io_error_quark(), PS_IO_ERROR_TIMED_OUT) ||
                 lib.g_error_matches(error, dbus, PS_DBUS_ERROR_TIMEOUT) ||
                 lib.g_error_matches(error, dbus, PS_DBUS_ERROR_TIMED_OUT) ||
                 lib.g_error_matches(error, dbus, PS_DBUS_ERROR_NO_REPLY))
            status = PORTER_SECRET_TIMED_OUT;
        else if (lib.g_error_matches(error, dbus, PS_DBUS_ERROR_SERVICE_UNKNOWN) ||
                 lib.g_error_matches(error, dbus, PS_DBUS_ERROR_NAME_HAS_NO_OWNER) ||
                 lib.g_error_matches(error, dbus, PS_DBUS_ERROR_SPAWN_CHILD_EXITED) ||
                 lib.g_error_matches(error, dbus, PS_DBUS_ERROR_SPAWN_EXEC_FAILED))
            status = PORTER_SECRET_NO_SERVICE;
    }
    if (message) {
        /* GDBus prefixes remote errors with their D-Bus name: keep the text only. */
        if (error) lib.g_dbus_error_strip_remote_error(error);
        *message = format("%s: %s", doing, error && error->message ? error->message : "failed");
    }
    clear_error(&error);
    return status;
}

static porter_secret_status out_of_memory(char **message) {
    if (message) *message = format("out of memory");
    return PORTER_SECRET_FAILED;
}

static int name_is_known(ps_connection *connection, deadline *d, unsigned timeout_ms, int *known, ps_error **error) {
    const char *name = service_name();
    ps_variant *reply = lib.g_dbus_connection_call_sync(
        connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner",
        lib.g_variant_new("(s)", name), VARIANT_TYPE("(b)"), PS_CALL_FLAGS_NONE, (int)timeout_ms, d->cancellable, error);
    if (!reply) return 0;
    int owned = 0;
    lib.g_variant_get(reply, "(b)", &owned);
    lib.g_variant_unref(reply);
    if (owned) { *known = 1; return 1; }
    reply = lib.g_dbus_connection_call_sync(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                            "org.freedesktop.DBus", "ListActivatableNames", NULL, VARIANT_TYPE("(as)"),
                                            PS_CALL_FLAGS_NONE, (int)timeout_ms, d->cancellable, error);
    if (!reply) return 0;
    ps_variant_iter *names = NULL;
    const char *each = NULL;
    *known = 0;
    lib.g_variant_get(reply, "(as)", &names);
    while (lib.g_variant_iter_next(names, "&s", &each)) {
        if (strcmp(each, name) == 0) *known = 1;
    }
    lib.g_variant_iter_free(names);
    lib.g_variant_unref(reply);
    return 1;
}

porter_secret_status porter_secret_open(const char *address, unsigned timeout_ms, porter_secret **out,
                                        char **message) {
    *out = NULL;
    if (message) *message = NULL;
    const char *unusable = lib_ready();
    if (unusable) {
        if (message) *message = format("%s", unusable);
        return PORTER_SECRET_NO_LIBRARY;
    }
    if (!porter_secret_service_get_type()) {
        /* GType refused the name: another copy of this code registered it first. */
        if (message) *message = format("cannot register the PorterSecretService type with GObject");
        return PORTER_SECRET_NO_LIBRARY;
    }
    if (timeout_ms == 0) timeout_ms = 1;
    deadline *d = deadline_start(timeout_ms);
    if (!d) return out_of_memory(message);
    ps_error *error = NULL;
    porter_secret_status status;

    ps_connection *connection = lib.g_dbus_connection_new_for_address_sync(
        address, PS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | PS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
        NULL, d->cancellable, &error);
    if (!connection) {
        status = failure(d, error, "cannot reach the session bus", message);
        if (status == PORTER_SECRET_FAILED) status = PORTER_SECRET_NO_BUS;
        deadline_end(d);
        return status;
    }
    lib.g_dbus_connection_set_exit_on_close(connection, 0);

    int known = 0;
    if (!name_is_known(connection, d, timeout_ms, &known, &error)) {
        status = failure(d, error, "the session bus did not answer", message);
        goto fail;
    }
    if (!known) {
        if (message) *message = format("no %s on the session bus (neither running nor activatable)", service_name());
        status = PORTER_SECRET_NO_SERVICE;
        goto fail;
    }

    porter_service *service = lib.g_initable_new(porter_secret_service_get_type(), d->cancellable, &error,
                                                 "porter-connection", connection,
                                                 "flags", PS_SERVICE_OPEN_SESSION, NULL);
    if (!service) {
        status = failure(d, error, "the secret service did not open a session", message);
        goto fail;
    }
    lib.g_dbus_proxy_set_default_timeout((ps_proxy *)service, (int)timeout_ms);
    deadline_end(d);

    porter_secret *secret = calloc(1, sizeof *secret);
    if (!secret) {
        lib.g_object_unref(service);
        lib.g_dbus_connection_close(connection, NULL, NULL, NULL);
        lib.g_object_unref(connection);
        return out_of_memory(message);
    }
    secret->connection = connection;
    secret->service = service;
    secret->timeout_ms = timeout_ms;
    *out = secret;
    return PORTER_SECRET_OK;

fail:
    lib.g_dbus_connection_close(connection, NULL, NULL, NULL);
    lib.g_object_unref(connection);
    deadline_end(d);
    return status;
}

void porter_secret_close(porter_secret *secret) {
    if (!secret) return;   /* a connection exists only once the library is loaded */
    lib.g_object_unref(secret->service);
    lib.g_dbus_connection_close(secret->connection, NULL, NULL, NULL);
    lib.g_object_unref(secret->connection);
    free(secret);
}

/* ---- the default collection ---- */

porter_secret_status porter_secret_default_collection(porter_secret *secret, porter_secret_collection_state *state,
                                                      char **message) {
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    if (!d) return out_of_memory(message);
    ps_error *error = NULL;
    ps_collection *collection = lib.secret_collection_for_alias_sync(
        (ps_service *)secret->service, PS_COLLECTION_DEFAULT, PS_COLLECTION_NONE, d->cancellable, &error);
    porter_secret_status status = PORTER_SECRET_OK;
    if (collection) {
        *state = lib.secret_collection_get_locked(collection) ? PORTER_SECRET_COLLECTION_LOCKED
                                                              : PORTER_SECRET_COLLECTION_UNLOCKED;
        lib.g_object_unref(collection);
    } else if (error) {
        status = failure(d, error, "cannot read the default collection", message);
    } else {
        *state = PORTER_SECRET_COLLECTION_MISSING;
    }
    deadline_end(d);
    return status;
}

/* ---- items ---- */

static ps_hash_table *attribute_table(const char *const *names, const char *const *values, size_t count) {
    ps_hash_table *table = lib.g_hash_table_new(lib.g_str_hash, lib.g_str_equal);
    for (size_t i = 0; i < count; i++) lib.g_hash_table_insert(table, (void *)names[i], (void *)values[i]);
    return table;
}

static int has_none_of(ps_item *item, const char *const *absent, size_t absent_count) {
    if (absent_count == 0) return 1;
    ps_hash_table *attributes = lib.secret_item_get_attributes(item);
    int none = 1;
    for (size_t i = 0; i < absent_count && none; i++) {
        if (lib.g_hash_table_contains(attributes, absent[i])) none = 0;
    }
    lib.g_hash_table_unref(attributes);
    return none;
}

static ps_list *search(porter_secret *secret, deadline *d, const char *const *names, const char *const *values,
                       size_t count, int flags, ps_error **error) {
    ps_hash_table *table = attribute_table(names, values, count);
    ps_list *items = lib.secret_service_search_sync((ps_service *)secret->service, &porter_schema, table,
                                                    PS_SEARCH_ALL | flags, d->cancellable, error);
    lib.g_hash_table_unref(table);
    return items;
}

/* Copies an item's attributes (xdg:schema left out) into a porter_secret_item. */
typedef struct { porter_secret_item *item; unsigned capacity; int failed; } attribute_copy;

static void copy_attribute(void *key, void *value, void *data) {
    attribute_copy *copy = data;
    if (strcmp(key, "xdg:schema") == 0 || copy->failed) return;
    if (copy->item->attribute_count >= copy->capacity) { copy->failed = 1; return; }
    char *name = strdup(key), *text = strdup(value);
    if (!name || !text) { free(name); free(text); copy->failed = 1; return; }
    copy->item->names[copy->item->attribute_count] = name;
    copy->item->values[copy->item->attribute_count] = text;
    copy->item->attribute_count++;
}

porter_secret_status porter_secret_search(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, int load_secrets, porter_secret_item **out,
                                          size_t *out_count, char **message) {
    *out = NULL;
    *out_count = 0;
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    if (!d) return out_of_memory(message);
    ps_error *error = NULL;
    ps_list *items = search(secret, d, names, values, count, load_secrets ? PS_SEARCH_LOAD_SECRETS : 0, &error);
    if (error) {
        porter_secret_status status = failure(d, error, "cannot search the secret service", message);
        lib.g_list_free_full(items, lib.g_object_unref);
        deadline_end(d);
        return status;
    }
    size_t n = 0, k = 0;
    for (ps_list *l = items; l; l = l->next) n++;
    porter_secret_item *result = calloc(n ? n : 1, sizeof *result);
    int failed = result == NULL;
    for (ps_list *l = items; l && !failed; l = l->next, k++) {
        ps_item *item = l->data;
        porter_secret_item *r = &result[k];
        ps_hash_table *attributes = lib.secret_item_get_attributes(item);
        unsigned size = lib.g_hash_table_size(attributes);
        r->names = calloc(size + 1, sizeof(char *));
        r->values = calloc(size + 1, sizeof(char *));
        attribute_copy copy = { r, size, !r->names || !r->values };
        if (!copy.failed) lib.g_hash_table_foreach(attributes, copy_attribute, &copy);
        lib.g_hash_table_unref(attributes);
        failed = copy.failed;
        r->locked = lib.secret_item_get_locked(item);
        ps_value_secret *v = load_secrets && !r->locked && !failed ? lib.secret_item_get_secret(item) : NULL;
        if (v) {
            size_t length = 0;
            const char *bytes = lib.secret_value_get(v, &length);
            r->secret = malloc(length + 1);
            if (r->secret) {
                memcpy(r->secret, bytes, length);
                r->secret[length] = 0;
                r->secret_length = length;
            } else {
                failed = 1;
            }
            lib.secret_value_unref(v);
        }
    }
    lib.g_list_free_full(items, lib.g_object_unref);
    deadline_end(d);
    if (failed) {
        porter_secret_items_free(result, n);
        return out_of_memory(message);
    }
    *out = result;
    *out_count = n;
    return PORTER_SECRET_OK;
}

void porter_secret_items_free(porter_secret_item *items, size_t count) {
    if (!items) return;
    for (size_t i = 0; i < count; i++) {
        for (size_t j = 0; j < items[i].attribute_count; j++) {
            free(items[i].names[j]);
            free(items[i].values[j]);
        }
        free(items[i].names);
        free(items[i].values);
        if (items[i].secret) {
            explicit_bzero(items[i].secret, items[i].secret_length);
            free(items[i].secret);
        }
    }
    free(items);
}

porter_secret_status porter_secret_store(porter_secret *secret, const char *const *names, const char *const *values,
                                         size_t count, const char *label, const char *value, size_t value_length,
                                         char **message) {
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    if (!d) return out_of_memory(message);
    ps_error *error = NULL;
    ps_hash_table *table = attribute_table(names, values, count);
    ps_value_secret *v = lib.secret_value_new(value, (ssize_t)value_length, "text/plain");
    int stored = lib.secret_service_store_sync((ps_service *)secret->service, &porter_schema, table,
                                               PS_COLLECTION_DEFAULT, label, v, d->cancellable, &error);
    lib.secret_value_unref(v);
    lib.g_hash_table_unref(table);
    porter_secret_status status = stored ? PORTER_SECRET_OK : failure(d, error, "cannot store in the secret service", message);
    deadline_end(d);
    return status;
}

porter_secret_status porter_secret_delete(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, const char *const *absent, size_t absent_count,
                                          size_t *deleted, char **message) {
    *deleted = 0;
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    if (!d) return out_of_memory(message);
    ps_error *error = NULL;
    porter_secret_status status = PORTER_SECRET_OK;
    ps_list *items = search(secret, d, names, values, count, 0, &error);
    if (error) status = failure(d, steal_error(&error), "cannot search the secret service", message);
    for (ps_list *l = items; l && status == PORTER_SECRET_OK; l = l->next) {
        if (!has_none_of(l->data, absent, absent_count)) continue;
        if (lib.secret_item_delete_sync(l->data, d->cancellable, &error)) (*deleted)++;
        else status = failure(d, steal_error(&error), "cannot delete from the secret service", message);
    }
    lib.g_list_free_full(items, lib.g_object_unref);
    deadline_end(d);
    return status;
}

/* Collects the schema's own attributes of an item (borrowed strings). */
static void copy_schema_attribute(void *key, void *value, void *data) {
    if (in_schema(key)) lib.g_hash_table_insert(data, key, value);
}

porter_secret_status porter_secret_update(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, const char *const *absent, size_t absent_count,
                                          const char *name, const char *value, char **message) {
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    if (!d) return out_of_memory(message);
    ps_error *error = NULL;
    porter_secret_status status = PORTER_SECRET_OK;
    ps_list *items = search(secret, d, names, values, count, 0, &error);
    if (error) status = failure(d, steal_error(&error), "cannot search the secret service", message);
    for (ps_list *l = items; l && status == PORTER_SECRET_OK; l = l->next) {
        if (!has_none_of(l->data, absent, absent_count)) continue;
        ps_hash_table *current = lib.secret_item_get_attributes(l->data);
        /* Borrows the strings of `current`, freed after it: only the schema's own
         * attributes, since anything else would fail libsecret's check. */
        ps_hash_table *changed = lib.g_hash_table_new(lib.g_str_hash, lib.g_str_equal);
        lib.g_hash_table_foreach(current, copy_schema_attribute, changed);
        lib.g_hash_table_insert(changed, (void *)name, (void *)value);
        if (!lib.secret_item_set_attributes_sync(l->data, &porter_schema, changed, d->cancellable, &error))
            status = failure(d, steal_error(&error), "cannot update an item of the secret service", message);
        lib.g_hash_table_unref(changed);
        lib.g_hash_table_unref(current);
    }
    lib.g_list_free_full(items, lib.g_object_unref);
    deadline_end(d);
    return status;
}
