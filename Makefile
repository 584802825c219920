# shardc: `make` builds build/shardc; `make check` runs every test.
# See docs/quickstart.md.

CC       ?= cc
PREFIX   ?= /usr/local
BUILD    ?= build
CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror
ALL_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L $(CFLAGS) -I$(BUILD)/gen -Icompiler/base -Iruntime
FUZZ_SECONDS ?= 60

SRC := $(wildcard compiler/base/*.c compiler/ir/*.c compiler/sema/*.c compiler/propagate/*.c compiler/partition/*.c compiler/schedule/*.c compiler/grad/*.c compiler/cost/*.c compiler/autoshard/*.c) compiler/driver/frontend.c \
	compiler/driver/autoshard_stage.c
GEN := $(BUILD)/gen/parser.c $(BUILD)/gen/lexer.c
HDR := $(wildcard compiler/*/*.h compiler/ir/*.def lib/*.h lib/*.def) $(BUILD)/gen/parser.h runtime/shardc_rt.h

OBJ := $(SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/parser.o $(BUILD)/obj/gen/lexer.o
# The reference interpreter and `shardc interp` go into shardc only.
INTERP_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard compiler/interp/*.c) compiler/driver/interp_cmd.c)
# C code generation (docs/codegen.md) and `shardc compile/build/run`.
# The build cache (cache.c, sha256.c) and the progress line (status.c) serve
# `shardc build` and `run`.
CODEGEN_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard compiler/codegen/*.c) compiler/driver/codegen_cmd.c \
	compiler/driver/cache.c compiler/driver/sha256.c compiler/driver/status.c compiler/driver/child.c \
	compiler/driver/toolchain.c)

# The communication runtime (docs/runtime.md): a static library of its own,
# built with -pthread, and its tests (tests/runtime/*.c, TAP-like output).
# -fPIC: the libraries also go into shared objects (the Python package's
# `shardc build --shared`, docs/python.md).
RT_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L $(CFLAGS) -fPIC -pthread -Iruntime
RT_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out runtime/mpi.c,$(wildcard runtime/*.c)))
# The MPI backend (runtime/mpi.c) is a library of its own, built with mpicc
# (OpenMPI) when it is installed; programs built for MPI link it before
# libshardc_rt.a.
MPICC    ?= $(shell command -v mpicc 2>/dev/null)
RT_MPI   := $(if $(MPICC),$(BUILD)/libshardc_rt_mpi.a)
RT_HDR   := $(wildcard runtime/*.h)
RT_TESTS := $(patsubst tests/runtime/%.c,$(BUILD)/tests/runtime/%,$(wildcard tests/runtime/*.c))

# The kernel library (docs/kernels.md): GEMM through CBLAS (OpenBLAS), the
# other kernels as loops, which run on a device's OpenMP threads when it has
# several cores ("Threads inside a device").  It uses the runtime's dtypes
# and bf16/f16 conversions, so a program links libshardc_lib.a
# libshardc_rt.a -ldnnl -lopenblas, with -fopenmp: gcc's libgomp, which
# oneDNN runs on too (clang: LLVM's libomp, which also serves oneDNN's
# libgomp calls; a library built by one compiler is linked by the same one).
OPENMP    ?= -fopenmp
LIB_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L $(CFLAGS) -fno-math-errno -fPIC $(OPENMP) -Iruntime -Ilib
LIB_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard lib/*.c lib/host/*.c))
LIB_HDR   := $(wildcard lib/*.h lib/host/*.h lib/*.def compiler/ir/*.def) runtime/shardc_rt.h
LIB_LINK   = $(BUILD)/libshardc_lib.a $(BUILD)/libshardc_rt.a -ldnnl -lopenblas -lm -pthread $(OPENMP)
LIB_TESTS := $(patsubst tests/lib/%.c,$(BUILD)/tests/lib/%,$(wildcard tests/lib/*.c))

.PHONY: all check check-fast check-asan fuzz install clean deps runtime-tests mpi-tests lib-tests bench bench-doc

all: $(BUILD)/shardc $(BUILD)/shardc.1 $(BUILD)/libshardc_rt.a $(BUILD)/libshardc_lib.a $(RT_MPI) \
	$(BUILD)/shardc-toolchain

# The compiler and flags the libraries are built with, for `shardc build`
# and `run` to link generated programs the same way (compiler/driver/
# toolchain.h): clang's -fopenmp is LLVM's libomp, gcc's libgomp, and a
# sanitized library needs the sanitizer at the link.  Rewritten only when
# it changes, so that a rebuilt tree keeps its build cache.
TOOLCHAIN_FLAGS = $(filter -fsanitize=% -fno-sanitize%,$(CFLAGS))
$(BUILD)/shardc-toolchain: FORCE
	@mkdir -p $(BUILD)
	@printf '# written by make: the compiler and flags of libshardc_lib.a and libshardc_rt.a\ncc=%s\nopenmp=%s\nflags=%s\n' \
	    '$(CC)' '$(OPENMP)' '$(TOOLCHAIN_FLAGS)' >$@.tmp
	@if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi
.PHONY: FORCE
FORCE:

# The man page, printed by shardc from the same tables as its --help
# (compiler/driver/usage.c).
$(BUILD)/shardc.1: $(BUILD)/shardc
	$(BUILD)/shardc --man > $@.tmp && mv $@.tmp $@

# One bison run writes both (a grouped target: make -j must not run it twice).
$(BUILD)/gen/parser.c $(BUILD)/gen/parser.h &: grammar/parser.y
	@mkdir -p $(BUILD)/gen
	bison -Wall -Werror --defines=$(BUILD)/gen/parser.h -o $(BUILD)/gen/parser.c $<

$(BUILD)/gen/lexer.c: grammar/lexer.l $(BUILD)/gen/parser.h
	@mkdir -p $(BUILD)/gen
	flex -o $@ $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Wall -Wno-unused-function -Wno-sign-compare -c -o $@ $<

$(BUILD)/obj/%.o: %.c $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(WARN) -c -o $@ $<

$(BUILD)/obj/runtime/%.o: runtime/%.c $(RT_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(RT_CFLAGS) $(WARN) -c -o $@ $<

$(BUILD)/libshardc_rt.a: $(RT_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/obj/runtime/mpi.o: runtime/mpi.c $(RT_HDR)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(RT_CFLAGS) $(WARN) -c -o $@ $<

$(BUILD)/libshardc_rt_mpi.a: $(BUILD)/obj/runtime/mpi.o
	rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/runtime/%: tests/runtime/%.c $(wildcard tests/runtime/*.h) $(BUILD)/libshardc_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(RT_CFLAGS) $(WARN) -o $@ $< $(BUILD)/libshardc_rt.a -lm

runtime-tests: $(RT_TESTS)

# The MPI backend's tests: test_collectives.c built for MPI, mpi_fail.c and mpi_stress.c.
MPI_TESTS := $(BUILD)/tests/runtime/mpi/test_collectives $(BUILD)/tests/runtime/mpi/mpi_fail \
             $(BUILD)/tests/runtime/mpi/mpi_stress

$(BUILD)/tests/runtime/mpi/test_collectives: tests/runtime/test_collectives.c tests/runtime/tap.h $(BUILD)/libshardc_rt.a $(RT_MPI)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(RT_CFLAGS) $(WARN) -DTEST_MPI -o $@ $< $(RT_MPI) $(BUILD)/libshardc_rt.a -lm

$(BUILD)/tests/runtime/mpi/%: tests/runtime/mpi/%.c $(BUILD)/libshardc_rt.a $(RT_MPI)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(RT_CFLAGS) $(WARN) -o $@ $< $(RT_MPI) $(BUILD)/libshardc_rt.a -lm

mpi-tests: $(if $(RT_MPI),$(MPI_TESTS))

$(BUILD)/obj/lib/%.o: lib/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(WARN) -c -o $@ $<

$(BUILD)/libshardc_lib.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/lib/%: tests/lib/%.c tests/lib/ktest.h tests/runtime/tap.h $(BUILD)/libshardc_lib.a $(BUILD)/libshardc_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(WARN) -o $@ $< $(LIB_LINK)

lib-tests: $(LIB_TESTS)

# The benchmarks of `make bench` (not part of check; bench/report.py runs
# them all in one go, prints each target met or not, and writes the report
# to $(BUILD)/bench/performance.md: docs/performance.md with its measured
# sections rewritten; `make bench-doc` or `make bench DOC=1` rewrites
# docs/performance.md itself, so that benchmarking leaves a clone clean
# unless asked): the machine's limits (FMA peak, STREAM), GEMM engines
# against each other, collectives of the threads backend and of OpenMPI,
# the samples against plain BLAS, compile time, and the cost model: it
# writes $(BUILD)/host.target (docs/autoshard.md) and compares its predicted
# times with the measured ones.  bench/coll_mpi needs mpicc;
# without it the report has no MPI column.  bench/threads (loops on a
# device's OpenMP threads against one thread, docs/kernels.md) is run by
# hand: build/bench/threads [T].
$(BUILD)/bench/gemm $(BUILD)/bench/gemm_shapes $(BUILD)/bench/limits $(BUILD)/bench/mlp_blas $(BUILD)/bench/threads: \
		$(BUILD)/bench/%: bench/%.c $(BUILD)/libshardc_lib.a $(BUILD)/libshardc_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(WARN) -pthread -o $@ $< $(LIB_LINK)

BENCH_PYTHON ?= /usr/bin/python3
BENCH_BIN := $(BUILD)/bench/limits $(BUILD)/bench/gemm $(BUILD)/bench/gemm_shapes $(BUILD)/bench/coll_threads $(BUILD)/bench/mlp_blas \
	$(if $(MPICC),$(BUILD)/bench/coll_mpi)

$(BUILD)/bench/coll_threads: bench/coll_threads.c $(BUILD)/libshardc_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(RT_CFLAGS) $(WARN) -o $@ $< $(BUILD)/libshardc_rt.a -lm

$(BUILD)/bench/coll_mpi: bench/coll_mpi.c
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) -std=c11 -D_POSIX_C_SOURCE=200809L $(CFLAGS) $(WARN) -o $@ $<


# BENCH_ARGS: more options for report.py (--quick, --only LETTERS).
BENCH_OUT = $(if $(DOC),docs/performance.md,$(BUILD)/bench/performance.md)

bench: all $(BENCH_BIN)
	$(BENCH_PYTHON) bench/report.py --build $(BUILD) --doc docs/performance.md --out $(BENCH_OUT) $(BENCH_ARGS)

bench-doc:
	$(MAKE) bench DOC=1

$(BUILD)/libfrontend.a: $(OBJ)
	rm -f $@
	ar rcs $@ $^

# shardc uses the kernel library's .npy reader (lib/host/npy.c).
$(BUILD)/shardc: $(BUILD)/obj/compiler/driver/main.o $(BUILD)/obj/compiler/driver/usage.o $(BUILD)/obj/compiler/driver/show.o \
		$(BUILD)/obj/compiler/driver/output.o $(INTERP_OBJ) $(CODEGEN_OBJ) \
		$(BUILD)/libfrontend.a $(BUILD)/libshardc_lib.a $(BUILD)/libshardc_rt.a
	$(CC) $(ALL_CFLAGS) -o $@ $^ -lglpk -lm -pthread

$(BUILD)/test_ir: tests/unit/test_ir.c $(BUILD)/libfrontend.a
	$(CC) $(ALL_CFLAGS) $(WARN) -o $@ $^ -lglpk -lm

# The sharding search's integer program against the plans experts choose
# (tests/autoshard/ilp_check.c, TAP-like output).
$(BUILD)/ilp_check: tests/autoshard/ilp_check.c $(BUILD)/libfrontend.a
	$(CC) $(ALL_CFLAGS) $(WARN) -o $@ $^ -lglpk -lm

# Every test: unit tests, lit golden and diagnostic tests, the same lit tests
# under ASan+UBSan, and a short fuzz run.  Ends with "N passed, N failed".
check: all $(BUILD)/test_ir $(BUILD)/ilp_check $(RT_TESTS) $(LIB_TESTS) mpi-tests
	@tests/run-tests $(BUILD)

# The edit-test loop's subset (unit, golden, interpreter, partitioner,
# runtime and kernel tests; tests/run-tests --fast), a minute or two.
check-fast: all $(BUILD)/test_ir $(BUILD)/ilp_check $(RT_TESTS) $(LIB_TESTS)
	@tests/run-tests --fast $(BUILD)

check-asan:
	$(MAKE) BUILD=build/asan CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" all

# libFuzzer over the whole front end; the samples and tests are the corpus.
$(BUILD)/fuzz_frontend: tests/fuzz/fuzz_frontend.c $(SRC) $(GEN) $(HDR)
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -DSHARDC_FUZZ_LIMITS -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all -I$(BUILD)/gen -Icompiler/base -o $@ tests/fuzz/fuzz_frontend.c $(SRC) $(GEN) -lglpk -lm

fuzz: $(BUILD)/fuzz_frontend
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-artifacts
	$(BUILD)/fuzz_frontend -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -artifact_prefix=$(BUILD)/fuzz-artifacts/ \
	    -max_len=4096 -dict=tests/fuzz/tdsl.dict $(BUILD)/fuzz-corpus samples tests/lit

# Headers go straight into PREFIX/include (every name starts with shardc_),
# where the generated C and prog.h find them with `-I PREFIX/include`, or
# with none for /usr/local; PREFIX/lib/pkgconfig/shardc.pc (and
# shardc-mpi.pc with the MPI backend) give a host program's flags
# (docs/codegen.md, "Linking a host program").
PUB_HDR := runtime/shardc_rt.h lib/shardc_lib.h lib/shardc_elementwise.h lib/shardc_elementwise.def \
	lib/shardc_parallel.h lib/shardc_npy.h lib/shardc_main.h lib/shardc_trace.h lib/shardc_session.h \
	lib/shardc_rng.h
VERSION := $(shell sed -n 's/^\#define SHARDC_VERSION "\(.*\)"/\1/p' compiler/driver/version.h)
PC_SED   = sed -e 's|@PREFIX@|$(abspath $(PREFIX))|' -e 's|@VERSION@|$(VERSION)|' -e 's|@CC@|$(CC)|' \
	-e 's|@OPENMP@|$(OPENMP)|g'

# The Python package (docs/python.md), where Debian's python3 looks for
# /usr/local's: PREFIX/lib/python3.X/dist-packages (and the package finds
# PREFIX/bin/shardc from there).
PYTHON_DIR ?= $(PREFIX)/lib/python$(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)/dist-packages

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/doc/shardc $(DESTDIR)$(PREFIX)/share/shardc/samples
	install -m 755 $(BUILD)/shardc $(DESTDIR)$(PREFIX)/bin/shardc
	install -m 755 tools/merge-traces $(DESTDIR)$(PREFIX)/bin/shardc-merge-traces
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 $(BUILD)/shardc.1 $(DESTDIR)$(PREFIX)/share/man/man1/shardc.1
	install -m 644 tools/shardc-completion.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/shardc
	install -m 644 docs/*.md LICENSE $(DESTDIR)$(PREFIX)/share/doc/shardc
	install -m 644 samples/*.tdsl $(DESTDIR)$(PREFIX)/share/shardc/samples
	install -d $(DESTDIR)$(PREFIX)/share/shardc/targets
	install -m 644 targets/*.target $(DESTDIR)$(PREFIX)/share/shardc/targets
	install -d $(DESTDIR)$(PREFIX)/share/shardc/samples/host
	install -m 644 samples/host/* $(DESTDIR)$(PREFIX)/share/shardc/samples/host
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(PUB_HDR) $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libshardc_rt.a $(BUILD)/libshardc_lib.a $(BUILD)/shardc-toolchain $(DESTDIR)$(PREFIX)/lib/
	$(if $(RT_MPI),install -m 644 $(RT_MPI) $(DESTDIR)$(PREFIX)/lib/libshardc_rt_mpi.a)
	$(PC_SED) tools/pkgconfig/shardc.pc.in >$(DESTDIR)$(PREFIX)/lib/pkgconfig/shardc.pc
	$(if $(RT_MPI),$(PC_SED) tools/pkgconfig/shardc-mpi.pc.in >$(DESTDIR)$(PREFIX)/lib/pkgconfig/shardc-mpi.pc)
	install -d $(DESTDIR)$(PYTHON_DIR)/shardc
	install -m 644 python/shardc/*.py $(DESTDIR)$(PYTHON_DIR)/shardc/

deps:
	tools/install-deps

clean:
	rm -rf build
