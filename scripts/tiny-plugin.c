/* The smallest C plugin: scheme "tiny", answers "tiny: URL". install-check.sh and
 * deb-check.sh build it with -Wall -Wextra -Werror against the installed header (through
 * pkg-config) to prove a third party's plugin compiles and loads. */
#include <porter_plugin.h>
#include <string.h>

static const porter_host *host;

static int32_t start(void *context, const porter_request *request, porter_client *client, void **load,
                     char *error, size_t capacity) {
    (void)context; (void)error; (void)capacity;
    porter_response response = { sizeof response, NULL, "text/plain", "utf-8", -1, -1, NULL, 0, -1, NULL };
    host->did_receive_response(client, &response);
    host->did_load_data(client, "tiny: ", 6);
    host->did_load_data(client, request->url, strlen(request->url));
    host->did_finish(client);
    *load = NULL;
    return 0;
}
static void nothing(void *load) { (void)load; }

static const porter_handler_vtable handler = { sizeof handler, NULL, start, nothing, nothing, NULL, NULL };
static const porter_scheme schemes[] = { { .name = "tiny", .flags = 0 } };
static const porter_plugin_descriptor descriptor = {
    sizeof descriptor, PORTER_PLUGIN_ABI_MAJOR, PORTER_PLUGIN_ABI_MINOR, "tiny", "1.0",
    schemes, 1, &handler, NULL, NULL, 0, NULL, 0, 0 };

int32_t porter_plugin_entry(const porter_host *h, const porter_plugin_descriptor **out, char *error, size_t capacity) {
    (void)error; (void)capacity;
    host = h;
    *out = &descriptor;
    return 0;
}
