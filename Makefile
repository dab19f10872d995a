# ThinTensor — top-level Makefile.
#
#   make              library, tools (CUDA backend when nvcc is found, else the CPU build)
#   make check        all CPU tests (unit tests + CLI tests), closing line "N passed, N failed"
#   make check-cuda   GPU parity tests (needs a GPU)
#   make fuzz         every libFuzzer target for FUZZ_SECONDS each (clang)
#   make install      PREFIX=/usr/local DESTDIR=
#   Options: V=1 (echo commands), SAN=1 (ASan+UBSan), WERROR=1, CUDA=0 (force the CPU build),
#            NVCC=path, CUDA_HOME=path
.DEFAULT_GOAL := all
.SUFFIXES:
.DELETE_ON_ERROR:

PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
AR      ?= ar
B       ?= build
VERSION := 1.0.0

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---- CUDA detection ----
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || ( test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc ))
ifeq ($(CUDA),0)
NVCC :=
endif
ifeq ($(SAN),1)
NVCC :=
endif
HAVE_CUDA := $(if $(NVCC),1,0)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90

# ---- flags ----
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
ifeq ($(CI),true)
WERROR ?= 1
endif
ifeq ($(WERROR),1)
WARN    += -Werror
endif
OPT     ?= -O2 -march=x86-64-v3 -g
ifeq ($(SAN),1)
OPT     := -O1 -g -fno-omit-frame-pointer
SANFLAGS:= -fsanitize=address,undefined -fno-sanitize-recover=undefined
B       := build-san
endif
CPPFLAGS+= -D_GNU_SOURCE -Ilibthin -Itools/common -Ikernels -MMD -MP
CFLAGS  ?=
CFLAGS  += -std=c11 $(OPT) $(WARN) $(SANFLAGS) -pthread -fPIC
LDFLAGS += $(SANFLAGS) -pthread
LIBS    := -ljansson -lzstd -lcrypto -lm
PACK_LIBS := -larchive
RUN_LIBS  := -lpcre2-8 -lutf8proc
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC -Ilibthin -Ikernels -Itools/common \
             -lineinfo --expt-relaxed-constexpr
# CUDA_TRACE=1: kernels with the decode timeline probes (env THIN_CUDA_TRACE; use its own B).
CUDA_TRACE ?= 0
NVCCFLAGS += -DTHIN_CUDA_TRACE=$(CUDA_TRACE)
ifeq ($(HAVE_CUDA),1)
CPPFLAGS  += -DTHIN_HAVE_CUDA=1
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl -lstdc++
endif

