/* SPDX-License-Identifier: MIT */
/* shmlock(1): what the command files share. See docs/shmlock.1. */
#ifndef SHMLOCK_CLI_H
#define SHMLOCK_CLI_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "duration.h"
#include "liblocal.h"

/* The Makefile passes the VERSION file's: it is the one source. */
#ifndef SHMLOCK_VERSION
#define SHMLOCK_VERSION "unknown"
#endif

/*
 * Exit statuses, documented in shmlock(1) and in --help: keep them stable.
 * 0, 1 and 2 are consul lock's (1: "lock acquisition failed", its timeout
 * included; 2: -child-exit-code). The others are told apart so that a
 * script can react to each: 64 and 69 are sysexits.h's EX_USAGE and
 * EX_UNAVAILABLE (flock(1) uses 64 for usage too), 126 and 127 a shell's.
 */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,	       /* timeout, busy, or any other failure */
	EXIT_CHILD = 2,	       /* the child failed, under -child-exit-code */
	EXIT_LOST = 3,	       /* the hold was lost and the child was stopped */
	EXIT_USAGE = 64,       /* bad command line */
	EXIT_UNAVAILABLE = 69, /* no broker could be reached, or it refused us */
	EXIT_NOEXEC = 126,     /* the child was found but cannot be executed */
	EXIT_NOTFOUND = 127,   /* the child's program was not found */
};

/* The exit status for a failure of liblocal @err (negative): EXIT_UNAVAILABLE
 * when it says the broker could not be found or reached (broker_missing()),
 * refused us or speaks another version (LOCAL_EDENIED, LOCAL_EVERSION), else
 * EXIT_FAIL. */
int exit_for(int err);
/* @err says no broker was reached: LOCAL_EBROKER, or a lookup's outcome
 * (LOCAL_ENOSOCKET, LOCAL_EREFUSED, LOCAL_ENOTSOCK, LOCAL_EACCESS,
 * LOCAL_EUNSAFE). */
bool broker_missing(int err);
/* local_strerror(@err), and for broker_missing() errors every path this
 * thread's last lookup tried and what it found there. */
const char *cli_strerror(int err);

/* ---- args.c: Go-style flags (-name=value, -name value, --name=value) ---- */

enum flag_type {
	FLAG_BOOL,     /* bool *: -name, -name=true|false */
	FLAG_STRING,   /* const char **: the argument itself */
	FLAG_INT,      /* long long * */
	FLAG_DURATION, /* int64_t *, nanoseconds, never negative */
};

struct flag {
	const char *name; /* without dashes */
	enum flag_type type;
	void *val;
	bool set; /* given on the command line */
};

enum args_mode {
	ARGS_STOP_AT_ARG,  /* flags end at the first argument (lock KEY CHILD...) */
	ARGS_INTERSPERSED, /* flags may follow arguments (release KEY -session ID) */
};

/*
 * Parse the flags of @cmd in argv[1..argc) (argv[0] is the command name).
 * On success the positional arguments are moved to the front of argv + 1 and
 * their number is stored in *nargs; returns 0. Returns 1 when help was asked
 * for (-h, -help, --help), or -EINVAL after printing the problem to stderr.
 */
int args_parse(const char *cmd, struct flag *flags, int argc, char **argv, enum args_mode mode,
	       int *nargs);
/* Find a flag by name in a NULL-terminated table (to test ->set). */
struct flag *args_flag(struct flag *flags, const char *name);

/* Print "shmlock CMD: ..." and the hint to run help; returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A KEY argument that no key can be (empty, or longer than LOCAL_KEY_MAX):
 * the same usage error from every command, EXIT_USAGE; 0 for a good one. */
int key_usage_error(const char *cmd, const char *key);
/* Print "shmlock: ..." to stderr. Messages echo keys, names and arguments:
 * each is escaped whole with text_escape(), so no byte of theirs reaches
 * the terminal raw. */
