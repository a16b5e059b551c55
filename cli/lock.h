/* SPDX-License-Identifier: MIT */
/* `shmlock lock`: the parts of running a child under a hold. */
#ifndef SHMLOCK_CLI_LOCK_H
#define SHMLOCK_CLI_LOCK_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "cli.h"

/* The command line of `shmlock lock`, checked. */
struct lock_opts {
	const char *key;
	char **child;	   /* CHILD... (NULL-terminated) */
	uint32_t limit;	   /* -n */
	const char *name;  /* -name, or the one made from the command */
	const char *value; /* -value */
	const char *socket;
	bool shell, pass_stdin, child_exit_code, verbose;
	uint32_t monitor_retry;
	int64_t timeout_ms; /* <0: forever */
	uint32_t ttl_ms, lease_ms;
	int32_t lock_delay_ms; /* -1: the default */
	int64_t kill_grace_ms;
};

/* Print "shmlock: ..." on stderr when -verbose is on. */
void verbose(const struct lock_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- wrapper.c: the shmlock process the user started ---- */

/*
 * Everything after the command line; returns the exit status (or dies by
 * the signal that stopped it). The hold is not taken in this process: it
 * forks the holder (lock_run.c), forwards the stop signals to it and ends
 * as it ends. Killing this process (SIGKILL included) therefore never
 * releases the hold before the child's whole tree is gone.
 */
int lock_run(const struct lock_opts *o);

/* What the wrapper hands to the holder it forked. */
struct holder_env {
	sigset_t stop_set;  /* the stop signals, blocked in both processes */
	sigset_t orig_mask; /* the signal mask shmlock started with */
	pid_t wrapper;	    /* the wrapper's pid, for messages */
	int parent_pidfd;   /* the wrapper's pidfd: readable once it is gone */
	bool take_tty;	    /* give the terminal's foreground to the child */
	pid_t tty_pgrp;	    /* ... and back to this group afterwards */
};

/* ---- lock_run.c: the holder: acquire, run, monitor, stop ---- */

/*
 * Run in the holder, a child of the wrapper: open the session, wait for
 * the hold, run the child under it and release the hold only once every
 * process of the child's tree is gone. Returns the exit status (or dies by
 * the signal that stopped it).
 */
int holder_run(const struct lock_opts *o, const struct holder_env *env);

/* ---- child.c: what the child is started with ---- */

/* CHILD... itself (-shell=false), or $SHELL -c "CHILD...". NULL: no memory. */
char **child_argv(const struct lock_opts *o);
void child_argv_free(const struct lock_opts *o, char **argv);
/* Our environment with the hold's SHMLOCK_* variables; the first *kept
 * entries are borrowed from environ. NULL: no memory. */
char **child_env(const struct lock_opts *o, uint64_t token, const char *session_id, size_t *kept);
void child_env_free(char **env, size_t kept);

/* ---- monitor.c: notice a lost hold within milliseconds ---- */

struct monitor {
	local_session *s;
	const char *key;
	uint64_t token;
	uint32_t retries; /* -monitor-retry */
	int efd;	  /* eventfd, readable once the hold is lost */
	_Atomic int lost; /* 0 while held, else the liblocal code that said so */
	atomic_bool stop;
	pthread_mutex_t mu; /* with cv: lets monitor_stop() cut a retry wait short */
	pthread_cond_t cv;
	pthread_t thread;
	bool running;
};

/*
 * Watch @key, held by @s with @token, from a thread of its own: local_watch()
 * wakes it at every change of the key, and local_held() says whether the
 * change took the hold away. Returns 0 or a negative error code.
 */
int monitor_start(struct monitor *m, local_session *s, const char *key, uint64_t token,
		  uint32_t retries);
/* Ask the thread to end. Call it before releasing the key: the release
 * changes the key, which wakes the thread, and must not count as a loss. */
void monitor_stop(struct monitor *m);
/* Wait (at most a second) for the thread to end. Returns 0, or -ETIMEDOUT:
 * then the session must not be closed, the thread may still use it. */
int monitor_join(struct monitor *m);
/* What a lost-hold code means, for the message. */
const char *monitor_reason(int code);

/* ---- run.c / supervise.c: the child and its process group ---- */

/* The signals that stop the child; shmlock takes them by signalfd. */
#define STOP_SIGNALS                             \
	{                                        \
		SIGTERM, SIGINT, SIGHUP, SIGQUIT \
	}

struct job_spec {
	char **argv; /* argv[0] is looked up in $PATH */
	char **envp;
	bool pass_stdin;
	bool take_tty;	/* hand the terminal's foreground to the child's group */
	pid_t tty_pgrp; /* and give it back to this group */
	int64_t grace_ms;
	sigset_t child_mask; /* the signal mask shmlock started with */
};

enum job_msg_type {
	JOB_STARTED = 1, /* value: the child's pid */
	JOB_EXEC_FAILED, /* value: errno of execvp */
	JOB_EXITED,	 /* value: the child's wait status */
};

struct job_msg {
	int type;
	int value;
};

struct job {
	pid_t pid;    /* the supervisor; 0 once reaped */
	pid_t pgid;   /* the child's process group, led by the supervisor */
	int pidfd;    /* polls readable when the supervisor has exited */
	int sock;     /* job_msg from the supervisor and the child */
	pid_t child;  /* from JOB_STARTED */
	int status;   /* from JOB_EXITED */
	int exec_err; /* from JOB_EXEC_FAILED */
	bool exited;  /* JOB_EXITED seen */
	bool took_tty;
	pid_t tty_pgrp; /* who gets the terminal back */
};

/*
 * Start the supervisor and, through it, the child. The supervisor leads a
 * new process group, is the child's subreaper, forwards its exit status,
 * stops what the child leaves behind (in its group or out of it), kills the
 * whole group if the holder dies. Returns 0 or -errno.
 */
int job_start(struct job *j, const struct job_spec *spec);
/* Let the supervisor start the child (after binding it to the session). */
int job_go(const struct job *j);
/* Send @sig to the job's process group. */
void job_kill(const struct job *j, int sig);
/* Read the supervisor's pending messages (non-blocking). */
void job_read(struct job *j);
/* Reap the supervisor once its pidfd is readable; returns its wait status. */
int job_reap(struct job *j);
/* Give the terminal back to the wrapper's process group if the job had it. */
void job_close(struct job *j);

/* Kill and reap every child of this process (orphans of the job that
 * came to us as its subreaper) until none is left, calling @tick(@arg)
 * every 10 ms while some resist. */
void job_reap_orphans(void (*tick)(void *arg), void *arg);

/* Run by the supervisor, in the child of fork(): async-signal-safe only. */
__attribute__((noreturn)) void supervise(const struct job_spec *spec, int sock, pid_t parent);

/* ---- proctree.c: a process's children, async-signal-safe ---- */

/* Up to @max live (not zombie) children of @parent, from /proc. Only the
 * process that reaps them may signal them by pid: until it reaps, their
 * pids cannot be reused. */
size_t proc_children(pid_t parent, pid_t *out, size_t max);
/* Send @sig to each live child of @parent. */
void proc_signal_children(pid_t parent, int sig);

#endif
