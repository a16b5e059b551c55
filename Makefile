# shmlock — top-level build. `make help` lists the targets.
#
# Build outputs go to $(O) (default build/); `make check` uses build/check and
# build/asan, so a release build and the test builds never mix objects.

# The one version number: the VERSION file. liblocal.h's LOCAL_VERSION_MAJOR
# and _MINOR, the symbol version node of libshm/liblocal.map and
# docs/openapi.json must agree with it (tests/install.sh checks).
VERSION    := $(shell cat VERSION)
SOVERSION  := 0
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
MANDIR     ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR    ?=
O          ?= build

CC       ?= cc
CFLAGS   ?= -O2 -g
WARNINGS := -std=gnu11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wundef
ifeq ($(WERROR),1)
WARNINGS += -Werror
endif
CPPFLAGS += -D_GNU_SOURCE -Iinclude -Ilibshm -Ibroker -DSHMLOCK_VERSION='"$(VERSION)"'
ifeq ($(CRASH_POINTS),1)
CPPFLAGS += -DLOCAL_CRASH_POINTS
endif
# Not added to CFLAGS: a CFLAGS= on the command line (make check passes
# CFLAGS="-O1 -g") would silently drop it and leave the build uninstrumented.
ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
ALL_CFLAGS = $(WARNINGS) $(CFLAGS) $(SAN_FLAGS) -fvisibility=hidden -MMD -MP

URCU_LIBS    := -lurcu-memb -lurcu-cds -lurcu-common
SYSTEMD_LIBS := $(shell pkg-config --libs libsystemd 2>/dev/null || echo -lsystemd)
CUNIT_LIBS   := $(shell pkg-config --libs cunit 2>/dev/null || echo -lcunit)
CURL_LIBS    := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
# OpenSSL: TLS for the TCP protocol (broker/faces/tcp/tcp_tls.c) and its tests.
TLS_LIBS     := $(shell pkg-config --libs openssl 2>/dev/null || echo -lssl -lcrypto)
HTTP_LIBS    := $(shell pkg-config --libs libmicrohttpd jansson 2>/dev/null || \
		  echo -lmicrohttpd -ljansson)

ifeq ($(V),1)
Q :=
say :=
else
Q := @
say = @printf '  %-7s %s\n' $(1) $(2);
endif

