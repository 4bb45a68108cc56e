/*
 * The Secret Service through libsecret, on a bus of the caller's choosing, every call
 * bounded in time, no prompt unless asked for.
 *
 * libsecret's SecretService proxy always connects to the session bus of the process
 * environment (its constructor names G_BUS_TYPE_SESSION). A small subclass hands it
 * the connection made here instead, so one process can hold stores on different buses
 * and never mutates its environment; the subclass also refuses the service's prompts.
 */
#include "porter_secret.h"
#include <libsecret/secret.h>
#include <string.h>

#define PORTER_SCHEMA_NAME "org.porter.Credential"

static const SecretSchema porter_schema = {
    .name = PORTER_SCHEMA_NAME,
    .flags = SECRET_SCHEMA_NONE,
    .attributes = {
        { "protocol", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { "host", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { "port", SECRET_SCHEMA_ATTRIBUTE_INTEGER },
        { "realm", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { "authtype", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { "proxy", SECRET_SCHEMA_ATTRIBUTE_BOOLEAN },
        { "user", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { "default", SECRET_SCHEMA_ATTRIBUTE_BOOLEAN },
        { NULL, 0 },
    },
};

const char *porter_secret_schema_name(void) { return PORTER_SCHEMA_NAME; }

static gboolean in_schema(const char *name) {
    for (size_t i = 0; i < G_N_ELEMENTS(porter_schema.attributes) && porter_schema.attributes[i].name; i++) {
        if (strcmp(porter_schema.attributes[i].name, name) == 0) return TRUE;
    }
    return FALSE;
}

/* ---- errors ---- */

#define PORTER_SECRET_ERROR (porter_secret_error_quark())
enum { PORTER_SECRET_ERROR_PROMPT_REFUSED = 1 };
static GQuark porter_secret_error_quark(void) { return g_quark_from_static_string("porter-secret-error"); }

/* ---- deadlines: a thread of our own cancels a call that runs too long ---- */

static GMainContext *watch_context;

static gpointer watch_main(gpointer unused) {
    (void)unused;
    GMainLoop *loop = g_main_loop_new(watch_context, FALSE);
    g_main_loop_run(loop);
    return NULL;
}

static void watch_start(void) {
    static gsize started = 0;
    if (g_once_init_enter(&started)) {
        watch_context = g_main_context_new();
        g_thread_unref(g_thread_new("porter-secret-deadline", watch_main, NULL));
        g_once_init_leave(&started, 1);
    }
}

/* Shared by the caller and the timer (a reference each), so neither outlives it. */
typedef struct {
    gint refs;
    gint fired;
    unsigned ms;
    GCancellable *cancellable;
    GSource *source;
} deadline;

static void deadline_unref(gpointer data) {
    deadline *d = data;
    if (!g_atomic_int_dec_and_test(&d->refs)) return;
    g_object_unref(d->cancellable);
    g_free(d);
}

static gboolean deadline_passed(gpointer data) {
    deadline *d = data;
    g_atomic_int_set(&d->fired, 1);
    g_cancellable_cancel(d->cancellable);
    return G_SOURCE_REMOVE;
}

static deadline *deadline_start(unsigned ms) {
    watch_start();
    deadline *d = g_new0(deadline, 1);
    d->refs = 2;
    d->ms = ms;
    d->cancellable = g_cancellable_new();
    d->source = g_timeout_source_new(ms);
    g_source_set_callback(d->source, deadline_passed, d, deadline_unref);
    g_source_attach(d->source, watch_context);
    return d;
}

static void deadline_end(deadline *d) {
    g_source_destroy(d->source);
    g_source_unref(d->source);
    deadline_unref(d);
}

static gboolean deadline_fired(deadline *d) { return g_atomic_int_get(&d->fired) != 0; }

/* ---- the SecretService subclass ---- */

typedef struct {
    SecretService parent;
    GDBusConnection *connection;
} PorterSecretService;

typedef struct {
    SecretServiceClass parent_class;
} PorterSecretServiceClass;

static GType porter_secret_service_get_type(void);
G_DEFINE_TYPE(PorterSecretService, porter_secret_service, SECRET_TYPE_SERVICE)

enum { PROP_0, PROP_CONNECTION };

static void porter_secret_service_init(PorterSecretService *self) { (void)self; }

static void porter_secret_service_set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
    PorterSecretService *self = (PorterSecretService *)object;
    if (id == PROP_CONNECTION) {
        g_clear_object(&self->connection);
        self->connection = g_value_dup_object(value);
    } else {
        G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
    }
}

static GObject *porter_secret_service_constructor(GType type, guint n, GObjectConstructParam *params) {
    GObject *object = G_OBJECT_CLASS(porter_secret_service_parent_class)->constructor(type, n, params);
    PorterSecretService *self = (PorterSecretService *)object;
    /* Still under construction: the construct-only proxy properties may be set, and
     * override the session bus libsecret's constructor named. */
    g_object_set(object, "g-bus-type", G_BUS_TYPE_NONE, "g-connection", self->connection, NULL);
    return object;
}

static void porter_secret_service_finalize(GObject *object) {
    PorterSecretService *self = (PorterSecretService *)object;
    g_clear_object(&self->connection);
    G_OBJECT_CLASS(porter_secret_service_parent_class)->finalize(object);
}

static void dismiss(SecretPrompt *prompt) {
    /* The service keeps a prompt object until it is answered: answer it. */
    g_dbus_proxy_call(G_DBUS_PROXY(prompt), "Dismiss", NULL, G_DBUS_CALL_FLAGS_NO_AUTO_START, 1000, NULL, NULL, NULL);
}

#define PROMPT_REFUSED "the secret service wants to prompt (a locked collection); Porter does not prompt"

/* Prompts are refused, never shown: a prompt waits for a person, and libsecret's
 * cancellation of one depends on the service answering (a stuck prompter kept the
 * caller waiting for ever in a test), so no deadline could bound it. */
static GVariant *porter_prompt_sync(SecretService *service, SecretPrompt *prompt, GCancellable *cancellable,
                                    const GVariantType *return_type, GError **error) {
    (void)service, (void)cancellable, (void)return_type;
    dismiss(prompt);
    g_set_error_literal(error, PORTER_SECRET_ERROR, PORTER_SECRET_ERROR_PROMPT_REFUSED, PROMPT_REFUSED);
    return NULL;
}

static void porter_prompt_async(SecretService *service, SecretPrompt *prompt, const GVariantType *return_type,
                                GCancellable *cancellable, GAsyncReadyCallback callback, gpointer user_data) {
    (void)return_type, (void)cancellable;
    dismiss(prompt);
    g_task_report_new_error(service, callback, user_data, porter_prompt_async, PORTER_SECRET_ERROR,
                            PORTER_SECRET_ERROR_PROMPT_REFUSED, PROMPT_REFUSED);
}

static GVariant *porter_prompt_finish(SecretService *service, GAsyncResult *result, GError **error) {
    (void)service;
    return g_task_propagate_pointer(G_TASK(result), error);
}

static void porter_secret_service_class_init(PorterSecretServiceClass *klass) {
    GObjectClass *object_class = G_OBJECT_CLASS(klass);
    object_class->constructor = porter_secret_service_constructor;
    object_class->set_property = porter_secret_service_set_property;
    object_class->finalize = porter_secret_service_finalize;
    g_object_class_install_property(object_class, PROP_CONNECTION,
        g_param_spec_object("porter-connection", "connection", "the bus connection to use", G_TYPE_DBUS_CONNECTION,
                            G_PARAM_WRITABLE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS));
    SecretServiceClass *service_class = SECRET_SERVICE_CLASS(klass);
    service_class->prompt_sync = porter_prompt_sync;
    service_class->prompt_async = porter_prompt_async;
    service_class->prompt_finish = porter_prompt_finish;
}

/* ---- the connection ---- */

struct porter_secret {
    GDBusConnection *connection;
    PorterSecretService *service;
    unsigned timeout_ms;
};

void porter_secret_free_message(char *message) { g_free(message); }

static const char *service_name(void) {
    const char *name = g_getenv("SECRET_SERVICE_BUS_NAME");   /* as libsecret itself */
    return name ? name : "org.freedesktop.secrets";
}

/* The status for `error` (consumed), with `*message` "doing: reason". */
static porter_secret_status failure(deadline *d, GError *error, const char *doing, char **message) {
    porter_secret_status status = PORTER_SECRET_FAILED;
    const char *reason = error ? error->message : "failed";
    if (d && deadline_fired(d)) {
        status = PORTER_SECRET_TIMED_OUT;
        if (message) *message = g_strdup_printf("%s: no answer within %u ms", doing, d->ms);
        g_clear_error(&error);
        return status;
    }
    if (error) {
        if (g_error_matches(error, PORTER_SECRET_ERROR, PORTER_SECRET_ERROR_PROMPT_REFUSED) ||
            g_error_matches(error, SECRET_ERROR, SECRET_ERROR_IS_LOCKED))
            status = PORTER_SECRET_LOCKED;
        else if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT) ||
                 g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_TIMEOUT) ||
                 g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_TIMED_OUT) ||
                 g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_NO_REPLY))
            status = PORTER_SECRET_TIMED_OUT;
        else if (g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SERVICE_UNKNOWN) ||
                 g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_NAME_HAS_NO_OWNER) ||
                 g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_CHILD_EXITED) ||
                 g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_EXEC_FAILED))
            status = PORTER_SECRET_NO_SERVICE;
    }
    if (message) {
        /* GDBus prefixes remote errors with their D-Bus name: keep the text only. */
        if (error) g_dbus_error_strip_remote_error(error);
        *message = g_strdup_printf("%s: %s", doing, error ? error->message : reason);
    }
    g_clear_error(&error);
    return status;
}

