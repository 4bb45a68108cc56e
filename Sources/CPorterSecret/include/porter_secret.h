/*
 * Porter's credentials in the Secret Service (org.freedesktop.secrets), through
 * libsecret, on a D-Bus bus given by its address. The header names no GLib type, so
 * Swift imports it without GLib's headers; libsecret-1.so.0 itself is opened with
 * dlopen() by the first porter_secret_open (nothing links GLib).
 *
 * Every call is bounded: it gives up after the connection's timeout (the D-Bus calls
 * are cancelled) and answers PORTER_SECRET_TIMED_OUT. No call ever shows a prompt: one
 * the service asks for (to unlock a locked collection) is dismissed, and the call
 * answers PORTER_SECRET_LOCKED.
 * A connection is not for concurrent use: callers serialise the calls on one.
 */
#ifndef PORTER_SECRET_H
#define PORTER_SECRET_H

#include <stddef.h>

typedef struct porter_secret porter_secret;

typedef enum {
    PORTER_SECRET_OK = 0,
    /* The bus address cannot be reached (nothing listens, authentication refused). */
    PORTER_SECRET_NO_BUS = 1,
    /* The bus has no org.freedesktop.secrets, running or activatable. */
    PORTER_SECRET_NO_SERVICE = 2,
    /* No answer within the timeout. */
    PORTER_SECRET_TIMED_OUT = 3,
    /* The collection is locked, or the service wanted to prompt and was not allowed to. */
    PORTER_SECRET_LOCKED = 4,
    PORTER_SECRET_FAILED = 5,
    /* libsecret-1.so.0 (or a function of it or of its GLib) cannot be loaded. */
    PORTER_SECRET_NO_LIBRARY = 6,
} porter_secret_status;

typedef enum {
    PORTER_SECRET_COLLECTION_UNLOCKED = 0,
    PORTER_SECRET_COLLECTION_LOCKED = 1,
    /* No collection behind the "default" alias (storing would have to create one). */
    PORTER_SECRET_COLLECTION_MISSING = 2,
} porter_secret_collection_state;

/* One item of Porter's schema: its attributes (xdg:schema left out) and its secret. */
typedef struct {
    size_t attribute_count;
    char **names;
    char **values;
    /* NULL when the item is locked (or its secret was not asked for). */
    char *secret;
    size_t secret_length;
    int locked;
} porter_secret_item;

/* The xdg:schema of Porter's items. */
const char *porter_secret_schema_name(void);

/* Connects to the bus at `address`, checks that org.freedesktop.secrets is on it
 * (running, or activatable), and opens a session with it. `*message` (free it with
 * porter_secret_free_message) says why when the answer is not OK. */
porter_secret_status porter_secret_open(const char *address, unsigned timeout_ms, porter_secret **out,
                                        char **message);
void porter_secret_close(porter_secret *secret);
void porter_secret_free_message(char *message);

/* The state of the collection behind the "default" alias, where items are stored. */
porter_secret_status porter_secret_default_collection(porter_secret *secret, porter_secret_collection_state *state,
                                                      char **message);

/* The items whose attributes include `names[i] = values[i]` for every i, with their
 * secrets when `load_secrets` (locked items come without). Free with
 * porter_secret_items_free, which wipes the secrets. */
porter_secret_status porter_secret_search(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, int load_secrets, porter_secret_item **items,
                                          size_t *item_count, char **message);
void porter_secret_items_free(porter_secret_item *items, size_t count);

/* Stores an item in the default collection, replacing one with exactly these
 * attributes. The secret is `secret_length` bytes (it may hold NUL bytes). */
porter_secret_status porter_secret_store(porter_secret *secret, const char *const *names, const char *const *values,
                                         size_t count, const char *label, const char *value, size_t value_length,
                                         char **message);

/* Deletes the items matching `names` / `values` that carry none of the attributes
 * `absent`; `*deleted` counts them. */
porter_secret_status porter_secret_delete(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, const char *const *absent, size_t absent_count,
                                          size_t *deleted, char **message);

/* Sets attribute `name` to `value` on the items matching as for porter_secret_delete
 * (their secrets are not read). */
porter_secret_status porter_secret_update(porter_secret *secret, const char *const *names, const char *const *values,
                                          size_t count, const char *const *absent, size_t absent_count,
                                          const char *name, const char *value, char **message);

#endif