void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print @prefix and the escaped message, and a newline, to stderr. */
void vmsg(const char *prefix, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* ---- durations: libshm/duration.h (Go's time.ParseDuration), shared with
 * Consul's API ---- */

/* ---- help.c ---- */

/* Print the help of @cmd (NULL: the overview) to @out; -ENOENT if unknown. */
int help_print(const char *cmd, FILE *out);

/* ---- common.c: what the inspection and administration commands share ---- */

/* The array @v (@n elements of @size bytes in use, *@cap allocated) with
 * room for one more: @v itself, or reallocated to twice *@cap elements
 * (@first the first time) with *@cap updated; NULL when out of memory, @v
 * and *@cap then as they were. */
void *grow_array(void *v, size_t n, size_t *cap, size_t size, size_t first);

struct cli_common {
	const char *socket; /* -socket; NULL: $SHMLOCK_SOCKET, then the default */
	bool json;	    /* -json */
};

#define CLI_FLAG_JSON(c)                             \
	{                                            \
		"json", FLAG_BOOL, &(c)->json, false \
	}
#define CLI_FLAG_SOCKET(c)                                 \
	{                                                  \
		"socket", FLAG_STRING, &(c)->socket, false \
	}
#define CLI_FLAGS_END                        \
	{                                    \
		NULL, FLAG_BOOL, NULL, false \
	}

/*
 * args_parse() with flags allowed among the arguments. Returns 0, 1 after
 * printing the help (exit 0), or -EINVAL after printing the problem.
 */
int cli_parse(const char *cmd, struct flag *flags, int argc, char **argv, int *nargs);
/* CLOCK_MONOTONIC in milliseconds. */
uint64_t mono_ms(void);
/* The exit status for a non-zero cli_parse() result. */
#define CLI_PARSE_EXIT(r) ((r) > 0 ? EXIT_OK : EXIT_USAGE)

/* ---- offline.c: the local_admin_* inspection calls, and when no broker
 * answers but its keeper still holds the segment, a read-only view of it
 * (said on stderr): status, keys and info work while the broker is down. */
int cli_admin_stats(const char *socket, struct local_stats *st, uint32_t *nq);
int cli_admin_keys(const char *socket, const char *prefix, unsigned flags,
		   int (*cb)(const char *, const struct local_key_info *, unsigned, void *),
		   int (*holder_cb)(const char *, const struct local_holder *, void *), void *arg);
int cli_admin_info(const char *socket, const char *key, struct local_key_info *ki, unsigned *kf);
int cli_admin_holders(const char *socket, const char *key,
		      int (*cb)(const struct local_holder *, void *), void *arg);

/* Open a session named @name on the broker of @c; prints the error. */
int cli_open(const struct cli_common *c, const char *name, local_session **out);

/* ---- escape.c: names and values made safe to print ---- */

#define ESC_QUOTE 1u /* escape '"' too, for text printed between quotes */

/*
 * @len bytes of @v for one line of human output: printable ASCII and UTF-8
 * as they are; a backslash as \\; \n, \r, \t; every other control
 * character (C0, DEL, and C1 as its two bytes) and every byte that is not
 * part of valid UTF-8 as \xNN. Returns malloc'ed text, or NULL.
 */
char *text_escape(const char *v, size_t len, unsigned flags);
/* text_escape(@v, @len, 0): how values are shown. */
char *value_text(const char *v, size_t len);
/* @s with every byte but RFC 3986's unreserved ones as %XX (malloc'ed). */
char *percent_encode(const char *s);
/* The same for @len bytes that may include NULs. */
char *percent_encoden(const char *s, size_t len);

/* ---- output.c: aligned tables and JSON ---- */

struct table;
/* A table of @ncols columns; @headers NULL for none. */
struct table *table_new(size_t ncols, const char *const *headers);
/* Add a row of @ncols cells (escaped with text_escape()); NULL cells print
 * as "-". */
int table_add(struct table *t, const char *const *cells);
/* The same, for cells escaped by the caller already (values, which may
 * hold NUL bytes). */
int table_add_escaped(struct table *t, const char *const *cells);
void table_print(struct table *t, FILE *out);
void table_free(struct table *t);

const char *kind_name(int kind);
/* A fencing token as JSON: a string of its decimal digits, the form of
 * SHMLOCK_TOKEN too. Tokens exceed 2^53, which a JSON number loses in
 * jq 1.6 and JavaScript. */
json_t *json_token(uint64_t token);
/* Set @obj's @field to the @len bytes of value @v: a JSON string as it is
 * when it is UTF-8, else percent-encoded with "@field_encoding": "percent"
 * (never null). Returns 0 or -ENOMEM. */
int json_set_value(json_t *obj, const char *field, const char *v, size_t len);
/* A name or key from the broker as a JSON string: as it is when it is
 * UTF-8 (jansson writes control characters as \u001b), else
 * percent-encoded, and then *encoded is set. NULL: no memory. */
json_t *json_text(const char *s, bool *encoded);
/* Set @obj's @field to json_text(@s), and "@field_encoding": "percent"
 * when it had to be encoded. Returns 0 or -ENOMEM. */
int json_set_text(json_t *obj, const char *field, const char *s);
/* Print @j to stdout (indented, or on one line with @one_line) and drop it.
 * Returns EXIT_OK, or EXIT_FAIL when @j is NULL (out of memory). */
int json_emit(json_t *j, bool one_line);
const char *behavior_name(int behavior);

/* ---- holders.c: the holders of a key ---- */

struct holders {
	struct local_holder *v;
	size_t n, cap;
};

/* A holder-listing callback: append @lh to the struct holders @arg. 0 or -ENOMEM. */
int holders_add(const struct local_holder *lh, void *arg);
/* Fill @h (zeroed by the caller) with the holders of @key; prints errors. */
int holders_get(local_session *s, const char *key, struct holders *h);
void holders_free(struct holders *h);
/* "name[pid], name[pid]" (malloc'ed; "-" for none). */
char *holders_text(const struct holders *h);
json_t *holders_json(const struct holders *h);
/* inspect.c: holders_get() asked of the broker, without a session. */
int holders_get_at(const char *socket, const char *key, struct holders *h);
/* A key's kind for a table, with LOCAL_KEY_* (quarantined, busy) shown. */
const char *key_kind_text(int kind, unsigned key_flags);
/* Add "quarantined" and "busy" (booleans) to a key's JSON; 0 or -1. */
int key_flags_json(json_t *j, unsigned key_flags);
/* Everything local_info() tells, as JSON (without the holders). */
json_t *key_info_json(const char *key, const struct local_key_info *ki, bool with_value);
/* The bytes of the value ki->value_buf received (0 without a buffer). */
size_t key_info_value_len(const struct local_key_info *ki);

/* ---- the commands ---- */

int cmd_lock(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_keys(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_leader(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_release(int argc, char **argv);
int cmd_session(int argc, char **argv);
int cmd_reset(int argc, char **argv);

#endif
