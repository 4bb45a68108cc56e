/*
 * Checks Sources/CPorterSecret/secret_abi.h (Porter's own declarations of the GLib,
 * GIO and libsecret it opens with dlopen) against the real headers: every layout,
 * constant and function signature. Compiling is the check; a mismatch is an error.
 *   cc -fsyntax-only -DPORTER_SECRET_ABI_CHECK $(pkg-config --cflags libsecret-1) \
 *      -I Sources/CPorterSecret Tests/LibsecretABI/check.c
 * (the LibsecretLoadingTests run it).
 */
#include "secret_abi.h"

#define SAME_OFFSET(mine, theirs, field) \
    _Static_assert(offsetof(mine, field) == offsetof(theirs, field), #theirs "." #field)
#define SAME_SIZE(mine, theirs) _Static_assert(sizeof(mine) == sizeof(theirs), "sizeof " #theirs)
#define SAME_VALUE(mine, theirs) _Static_assert((long)(mine) == (long)(theirs), #theirs)

SAME_SIZE(ps_error_layout, GError);
SAME_OFFSET(ps_error_layout, GError, domain);
SAME_OFFSET(ps_error_layout, GError, code);
SAME_OFFSET(ps_error_layout, GError, message);
SAME_SIZE(ps_list_layout, GList);
SAME_OFFSET(ps_list_layout, GList, data);
SAME_OFFSET(ps_list_layout, GList, next);
SAME_OFFSET(ps_list_layout, GList, prev);
SAME_SIZE(ps_type_query_layout, GTypeQuery);
SAME_OFFSET(ps_type_query_layout, GTypeQuery, class_size);
SAME_OFFSET(ps_type_query_layout, GTypeQuery, instance_size);
SAME_SIZE(ps_schema_attribute_layout, SecretSchemaAttribute);
SAME_SIZE(ps_schema_layout, SecretSchema);
SAME_OFFSET(ps_schema_layout, SecretSchema, flags);
SAME_OFFSET(ps_schema_layout, SecretSchema, attributes);
SAME_OFFSET(ps_schema_layout, SecretSchema, reserved);
SAME_OFFSET(ps_schema_layout, SecretSchema, reserved7);
SAME_SIZE(ps_object_class_layout, GObjectClass);
SAME_OFFSET(ps_object_class_layout, GObjectClass, constructor);
SAME_OFFSET(ps_object_class_layout, GObjectClass, set_property);
SAME_OFFSET(ps_object_class_layout, GObjectClass, finalize);
SAME_SIZE(ps_proxy_class_layout, GDBusProxyClass);
SAME_SIZE(ps_service_class_layout, SecretServiceClass);
SAME_OFFSET(ps_service_class_layout, SecretServiceClass, prompt_sync);
SAME_OFFSET(ps_service_class_layout, SecretServiceClass, prompt_async);
SAME_OFFSET(ps_service_class_layout, SecretServiceClass, prompt_finish);
SAME_SIZE(ps_object_layout, GObject);
SAME_SIZE(ps_proxy_layout, GDBusProxy);
SAME_SIZE(ps_service_layout, SecretService);

SAME_VALUE(PS_SCHEMA_NONE, SECRET_SCHEMA_NONE);
SAME_VALUE(PS_SCHEMA_ATTRIBUTE_STRING, SECRET_SCHEMA_ATTRIBUTE_STRING);
SAME_VALUE(PS_SCHEMA_ATTRIBUTE_INTEGER, SECRET_SCHEMA_ATTRIBUTE_INTEGER);
SAME_VALUE(PS_SCHEMA_ATTRIBUTE_BOOLEAN, SECRET_SCHEMA_ATTRIBUTE_BOOLEAN);
SAME_VALUE(PS_SEARCH_ALL, SECRET_SEARCH_ALL);
SAME_VALUE(PS_SEARCH_LOAD_SECRETS, SECRET_SEARCH_LOAD_SECRETS);
SAME_VALUE(PS_SERVICE_OPEN_SESSION, SECRET_SERVICE_OPEN_SESSION);
SAME_VALUE(PS_COLLECTION_NONE, SECRET_COLLECTION_NONE);
SAME_VALUE(PS_ERROR_IS_LOCKED, SECRET_ERROR_IS_LOCKED);
SAME_VALUE(PS_IO_ERROR_TIMED_OUT, G_IO_ERROR_TIMED_OUT);
SAME_VALUE(PS_DBUS_ERROR_SERVICE_UNKNOWN, G_DBUS_ERROR_SERVICE_UNKNOWN);
SAME_VALUE(PS_DBUS_ERROR_NAME_HAS_NO_OWNER, G_DBUS_ERROR_NAME_HAS_NO_OWNER);
SAME_VALUE(PS_DBUS_ERROR_NO_REPLY, G_DBUS_ERROR_NO_REPLY);
SAME_VALUE(PS_DBUS_ERROR_TIMEOUT, G_DBUS_ERROR_TIMEOUT);
SAME_VALUE(PS_DBUS_ERROR_TIMED_OUT, G_DBUS_ERROR_TIMED_OUT);
SAME_VALUE(PS_DBUS_ERROR_SPAWN_EXEC_FAILED, G_DBUS_ERROR_SPAWN_EXEC_FAILED);
SAME_VALUE(PS_DBUS_ERROR_SPAWN_CHILD_EXITED, G_DBUS_ERROR_SPAWN_CHILD_EXITED);
SAME_VALUE(PS_BUS_TYPE_NONE, G_BUS_TYPE_NONE);
SAME_VALUE(PS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT, G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT);
SAME_VALUE(PS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION);
SAME_VALUE(PS_CALL_FLAGS_NONE, G_DBUS_CALL_FLAGS_NONE);
SAME_VALUE(PS_CALL_FLAGS_NO_AUTO_START, G_DBUS_CALL_FLAGS_NO_AUTO_START);
SAME_VALUE(PS_PARAM_WRITABLE, G_PARAM_WRITABLE);
SAME_VALUE(PS_PARAM_CONSTRUCT_ONLY, G_PARAM_CONSTRUCT_ONLY);
SAME_VALUE(PS_PARAM_STATIC_STRINGS, G_PARAM_STATIC_STRINGS);
SAME_VALUE(PS_SOURCE_REMOVE, G_SOURCE_REMOVE);
_Static_assert(sizeof(ps_gtype) == sizeof(GType) && sizeof(ps_quark) == sizeof(GQuark), "GType, GQuark");

/* Every function: the pointer type Porter looks it up as is the real one's (GCC marks
 * the type of a G_GNUC_CONST function const, hence the second form). */
#define SAME_SIGNATURE(ret, name, params)                                                   \
    typedef ret ps_signature_##name params;                                                 \
    _Static_assert(__builtin_types_compatible_p(ps_signature_##name *, __typeof__(&name)) || \
                   __builtin_types_compatible_p(const ps_signature_##name *, __typeof__(&name)), "signature of " #name);
PS_FUNCTIONS(SAME_SIGNATURE)
