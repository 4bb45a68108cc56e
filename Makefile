# Porter: `make demo` shows it working, `make test` runs every test, `make bench`
# writes BENCHMARKS.md. Each installs what is missing first.
SWIFT ?= swift
PORTER := .build/debug/porter

.PHONY: deps build demo test bench clean

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build --product porter
	$(SWIFT) build --product CustomScheme

demo: build
	@bash scripts/demo.sh

test: deps
	$(SWIFT) build --build-tests
	PORTER_BIN=$(CURDIR)/$(PORTER) CUSTOM_SCHEME_BIN=$(CURDIR)/.build/debug/CustomScheme $(SWIFT) test --skip-build

bench: deps
	@bash Benchmarks/run.sh

clean:
	rm -rf .build