static gboolean name_is_known(GDBusConnection *connection, deadline *d, unsigned timeout_ms, gboolean *known,
                              GError **error) {
    const char *name = service_name();
    GVariant *reply = g_dbus_connection_call_sync(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                  "org.freedesktop.DBus", "NameHasOwner", g_variant_new("(s)", name),
                                                  G_VARIANT_TYPE("(b)"), G_DBUS_CALL_FLAGS_NONE, (int)timeout_ms,
                                                  d->cancellable, error);
    if (!reply) return FALSE;
    gboolean owned = FALSE;
    g_variant_get(reply, "(b)", &owned);
    g_variant_unref(reply);
    if (owned) { *known = TRUE; return TRUE; }
    reply = g_dbus_connection_call_sync(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                        "org.freedesktop.DBus", "ListActivatableNames", NULL, G_VARIANT_TYPE("(as)"),
                                        G_DBUS_CALL_FLAGS_NONE, (int)timeout_ms, d->cancellable, error);
    if (!reply) return FALSE;
    GVariantIter *names = NULL;
    const char *each = NULL;
    *known = FALSE;
    g_variant_get(reply, "(as)", &names);
    while (g_variant_iter_next(names, "&s", &each)) {
        if (strcmp(each, name) == 0) *known = TRUE;
    }
    g_variant_iter_free(names);
    g_variant_unref(reply);
    return TRUE;
}