LIBSHM_SRC := $(wildcard libshm/*.c)
BROKER_SRC := $(sort $(shell find broker -name "*.c"))
CLI_SRC    := $(wildcard cli/*.c)
TESTLIB_SRC := tests/harness.c tests/broker_fixture.c tests/invariants.c tests/net_fixture.c \
	       tests/key_fixture.c tests/word_fixture.c tests/etcd_fixture.c tests/ui_fixture.c \
	       tests/tcp_fixture.c
UNIT_SRC   := $(wildcard tests/unit_*.c)
INTEG_SRC  := $(wildcard tests/it_*.c)

PIC_OBJ    := $(LIBSHM_SRC:%.c=$(O)/pic/%.o)
STATIC_OBJ := $(LIBSHM_SRC:%.c=$(O)/static/%.o)
# The web view's assets (ui/), embedded in the broker.
UI_ASSETS  := index.html app.js app.css
UI_GEN_OBJ := $(patsubst %,$(O)/gen/ui_%.o,$(subst .,_,$(UI_ASSETS)))
BROKER_OBJ := $(BROKER_SRC:%.c=$(O)/%.o) $(O)/gen/openapi_doc.o $(UI_GEN_OBJ)
CLI_OBJ    := $(CLI_SRC:%.c=$(O)/%.o)

SONAME   := liblocal.so.$(SOVERSION)
SHLIB    := $(O)/liblocal.so.$(VERSION)
# In-tree archive: every symbol global, so that the broker, the CLI and the
# tests reach internal functions.
STLIB    := $(O)/liblocal.a
# The installed archive: one relocatable object whose only global symbols
# are the public API (LOCAL_API, default visibility); the internals, hidden
# by -fvisibility=hidden, are made local, so a program with its own
# hex_encode() links against it.
DIST_STLIB := $(O)/dist/liblocal.a
BROKER   := $(O)/shmlockd
CLI      := $(O)/shmlock
TESTS    := $(O)/tests/shmlock-tests
DEMO     := $(O)/handover-demo
BENCH    := $(O)/bench/shmlock-bench

.PHONY: all install uninstall check test run bench clean help deps deps-run format format-all lint lint-changed static-check fuzz \
	fuzz-short fuzz-build header-check install-check
all: $(SHLIB) $(STLIB) $(DIST_STLIB) $(O)/liblocal.pc $(BROKER) $(if $(CLI_SRC),$(CLI))

# Objects depend on the flags they were built with, so changing SANITIZE or
# CRASH_POINTS in the same $(O) rebuilds instead of mixing objects.
FLAGS_STAMP := $(O)/.flags
FLAGS_NOW := $(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS)
$(shell mkdir -p $(O); [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || \
	echo '$(FLAGS_NOW)' > $(FLAGS_STAMP))

$(O)/pic/%.o: %.c $(FLAGS_STAMP)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -fPIC -c $< -o $@

$(O)/static/%.o $(O)/%.o: %.c $(FLAGS_STAMP)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(SHLIB): $(PIC_OBJ) libshm/liblocal.map
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,$(SONAME) \
		-Wl,--version-script=libshm/liblocal.map -Wl,--no-undefined \
		$(PIC_OBJ) -o $@ $(LDFLAGS) -lpthread
	$(Q)ln -sf liblocal.so.$(VERSION) $(O)/$(SONAME)
	$(Q)ln -sf $(SONAME) $(O)/liblocal.so

$(STLIB): $(STATIC_OBJ)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(DIST_STLIB): $(STATIC_OBJ)
	$(call say,AR,$@)
	@mkdir -p $(@D)
	$(Q)ld -r -o $(O)/dist/liblocal.o $^
	$(Q)objcopy --localize-hidden $(O)/dist/liblocal.o
	$(Q)rm -f $@ && ar rcs $@ $(O)/dist/liblocal.o

# The .pc says where the library is installed: it is written again whenever
# PREFIX, LIBDIR or INCLUDEDIR differ from the last build's (make install
# PREFIX=/usr after a plain make), through this stamp.
PC_NOW := $(PREFIX) $(LIBDIR) $(INCLUDEDIR) $(VERSION)
PC_STAMP := $(O)/.pcvars
$(shell mkdir -p $(O); [ "$$(cat $(PC_STAMP) 2>/dev/null)" = '$(PC_NOW)' ] || \
	echo '$(PC_NOW)' > $(PC_STAMP))

$(O)/liblocal.pc: libshm/liblocal.pc.in $(PC_STAMP)
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' $< > $@

$(BROKER): $(BROKER_OBJ) $(STLIB)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(BROKER_OBJ) $(STLIB) -o $@ $(LDFLAGS) $(URCU_LIBS) \
		$(SYSTEMD_LIBS) $(HTTP_LIBS) $(TLS_LIBS) $(CURL_LIBS) -lpthread

# The OpenAPI document, served live by the broker, compiled in from docs/.
$(O)/gen/openapi_doc.c: docs/openapi.json scripts/embed.sh
	$(call say,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sh scripts/embed.sh openapi_json $< > $@

# The web view's page, script and style (ui/), compiled into the broker
# (docs/web-view.md): nothing fetched at build or install time.
.SECONDARY: $(UI_GEN_OBJ:.o=.c)
$(O)/gen/ui_%.c: scripts/embed.sh $(addprefix ui/,$(UI_ASSETS))
	$(call say,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sh scripts/embed.sh ui_$* ui/$(subst _,.,$*) > $@

$(O)/gen/%.o: $(O)/gen/%.c
	$(call say,CC,$@)
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(CLI): $(CLI_OBJ) $(STLIB)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(CLI_OBJ) $(STLIB) -o $@ $(LDFLAGS) -ljansson -lpthread

$(DEMO): $(O)/docs/examples/handover.o $(STLIB)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) -lpthread

# The examples of docs/examples/, run by the examples test suite.
EXAMPLES := $(O)/examples/leader $(O)/examples/semaphore
$(EXAMPLES): $(O)/examples/%: $(O)/docs/examples/%.o $(STLIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) -lpthread

# Tests link the static archive so they can reach internal functions too,
# the broker's HTTP route table (checked against the OpenAPI document), the
# loop's fd watches (unit_watch.c) and the network module's pure parts
# (tests/unit_net.c).
NET_UNIT_OBJ := $(patsubst %,$(O)/broker/net/%.o,net_token net_conns net_rate net_web)
$(TESTS): $(TESTLIB_SRC:%.c=$(O)/%.o) $(UNIT_SRC:%.c=$(O)/%.o) $(INTEG_SRC:%.c=$(O)/%.o) \
		$(O)/tests/main.o $(O)/tests/runner.o $(O)/tests/isolate.o \
		$(O)/broker/faces/http/http_routes.o $(O)/broker/faces/http/http_body.o \
		$(O)/broker/core/watch.o $(NET_UNIT_OBJ) $(STLIB)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) $(CUNIT_LIBS) $(CURL_LIBS) $(HTTP_LIBS) $(TLS_LIBS) \
		-lpthread

BENCH_SRC := $(wildcard tests/bench/*.c)
$(BENCH): $(BENCH_SRC:tests/bench/%.c=$(O)/bench/%.o) $(STLIB)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) $(CURL_LIBS) $(HTTP_LIBS) -lpthread

$(O)/bench/%.o: tests/bench/%.c $(FLAGS_STAMP)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

# ---- running -------------------------------------------------------------

# Everything: build, run, test. deps-run: only what building and running
# need (make run), not the test toolchain.
deps:
	@scripts/install-deps.sh all

deps-run:
	@scripts/install-deps.sh run

test: $(TESTS) $(BROKER) $(if $(CLI_SRC),$(CLI)) $(EXAMPLES)
	SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) SHMLOCK_CLI_BIN=$(abspath $(CLI)) \
		SHMLOCK_EXAMPLES_DIR=$(abspath $(O))/examples $(TESTS)

# ---- make check ------------------------------------------------------------

# The README's test command: the -Werror build with crash points and its
# tests, the same suites under ASan+UBSan and under TSan, the Python
# binding, install-check, lint, the fuzzers, the kill soak, the cluster
# fault suite, valgrind, the Debian packages and the spin models. Nothing is
# left out to make it fast: the steps run side by side instead, in lanes
# (below), since most of them wait on brokers, clients and timers rather
# than use a CPU. Each step's output goes whole to build/check-logs/STEP.log
# (scripts/check-step.sh), printed when the step fails; a line per step
# says how long it took (wall and CPU seconds), and the table of all steps
# ends the run. Every step of one build passes the same flags, and each
# build is made once, before the steps that use it start, so that no step
# rebuilds what another built and no two makes write one tree at once.
CHECK_LOG  := build/check-logs
CHECK_VARS := O=build/check CRASH_POINTS=1 WERROR=1
# ASan's build carries line tables only (-g1): a report's stack keeps its
# files and lines (not the frames of inlined functions), for a third less
# compiling than -g. TSan's keeps -g: its suppressions (tests/tsan.supp)
# name inline functions, which only -g's debug information shows.
ASAN_VARS  := O=build/asan CRASH_POINTS=1 WERROR=1 SANITIZE=address,undefined CFLAGS="-O1 -g1"
TSAN_VARS  := O=build/tsan CRASH_POINTS=1 WERROR=1 SANITIZE=thread CFLAGS="-O1 -g"
# Run one step: its name is the target's without "check-".
STEP = @scripts/check-step.sh $(CHECK_LOG) $(@:check-%=%)
# The test runner keeps one test at a time while the load average is above
# its jobs plus the CPUs (tests/main.c). Here the other lanes make much of
# that load themselves (up to CHECK_JOBS compilers, a fuzzer, the models),
# most of it niced so that it takes no CPU time from the tests, but counted
# in the load average all the same: the passes hold back only above ten per CPU,
# when other work than make check's loads the machine.
CHECK_MAX_LOAD ?= $(shell echo $$((10 * $$(nproc))))
# Make's jobs: the lanes (five) and the CPUs, for the builds' compilers;
# more only crowd the machine and its load average, which the tests read.
CHECK_JOBS ?= $(shell echo $$((5 + $$(nproc))))
# What the steps with O=build/check run, built in one go.
CHECK_BUILT = tests/shmlock-tests examples/leader examples/semaphore soak/shmlock-soak \
	jepsen/jepsen-worker python/_fast$(PY_EXT_SUFFIX)

.PHONY: check-steps check-model check-lint check-build check-test check-python check-install \
	check-soak check-jepsen check-valgrind check-asan-build check-asan check-tsan-build \
	check-tsan check-fuzz check-deb check-knot
check: deps
	@rm -rf $(CHECK_LOG) && mkdir -p $(CHECK_LOG) && date +%s > $(CHECK_LOG)/start
	@SHMLOCK_TEST_MAX_LOAD=$${SHMLOCK_TEST_MAX_LOAD:-$(CHECK_MAX_LOAD)} \
		$(MAKE) --no-print-directory -k -j$(CHECK_JOBS) check-steps; rc=$$?; \
		scripts/check-step.sh --summary $(CHECK_LOG); exit $$rc

# The lanes. Each runs its steps one after the other; the lanes run side
# by side. The test passes (the check build's, TSan's, ASan's, then the
# shorter runs) are all in lane 1, one pass at a time, each with its tests
# side by side: a test that runs alone in its pass (TEST_ALONE) then has no
# other test beside it, and the deadlines see the load they were made for.
# The other lanes (lint, fuzzers, models, Debian packages) keep no deadline
# of a test and run niced: they take the CPU time the tests leave; the
# sanitizer builds, which lane 1 waits for, are not niced.
check-steps: check-jepsen check-valgrind check-fuzz check-model check-deb check-knot

# Lane 1: the check build, its tests, TSan's and ASan's, then the short
# runs that use the check build.
check-build:
	$(STEP) $(MAKE) $(CHECK_VARS) all $(addprefix build/check/,$(CHECK_BUILT))
check-test: check-build
	$(STEP) $(MAKE) $(CHECK_VARS) test
check-tsan: check-test check-tsan-build
	$(STEP) $(MAKE) $(TSAN_VARS) test-tsan
check-asan: check-tsan check-asan-build
	$(STEP) $(MAKE) $(ASAN_VARS) test
check-python: check-asan
	$(STEP) $(MAKE) $(CHECK_VARS) python-check
check-install: check-python
	$(STEP) $(MAKE) $(CHECK_VARS) install-check
check-soak: check-install
	$(STEP) $(MAKE) $(CHECK_VARS) soak-short
check-jepsen: check-soak
	$(STEP) $(MAKE) $(CHECK_VARS) jepsen-short

# Lane 2: the sanitizer builds, TSan's first (its pass comes first), not
# niced: lane 1 waits for them (niced, on a machine others loaded, they
# kept lane 1 idle 4.5 min), then the checks of the source, then valgrind
# (not niced either: its tests keep their deadlines under memcheck).
check-tsan-build:
	$(STEP) $(MAKE) $(TSAN_VARS) build/tsan/tests/shmlock-tests \
		build/tsan/shmlockd build/tsan/shmlock
check-asan-build: check-tsan-build
	$(STEP) $(MAKE) $(ASAN_VARS) build/asan/tests/shmlock-tests \
		build/asan/shmlockd build/asan/shmlock build/asan/examples/leader \
		build/asan/examples/semaphore
check-lint: check-asan-build
	$(STEP) nice -n 10 sh -c '$(MAKE) header-check && $(MAKE) lint'
check-valgrind: check-lint check-build
	$(STEP) $(MAKE) $(CHECK_VARS) valgrind

# Lanes 3 to 5: one CPU each, for the most part, niced. The Debian
# packages' build waits for the check build, which lane 1 waits for.
check-fuzz:
	$(STEP) nice -n 10 $(MAKE) fuzz-short
check-model:
	$(STEP) nice -n 10 $(MAKE) $(CHECK_VARS) model
check-deb: check-build
	$(STEP) nice -n 10 $(MAKE) deb-check
# The knot among broker files (scripts/knot.py) reads the check build's objects.
check-knot: check-build
	$(STEP) $(MAKE) $(CHECK_VARS) knot

run: deps-run
	$(MAKE) all $(DEMO)
	scripts/run.sh $(abspath $(BROKER)) $(abspath $(DEMO))

bench: deps
	$(MAKE) all $(BENCH) $(PY_EXT)
	SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) $(BENCH)
	@# Section 12, cluster keys on etcd: a real etcd and two brokers as hosts.
	@case ",$${SHMLOCK_BENCH_ONLY:-12}," in *,12,*) \
		echo "== 12. Cluster keys on etcd (scripts/cluster-bench.sh; docs/cluster.md)"; \
		sh scripts/cluster-bench.sh $(O);; esac
	@# Section 13, the Python binding against fcntl.flock and raw ctypes, in one process.
	@case ",$${SHMLOCK_BENCH_ONLY:-13}," in *,13,*) \
		SHMLOCK_LIBLOCAL=$(abspath $(O))/$(SONAME) SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) \
		SHMLOCK_ACCEL=$(abspath $(PY_EXT)) \
		PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 python/bench/binding.py;; esac
	@# Section 14, cluster keys at scale: 3 and 5 brokers as hosts on one etcd member,
	@# local operations per second and etcd writes per 1000 (docs/cluster.md, "Holding").
	@case ",$${SHMLOCK_BENCH_ONLY:-14}," in *,14,*) \
		echo "== 14. Cluster keys at scale: hosts on one etcd member (scripts/cluster-scale.sh)"; \
		sh scripts/cluster-scale.sh $(O);; esac

# ---- the knot (docs/architecture.md, "The core and its faces") ---------------

# The file-level call graph of broker/, drawn from the built objects (nm), and
# its largest strongly connected component: the files that each reach all the
# others. The core meets faces only through broker/core/face.h, so the knot
# stays within one face or the core (at most KNOT_MAX files).
KNOT_MAX ?= 5
.PHONY: knot
knot: $(BROKER)
	/usr/bin/python3 scripts/knot.py --max $(KNOT_MAX) $(O)

# ---- the Python binding (python/, docs/python.md) -------------------------

# The accelerator shmlock._fast (python/ext/, docs/python.md "The
# accelerator"), built here against this build's liblocal.so with the
# project's warnings, into $(O)/python/ and loaded by path (SHMLOCK_ACCEL):
# the source tree stays clean and each O= has its own. python/setup.py
# builds the same sources for packages. No sanitizer flags: Python loads
# it, and the binding's tests run against the plain builds.
PY_EXT_SUFFIX := $(shell /usr/bin/python3 -c \
	'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PY_INCLUDE    := $(shell /usr/bin/python3 -c \
	'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT_SRC    := $(wildcard python/ext/*.c)
PY_EXT        := $(O)/python/_fast$(PY_EXT_SUFFIX)
$(PY_EXT): $(PY_EXT_SRC) python/ext/fast.h $(SHLIB) $(FLAGS_STAMP)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -D_GNU_SOURCE -Iinclude -isystem $(PY_INCLUDE) $(WARNINGS) $(CFLAGS) -fPIC \
		-fvisibility=hidden -shared $(PY_EXT_SRC) -o $@ -L$(O) -llocal -lpthread -lm

# Its pytest suite with Debian's python3, against this build's liblocal.so
# and a broker it starts on a private socket (python/tests/conftest.py):
# twice, with the accelerator and with ctypes alone (SHMLOCK_ACCEL=off),
# which must answer alike.
.PHONY: python-check
python-check: $(SHLIB) $(BROKER) $(PY_EXT)
	cd python && for accel in $(abspath $(PY_EXT)) off; do \
		echo "  PYTEST  SHMLOCK_ACCEL=$$accel"; \
		SHMLOCK_ACCEL=$$accel SHMLOCK_LIBLOCAL=$(abspath $(O))/$(SONAME) \
		SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) PYTHONDONTWRITEBYTECODE=1 \
		timeout 300 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests || exit 1; \
	done

# ---- reliability (docs/reliability.md) -----------------------------------

.PHONY: soak soak-short cluster-soak model test-tsan valgrind
SOAK     := $(O)/soak/shmlock-soak
SOAK_SRC := $(wildcard tests/soak/*.c)
SECONDS  ?= 60

$(SOAK): $(SOAK_SRC:%.c=$(O)/%.o) $(O)/tests/invariants.o $(STLIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) -lpthread

# The kill soak: make soak SECONDS=N [SEED=N]; soak-short is the run in check.
soak: $(SOAK) $(BROKER)
	SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) $(SOAK) --seconds $(SECONDS) $(if $(SEED),--seed $(SEED))

soak-short: $(SOAK) $(BROKER)
	SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) $(SOAK) --seconds 20 $(if $(SEED),--seed $(SEED))

# The cross-host kill soak of cluster keys (a real etcd, three brokers; holders
# and brokers SIGKILLed): cluster/kill_soak for $(SECONDS) s, $(RUNS) runs.
cluster-soak: $(TESTS) $(BROKER) $(CLI)
	SECONDS_SOAK=$(SECONDS) RUNS=$(or $(RUNS),1) $(if $(SEED),SEED=$(SEED)) \
		sh scripts/cluster-soak.sh $(O)

# The fault suite of cluster keys (docs/jepsen.md): a real 3-member etcd,
# three brokers as hosts behind TCP proxies that partition, liblocal clients
# on a lock and a semaphore, a seeded nemesis (broker, client and etcd
# SIGSTOP/SIGKILL, partitions, a client stopped inside its hold or inside the
# key mutex), then tests/jepsen/check.py over the records. It needs a
# CRASH_POINTS=1 build (the stop inside the key mutex): without one it runs
# in build/check. make jepsen [SECONDS=60] [RUNS=3] [SEED=N]; jepsen-short
# is the fixed schedule that check runs.
.PHONY: jepsen jepsen-short
JEPSEN_WORKER := $(O)/jepsen/jepsen-worker
JEPSEN_RUN = PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tests/jepsen/run.py --broker $(abspath $(BROKER)) \
	--worker $(abspath $(JEPSEN_WORKER))

$(JEPSEN_WORKER): $(O)/tests/jepsen/worker.o $(STLIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) -lpthread

ifeq ($(CRASH_POINTS),1)
jepsen: $(JEPSEN_WORKER) $(BROKER)
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tests/jepsen/test_check.py
	$(JEPSEN_RUN) --seconds $(SECONDS) --runs $(or $(RUNS),3) $(if $(SEED),--seed $(SEED))

jepsen-short: $(JEPSEN_WORKER) $(BROKER)
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tests/jepsen/test_check.py
	$(JEPSEN_RUN) --short $(if $(SEED),--seed $(SEED))
else
# Without crash points the stop inside the key mutex cannot be had: the
# build make check tests with.
jepsen jepsen-short:
	$(MAKE) O=build/check CRASH_POINTS=1 WERROR=1 $@
endif

# The Promela model of the per-key protocol (tests/model/key.pml), checked
# exhaustively with spin; MODEL_DEFS=-DBUG_... reproduces an open bug.
model: deps
	tests/model/check.sh $(O)/model $(MODEL_DEFS)

# ThreadSanitizer sees the memory accesses of one process's threads only:
# the other processes on the segment (clients, the broker) are invisible to
# it, so it cannot judge the cross-process protocol and reports nothing
# about it. It runs the suites whose concurrency includes threads of one
# process: locks and handoff (threads with their own sessions), watch (a watcher and a
# changer), the lease storm, and unit; the brokers they start are TSan
# builds too (event loop, doorbell and liburcu threads). Each process logs
# to $(O)/tsan.PID; any such file fails the run. The other lease tests
# restart brokers in a loop and outrun their deadlines under TSan.
# Of the handle suite, the threaded tests but the one whose point is
# lock-free reads of an entry another thread keeps re-creating (TSan reports
# each field read, all checked against the fast word: tests/tsan.supp).
TSAN_SUITES := locks handoff unit watch leases/every_lease_of_a_storm_expires http cluster \
	handle/a_kept_node_is_one_thread_s handle/threads_sharing_handles_keep_the_counts \
	handle/a_re_acquire_never_answers_another_grant_s_token \
	consul/blocking_queries_woken_by_api_liblocal_and_cli
# Three tests at once: under TSan a broker and its clients run 5 to 15
# times slower, but they mostly wait (the pass used 95 CPU seconds in 409 s
# one test at a time); three such passes side by side, three tests at
# once each, at load 20 to 38, took 381 to 387 s each with no deadline
# missed but one (cluster/broker_stopped: its broker stopped inside a key's
# mutex, which a loaded machine makes likely at any job count).
TSAN_TEST_JOBS ?= 3
test-tsan: $(TESTS) $(BROKER) $(if $(CLI_SRC),$(CLI))
	@rm -f $(O)/tsan.*
	SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) SHMLOCK_CLI_BIN=$(abspath $(CLI)) \
	SHMLOCK_TEST_JOBS=$(TSAN_TEST_JOBS) \
	TSAN_OPTIONS="halt_on_error=0 log_path=$(abspath $(O))/tsan \
		suppressions=$(abspath tests/tsan.supp)" $(TESTS) $(TSAN_SUITES)
	@if ls $(O)/tsan.* >/dev/null 2>&1; then cat $(O)/tsan.*; \
		echo "ThreadSanitizer reported the above"; exit 1; fi

# memcheck over the in-process suites (unit, keyops). The runner forks
# every test; valgrind follows fork() (the child runs on the same
# valgrind), and an error in a child makes that child exit with
# --error-exitcode, which fails its test and so the run. Children of exec() (brokers) are not traced.
VALGRIND := valgrind -q --error-exitcode=1 --trace-children=no --child-silent-after-fork=no \
	--leak-check=full --errors-for-leak-kinds=definite --suppressions=tests/valgrind.supp
# One test at a time: a test under memcheck runs 20 to 50 times slower, and
# two beside it on a small machine would push it past its deadline.
valgrind: $(TESTS) $(BROKER)
	SHMLOCK_BROKER_BIN=$(abspath $(BROKER)) SHMLOCK_TEST_JOBS=1 $(VALGRIND) $(TESTS) unit keyops

# The public header must compile on its own, as C and as C++ (liburcu does
# the same for its headers).
header-check:
	@printf '#include <liblocal.h>\nint main(void) { return local_strerror(0) == 0; }\n' | \
		$(CC) -std=c99 -Wall -Wextra -Werror -pedantic -Iinclude -x c -fsyntax-only -
	@printf '#include <liblocal.h>\nint main() { return local_strerror(0) == nullptr; }\n' | \
		$(CXX) -std=c++11 -Wall -Wextra -Werror -pedantic -Iinclude -x c++ -fsyntax-only -
	@# The growable structs' macros, as C99 and C++11 programs use them.
	@printf '#include <liblocal.h>\nint main(void) { static LOCAL_OPTS(local_key_info, k);\n%s\n' \
		'LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0); return LOCAL_HAS(&k, token) + (int)o.sz; }' | \
		$(CC) -std=c99 -Wall -Wextra -Werror -pedantic -Iinclude -x c -fsyntax-only -
	@printf '#include <liblocal.h>\nint main() { local_key_info k{}; k.sz = sizeof k;\n%s\n' \
		'return LOCAL_HAS(&k, token) + (local_version() == nullptr); }' | \
		$(CXX) -std=c++11 -Wall -Wextra -Werror -pedantic -Iinclude -x c++ -fsyntax-only -
	@echo "  OK      include/liblocal.h compiles alone as C99 and C++11"

# ---- fuzzing (clang libFuzzer, ASan+UBSan) --------------------------------

FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SECONDS ?= 300
FUZZ_O := build/fuzz
# fuzz_cli also needs the CLI's parsers and the duration parser, built here with the target's flags
# (the rest of cli/ wants a broker and jansson).
FUZZ_CLI_SRC := cli/args.c libshm/duration.c cli/escape.c
# fuzz_http runs the broker in process: all of broker/ but main.c, and the
# OpenAPI document it serves, built in $(FUZZ_O) with the fuzz flags; the
# broker's RCU frees are made synchronous (see tests/fuzz/fuzz_http.c).
FUZZ_BROKER_OBJ := $(patsubst %.c,$(FUZZ_O)/%.o,$(filter-out broker/core/main.c,$(BROKER_SRC))) \
		   $(FUZZ_O)/gen/openapi_doc.o $(patsubst %,$(FUZZ_O)/gen/ui_%.o,index_html app_js app_css)

# The objects in one recursive make (its own flags), then each target
# linked by a rule of its own, side by side under make's jobs.
FUZZ_LINKS := $(FUZZ_TARGETS:%=fuzz-link-%)
.PHONY: fuzz-objs $(FUZZ_LINKS)
fuzz-build: $(FUZZ_LINKS)
fuzz-objs:
	$(MAKE) O=$(FUZZ_O) CC=clang SANITIZE=address,undefined \
		CFLAGS="-O1 -g -fsanitize=fuzzer-no-link" $(FUZZ_O)/liblocal.a $(FUZZ_BROKER_OBJ)
$(FUZZ_LINKS): fuzz-link-%: fuzz-objs
	@echo "  FUZZ    $(FUZZ_O)/$*"
	@libs=; \
	case $* in fuzz_cli) extra="-Icli $(FUZZ_CLI_SRC)";; \
	fuzz_tcp) extra="-Ibroker broker/faces/tcp/tcp_parse.c broker/net/dflockd.c";; \
	fuzz_http_body) extra="-Ibroker broker/faces/http/http_body.c"; libs="$(HTTP_LIBS)";; \
	fuzz_http) extra="-Ibroker -Itests tests/invariants.c $(FUZZ_BROKER_OBJ)"; \
		libs="-Wl,--wrap=urcu_memb_call_rcu $(URCU_LIBS) $(SYSTEMD_LIBS) $(HTTP_LIBS) $(TLS_LIBS) $(CURL_LIBS)";; \
	*) extra=;; esac; \
	clang -O1 -g -D_GNU_SOURCE -Iinclude -Ilibshm \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		tests/fuzz/$*.c $$extra $(FUZZ_O)/liblocal.a $$libs -lpthread \
		-o $(FUZZ_O)/$*

# Each target for FUZZ_SECONDS (default 5 minutes); `fuzz-short` is the
# bounded run that `make check` does. New inputs go to a scratch corpus (so
# fuzz-short starts from the committed seeds in tests/fuzz/corpus/ only when
# build/fuzz is fresh, as in CI).
# One rule per target (fuzz-short-NAME, fuzz-long-NAME), so that make's
# jobs run the targets side by side: in make check their lane is niced and
# takes the CPU time the tests leave, which several fuzzers at once take
# more of than one. Each keeps its own log and corpus, and prints its lines
# when it is done.
FUZZ_LONG := $(FUZZ_TARGETS:%=fuzz-long-%)
FUZZ_SHORT := $(FUZZ_TARGETS:%=fuzz-short-%)
.PHONY: $(FUZZ_LONG) $(FUZZ_SHORT)
fuzz: $(FUZZ_LONG)
fuzz-short: $(FUZZ_SHORT)
$(FUZZ_LONG): fuzz-long-%: fuzz-build
	@$(call fuzz_run,$*,$(FUZZ_SECONDS) s,-max_total_time=$(FUZZ_SECONDS))
$(FUZZ_SHORT): fuzz-short-%: fuzz-build
	@runs=$(FUZZ_SHORT_RUNS); case $* in fuzz_http) runs=$(FUZZ_HTTP_SHORT_RUNS);; \
		fuzz_tcp) runs=$(FUZZ_TCP_SHORT_RUNS);; \
		fuzz_http_body) runs=$(FUZZ_HTTP_BODY_SHORT_RUNS);; esac; \
		$(call fuzz_run,$*,$$runs runs (seed 1),-seed=1 -runs=$$runs)
# Run target $(1) ($(2) says for how long) with libFuzzer options $(3).
fuzz_run = mkdir -p $(FUZZ_O)/corpus/$(1:fuzz_%=%); \
	$(FUZZ_O)/$(1) $(3) -timeout=10 -print_final_stats=1 -artifact_prefix=$(FUZZ_O)/ \
		$(FUZZ_O)/corpus/$(1:fuzz_%=%) tests/fuzz/corpus/$(1:fuzz_%=%) 2> $(FUZZ_O)/$(1).log || \
		{ echo "  FAIL    $(1) for $(2)"; tail -50 $(FUZZ_O)/$(1).log; exit 1; }; \
	echo "  RUN     $(1) for $(2): $$(grep -E 'stat::number_of_executed_units|Done' \
		$(FUZZ_O)/$(1).log | tail -2 | tr -s ' \n' ' ')"
# make check runs a fixed number of inputs from a fixed seed: the same
# exploration every time, so CI is reproducible; make fuzz explores anew.
FUZZ_SHORT_RUNS ?= 2000000
# fuzz_http does a whole HTTP exchange with an in-process broker per input
# (2000 to 3000 a second under ASan, against 100 000s for the decoders):
# 100 000 take 30 to 50 s.
FUZZ_HTTP_SHORT_RUNS ?= 100000
# fuzz_tcp parses whole request streams (about 35 000 a second under ASan):
# 800 000 take 20 to 25 s.
FUZZ_TCP_SHORT_RUNS ?= 800000
# fuzz_http_body parses each input with jansson five times: 500 000 take
# about 3 s (13 s on a loaded 2-CPU machine).
FUZZ_HTTP_BODY_SHORT_RUNS ?= 500000

# ---- install -------------------------------------------------------------

# Units and sysusers.d: under PREFIX (/usr/local/lib/systemd/system is in
# systemd's search path), except for PREFIX=/usr, where they go where this
# machine's systemd says (its pkg-config file; Debian's /lib/systemd/system
# without one).
ifeq ($(PREFIX),/usr)
SYSTEMDUNITDIR ?= $(or $(shell pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null),\
			/lib/systemd/system)
SYSUSERSDIR    ?= $(or $(shell pkg-config --variable=sysusersdir systemd 2>/dev/null),\
			/usr/lib/sysusers.d)
else
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR    ?= $(PREFIX)/lib/sysusers.d
endif
COMPLETIONDIR  ?= $(PREFIX)/share/bash-completion/completions
# The README, the guides of docs/ and the network drop-in example, so that an
# installed broker comes with what an operator reads (Debian: /usr/share/doc/shmlockd).
DOCDIR         ?= $(PREFIX)/share/doc/shmlock
DOC_FILES      := README.md docs/cluster.md docs/security.md docs/http-api.md docs/tcp-protocol.md \
		  docs/consul-api.md docs/python.md docs/upgrades.md docs/web-view.md

# Every function of the public header gets a man page link to liblocal(3),
# so that `man local_lock` finds it.
MAN3_LINKS := $(shell sed -n 's/^LOCAL_API [^\x28]*[ *]\(local_[a-z_0-9]*\)\x28.*/\1/p' \
		include/liblocal.h) local_session_opts_init # a macro now

# What install writes, one path a line, without DESTDIR: uninstall removes
# exactly these.
INSTALLED_FILES := $(LIBDIR)/liblocal.so.$(VERSION) $(LIBDIR)/$(SONAME) $(LIBDIR)/liblocal.so \
	$(LIBDIR)/liblocal.a $(INCLUDEDIR)/liblocal.h $(PKGCONFIGDIR)/liblocal.pc \
	$(SBINDIR)/shmlockd $(MANDIR)/man3/liblocal.3 $(MANDIR)/man8/shmlockd.8 \
	$(MAN3_LINKS:%=$(MANDIR)/man3/%.3) \
	$(if $(CLI_SRC),$(BINDIR)/shmlock $(MANDIR)/man1/shmlock.1 $(COMPLETIONDIR)/shmlock) \
	$(SYSTEMDUNITDIR)/shmlockd.service $(SYSTEMDUNITDIR)/shmlockd.socket \
	$(SYSTEMDUNITDIR)/shmlockd-http.socket $(SYSTEMDUNITDIR)/shmlockd-tcp.socket \
	$(SYSTEMDUNITDIR)/shmlockd-consul.socket \
	$(SYSTEMDUNITDIR)/shmlockd-metrics.socket \
	$(SYSUSERSDIR)/shmlock.conf \
	$(addprefix $(DOCDIR)/,$(notdir $(DOC_FILES))) $(DOCDIR)/examples/shmlockd-network.conf
INSTALL_DIRS := $(sort $(dir $(INSTALLED_FILES)))
# The directories install had to create are listed here (with DESTDIR), so
# that uninstall removes them again once empty, and no other.
INSTALL_DIRS_LOG := $(O)/install-dirs.txt

.PHONY: install-units
install: all
	@for d in $(INSTALL_DIRS:%=$(DESTDIR)%); do \
		d=$${d%/}; todo=; \
		while [ -n "$$d" ] && [ ! -d "$$d" ]; do todo="$$d $$todo"; d=$${d%/*}; done; \
		for t in $$todo; do install -d "$$t" && echo "$$t" >> $(INSTALL_DIRS_LOG); done; \
	done
	install -m 0755 $(SHLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf liblocal.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/liblocal.so
	install -m 0644 $(DIST_STLIB) $(DESTDIR)$(LIBDIR)/
	install -m 0644 include/liblocal.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 0644 $(O)/liblocal.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 0755 $(BROKER) $(DESTDIR)$(SBINDIR)/
	install -m 0644 docs/liblocal.3 $(DESTDIR)$(MANDIR)/man3/
	for f in $(MAN3_LINKS); do echo '.so man3/liblocal.3' > $(DESTDIR)$(MANDIR)/man3/$$f.3; \
		chmod 0644 $(DESTDIR)$(MANDIR)/man3/$$f.3; done
	install -m 0644 docs/shmlockd.8 $(DESTDIR)$(MANDIR)/man8/
	$(if $(CLI_SRC),install -m 0755 $(CLI) $(DESTDIR)$(BINDIR)/)
	$(if $(CLI_SRC),install -m 0644 docs/shmlock.1 $(DESTDIR)$(MANDIR)/man1/)
	$(if $(CLI_SRC),install -m 0644 cli/shmlock.bash-completion $(DESTDIR)$(COMPLETIONDIR)/shmlock)
	$(MAKE) --no-print-directory install-units
	install -m 0644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	sed 's|@SBINDIR@|$(SBINDIR)|g' systemd/shmlockd-network.conf.in \
		> $(DESTDIR)$(DOCDIR)/examples/shmlockd-network.conf
	chmod 0644 $(DESTDIR)$(DOCDIR)/examples/shmlockd-network.conf
	@if [ -z "$(DESTDIR)" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
			echo "ldconfig"; ldconfig; \
		else \
			echo "note: run ldconfig as root so that programs find liblocal.so.$(SOVERSION) in $(LIBDIR)"; \
		fi; \
	fi

# ExecStart= names the installed broker: the service file is generated here.
install-units:
	@# Alone (the systemd tests install the units of the broker under test)
	@# it makes its directories; under `make install` they exist, recorded.
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR)
	sed 's|@SBINDIR@|$(SBINDIR)|g' systemd/shmlockd.service.in \
		> $(DESTDIR)$(SYSTEMDUNITDIR)/shmlockd.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/shmlockd.service
	install -m 0644 systemd/shmlockd.socket systemd/shmlockd-http.socket \
		systemd/shmlockd-tcp.socket systemd/shmlockd-metrics.socket \
		$(DESTDIR)$(SYSTEMDUNITDIR)/
	install -m 0644 systemd/shmlockd-consul.socket $(DESTDIR)$(SYSTEMDUNITDIR)/
	install -m 0644 systemd/shmlock.sysusers $(DESTDIR)$(SYSUSERSDIR)/shmlock.conf

uninstall:
	rm -f $(INSTALLED_FILES:%=$(DESTDIR)%)
	@if [ -f $(INSTALL_DIRS_LOG) ]; then \
		for d in $$(sort -r -u $(INSTALL_DIRS_LOG)); do \
			case "$$d" in "$(DESTDIR)"*) rmdir "$$d" 2>/dev/null || true;; esac; \
		done; \
		for d in $$(cat $(INSTALL_DIRS_LOG)); do [ ! -d "$$d" ] || echo "$$d"; done \
			> $(INSTALL_DIRS_LOG).new; \
		mv $(INSTALL_DIRS_LOG).new $(INSTALL_DIRS_LOG); \
		[ -s $(INSTALL_DIRS_LOG) ] || rm -f $(INSTALL_DIRS_LOG); \
	fi

# make install into a scratch DESTDIR, check what landed where, link a
# program with its own hex_encode() against the static library, uninstall,
# check that nothing is left (tests/install.sh).
install-check: all
	+tests/install.sh $(O) $(abspath $(O))/install-check

# ---- Debian packages (docs/packaging.md) ---------------------------------

# Build the packages of debian/ out of tree, lintian them, install them on
# this machine (as root), use the installed broker, CLI, library and binding,
# purge them and check that nothing is left (tests/deb-check.sh).
# The package build must not inherit this make's command-line variables
# (O=, CRASH_POINTS=, PREFIX= ... travel in MAKEFLAGS): debian/rules sets its own.
# Debian's tools only: no pyenv python or /usr/local tool ahead in PATH.
DEB_ENV := env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH=/usr/sbin:/usr/bin:/sbin:/bin
.PHONY: deb deb-check
deb-check:
	@scripts/install-deps.sh deb
	$(DEB_ENV) tests/deb-check.sh

# The packages alone, into $(O)/deb (built from a copy: the tree stays clean).
deb:
	@scripts/install-deps.sh deb
	rm -rf $(O)/deb && mkdir -p $(O)/deb/shmlock-$(VERSION)
	git ls-files -co --exclude-standard | while read -r f; do [ ! -e "$$f" ] || echo "$$f"; done | \
		tar -cf - -T - | tar -C $(O)/deb/shmlock-$(VERSION) -xf -
	cd $(O)/deb/shmlock-$(VERSION) && $(DEB_ENV) dpkg-buildpackage -us -uc -b -j2
	rm -rf $(O)/deb/shmlock-$(VERSION)
	@ls $(O)/deb/*.deb

# Every tracked C file, for lint and format-all.
C_TRACKED = git ls-files -z -- '*.c' '*.h'

# clang-format (.clang-format) over the whole tree: make lint fails on any
# file it would change (make format-all rewrites them), and every tracked
# file must be on docs/architecture.md's map (scripts/doc-map-check.sh).
lint: static-check
	$(C_TRACKED) | xargs -0 clang-format-14 --dry-run -Werror
	sh scripts/doc-map-check.sh

# Rewrite every tracked C file as clang-format lays it out.
format-all:
	$(C_TRACKED) | xargs -0 clang-format-14 -i

# Only the lines changed since $(LINT_BASE): `make lint-changed LINT_BASE=main~3`.
LINT_BASE ?= HEAD
lint-changed:
	git clang-format-14 --diff --extensions c,h $(LINT_BASE) -- libshm broker cli include tests

format:
	git clang-format-14 --extensions c,h $(LINT_BASE) -- libshm broker cli include tests

# cppcheck over the product's sources; part of make check, so it stays at
# zero findings (an intended pattern takes a cppcheck-suppress comment).
static-check:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr --library=scripts/cppcheck-jansson.cfg \
		-D_GNU_SOURCE -Iinclude -Ilibshm -Ibroker libshm broker cli

clean:
	rm -rf build

help:
	@echo 'make            build liblocal (.so, .a, .pc), shmlockd and shmlock'
	@echo 'make check      install missing deps (as root), build with -Werror, run all'
	@echo '                tests, again under ASan+UBSan and TSan, and every reliability'
	@echo '                step, side by side; each step'"'"'s log in build/check-logs/'
	@echo 'make run        run shmlockd in the foreground with a short demo'
	@echo 'make bench      print the benchmark tables'
	@echo 'make python-check  the Python binding'"'"'s pytest suite against this build, with its'
	@echo '                C accelerator and with ctypes alone'
	@echo 'make jepsen     the fault suite of cluster keys (docs/jepsen.md): SECONDS=60 RUNS=3'
	@echo '                [SEED=N]; make jepsen-short is its fixed schedule (in make check)'
	@echo 'make install    install under $$(DESTDIR)$$(PREFIX) (ldconfig when DESTDIR is empty)'
	@echo 'make uninstall  remove what make install wrote (same PREFIX, DESTDIR and O)'
	@echo 'make deb        build the Debian packages into $$(O)/deb'
	@echo 'make deb-check  build, lintian, install, use and purge the Debian packages (root)'
	@echo 'make lint       cppcheck (also in make check) and clang-format over every tracked'
	@echo '                .c/.h; make format-all rewrites them all; make lint-changed and'
	@echo '                make format: only the lines changed since LINT_BASE (HEAD)'
	@echo 'make SANITIZE=address,undefined|thread   sanitizer build; V=1 verbose'

-include $(shell find $(O) -name '*.d' -type f 2>/dev/null)
