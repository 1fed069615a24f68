# The two set-up commands of the README, plus their building blocks.
#   make demo   install deps, build, run the main job
#   make test   install deps, build, run the whole test suite (also under ASan+UBSan)
.PHONY: deps build build-asan demo test bench clean

JOBS ?= $(shell nproc)

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake --preset release > /dev/null
	@cmake --build --preset release -j $(JOBS)

# Only the layers whose tests run under the sanitizers are built there.
build-asan: deps
	@cmake --preset asan > /dev/null
	@cmake --build --preset asan -j $(JOBS) --target tests_core tests_kernels

demo: build
	@bash scripts/demo.sh

test: build build-asan
	@ctest --preset release -j $(JOBS)
	@ctest --preset asan -j $(JOBS) -L 'core|kernels'

bench: build
	@bash scripts/bench.sh

clean:
	rm -rf build