porter_secret_status porter_secret_open(const char *address, unsigned timeout_ms, porter_secret **out,
                                        char **message) {
    *out = NULL;
    if (message) *message = NULL;
    if (timeout_ms == 0) timeout_ms = 1;
    deadline *d = deadline_start(timeout_ms);
    GError *error = NULL;
    porter_secret_status status;

    GDBusConnection *connection = g_dbus_connection_new_for_address_sync(
        address, G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
        NULL, d->cancellable, &error);
    if (!connection) {
        status = failure(d, error, "cannot reach the session bus", message);
        if (status == PORTER_SECRET_FAILED) status = PORTER_SECRET_NO_BUS;
        deadline_end(d);
        return status;
    }
    g_dbus_connection_set_exit_on_close(connection, FALSE);

    gboolean known = FALSE;
    if (!name_is_known(connection, d, timeout_ms, &known, &error)) {
        status = failure(d, error, "the session bus did not answer", message);
        goto fail;
    }
    if (!known) {
        if (message) *message = g_strdup_printf("no %s on the session bus (neither running nor activatable)", service_name());
        status = PORTER_SECRET_NO_SERVICE;
        goto fail;
    }

    PorterSecretService *service = g_initable_new(porter_secret_service_get_type(), d->cancellable, &error,
                                                  "porter-connection", connection,
                                                  "flags", SECRET_SERVICE_OPEN_SESSION, NULL);
    if (!service) {
        status = failure(d, error, "the secret service did not open a session", message);
        goto fail;
    }
    g_dbus_proxy_set_default_timeout(G_DBUS_PROXY(service), (int)timeout_ms);
    deadline_end(d);

    porter_secret *secret = g_new0(porter_secret, 1);
    secret->connection = connection;
    secret->service = service;
    secret->timeout_ms = timeout_ms;
    *out = secret;
    return PORTER_SECRET_OK;

fail:
    g_dbus_connection_close(connection, NULL, NULL, NULL);
    g_object_unref(connection);
    deadline_end(d);
    return status;
}