# ---- sources ----
LIB_SRC    := $(sort $(wildcard libthin/*.c))
COMMON_SRC := $(sort $(wildcard tools/common/*.c))
KERN_SRC   := $(sort $(wildcard kernels/*.c))
CU_SRC     := $(sort $(wildcard kernels/*.cu))
TOOLS      := thin-pack thin-inspect thin-quant thin-run thin-compare
TESTS_SRC  := $(sort $(wildcard tests/test_*.c))
CUTESTS_SRC:= $(sort $(wildcard tests/cuda/test_*.c))
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
LIB_OBJ    := $(call obj,$(LIB_SRC))
COMMON_OBJ := $(call obj,$(COMMON_SRC))
KERN_OBJ   := $(call obj,$(KERN_SRC))
CU_OBJ     := $(patsubst %.cu,$(B)/obj/%.cu.o,$(CU_SRC))

LIBTHIN_A  := $(B)/lib/libthin.a
LIBTHIN_SO := $(B)/lib/libthin.so
COMMON_A   := $(B)/lib/libthintool.a
KERN_A     := $(B)/lib/libthinkern.a
CUDA_A     := $(if $(CU_OBJ),$(if $(filter 1,$(HAVE_CUDA)),$(B)/lib/libthincuda.a))

# Per-tool archive of everything but main.c, so tests can link a tool's modules.
tool_src  = $(filter-out tools/$(1)/main.c,$(sort $(wildcard tools/$(1)/*.c)))
tool_a    = $(B)/lib/lib$(subst -,_,$(1)).a
TOOL_AS   := $(foreach t,$(TOOLS),$(if $(call tool_src,$(t)),$(call tool_a,$(t))))
BINS      := $(foreach t,$(TOOLS),$(if $(wildcard tools/$(t)/main.c),$(B)/bin/$(t)))
TESTS     := $(patsubst tests/%.c,$(B)/tests/%,$(TESTS_SRC))
CUTESTS   := $(patsubst tests/cuda/%.c,$(B)/tests/cuda/%,$(CUTESTS_SRC))
# One group: the CUDA backend calls the thin-run archive's sampler, which comes before it.
ALL_LINK  := -Wl,--start-group $(TOOL_AS) $(KERN_A) $(CUDA_A) $(COMMON_A) $(LIBTHIN_A) -Wl,--end-group
ALL_DEPS  := $(TOOL_AS) $(KERN_A) $(CUDA_A) $(COMMON_A) $(LIBTHIN_A)
ALL_LIBS  := $(PACK_LIBS) $(RUN_LIBS) $(LIBS) $(CUDA_LIBS)

.PHONY: all lib tools tests check check-cuda fuzz install uninstall clean bench deps demo test
all: banner lib tools tests

# Debian packages needed to build and test (run as root, or with sudo).
DEPS := build-essential pkg-config libzstd-dev libssl-dev libarchive-dev libcmocka-dev \
        libjansson-dev libpcre2-dev libutf8proc-dev zstd clang libclang-rt-14-dev valgrind zip python3
deps:
	@if dpkg -s $(DEPS) >/dev/null 2>&1; then echo "thin: dependencies present"; else \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(DEPS); fi

# The main job on the bundled model: pack, inspect, quantize, verify and generate with stories260K.
demo: all
	$(Q)B=$(B) sh tests/demo.sh

# Everything CI runs: the tests, the tests again under ASan+UBSan, and every fuzzer briefly.
test: check
	$(Q)$(MAKE) --no-print-directory SAN=1 check
	$(Q)$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(or $(CI_FUZZ_SECONDS),20)

banner:
ifeq ($(HAVE_CUDA),1)
	@echo "thin: building with CUDA ($(NVCC))"
else
	@echo "thin: nvcc not found (or CUDA=0): CPU-only build, no GPU backend"
endif
.PHONY: banner

lib: $(LIBTHIN_A) $(LIBTHIN_SO) $(B)/lib/thin.pc
tools: $(BINS)
tests: $(TESTS)

$(B)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -DTHIN_HAVE_CUDA=1 -MMD -MP -c $< -o $@

$(LIBTHIN_A): $(LIB_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^
$(LIBTHIN_SO): $(LIB_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libthin.so.1 $(LDFLAGS) -o $@ $^ $(LIBS)
$(COMMON_A): $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && $(AR) rcs $@ $^
$(KERN_A): $(KERN_OBJ)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && $(AR) rcs $@ $^
$(B)/lib/libthincuda.a: $(CU_OBJ)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

define TOOL_RULES
$(call tool_a,$(1)): $(call obj,$(call tool_src,$(1)))
	@mkdir -p $$(@D)
	$(Q)rm -f $$@ && $(AR) rcs $$@ $$^
$(B)/bin/$(1): $(B)/obj/tools/$(1)/main.o $(ALL_DEPS)
	@mkdir -p $$(@D)
	@$(if $(Q),echo "  LINK    $$@")
	$(Q)$(CC) $(LDFLAGS) -o $$@ $$< $(ALL_LINK) $(ALL_LIBS)
endef
$(foreach t,$(TOOLS),$(eval $(call TOOL_RULES,$(t))))

$(B)/tests/%: $(B)/obj/tests/%.o $(ALL_DEPS)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LINK) $(ALL_LIBS) -lcmocka

$(B)/tests/cuda/%: $(B)/obj/tests/cuda/%.o $(ALL_DEPS)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LINK) $(ALL_LIBS)

# pkg-config file; PREFIX is baked in, so it is rewritten whenever PREFIX changes.
PC_CMD = printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: thin\nDescription: ThinTensor .thin tensor container\nVersion: %s\nLibs: -L$${libdir} -lthin\nLibs.private: -ljansson -lzstd -lcrypto -lm -pthread\nCflags: -I$${includedir}\n' '$(PREFIX)' '$(VERSION)'
$(B)/lib/thin.pc: FORCE
	@mkdir -p $(@D)
	@$(PC_CMD) > $@.tmp && if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
.PHONY: FORCE
FORCE:

# ---- tests ----
check: all
	$(Q)B=$(B) sh tests/run-tests.sh

check-cuda: all $(CUTESTS)
	$(Q)B=$(B) sh tests/run-cuda-tests.sh

# ---- fuzzing (clang + libFuzzer, ASan + UBSan) ----
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
               -D_GNU_SOURCE -Ilibthin -Itools/common -Ikernels -Itools/thin-pack -Itools/thin-run \
               -Itools/thin-quant -Itools/thin-inspect -pthread
FUZZ_LIBSRC := $(LIB_SRC) $(COMMON_SRC) $(KERN_SRC) $(call tool_src,thin-pack) \
               $(call tool_src,thin-run) $(call tool_src,thin-quant) $(call tool_src,thin-inspect)
FUZZ_BINS := $(patsubst tests/fuzz/%.c,build-fuzz/%,$(FUZZ_SRC))
# The library sources are compiled once (instrumented, without libFuzzer's main) for all targets.
FUZZ_OBJ  := $(patsubst %.c,build-fuzz/obj/%.o,$(FUZZ_LIBSRC))
.SECONDARY: $(FUZZ_OBJ)
build-fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)clang $(subst fuzzer,fuzzer-no-link,$(FUZZ_CFLAGS)) -MMD -MP -c $< -o $@
build-fuzz/%: tests/fuzz/%.c $(FUZZ_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)clang $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_OBJ) $(PACK_LIBS) $(RUN_LIBS) $(LIBS)
fuzz: $(FUZZ_BINS)
	$(Q)FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run-fuzz.sh $(FUZZ_BINS)

# Benchmark programs (not tests, not installed); thin-bench-prefill with the CUDA backend only.
BENCH_BINS := $(B)/bench/thin-bench-ops $(if $(CUDA_A),$(B)/bench/thin-bench-prefill)
$(B)/bench/%: $(B)/obj/bench/%.o $(ALL_DEPS)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LINK) $(ALL_LIBS)
bench: all $(BENCH_BINS)
	@echo "benchmarks live in bench/: see README.md"

# ---- install ----
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIBTHIN_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIBTHIN_SO) $(DESTDIR)$(PREFIX)/lib/libthin.so.1
	ln -sf libthin.so.1 $(DESTDIR)$(PREFIX)/lib/libthin.so
	install -m 644 libthin/thin.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(B)/lib/thin.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(TOOLS)) $(DESTDIR)$(PREFIX)/lib/libthin.* \
	      $(DESTDIR)$(PREFIX)/include/thin.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/thin.pc

clean:
	rm -rf build build-san build-fuzz

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
-include $(shell find build-fuzz/obj -name '*.d' 2>/dev/null)
