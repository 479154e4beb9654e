# Builds the C shim: build/libshim-cpu.so always, build/libshim-cuda.so when nvcc is found.
# `make test` and `make demo` are the README's two commands; each installs what is missing.

CC      ?= gcc
CXX     ?= g++
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
BUN     := node_modules/.bin/bun

WARN     := -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS   := -O3 -fno-math-errno -fno-trapping-math -fPIC -std=c11 -D_GNU_SOURCE $(WARN) -I/usr/include/x86_64-linux-gnu/openblas-pthread
CXXFLAGS := -O3 -fPIC -std=c++17 $(WARN)
# sm_90 machine code for Hopper (H100/H200), plus PTX for anything newer.
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Werror,-Wno-unused-parameter --Werror all-warnings

COMMON_SRC := $(wildcard c/common/*.c)
CPU_SRC    := $(wildcard c/cpu/*.c) $(wildcard c/cpu/*.cc)
CUDA_SRC   := $(wildcard c/cuda/*.cu) $(wildcard c/cuda/*.c)
HEADERS    := c/shim.h $(wildcard c/common/*.h) $(wildcard c/cpu/*.h) $(wildcard c/cuda/*.h)

CPU_OBJ  := $(patsubst c/%,build/obj/cpu/%.o,$(COMMON_SRC) $(CPU_SRC))
CUDA_OBJ := $(patsubst c/%,build/obj/cuda/%.o,$(COMMON_SRC) $(CUDA_SRC))

LIBS := build/libshim-cpu.so
ifneq ($(NVCC),)
LIBS += build/libshim-cuda.so
endif

.PHONY: all cpu cuda setup test demo bench clean
all: $(LIBS)
cpu: build/libshim-cpu.so
cuda: build/libshim-cuda.so

build/libshim-cpu.so: $(CPU_OBJ)
	$(CXX) -shared -o $@ $^ -lgloo -lopenblas -lpthread -lm

# The optimizer steps' loops vectorise their square roots only without errno (they never take a negative one).
build/obj/cpu/cpu/optim.c.o: CFLAGS += -fno-math-errno

# The vectorised math's polynomials (c/cpu/vecmath.h) as fused multiply-adds where the host has
# them: ISO C mode leaves a * b + c unfused, which makes exp, tanh, erf and gelu up to twice as slow.
build/obj/cpu/cpu/elementwise.c.o: CFLAGS += -ffp-contract=fast

build/obj/cpu/%.c.o: c/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

build/obj/cpu/%.cc.o: c/%.cc $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c -o $@ $<

# NCCL and cuBLAS are dlopen'ed at run time (c/cuda/), so only the CUDA runtime is linked, statically:
# the library then needs no libcudart.so on the loader's path where it runs, only a driver.
build/libshim-cuda.so: $(CUDA_OBJ)
	$(NVCC) -shared $(CUDA_ARCH) -o $@ $^ -cudart static -ldl -lpthread -lrt

build/obj/cuda/%.c.o: c/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

build/obj/cuda/%.cu.o: c/%.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# Each command installs what it needs (scripts/setup.sh's modes): only the tests need chromium.
setup:
	@bash scripts/setup.sh test

# The README's commands.
test: setup
	@$(MAKE) --no-print-directory all
	$(BUN) test

demo:
	@bash scripts/setup.sh demo
	@$(MAKE) --no-print-directory all
	$(BUN) run examples/gpt.ts

bench:
	@bash scripts/setup.sh bench
	@$(MAKE) --no-print-directory all
	$(BUN) run bench/codec.ts
	$(BUN) run bench/dispatch.ts
	$(BUN) run bench/trace.ts
	$(BUN) run bench/collectives.ts
	$(BUN) run bench/ops.ts
	$(BUN) run bench/train.ts

clean:
	rm -rf build