void porter_secret_close(porter_secret *secret) {
    if (!secret) return;
    g_object_unref(secret->service);
    g_dbus_connection_close(secret->connection, NULL, NULL, NULL);
    g_object_unref(secret->connection);
    g_free(secret);
}

/* ---- the default collection ---- */

static SecretCollection *default_collection(porter_secret *secret, deadline *d, GError **error) {
    return secret_collection_for_alias_sync(SECRET_SERVICE(secret->service), SECRET_COLLECTION_DEFAULT,
                                            SECRET_COLLECTION_NONE, d->cancellable, error);
}

porter_secret_status porter_secret_default_collection(porter_secret *secret, porter_secret_collection_state *state,
                                                      char **message) {
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    GError *error = NULL;
    SecretCollection *collection = default_collection(secret, d, &error);
    porter_secret_status status = PORTER_SECRET_OK;
    if (collection) {
        *state = secret_collection_get_locked(collection) ? PORTER_SECRET_COLLECTION_LOCKED
                                                          : PORTER_SECRET_COLLECTION_UNLOCKED;
        g_object_unref(collection);
    } else if (error) {
        status = failure(d, error, "cannot read the default collection", message);
    } else {
        *state = PORTER_SECRET_COLLECTION_MISSING;
    }
    deadline_end(d);
    return status;
}

/* ---- items ---- */

static GHashTable *attribute_table(const char *const *names, const char *const *values, size_t count) {
    GHashTable *table = g_hash_table_new(g_str_hash, g_str_equal);
    for (size_t i = 0; i < count; i++) g_hash_table_insert(table, (gpointer)names[i], (gpointer)values[i]);
    return table;
}

static gboolean has_none_of(SecretItem *item, const char *const *absent, size_t absent_count) {
    if (absent_count == 0) return TRUE;
    GHashTable *attributes = secret_item_get_attributes(item);
    gboolean none = TRUE;
    for (size_t i = 0; i < absent_count && none; i++) {
        if (g_hash_table_contains(attributes, absent[i])) none = FALSE;
    }
    g_hash_table_unref(attributes);
    return none;
}

static GList *search(porter_secret *secret, deadline *d, const char *const *names, const char *const *values,
                     size_t count, SecretSearchFlags flags, GError **error) {
    GHashTable *table = attribute_table(names, values, count);
    GList *items = secret_service_search_sync(SECRET_SERVICE(secret->service), &porter_schema, table,
                                              SECRET_SEARCH_ALL | flags, d->cancellable, error);
    g_hash_table_unref(table);
    return items;
}

porter_secret_status porter_secret_search(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, int load_secrets, porter_secret_item **out,
                                          size_t *out_count, char **message) {
    *out = NULL;
    *out_count = 0;
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    GError *error = NULL;
    GList *items = search(secret, d, names, values, count, load_secrets ? SECRET_SEARCH_LOAD_SECRETS : 0, &error);
    if (error) {
        porter_secret_status status = failure(d, error, "cannot search the secret service", message);
        g_list_free_full(items, g_object_unref);
        deadline_end(d);
        return status;
    }
    size_t n = g_list_length(items), k = 0;
    porter_secret_item *result = g_new0(porter_secret_item, n ? n : 1);
    for (GList *l = items; l; l = l->next, k++) {
        SecretItem *item = l->data;
        porter_secret_item *r = &result[k];
        GHashTable *attributes = secret_item_get_attributes(item);
        guint size = g_hash_table_size(attributes);
        r->names = g_new0(char *, size + 1);
        r->values = g_new0(char *, size + 1);
        GHashTableIter iter;
        gpointer key, value;
        g_hash_table_iter_init(&iter, attributes);
        while (g_hash_table_iter_next(&iter, &key, &value)) {
            if (strcmp(key, "xdg:schema") == 0) continue;
            r->names[r->attribute_count] = g_strdup(key);
            r->values[r->attribute_count] = g_strdup(value);
            r->attribute_count++;
        }
        g_hash_table_unref(attributes);
        r->locked = secret_item_get_locked(item);
        SecretValue *v = load_secrets && !r->locked ? secret_item_get_secret(item) : NULL;
        if (v) {
            gsize length = 0;
            const gchar *bytes = secret_value_get(v, &length);
            r->secret = g_malloc(length + 1);
            memcpy(r->secret, bytes, length);
            r->secret[length] = 0;
            r->secret_length = length;
            secret_value_unref(v);
        }
    }
    g_list_free_full(items, g_object_unref);
    deadline_end(d);
    *out = result;
    *out_count = n;
    return PORTER_SECRET_OK;
}

