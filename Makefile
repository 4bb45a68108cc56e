# Porter: `make demo` shows it working, `make test` runs every test, `make bench`
# writes BENCHMARKS.md, `make fuzz` runs every libFuzzer harness for FUZZ_SECONDS (60)
# (FUZZING.md). Each installs what is missing first. `make install` / `make uninstall`
# (below) put porter, its helpers, plugins, header, man page and completions in PREFIX;
# `make deb` packages the same files for Debian.
SWIFT ?= swift
PORTER := .build/debug/porter

.PHONY: deps build demo test bench fuzz clean install uninstall install-build docs deb link-order
FUZZ_SECONDS ?= 60

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build --product porter
	$(SWIFT) build --product porterd
	$(SWIFT) build --product porter-plugin-worker
	$(SWIFT) build --product CustomScheme
	$(SWIFT) build --product GopherPlugin

demo: build
	@bash scripts/demo.sh

test: deps
	@bash scripts/test.sh

bench: deps
	@bash Benchmarks/run.sh

fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh

clean:
	rm -rf .build

# `make docs`: DocC reference of the public modules, with the "Migrating from URLSession"
# article (Sources/Porter/Porter.docc), as one static site in .build/docs (serve that
# folder; open /documentation/porter). Not part of `make test`.
DOC_TARGETS = Porter PorterCore PorterSession PorterBackground PorterCache PorterCookies PorterCredentials PorterPlugins \
	PorterPluginKit PorterFoundation PorterOpenAPI
docs:
	$(SWIFT) package --allow-writing-to-directory .build/docs generate-documentation \
		$(addprefix --target ,$(DOC_TARGETS)) --enable-experimental-combined-documentation \
		--transform-for-static-hosting --output-path .build/docs

# `make install [PREFIX=/usr/local] [DESTDIR=] [CONFIG=release]`: builds porter, porterd,
# porter-plugin-worker and the plugins in CONFIG (release, or debug to install what
# `swift build` already made, as the test does). porter and porterd are linked once more
# with the Swift runtime linked statically (scripts/link-static.py: SwiftPM's own link
# command plus -static-stdlib, from the same objects, into $(BUILT)/static; a few seconds,
# where `swift build --static-swift-stdlib` would recompile the package): they load no
# Swift library at start; with the toolchain's lld, packed relative relocations and the
# functions of ordinary use placed together (scripts/static-link.order, made by
# `make link-order`) keep what a start maps small. The worker and the plugins keep the shared runtime, which the
# Swift plugins it loads need anyway (one runtime per worker). Then it installs:
#   PREFIX/bin/{porter,porterd,porter-plugin-worker}   (porter finds the other two beside it)
#   PREFIX/lib/porter/plugins/*.so                       (porter in PREFIX/bin scans it)
#   PREFIX/include/porter/porter_plugin.h, PREFIX/lib/pkgconfig/porter-plugin.pc
#   PREFIX/share/man/man1/porter.1, completions for bash, zsh and fish
#   PREFIX/lib/systemd/user/porterd.{socket,service}, PREFIX/share/doc/porter/README.md
# BINDIR and LIBDIR are fixed below PREFIX: the installed porter finds its plugins
# relative to itself. `make uninstall` (same PREFIX and DESTDIR) removes exactly these.
PREFIX ?= /usr/local
DESTDIR ?=
CONFIG ?= release
INSTALL ?= install
PYTHON ?= python3
BUILT = .build/$(CONFIG)
STAGE = .build/install-$(CONFIG)
ROOT = $(DESTDIR)$(PREFIX)
PROGRAMS = porter porterd porter-plugin-worker
# Linked with the Swift runtime linked statically (the rest of PROGRAMS: dynamically).
STATIC_PROGRAMS = porter porterd
PLUGINS = libPorterSFTPPlugin.so libGopherPlugin.so
ABI = $(shell sed -n 's/^\#define PORTER_PLUGIN_ABI_MAJOR //p' Sources/CPorterPlugin/include/porter_plugin.h).$(shell sed -n 's/^\#define PORTER_PLUGIN_ABI_MINOR //p' Sources/CPorterPlugin/include/porter_plugin.h)
INSTALLED = $(addprefix bin/,$(PROGRAMS)) $(addprefix lib/porter/plugins/,$(PLUGINS)) \
	include/porter/porter_plugin.h lib/pkgconfig/porter-plugin.pc share/man/man1/porter.1 \
	share/bash-completion/completions/porter share/zsh/site-functions/_porter \
	share/fish/vendor_completions.d/porter.fish lib/systemd/user/porterd.socket \
	lib/systemd/user/porterd.service share/doc/porter/README.md
# Folders only Porter uses: removed by uninstall once empty.
OWN_DIRS = lib/porter/plugins lib/porter include/porter share/doc/porter

