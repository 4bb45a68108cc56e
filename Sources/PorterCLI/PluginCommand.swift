import ArgumentParser
import Foundation
import Porter
import PorterTestKit

/// `porter plugin test FILE` and `porter plugin new --c|--swift NAME`: for plugin authors.
struct PluginCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugin",
        abstract: "For plugin authors: check a plugin against the handler contract, or start a new one.",
        subcommands: [PluginTest.self, PluginNew.self])
}

struct PluginTest: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test",
        abstract: "Load a plugin file and run the handler contract against it: callback order, cancel in every phase, pause and resume, challenges, redirects, a crash, a load that never ends.",
        discussion: "Each broken rule is printed with its fix. Exit status 0: every rule kept; 1: a rule broken; 2: the plugin did not load.")

    @Argument(help: "The plugin's shared object (./libmy.so).")
    var file: String

    @Option(name: .long, help: "The URL to load (repeatable; default SCHEME://127.0.0.1/ for each scheme the plugin serves).")
    var url: [String] = []

    @Option(name: .long, help: "Seconds a load may take before it counts as never ending.")
    var timeout: Double = 20

    @Flag(name: .long, help: "Run the plugin inside this process instead of in a sandboxed worker (a crash then ends porter).")
    var pluginsInProcess = false

    func validate() throws {
        guard timeout.isFinite, timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout wants 0 < SECONDS <= 3600") }
        for u in url where URL(string: u)?.scheme == nil { throw ValidationError("not a URL: \(u)") }
    }

    func run() throws {
        var isolation = PluginIsolation.default
        if pluginsInProcess { isolation.defaultMode = .inProcess }
        Porter.bootstrap(loadPlugins: false, pluginIsolation: isolation)
        let registry = HandlerRegistry()
        let path = file.hasPrefix("/") ? file : FileManager.default.currentDirectoryPath + "/" + file
        let verdict = PluginLoader(registry: registry, isolation: isolation).load(path: path)
        guard let plugin = verdict.plugin, let registration = registry.registrations.first else {
            print("porter plugin test: \(file) did not load: \(verdict)")
            throw ExitCode(2)
        }
        print("loaded \(plugin.name) \(plugin.version) (\(plugin.mode)); schemes: \(plugin.schemes.map(\.name).joined(separator: ", "))")
        let urls = url.isEmpty ? plugin.schemes.compactMap { URL(string: "\($0.name)://127.0.0.1/") } : url.compactMap(URL.init(string:))
        var options = ConformanceOptions()
        options.loadTimeout = timeout
        var failed = false
        for target in urls {
            let report = ConformanceKit.run(factory: registration.factory, url: target, options: options)
            print(report)
            if !report.passed { failed = true }
        }
        if failed { throw ExitCode(1) }
    }
}

struct PluginNew: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "new",
        abstract: "Write a new plugin's sources into a folder NAME: C (a .c file and a Makefile using pkg-config porter-plugin) or Swift (a package on PorterPluginKit).",
        discussion: "The plugin serves the scheme NAME (lower-cased) and declares the folder ~/.config/NAME as the one it reads; 'make test' (C) runs 'porter plugin test' on the result.")

    @Flag(name: .customLong("c"), help: "A plugin in C.")
    var c = false

    @Flag(name: .customLong("swift"), help: "A plugin in Swift (PorterPluginKit).")
    var swift = false

    @Argument(help: "The plugin's name: a letter, then letters, digits or '-'; also its scheme.")
    var name: String

    @Option(name: .long, help: "Where to create the folder NAME (default: the current folder).")
    var output: String?

    @Option(name: .long, help: "Swift: the Porter package the plugin depends on, a path (default: the PORTER_SOURCE environment variable, else the Git URL placeholder).")
    var porterPackage: String?

    func validate() throws {
        if c == swift { throw ValidationError("choose one of --c and --swift") }
        guard let first = name.unicodeScalars.first, CharacterSet.letters.contains(first),
              name.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "-") }), name.count <= 40
        else { throw ValidationError("NAME wants a letter, then letters, digits or '-' (at most 40), not \(name.debugDescription)") }
    }

    func run() throws {
        let base = output ?? FileManager.default.currentDirectoryPath
        let folder = URL(fileURLWithPath: base).appendingPathComponent(name)
        if FileManager.default.fileExists(atPath: folder.path) {
            print("porter plugin new: \(folder.path) exists; not overwriting it")
            throw ExitCode(1)
        }
        let files = c ? PluginTemplates.c(name: name) : PluginTemplates.swift(name: name,
            porterPackage: porterPackage ?? ProcessInfo.processInfo.environment["PORTER_SOURCE"])
        for (relative, text) in files {
            let url = folder.appendingPathComponent(relative)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: url, atomically: true, encoding: .utf8)
            print("wrote \(url.path)")
        }
        print(c ? "next: cd \(name) && make && make test" : "next: cd \(name) && swift build && porter plugin test .build/debug/lib\(PluginTemplates.identifier(name)).so")
    }
}

