/* CPorterPlugin is a header-only target (include/porter_plugin.h); SwiftPM needs one
 * source file to build it. */
#include "porter_plugin.h"
