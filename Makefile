# The two set-up commands of the README, plus their building blocks. Each command builds only what
# it runs: `make demo` the hspmd program, `make test` the test programs (and hspmd, which they
# run), `make bench` the benchmark programs; `make build` builds everything.
#   make demo   install deps, build hspmd, run the main job
#   make test   install deps, build the tests, run the whole test suite (also under ASan+UBSan)
.PHONY: deps configure build build-tests build-asan demo test bench clean

JOBS ?= $(shell nproc)

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset release > /dev/null

build: configure
	@cmake --build --preset release -j $(JOBS)

build-tests: configure
	@cmake --build --preset release -j $(JOBS) --target all_tests

# Only the layers whose tests run under the sanitizers are built there.
build-asan: deps
	@cmake --preset asan > /dev/null
	@cmake --build --preset asan -j $(JOBS) --target tests_core tests_kernels

# scripts/demo.sh (and scripts/elastic_demo.sh, which it runs) run only the hspmd program.
demo: configure
	@cmake --build --preset release -j $(JOBS) --target hspmd
	@bash scripts/demo.sh

test: build-tests build-asan
	@ctest --preset release -j $(JOBS)
	@ctest --preset asan -j $(JOBS) -L 'core|kernels'

bench: configure
	@cmake --build --preset release -j $(JOBS) --target all_benchmarks
	@bash scripts/bench.sh

clean:
	rm -rf build
