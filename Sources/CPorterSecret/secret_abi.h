/*
 * The part of GLib, GObject, GIO and libsecret that porter_secret.c uses, declared here
 * so Porter compiles and links without their headers or pkg-config flags: every
 * function is looked up with dlsym() in libsecret-1.so.0 (and the GLib it depends on)
 * the first time a program opens the Secret Service. A program that never does never
 * maps them, and a package that depends on Porter sees no `-pthread` from pkg-config.
 *
 * Only stable, public ABI is declared (GLib 2.x and libsecret 0.18+ keep these
 * layouts and values); at load time the sizes GType reports for SecretService are
 * compared with these too. Tests/LibsecretABI/check.c compiles this header with
 * PORTER_SECRET_ABI_CHECK against the real headers, where every type, constant, layout
 * and function signature below is checked against the real one.
 */
#ifndef PORTER_SECRET_ABI_H
#define PORTER_SECRET_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- layouts of our own, checked against GLib's in the ABI check ---- */

typedef struct { uint32_t domain; int code; char *message; } ps_error_layout;                 /* GError */
typedef struct ps_list_layout { void *data; struct ps_list_layout *next, *prev; } ps_list_layout;   /* GList */
typedef struct { unsigned long type; const char *type_name; unsigned class_size, instance_size; } ps_type_query_layout;
typedef struct { const char *name; int type; } ps_schema_attribute_layout;
typedef struct {                                                                           /* SecretSchema */
    const char *name;
    int flags;
    ps_schema_attribute_layout attributes[32];
    int reserved;
    void *reserved1, *reserved2, *reserved3, *reserved4, *reserved5, *reserved6, *reserved7;
} ps_schema_layout;
typedef struct {                                                                           /* GObjectClass */
    unsigned long g_type;
    void *construct_properties;
    void *constructor, *set_property, *get_property, *dispose, *finalize, *dispatch_properties_changed, *notify,
        *constructed;
    unsigned long flags, n_construct_properties;
    void *pspecs;
    unsigned long n_pspecs;
    void *pdummy[3];
} ps_object_class_layout;
typedef struct {                                                                           /* GDBusProxyClass */
    ps_object_class_layout parent_class;
    void *g_properties_changed, *g_signal;
    void *padding[32];
} ps_proxy_class_layout;
typedef struct {                                                                           /* SecretServiceClass */
    ps_proxy_class_layout parent_class;
    unsigned long collection_gtype, item_gtype;
    void *prompt_sync, *prompt_async, *prompt_finish, *get_collection_gtype, *get_item_gtype;
    void *padding[14];
} ps_service_class_layout;
typedef struct { void *g_class; unsigned ref_count; void *qdata; } ps_object_layout;       /* GObject */
typedef struct { ps_object_layout parent_instance; void *priv; } ps_proxy_layout;          /* GDBusProxy */
typedef struct { ps_proxy_layout parent; void *pv; } ps_service_layout;                    /* SecretService */

/* ---- the types the functions name ---- */

