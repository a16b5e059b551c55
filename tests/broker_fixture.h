/* SPDX-License-Identifier: MIT */
/*
 * A real shmlockd for a test: its own socket in a fresh temporary directory
 * and its own segment name, started from $SHMLOCK_BROKER_BIN, and ready when
 * its socket answers.
 */
#ifndef SHMLOCK_TEST_BROKER_FIXTURE_H
#define SHMLOCK_TEST_BROKER_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "liblocal.h"

struct broker_proc {
	pid_t pid;
	char dir[64];
	char sock[128];
	char shm[64];
	char log[128];
	const char *extra[16]; /* extra flags, NULL-terminated */
	/* How the broker is started, set after broker_names() and before
	 * broker_spawn() or broker_restart() (broker_start() clears them).
	 * The service manager's variables of the test (NOTIFY_SOCKET,
	 * WATCHDOG_*, LISTEN_*) are never passed on; @env may set them. */
	const char *env[8]; /* "NAME=value" set, "NAME" removed; NULL-terminated */
	/* Sockets handed over as fds 3.. with LISTEN_FDS and LISTEN_PID, as a
	 * service manager hands them. */
	int listen_fds[4];
	int nlisten;
	const char *listen_names; /* their LISTEN_FDNAMES; NULL: none */
	bool no_socket_flag;	  /* no --socket: it serves only an activated one */
	/* A program that runs the broker, as systemd-socket-activate: its argv
	 * up to the broker's, NULL-terminated; NULL: none. */
	const char *const *launcher;
	/* uid nonzero: run as @uid and @gid, no supplementary groups (exit 99
	 * when that is refused). */
	uid_t uid;
	gid_t gid;
};

/* Fresh names for @b (zeroed first): a new directory for its socket and
 * log, and a segment name with @tag in it; nothing started. */
void broker_names(struct broker_proc *b, const char *tag);
/* Fill names and start the broker; fails the test if not ready in 5 s. */
void broker_start(struct broker_proc *b, const char *const *extra);
/* Start again with the same names and flags (restart after a stop/kill);
 * also the first start of a broker named by broker_names(). */
void broker_restart(struct broker_proc *b);
/* Start with the same names and flags plus @more (NULL-terminated), without
 * waiting; then broker_wait_ready() fails the test unless it answers within
 * @timeout_ms. */
void broker_spawn(struct broker_proc *b, const char *const *more);
void broker_wait_ready(struct broker_proc *b, int timeout_ms);
/* Start with the same names and flags plus @more (NULL-terminated), expecting
 * a refusal: returns the exit status; fails the test if it is still running
 * after @timeout_ms or dies of a signal. */
int broker_refuses(struct broker_proc *b, const char *const *more, int timeout_ms);
/* Name @b (tag @tag) and start it with @more (NULL-terminated) on a
 * listening loopback socket handed over as a service manager would, its
 * LISTEN_FDNAMES @fd_name, its port in *@port. Not waited for:
 * connections queue in the socket's backlog until the broker serves them. */
void broker_spawn_activated(struct broker_proc *b, const char *tag, const char *fd_name, int *port,
			    const char *const *more);
/* Start again with the same names and flags plus @more; ready as broker_start(). */
void broker_restart_with(struct broker_proc *b, const char *const *more);
/* @o named as @b (directory, segment, log, flags) but with the socket
 * @sock_name in @b's directory: a second broker beside it, not started. */
void broker_beside(const struct broker_proc *b, struct broker_proc *o, const char *sock_name);
/* Send @sig and wait for the broker to exit. */
void broker_signal_wait(struct broker_proc *b, int sig);
/* SIGTERM, wait, unlink the segment and remove the directory. */
void broker_stop(struct broker_proc *b);

/*
 * The segment's keeper beside @b's socket (broker/core/keeper.c): the segment's
 * fd (the test's to close), or -errno; and telling it to exit (0, or -errno
 * when none answers), which ends the segment once nobody maps it.
 */
int keeper_segment_fd(const struct broker_proc *b);
int keeper_end(const struct broker_proc *b);

/* Does @b's log have a line containing @what? */
bool broker_log_has(const struct broker_proc *b, const char *what);
/* How many lines of @b's log contain @what. */
unsigned broker_log_count(const struct broker_proc *b, const char *what);
/* SIGTERM, and require a clean exit (status 0: under ASan or UBSan a report,
 * even one made while stopping, ends the broker with another status; its
 * log is printed then), then as broker_stop(). */
void broker_stop_clean(struct broker_proc *b);
/* `shmlockd --check` on @b's segment (through its socket and label): the
 * exit status, the output in @out. */
int broker_check(const struct broker_proc *b, char *out, size_t size);

/* Open a session on @b with @lock_delay_ms (-1: default) and optional TTL. */
local_session *open_session(const struct broker_proc *b, const char *name, int lock_delay_ms,
			    uint32_t ttl_ms);

#endif
