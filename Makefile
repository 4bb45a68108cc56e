# Porter: `make demo` shows it working, `make test` runs every test, `make bench`
# writes BENCHMARKS.md, `make fuzz` runs every libFuzzer harness for FUZZ_SECONDS (60)
# (FUZZING.md). Each installs what is missing first.
SWIFT ?= swift
PORTER := .build/debug/porter

.PHONY: deps build demo test bench fuzz clean
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