#ifdef PORTER_SECRET_ABI_CHECK
#include <libsecret/secret.h>
typedef GType ps_gtype;
typedef GQuark ps_quark;
typedef GError ps_error;
typedef GList ps_list;
typedef GTypeQuery ps_type_query;
typedef SecretSchema ps_schema;
typedef GObject ps_object;
typedef GObjectClass ps_object_class;
typedef GTypeInstance ps_type_instance;
typedef GObjectConstructParam ps_construct_param;
typedef GValue ps_value;
typedef GParamSpec ps_param_spec;
typedef GMainContext ps_main_context;
typedef GMainLoop ps_main_loop;
typedef GThread ps_thread;
typedef GSource ps_source;
typedef GVariant ps_variant;
typedef GVariantType ps_variant_type;
typedef GVariantIter ps_variant_iter;
typedef GHashTable ps_hash_table;
typedef GCancellable ps_cancellable;
typedef GDBusConnection ps_connection;
typedef GDBusAuthObserver ps_auth_observer;
typedef GDBusProxy ps_proxy;
typedef GAsyncResult ps_async_result;
typedef GTask ps_task;
typedef SecretService ps_service;
typedef SecretPrompt ps_prompt;
typedef SecretCollection ps_collection;
typedef SecretItem ps_item;
typedef SecretValue ps_value_secret;
typedef GDBusConnectionFlags ps_connection_flags;
typedef GDBusCallFlags ps_call_flags;
typedef GParamFlags ps_param_flags;
typedef GTypeFlags ps_type_flags;
typedef SecretCollectionFlags ps_collection_flags;
typedef SecretSearchFlags ps_search_flags;
typedef GSourceFunc ps_source_func;
typedef GDestroyNotify ps_destroy_notify;
typedef GThreadFunc ps_thread_func;
typedef GHashFunc ps_hash_func;
typedef GEqualFunc ps_equal_func;
typedef GHFunc ps_each_func;
typedef GClassInitFunc ps_class_init_func;
typedef GInstanceInitFunc ps_instance_init_func;
typedef GAsyncReadyCallback ps_ready_callback;
#else
typedef unsigned long ps_gtype;
typedef uint32_t ps_quark;
typedef ps_error_layout ps_error;
typedef ps_list_layout ps_list;
typedef ps_type_query_layout ps_type_query;
typedef ps_schema_layout ps_schema;
typedef ps_object_layout ps_object;
typedef ps_object_class_layout ps_object_class;
typedef struct ps_type_instance ps_type_instance;
typedef struct ps_construct_param ps_construct_param;
typedef struct ps_value ps_value;
typedef struct ps_param_spec ps_param_spec;
typedef struct ps_main_context ps_main_context;
typedef struct ps_main_loop ps_main_loop;
typedef struct ps_thread ps_thread;
typedef struct ps_source ps_source;
typedef struct ps_variant ps_variant;
typedef struct ps_variant_type ps_variant_type;
typedef struct ps_variant_iter ps_variant_iter;
typedef struct ps_hash_table ps_hash_table;
typedef struct ps_cancellable ps_cancellable;
typedef struct ps_connection ps_connection;
typedef struct ps_auth_observer ps_auth_observer;
typedef ps_proxy_layout ps_proxy;
typedef struct ps_async_result ps_async_result;
typedef struct ps_task ps_task;
typedef ps_service_layout ps_service;
typedef struct ps_prompt ps_prompt;
typedef struct ps_collection ps_collection;
typedef struct ps_item ps_item;
typedef struct ps_value_secret ps_value_secret;
typedef int ps_connection_flags;
typedef int ps_call_flags;
typedef int ps_param_flags;
typedef int ps_type_flags;
typedef int ps_collection_flags;
typedef int ps_search_flags;
typedef int (*ps_source_func)(void *);
typedef void (*ps_destroy_notify)(void *);
typedef void *(*ps_thread_func)(void *);
typedef unsigned (*ps_hash_func)(const void *);
typedef int (*ps_equal_func)(const void *, const void *);
typedef void (*ps_each_func)(void *, void *, void *);
typedef void (*ps_class_init_func)(void *, void *);
typedef void (*ps_instance_init_func)(ps_type_instance *, void *);
typedef void (*ps_ready_callback)(ps_object *, ps_async_result *, void *);
#endif

/* ---- constants (values from the public headers; checked) ---- */