/// The sources `porter plugin new` writes.
enum PluginTemplates {
    /// NAME as a C and Swift identifier ('-' becomes '_').
    static func identifier(_ name: String) -> String { name.replacingOccurrences(of: "-", with: "_") }

    static func c(name: String) -> [(String, String)] {
        let id = identifier(name), scheme = name.lowercased()
        let source = """
        /*
         * \(scheme):// for Porter: a plugin in C against porter_plugin.h, made by
         * `porter plugin new --c \(name)`. It answers every URL of its scheme with a line of
         * text; replace `produce` with your protocol.
         *
         * The contract (checked by `make test`, i.e. `porter plugin test`):
         * - start returns at once; the load runs on a thread of its own;
         * - report a response, then data, then exactly one of did_finish / did_fail;
         * - stop only sets a flag and wakes the thread; destroy joins it;
         * - pause / resume only flip a flag (they may come from inside a client call).
         */
        #include <porter_plugin.h>

        #include <pthread.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>

        static const porter_host *host;

        typedef struct \(id)_load {
            porter_client *client;
            const porter_request *request;
            pthread_t thread;
            pthread_mutex_t lock;
            pthread_cond_t cond;
            int paused, stopped;
        } \(id)_load;

        /* Waits while paused; returns nonzero once the load was stopped. */
        static int wait_or_stop(\(id)_load *l) {
            pthread_mutex_lock(&l->lock);
            while (l->paused && !l->stopped) pthread_cond_wait(&l->cond, &l->lock);
            int stopped = l->stopped;
            pthread_mutex_unlock(&l->lock);
            return stopped;
        }

        /* The body for a URL: replace with your protocol. */
        static int produce(const char *url, char *out, size_t cap) {
            return snprintf(out, cap, "hello from \(scheme): %s\\n", url);
        }

        static void *run(void *p) {
            \(id)_load *l = p;
            char body[4096];
            int n = produce(l->request->url, body, sizeof body);
            if (n < 0 || (size_t)n >= sizeof body) {
                host->did_fail(l->client, PORTER_ERR_RESOURCE_UNAVAILABLE, "the body does not fit", NULL, 0);
                return NULL;
            }
            porter_response response = {
                .struct_size = sizeof(porter_response),
                .mime_type = "text/plain",
                .text_encoding = "utf-8",
                .expected_length = n,
                .status_code = -1,
                .resume_offset = -1,
            };
            if (wait_or_stop(l)) return NULL;
            host->did_receive_response(l->client, &response);
            if (wait_or_stop(l)) return NULL;
            host->did_load_data(l->client, body, (size_t)n);
            if (wait_or_stop(l)) return NULL;
            host->did_finish(l->client);
            return NULL;
        }

        static int32_t \(id)_start(void *ctx, const porter_request *request, porter_client *client, void **out, char *error, size_t cap) {
            (void)ctx;
            \(id)_load *l = calloc(1, sizeof *l);
            if (!l) { snprintf(error, cap, "out of memory"); return PORTER_ERR_RESOURCE_UNAVAILABLE; }
            l->client = client;
            l->request = request;
            pthread_mutex_init(&l->lock, NULL);
            pthread_cond_init(&l->cond, NULL);
            if (pthread_create(&l->thread, NULL, run, l) != 0) {
                pthread_mutex_destroy(&l->lock);
                pthread_cond_destroy(&l->cond);
                free(l);
                snprintf(error, cap, "cannot start a thread");
                return PORTER_ERR_RESOURCE_UNAVAILABLE;
            }
            *out = l;
            return 0;
        }

        static void \(id)_stop(void *p) {
            \(id)_load *l = p;
            pthread_mutex_lock(&l->lock);
            l->stopped = 1;
            pthread_cond_broadcast(&l->cond);
            pthread_mutex_unlock(&l->lock);
        }

        static void \(id)_destroy(void *p) {
            \(id)_load *l = p;
            \(id)_stop(l);
            pthread_join(l->thread, NULL);
            pthread_mutex_destroy(&l->lock);
            pthread_cond_destroy(&l->cond);
            free(l);
        }

        static void \(id)_pause(void *p) {
            \(id)_load *l = p;
            pthread_mutex_lock(&l->lock);
            l->paused = 1;
            pthread_mutex_unlock(&l->lock);
        }

        static void \(id)_resume(void *p) {
            \(id)_load *l = p;
            pthread_mutex_lock(&l->lock);
            l->paused = 0;
            pthread_cond_broadcast(&l->cond);
            pthread_mutex_unlock(&l->lock);
        }

        static const porter_handler_vtable vtable = {
            .struct_size = sizeof(porter_handler_vtable),
            .start = \(id)_start,
            .stop = \(id)_stop,
            .destroy = \(id)_destroy,
            .pause = \(id)_pause,
            .resume = \(id)_resume,
        };

        /* Add PORTER_SCHEME_NEEDS_NETWORK if the plugin connects to other machines: without
         * it the sandbox forbids TCP. Set `default_port` to the port a URL without one
         * means (credentials are kept per host and port), and PORTER_SCHEME_CARRIES_COOKIES
         * if loads should send and store the session's cookies. */
        static const porter_scheme schemes[] = {{.name = "\(scheme)", .flags = 0, .default_port = 0}};

        /* What the plugin may open inside the home folder (everything else there is
         * EACCES in its sandbox); "~/" is the user's home. */
        static const char *const read_paths[] = {"~/.config/\(name)"};

        static const porter_plugin_descriptor descriptor = {
            .struct_size = sizeof(porter_plugin_descriptor),
            .abi_major = PORTER_PLUGIN_ABI_MAJOR,
            .abi_minor = PORTER_PLUGIN_ABI_MINOR,
            .name = "\(name)",
            .version = "0.1.0",
            .schemes = schemes,
            .scheme_count = 1,
            .handler = &vtable,
            .read_paths = read_paths,
            .read_path_count = 1,
        };

        __attribute__((visibility("default")))
        int32_t porter_plugin_entry(const porter_host *h, const porter_plugin_descriptor **out, char *error, size_t cap) {
            if (h->abi_major != PORTER_PLUGIN_ABI_MAJOR) {
                snprintf(error, cap, "built for ABI %d, the host has %d", PORTER_PLUGIN_ABI_MAJOR, h->abi_major);
                return 1;
            }
            host = h;
            *out = &descriptor;
            return 0;
        }

        """
        let makefile = """
        # Builds lib\(id).so against the installed plugin header (pkg-config porter-plugin).
        #   make            build
        #   make test       porter plugin test ./lib\(id).so
        #   make install    into $(pkg-config --variable=plugindir porter-plugin) (or PLUGINDIR)
        CC ?= cc
        PORTER ?= porter
        CFLAGS ?= -O2 -g
        CFLAGS += -std=c11 -Wall -Wextra -Werror -fPIC -fvisibility=hidden $(shell pkg-config --cflags porter-plugin)
        LDFLAGS += -shared -Wl,-z,relro,-z,now -Wl,--no-undefined
        LDLIBS += -lpthread
        PLUGINDIR ?= $(shell pkg-config --variable=plugindir porter-plugin)

        lib\(id).so: \(name).c
        \t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

        test: lib\(id).so
        \t$(PORTER) plugin test ./lib\(id).so

        install: lib\(id).so
        \tinstall -D -m 0644 lib\(id).so $(DESTDIR)$(PLUGINDIR)/lib\(id).so

        clean:
        \trm -f lib\(id).so

        .PHONY: test install clean

        """
        return [("\(name).c", source), ("Makefile", makefile)]
    }

