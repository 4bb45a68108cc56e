/* The gopher example plugin exports one function, porter_plugin_entry
 * (porter_plugin.h); an application that links it in can register it directly. */
#include "porter_plugin.h"