enum {
    PS_SCHEMA_NONE = 0,
    PS_SCHEMA_ATTRIBUTE_STRING = 0,
    PS_SCHEMA_ATTRIBUTE_INTEGER = 1,
    PS_SCHEMA_ATTRIBUTE_BOOLEAN = 2,
    PS_SEARCH_ALL = 1 << 1,
    PS_SEARCH_LOAD_SECRETS = 1 << 3,
    PS_SERVICE_OPEN_SESSION = 1 << 1,
    PS_COLLECTION_NONE = 0,
    PS_ERROR_IS_LOCKED = 2,
    PS_IO_ERROR_TIMED_OUT = 24,
    PS_DBUS_ERROR_SERVICE_UNKNOWN = 2,
    PS_DBUS_ERROR_NAME_HAS_NO_OWNER = 3,
    PS_DBUS_ERROR_NO_REPLY = 4,
    PS_DBUS_ERROR_TIMEOUT = 12,
    PS_DBUS_ERROR_TIMED_OUT = 20,
    PS_DBUS_ERROR_SPAWN_EXEC_FAILED = 23,
    PS_DBUS_ERROR_SPAWN_CHILD_EXITED = 25,
    PS_BUS_TYPE_NONE = 0,
    PS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT = 1 << 0,
    PS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION = 1 << 3,
    PS_CALL_FLAGS_NONE = 0,
    PS_CALL_FLAGS_NO_AUTO_START = 1 << 0,
    PS_PARAM_WRITABLE = 1 << 1,
    PS_PARAM_CONSTRUCT_ONLY = 1 << 3,
    PS_PARAM_STATIC_STRINGS = (1 << 5) | (1 << 6) | (1 << 7),
    PS_SOURCE_REMOVE = 0,
};
#define PS_COLLECTION_DEFAULT "default"

/* ---- every function porter_secret.c calls, looked up by name ---- */