void porter_secret_items_free(porter_secret_item *items, size_t count) {
    if (!items) return;
    for (size_t i = 0; i < count; i++) {
        for (size_t j = 0; j < items[i].attribute_count; j++) {
            g_free(items[i].names[j]);
            g_free(items[i].values[j]);
        }
        g_free(items[i].names);
        g_free(items[i].values);
        if (items[i].secret) {
            explicit_bzero(items[i].secret, items[i].secret_length);
            g_free(items[i].secret);
        }
    }
    g_free(items);
}

porter_secret_status porter_secret_store(porter_secret *secret, const char *const *names, const char *const *values,
                                         size_t count, const char *label, const char *value, size_t value_length,
                                         char **message) {
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    GError *error = NULL;
    GHashTable *table = attribute_table(names, values, count);
    SecretValue *v = secret_value_new(value, (gssize)value_length, "text/plain");
    gboolean stored = secret_service_store_sync(SECRET_SERVICE(secret->service), &porter_schema, table,
                                                SECRET_COLLECTION_DEFAULT, label, v, d->cancellable, &error);
    secret_value_unref(v);
    g_hash_table_unref(table);
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
    GError *error = NULL;
    porter_secret_status status = PORTER_SECRET_OK;
    GList *items = search(secret, d, names, values, count, 0, &error);
    if (error) status = failure(d, g_steal_pointer(&error), "cannot search the secret service", message);
    for (GList *l = items; l && status == PORTER_SECRET_OK; l = l->next) {
        if (!has_none_of(l->data, absent, absent_count)) continue;
        if (secret_item_delete_sync(l->data, d->cancellable, &error)) (*deleted)++;
        else status = failure(d, g_steal_pointer(&error), "cannot delete from the secret service", message);
    }
    g_list_free_full(items, g_object_unref);
    deadline_end(d);
    return status;
}

porter_secret_status porter_secret_update(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, const char *const *absent, size_t absent_count,
                                          const char *name, const char *value, char **message) {
    if (message) *message = NULL;
    deadline *d = deadline_start(secret->timeout_ms);
    GError *error = NULL;
    porter_secret_status status = PORTER_SECRET_OK;
    GList *items = search(secret, d, names, values, count, 0, &error);
    if (error) status = failure(d, g_steal_pointer(&error), "cannot search the secret service", message);
    for (GList *l = items; l && status == PORTER_SECRET_OK; l = l->next) {
        if (!has_none_of(l->data, absent, absent_count)) continue;
        GHashTable *current = secret_item_get_attributes(l->data);
        GHashTable *changed = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        GHashTableIter iter;
        gpointer k, v;
        g_hash_table_iter_init(&iter, current);
        /* Only the schema's own attributes: anything else would fail libsecret's check. */
        while (g_hash_table_iter_next(&iter, &k, &v)) {
            if (in_schema(k)) g_hash_table_insert(changed, g_strdup(k), g_strdup(v));
        }
        g_hash_table_insert(changed, g_strdup(name), g_strdup(value));
        if (!secret_item_set_attributes_sync(l->data, &porter_schema, changed, d->cancellable, &error))
            status = failure(d, g_steal_pointer(&error), "cannot update an item of the secret service", message);
        g_hash_table_unref(changed);
        g_hash_table_unref(current);
    }
    g_list_free_full(items, g_object_unref);
    deadline_end(d);
    return status;
}