install-build:
	@case "$(CONFIG)" in release|debug) ;; *) echo "CONFIG must be release or debug" >&2; exit 1;; esac
	@case "$(PREFIX)" in /*) ;; *) echo "PREFIX must be an absolute path" >&2; exit 1;; esac
	for p in $(PROGRAMS) PorterSFTPPlugin GopherPlugin; do $(SWIFT) build -c $(CONFIG) --product $$p || exit 1; done
	$(PYTHON) scripts/link-static.py $(CONFIG) $(BUILT)/static $(STATIC_PROGRAMS)
	rm -rf $(STAGE) && mkdir -p $(STAGE)
	$(BUILT)/static/porter --generate-completion-script bash > $(STAGE)/porter.bash
	$(BUILT)/static/porter --generate-completion-script zsh > $(STAGE)/_porter
	$(BUILT)/static/porter --generate-completion-script fish > $(STAGE)/porter.fish
	$(PYTHON) scripts/gen-manpage.py $(BUILT)/static/porter > $(STAGE)/porter.1
	printf '%s\n' 'prefix=$(PREFIX)' 'includedir=$${prefix}/include' 'plugindir=$${prefix}/lib/porter/plugins' '' \
		'Name: porter-plugin' 'Description: The C ABI of Porter plugins (porter_plugin.h); install the .so into plugindir' \
		'Version: $(ABI)' 'Cflags: -I$${includedir}/porter' > $(STAGE)/porter-plugin.pc
	for u in porterd.socket porterd.service; do \
		sed -e 's|/usr/local/bin/porterd|$(PREFIX)/bin/porterd|' -e 's|/usr/local/share/doc/porter|$(PREFIX)/share/doc/porter|' \
			-e 's|(make install puts both units there)|(make install puts both units in $(PREFIX)/lib/systemd/user)|' \
			Support/systemd/$$u > $(STAGE)/$$u || exit 1; done

install: deps install-build
	umask 022 && $(INSTALL) -d -m 755 $(ROOT)/bin $(ROOT)/lib/porter/plugins $(ROOT)/include/porter $(ROOT)/lib/pkgconfig \
		$(ROOT)/share/man/man1 $(ROOT)/share/bash-completion/completions $(ROOT)/share/zsh/site-functions \
		$(ROOT)/share/fish/vendor_completions.d $(ROOT)/lib/systemd/user $(ROOT)/share/doc/porter
	$(INSTALL) -m 755 $(addprefix $(BUILT)/static/,$(STATIC_PROGRAMS)) \
		$(addprefix $(BUILT)/,$(filter-out $(STATIC_PROGRAMS),$(PROGRAMS))) $(ROOT)/bin/
	$(INSTALL) -m 644 $(addprefix $(BUILT)/,$(PLUGINS)) $(ROOT)/lib/porter/plugins/
	$(INSTALL) -m 644 Sources/CPorterPlugin/include/porter_plugin.h $(ROOT)/include/porter/
	$(INSTALL) -m 644 $(STAGE)/porter-plugin.pc $(ROOT)/lib/pkgconfig/
	$(INSTALL) -m 644 $(STAGE)/porter.1 $(ROOT)/share/man/man1/
	$(INSTALL) -m 644 $(STAGE)/porter.bash $(ROOT)/share/bash-completion/completions/porter
	$(INSTALL) -m 644 $(STAGE)/_porter $(ROOT)/share/zsh/site-functions/
	$(INSTALL) -m 644 $(STAGE)/porter.fish $(ROOT)/share/fish/vendor_completions.d/
	$(INSTALL) -m 644 $(STAGE)/porterd.socket $(STAGE)/porterd.service $(ROOT)/lib/systemd/user/
	$(INSTALL) -m 644 README.md $(ROOT)/share/doc/porter/

uninstall:
	@case "$(PREFIX)" in /*) ;; *) echo "PREFIX must be an absolute path" >&2; exit 1;; esac
	rm -f $(addprefix $(ROOT)/,$(INSTALLED))
	for d in $(OWN_DIRS); do if [ -d "$(ROOT)/$$d" ]; then rmdir --ignore-fail-on-non-empty "$(ROOT)/$$d"; fi; done

# `make deb [CONFIG=release] [DEB_DIR=.build] [DEB_COMPRESSION=xz]`: DEB_DIR/porter_VERSION_ARCH.deb,
# what `make install PREFIX=/usr` puts in place (built in CONFIG) plus the shared Swift
# runtime the worker and the plugins need in /usr/lib/porter/swift and the DocC articles
# in /usr/share/doc/porter
# (scripts/make-deb.sh says how). Install it with `apt install ./porter_*.deb`;
# scripts/deb-check.sh (in `make test`) installs and removes one built from the debug build.
DEB_DIR ?= .build
DEB_COMPRESSION ?= xz
DEB_STAGE = .build/deb-$(CONFIG)
# `make link-order`: writes scripts/static-link.order again from what the release build's
# porter and porterd run (callgrind and perf; see scripts/link-order.py). Commit the result.
link-order: deps
	$(MAKE) install PREFIX=$(CURDIR)/.build/link-order CONFIG=release
	$(PYTHON) scripts/link-order.py $(CURDIR)/.build/link-order

deb: deps
	rm -rf $(DEB_STAGE)
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(DEB_STAGE)) PREFIX=/usr CONFIG=$(CONFIG)
	CONFIG=$(CONFIG) SWIFT=$(SWIFT) DEB_COMPRESSION=$(DEB_COMPRESSION) bash scripts/make-deb.sh $(DEB_STAGE) $(DEB_DIR)