    static func swift(name: String, porterPackage: String?) -> [(String, String)] {
        let id = identifier(name), scheme = name.lowercased()
        let dependency: String
        let packageName: String
        if let path = porterPackage {
            dependency = ".package(path: \(String(reflecting: path)))"
            packageName = URL(fileURLWithPath: path).lastPathComponent.lowercased()
        } else {
            dependency = ".package(url: \"https://github.com/porter-swift/porter\", from: \"1.0.0\")"
            packageName = "porter"
        }
        let manifest = """
        // swift-tools-version:6.0
        // Made by `porter plugin new --swift \(name)`: builds lib\(id).so, a Porter plugin.
        import PackageDescription

        let package = Package(
            name: "\(id)",
            products: [.library(name: "\(id)", type: .dynamic, targets: ["\(id)"])],
            dependencies: [\(dependency)],
            targets: [
                .target(name: "\(id)", dependencies: [.product(name: "PorterPluginKit", package: "\(packageName)")],
                        swiftSettings: [.swiftLanguageMode(.v6)]),
            ]
        )

        """
        let source = """
        // \(scheme):// for Porter, on PorterPluginKit. Check it with
        //     swift build && porter plugin test .build/debug/lib\(id).so
        import PorterPluginKit

        final class Load: PluginLoadHandler, @unchecked Sendable {
            let request: PluginRequest, client: PluginClient
            init(request: PluginRequest, client: PluginClient) { self.request = request; self.client = client }
            func start() {   // return promptly: real plugins do their I/O on a thread of their own
                let body = Array("hello from \(scheme): \\(request.url)\\n".utf8)
                client.receive(PluginResponse(mimeType: "text/plain", expectedLength: Int64(body.count)))
                client.load(body)
                client.finish()
            }
            func stop() {}
            func waitUntilDone() {}
        }

        // Add PORTER_SCHEME_NEEDS_NETWORK to the flags if the plugin connects to other machines.
        let definition = PluginDefinition(name: "\(name)", version: "0.1.0",
                                          schemes: [PluginSchemeDefinition("\(scheme)", flags: 0)],
                                          readPaths: ["~/.config/\(name)"]) { request, client in
            Load(request: request, client: client)
        }

        @_cdecl("porter_plugin_entry")
        public func porter_plugin_entry(_ host: UnsafePointer<porter_host>?,
                                        _ out: UnsafeMutablePointer<UnsafePointer<porter_plugin_descriptor>?>?,
                                        _ error: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
            PluginKit.export(definition, host: host, descriptor: out, error: error, capacity: capacity)
        }

        """
        return [("Package.swift", manifest), ("Sources/\(id)/\(id).swift", source)]
    }
}