#define PS_FUNCTIONS(X)                                                                                              \
    /* GLib */                                                                                                       \
    X(void, g_free, (void *))                                                                                        \
    X(ps_quark, g_quark_from_static_string, (const char *))                                                          \
    X(ps_main_context *, g_main_context_new, (void))                                                                 \
    X(ps_main_loop *, g_main_loop_new, (ps_main_context *, int))                                                     \
    X(void, g_main_loop_run, (ps_main_loop *))                                                                       \
    X(ps_thread *, g_thread_new, (const char *, ps_thread_func, void *))                                             \
    X(void, g_thread_unref, (ps_thread *))                                                                           \
    X(ps_source *, g_timeout_source_new, (unsigned))                                                                 \
    X(void, g_source_set_callback, (ps_source *, ps_source_func, void *, ps_destroy_notify))                         \
    X(unsigned, g_source_attach, (ps_source *, ps_main_context *))                                                   \
    X(void, g_source_destroy, (ps_source *))                                                                         \
    X(void, g_source_unref, (ps_source *))                                                                           \
    X(int, g_error_matches, (const ps_error *, ps_quark, int))                                                       \
    X(void, g_error_free, (ps_error *))                                                                              \
    X(void, g_set_error_literal, (ps_error **, ps_quark, int, const char *))                                         \
    X(ps_variant *, g_variant_new, (const char *, ...))                                                              \
    X(void, g_variant_get, (ps_variant *, const char *, ...))                                                        \
    X(void, g_variant_unref, (ps_variant *))                                                                         \
    X(int, g_variant_iter_next, (ps_variant_iter *, const char *, ...))                                              \
    X(void, g_variant_iter_free, (ps_variant_iter *))                                                                \
    X(ps_hash_table *, g_hash_table_new, (ps_hash_func, ps_equal_func))                                              \
    X(int, g_hash_table_insert, (ps_hash_table *, void *, void *))                                                   \
    X(void, g_hash_table_unref, (ps_hash_table *))                                                                   \
    X(int, g_hash_table_contains, (ps_hash_table *, const void *))                                                   \
    X(unsigned, g_hash_table_size, (ps_hash_table *))                                                                \
    X(void, g_hash_table_foreach, (ps_hash_table *, ps_each_func, void *))                                           \
    X(unsigned, g_str_hash, (const void *))                                                                          \
    X(int, g_str_equal, (const void *, const void *))                                                                \
    X(void, g_list_free_full, (ps_list *, ps_destroy_notify))                                                        \
    /* GObject */                                                                                                    \
    X(void, g_object_unref, (void *))                                                                                \
    X(void, g_object_set, (void *, const char *, ...))                                                               \
    X(void *, g_value_dup_object, (const ps_value *))                                                                \
    X(ps_gtype, g_type_register_static_simple,                                                                       \
      (ps_gtype, const char *, unsigned, ps_class_init_func, unsigned, ps_instance_init_func, ps_type_flags))        \
    X(void *, g_type_class_peek_parent, (void *))                                                                    \
    X(void, g_type_query, (ps_gtype, ps_type_query *))                                                               \
    X(void, g_object_class_install_property, (ps_object_class *, unsigned, ps_param_spec *))                         \
    X(ps_param_spec *, g_param_spec_object, (const char *, const char *, const char *, ps_gtype, ps_param_flags))    \
    /* GIO */                                                                                                        \
    X(void *, g_initable_new, (ps_gtype, ps_cancellable *, ps_error **, const char *, ...))                          \
    X(ps_cancellable *, g_cancellable_new, (void))                                                                   \
    X(void, g_cancellable_cancel, (ps_cancellable *))                                                                \
    X(ps_connection *, g_dbus_connection_new_for_address_sync,                                                       \
      (const char *, ps_connection_flags, ps_auth_observer *, ps_cancellable *, ps_error **))                        \
    X(void, g_dbus_connection_set_exit_on_close, (ps_connection *, int))                                             \
    X(ps_variant *, g_dbus_connection_call_sync,                                                                     \
      (ps_connection *, const char *, const char *, const char *, const char *, ps_variant *,                        \
       const ps_variant_type *, ps_call_flags, int, ps_cancellable *, ps_error **))                                  \
    X(void, g_dbus_connection_close, (ps_connection *, ps_cancellable *, ps_ready_callback, void *))                  \
    X(void, g_dbus_proxy_set_default_timeout, (ps_proxy *, int))                                                     \
    X(void, g_dbus_proxy_call,                                                                                       \
      (ps_proxy *, const char *, ps_variant *, ps_call_flags, int, ps_cancellable *, ps_ready_callback, void *))     \
    X(int, g_dbus_error_strip_remote_error, (ps_error *))                                                            \
    X(ps_gtype, g_dbus_connection_get_type, (void))                                                                  \
    X(ps_quark, g_io_error_quark, (void))                                                                            \
    X(ps_quark, g_dbus_error_quark, (void))                                                                          \
    X(void, g_task_report_new_error,                                                                                 \
      (void *, ps_ready_callback, void *, void *, ps_quark, int, const char *, ...))                                 \
    X(void *, g_task_propagate_pointer, (ps_task *, ps_error **))                                                    \
    /* libsecret */                                                                                                  \
    X(ps_gtype, secret_service_get_type, (void))                                                                     \
    X(ps_quark, secret_error_get_quark, (void))                                                                      \
    X(ps_collection *, secret_collection_for_alias_sync,                                                             \
      (ps_service *, const char *, ps_collection_flags, ps_cancellable *, ps_error **))                              \
    X(int, secret_collection_get_locked, (ps_collection *))                                                          \
    X(ps_hash_table *, secret_item_get_attributes, (ps_item *))                                                      \
    X(ps_list *, secret_service_search_sync,                                                                         \
      (ps_service *, const ps_schema *, ps_hash_table *, ps_search_flags, ps_cancellable *, ps_error **))            \
    X(int, secret_item_get_locked, (ps_item *))                                                                      \
    X(ps_value_secret *, secret_item_get_secret, (ps_item *))                                                        \
    X(const char *, secret_value_get, (ps_value_secret *, size_t *))                                                 \
    X(void, secret_value_unref, (void *))                                                                            \
    X(ps_value_secret *, secret_value_new, (const char *, ssize_t, const char *))                                    \
    X(int, secret_service_store_sync,                                                                                \
      (ps_service *, const ps_schema *, ps_hash_table *, const char *, const char *, ps_value_secret *,              \
       ps_cancellable *, ps_error **))                                                                               \
    X(int, secret_item_delete_sync, (ps_item *, ps_cancellable *, ps_error **))                                      \
    X(int, secret_item_set_attributes_sync,                                                                          \
      (ps_item *, const ps_schema *, ps_hash_table *, ps_cancellable *, ps_error **))

/* The library opened on first use; its dependencies (GLib, GObject, GIO) come with it
 * and every name above is found through its handle. */
#define PS_LIBRARY "libsecret-1.so.0"

#endif
