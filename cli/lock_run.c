// SPDX-License-Identifier: MIT
/*
 * The holder, forked by the wrapper (wrapper.c): open a session, wait for
 * the hold, run the child under it, and stop the child the moment the hold
 * is lost, shmlock is told to stop, or the wrapper dies. One poll loop over
 * a signalfd, the wrapper's and the supervisor's pidfds, the supervisor's
 * socket, the monitor's eventfd and timerfds for renewals and the kill
 * grace period: no signal handlers, no sleeping.
 *
 * The session belongs to this process: the broker ends it, and releases
 * the hold, when this process exits. So it exits last: it is the subreaper
 * of the child's whole tree and releases only once it has no child left.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "lock.h"

struct run {
	const struct lock_opts *o;
	const struct holder_env *env;
	local_session *s;
	uint64_t token;
	sigset_t stop_set, orig_mask;
	int sfd;       /* signalfd of the stop signals */
	int ttl_tfd;   /* renews the session's TTL */
	int lease_tfd; /* renews the hold's lease */
	int grace_tfd; /* ends the kill grace period */
	struct monitor mon;
	struct job job;
	int parent_fd;	 /* the wrapper's pidfd; -1 once it is gone */
	int stop_sig;	 /* the signal that made us stop the child */
	pid_t stop_from; /* who sent it */
	int lost;	 /* the code that told us the hold was lost */
	bool stopping;
	bool orphaned; /* the wrapper was killed: nobody reads our status */
};

/* ---- signals ---- */

/*
 * Take the stop signals by signalfd. The wrapper blocked them before it
 * forked us, so every thread inherits the mask, and a signal it forwards
 * before this point waits for us. We are in a process group of our own:
 * the terminal's signals reach the wrapper, which forwards them, and a
 * kill() of our pid reaches us alone; either is one stop request.
 */
static int signals_setup(struct run *r)
{
	r->stop_set = r->env->stop_set;
	r->orig_mask = r->env->orig_mask;
	r->sfd = signalfd(-1, &r->stop_set, SFD_CLOEXEC | SFD_NONBLOCK);
	return r->sfd < 0 ? -errno : 0;
}

/* Has the wrapper gone (killed: it waits for us otherwise)? */
static bool parent_gone(struct run *r)
{
	struct pollfd p = { .fd = r->parent_fd, .events = POLLIN };

	return r->parent_fd >= 0 && poll(&p, 1, 0) == 1;
}

static const char *signame(int sig)
{
	const char *abbrev = sigabbrev_np(sig);
	static char buf[16];

	snprintf(buf, sizeof(buf), "SIG%s", abbrev ? abbrev : "?");
	return buf;
}

/* Read one pending stop signal: its number (and its sender in *from, if
 * given), or 0. */
static int signal_read_from(struct run *r, pid_t *from)
{
	struct signalfd_siginfo si;

	if (read(r->sfd, &si, sizeof(si)) != sizeof(si))
		return 0;
	if (from)
		*from = (pid_t)si.ssi_pid;
	return (int)si.ssi_signo;
}

static int signal_read(struct run *r)
{
	return signal_read_from(r, NULL);
}

/*
 * End shmlock by the signal it was stopped with, after its clean-up, so
 * that whoever sent it (a shell, systemd) sees the death it asked for.
 */
__attribute__((noreturn)) static void die_by(int sig)
{
	sigset_t set;

	fflush(NULL);
	/* A core file of shmlock is never what SIGQUIT was for here. */
	if (sig == SIGQUIT)
		prctl(PR_SET_DUMPABLE, 0);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	raise(sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	_exit(128 + sig);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ---- timers ---- */

static int timer_new(void)
{
	return timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
}

static void timer_set(int fd, int64_t first_ms, int64_t every_ms)
{
	struct itimerspec its = {
		.it_value = { first_ms / 1000, first_ms % 1000 * 1000000 },
		.it_interval = { every_ms / 1000, every_ms % 1000 * 1000000 },
	};

	/* A zero it_value disarms: "now" is the smallest real delay. */
	if (!first_ms)
		its.it_value.tv_nsec = 1;
	timerfd_settime(fd, 0, &its, NULL);
}

/* Consume a timerfd's expirations; whether it had any. */
static bool timer_fired(int fd)
{
	uint64_t n;

	return fd >= 0 && read(fd, &n, sizeof(n)) == sizeof(n);
}

/* Renew three times per period: one late wake-up never costs the hold. */
static int64_t renew_every(uint32_t period_ms)
{
	return period_ms >= 3 ? period_ms / 3 : 1;
}

/* ---- acquisition ---- */

struct acquire {
	local_session *s;
	const char *key;
	uint32_t limit;
	struct local_acquire_opts opts;
	uint64_t token;
	int err;
	int efd;
};

static void *acquire_main(void *arg)
{
	struct acquire *a = arg;
	uint64_t one = 1;

	if (a->limit > 1)
		a->err = local_sem_acquire(a->s, a->key, a->limit, &a->opts, &a->token);
	else
		a->err = local_lock(a->s, a->key, &a->opts, &a->token);
	(void)!write(a->efd, &one, sizeof(one));
	return NULL;
}

/*
 * " (in lock-delay for 12 s after holder pid 4242 (backup) died)" when the
 * broker says @key waits out the lock-delay of a lost hold; else "".
 */
static void delay_text(const struct run *r, const char *key, char *buf, size_t size)
{
	struct proto_op_delay d;
	const char *what;

	buf[0] = '\0';
	if (op_lock_delay(r->s->socket_path, key, &d))
		return;
	if (d.how & PROTO_DELAY_DIED)
		what = "died";
	else if (d.how & PROTO_DELAY_SESSION)
		what = "lost its session (TTL or operator)";
	else
		what = "lost its hold (lease or operator)";
	/* Escaped with the whole message by errorf() and verbose(). */
	snprintf(buf, size, " (in lock-delay for %llu s after holder pid %d (%s) %s)",
		 (unsigned long long)((d.remaining_ms + 999) / 1000), (int)d.pid, d.name, what);
}

static void acquire_failed(struct run *r, int err)
{
	const struct lock_opts *o = r->o;
	LOCAL_OPTS(local_key_info, info); /* sized; no value wanted */
	struct local_key_info *ki = &info;
	char buf[32];
	bool known = !local_info(r->s, o->key, ki);

	if (err == -ETIMEDOUT || err == -EBUSY) {
		char delay[200];

		duration_format((uint64_t)o->timeout_ms, buf, sizeof(buf));
		if (known && ki->holder_session[0]) {
			errorf("timed out after %s waiting for %s (held by %s, pid %d)", buf,
			       o->key, ki->holder_name[0] ? ki->holder_name : ki->holder_session,
			       (int)ki->holder_pid);
		} else {
			delay_text(r, o->key, delay, sizeof(delay));
			errorf("timed out after %s waiting for %s%s", buf, o->key, delay);
		}
	} else if (err == -LOCAL_EKIND && o->limit > 1) {
		errorf("%s is a lock: -n=%u would make it a semaphore", o->key, o->limit);
	} else if (err == -LOCAL_EKIND || err == -LOCAL_ELIMIT) {
		if (known && ki->kind == LOCAL_KIND_SEMAPHORE)
			errorf("%s is a semaphore with limit %u, not %u: every holder must use "
			       "-n=%u",
			       o->key, ki->limit, o->limit, ki->limit);
		else
			errorf("cannot acquire %s with -n=%u: %s", o->key, o->limit,
			       local_strerror(err));
	} else {
		errorf("cannot acquire %s: %s", o->key, local_strerror(err));
	}
}

/*
 * Wait for the hold in a thread of its own, so that this one goes on
 * renewing the TTL and taking signals. A stop signal while waiting ends
 * shmlock at once: nothing runs yet, and the broker ends the session and
 * its queued request when this process exits.
 */
static int acquire(struct run *r)
{
	const struct lock_opts *o = r->o;
	struct acquire a = {
		.s = r->s,
		.key = o->key,
		.limit = o->limit,
		.opts = { .sz = sizeof(a.opts), /* sized options */
			  .timeout_ms = o->timeout_ms,
			  .lease_ms = o->lease_ms },
	};
	pthread_t thread;
	int err;

	if (o->value) {
		a.opts.value = o->value;
		a.opts.value_len = strlen(o->value);
	}
	a.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	err = a.efd < 0 ? -errno : -pthread_create(&thread, NULL, acquire_main, &a);
	if (err) {
		errorf("cannot wait for %s: %s", o->key, strerror(-err));
		if (a.efd >= 0)
			close(a.efd);
		return err;
	}
	if (o->verbose) {
		char delay[200];

		delay_text(r, o->key, delay, sizeof(delay));
		verbose(o, "waiting for %s%s%s", o->key, o->limit > 1 ? " (semaphore)" : "", delay);
	}
	for (;;) {
		struct pollfd p[4] = { { .fd = r->sfd, .events = POLLIN },
				       { .fd = a.efd, .events = POLLIN },
				       { .fd = r->ttl_tfd, .events = POLLIN },
				       { .fd = r->parent_fd, .events = POLLIN } };
		int sig;

		if (poll(p, 4, -1) < 0 && errno != EINTR)
			continue;
		sig = signal_read(r);
		if (p[3].revents) {
			/* The wrapper was killed: nobody waits for us any
			 * more, nothing runs yet. Leave as for a signal. */
			verbose(o, "shmlock (pid %d) was killed: giving up %s",
				(int)r->env->wrapper, o->key);
			sig = SIGKILL;
		}
		if (sig) {
			verbose(o, "got %s while waiting for %s: giving up", signame(sig), o->key);
			/* Granted meanwhile: give it back now, rather than
			 * leave it to the broker as the hold of a dead
			 * process, which would start a lock-delay. */
			if (poll(&p[1], 1, 0) == 1) {
				pthread_join(thread, NULL);
				if (!a.err)
					local_release(r->s, o->key);
				local_session_close(r->s);
			}
			if (sig == SIGKILL) {
				fflush(NULL);
				_exit(EXIT_FAIL);
			}
			die_by(sig);
		}
		if (timer_fired(r->ttl_tfd))
			local_session_renew(r->s);
		if (p[1].revents)
			break;
	}
	pthread_join(thread, NULL);
	close(a.efd);
	if (a.err) {
		acquire_failed(r, a.err);
		return a.err;
	}
	r->token = a.token;
	return 0;
}

static int start_child(struct run *r)
{
	const struct lock_opts *o = r->o;
	struct job_spec spec = {
		.pass_stdin = o->pass_stdin,
		.grace_ms = o->kill_grace_ms,
		.child_mask = r->orig_mask,
	};
	size_t kept = 0;
	int err = -ENOMEM;

	spec.take_tty = r->env->take_tty;
	spec.tty_pgrp = r->env->tty_pgrp;
	spec.argv = child_argv(o);
	spec.envp = child_env(o, r->token, local_session_id(r->s), &kept);
	if (spec.argv && spec.envp)
		err = job_start(&r->job, &spec);
	if (!err) {
		/* The session now ends only when the supervisor, which exits
		 * after the child's whole tree, has exited too: a SIGKILL of
		 * this process releases nothing while the command still runs. */
		int b = local_session_bind_process(r->s, r->job.pid);

		if (b)
			verbose(o,
				"could not bind the supervisor to the session (%s): a kill "
				"of this process would release the hold at once",
				local_strerror(b));
		err = job_go(&r->job);
	}
	if (err)
		errorf("cannot start the child: %s", strerror(-err));
	child_argv_free(o, spec.argv);
	child_env_free(spec.envp, kept);
	return err;
}

/* ---- the child ---- */

/* Stop the child's process group: SIGTERM now (after SIGINT, for SIGINT),
 * SIGKILL when the grace period ends, or at once on a second request. */
static void stop_child(struct run *r, int sig)
{
	const struct lock_opts *o = r->o;

	if (r->stopping) {
		if (sig) {
			verbose(o, "%s while stopping: SIGKILL to process group %d", signame(sig),
				(int)r->job.pgid);
			job_kill(&r->job, SIGKILL);
		}
		return;
	}
	r->stopping = true;
	verbose(o, "stopping the child: SIGTERM to process group %d", (int)r->job.pgid);
	if (sig == SIGINT)
		job_kill(&r->job, SIGINT);
	job_kill(&r->job, SIGTERM);
	if (o->kill_grace_ms)
		timer_set(r->grace_tfd, o->kill_grace_ms, 0);
	else
		job_kill(&r->job, SIGKILL);
}

static void hold_lost(struct run *r, int code)
{
	if (r->lost || r->stop_sig)
		return;
	r->lost = code;
	errorf("lost the hold on %s: %s; stopping the child", r->o->key, monitor_reason(code));
	stop_child(r, 0);
}

/* Run until the supervisor has exited, that is until every process of the
 * child's group is gone. Returns the child's wait status. */
static int run_child(struct run *r)
{
	const struct lock_opts *o = r->o;
	int status = -1;

	while (status < 0) {
		struct pollfd p[] = {
			{ .fd = r->sfd, .events = POLLIN },
			{ .fd = r->mon.efd, .events = POLLIN },
			{ .fd = r->job.sock, .events = POLLIN },
			{ .fd = r->job.pidfd, .events = POLLIN },
			{ .fd = r->ttl_tfd, .events = POLLIN },
			{ .fd = r->lease_tfd, .events = POLLIN },
			{ .fd = r->grace_tfd, .events = POLLIN },
			{ .fd = r->parent_fd, .events = POLLIN },
		};
		uint64_t n;
		int sig, err;
		pid_t from = 0;

		if (poll(p, sizeof(p) / sizeof(p[0]), -1) < 0 && errno != EINTR)
			continue;
		while ((sig = signal_read_from(r, &from))) {
			/* One request sent to every process of the job at
			 * once (systemd's KillMode=control-group) reaches us
			 * twice: from its sender, and forwarded by the
			 * wrapper. Only a second signal from the same sender
			 * asks for SIGKILL. */
			if (r->stop_sig && from != r->stop_from) {
				verbose(o, "got %s again, from pid %d: the same request",
					signame(sig), (int)from);
				continue;
			}
			if (!r->stop_sig && !r->lost) {
				r->stop_sig = sig;
				r->stop_from = from;
			}
			verbose(o, "got %s", signame(sig));
			stop_child(r, sig);
		}
		if (read(r->mon.efd, &n, sizeof(n)) == sizeof(n))
			hold_lost(r, atomic_load(&r->mon.lost));
		if (timer_fired(r->ttl_tfd)) {
			err = local_session_renew(r->s);
			if (err)
				hold_lost(r, err);
		}
		if (timer_fired(r->lease_tfd)) {
			err = local_renew(r->s, o->key, 0, NULL);
			if (err)
				hold_lost(r, err);
		}
		if (timer_fired(r->grace_tfd)) {
			verbose(o, "grace period over: SIGKILL to process group %d",
				(int)r->job.pgid);
			job_kill(&r->job, SIGKILL);
		}
		if (p[7].revents) {
			/* Killed, so that its user wants everything gone now;
			 * and nobody will read our status. */
			verbose(o, "shmlock (pid %d) was killed: SIGKILL to process group %d",
				(int)r->env->wrapper, (int)r->job.pgid);
			close_fd(&r->parent_fd);
			r->orphaned = r->stopping = true;
			job_kill(&r->job, SIGKILL);
		}
		if (p[2].revents)
			job_read(&r->job);
		if (p[3].revents) {
			int sup;

			/* The supervisor reports the child's status before it
			 * exits. Without that report, it died first (killed):
			 * make sure nothing of its group runs on. */
			job_read(&r->job);
			if (!r->job.exited)
				job_kill(&r->job, SIGKILL);
			sup = job_reap(&r->job);
			status = r->job.exited ? r->job.status : sup;
		}
	}
	return status;
}

static void report_child(const struct run *r, int status)
{
	const struct lock_opts *o = r->o;

	if (r->job.exec_err)
		errorf("cannot run %s: %s", o->shell ? "the shell" : o->child[0],
		       strerror(r->job.exec_err));
	else if (WIFEXITED(status))
		verbose(o, "child exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		verbose(o, "child killed by %s", signame(WTERMSIG(status)));
}

/* A child that could not be started ends shmlock as it would end a shell:
 * 127 when the program was not found, 126 when it cannot be executed. */
static int exec_exit(int exec_err)
{
	return exec_err == ENOENT || exec_err == ENOTDIR ? EXIT_NOTFOUND : EXIT_NOEXEC;
}

/*
 * The exit status for a child that ran and ended with @status. As consul
 * lock: 0 whatever it did, or 2 when it failed under -child-exit-code. But a
 * shell (-shell, the default) says it could not start the command with 127
 * (not found) or 126 (not executable): shmlock passes those on, so that a
 * misspelt command is never reported as a success.
 */
static int child_exit(const struct lock_opts *o, int status)
{
	if (o->shell && WIFEXITED(status) &&
	    (WEXITSTATUS(status) == EXIT_NOTFOUND || WEXITSTATUS(status) == EXIT_NOEXEC))
		return WEXITSTATUS(status);
	if (o->child_exit_code && !(WIFEXITED(status) && !WEXITSTATUS(status)))
		return EXIT_CHILD;
	return EXIT_OK;
}

static int open_session(struct run *r)
{
	const struct lock_opts *o = r->o;
	struct local_session_opts so;
	int err;

	local_session_opts_init(&so);
	so.socket_path = o->socket;
	so.name = o->name;
	so.ttl_ms = o->ttl_ms;
	so.lock_delay_ms = o->lock_delay_ms;
	if (o->verbose) {
		/* Look once without waiting, to say that we wait, and for what. */
		int wait_ms = broker_wait_default_ms();
		char tried[sizeof(struct lookup_report)];

		so.broker_wait_ms = 0;
		err = local_session_open(&so, &r->s);
		if ((err == -LOCAL_ENOSOCKET || err == -LOCAL_EREFUSED) && wait_ms > 0) {
			broker_lookup_text(tried, sizeof(tried));
			verbose(o, "no broker answers yet (%s): waiting up to %d ms for one", tried,
				wait_ms);
			so.broker_wait_ms = wait_ms;
			err = local_session_open(&so, &r->s);
		}
	} else {
		err = local_session_open(&so, &r->s);
	}
	if (err) {
		errorf("cannot open a session with the broker: %s", cli_strerror(err));
		return err;
	}
	verbose(o, "found the broker at %s", r->s->socket_path);
	verbose(o, "opened session %s (%s)", local_session_id(r->s), o->name);
	return 0;
}

/* While the last orphans die: keep the session and the lease alive, they
 * must not expire while something of the child still runs. */
static void renew_tick(void *arg)
{
	struct run *r = arg;

	if (timer_fired(r->ttl_tfd))
		local_session_renew(r->s);
	if (timer_fired(r->lease_tfd))
		local_renew(r->s, r->o->key, 0, NULL);
}

int holder_run(const struct lock_opts *o, const struct holder_env *env)
{
	struct run r = { .o = o,
			 .env = env,
			 .sfd = -1,
			 .ttl_tfd = -1,
			 .lease_tfd = -1,
			 .grace_tfd = -1,
			 .parent_fd = env->parent_pidfd };
	bool session_free = true, started = false;
	int err, status = 0, rc = EXIT_FAIL;
	struct pollfd p;

	r.mon.efd = -1;
	r.job.pidfd = r.job.sock = -1;
	err = signals_setup(&r);
	if (err) {
		errorf("cannot take signals: %s", strerror(-err));
		goto out;
	}
	r.grace_tfd = timer_new();
	if (o->ttl_ms)
		r.ttl_tfd = timer_new();
	if (o->lease_ms)
		r.lease_tfd = timer_new();
	if (r.grace_tfd < 0 || (o->ttl_ms && r.ttl_tfd < 0) || (o->lease_ms && r.lease_tfd < 0)) {
		errorf("cannot create timers: %s", strerror(errno));
		goto out;
	}
	err = open_session(&r);
	if (err) {
		rc = exit_for(err);
		goto out;
	}
	if (o->ttl_ms)
		timer_set(r.ttl_tfd, renew_every(o->ttl_ms), renew_every(o->ttl_ms));
	err = acquire(&r);
	if (err) {
		rc = exit_for(err);
		goto out_close;
	}
	verbose(o, "acquired %s (token %llu)", o->key, (unsigned long long)r.token);
	if (o->lease_ms)
		timer_set(r.lease_tfd, renew_every(o->lease_ms), renew_every(o->lease_ms));
	err = monitor_start(&r.mon, r.s, o->key, r.token, o->monitor_retry);
	if (err) {
		errorf("cannot watch %s: %s", o->key, strerror(-err));
		goto out_release;
	}
	/* A stop signal that came while we acquired: do not start at all. */
	p = (struct pollfd){ .fd = r.sfd, .events = POLLIN };
	if (poll(&p, 1, 0) == 1) {
		r.stop_sig = signal_read(&r);
		goto out_release;
	}
	if (parent_gone(&r)) {
		r.orphaned = true;
		goto out_release;
	}
	if (start_child(&r))
		goto out_release;
	started = true;
	verbose(o, "started the child: process group %d", (int)r.job.pgid);
	status = run_child(&r);
	/* The supervisor is gone. If it was killed, or killed itself to end
	 * a stubborn group, the orphans of the child's tree are ours now:
	 * the hold stays until the last of them is. */
	job_reap_orphans(renew_tick, &r);
	report_child(&r, status);
out_release:
	monitor_stop(&r.mon);
	if (!r.lost) {
		/* A loss the monitor saw but the loop did not read, else
		 * whatever the release finds. */
		err = atomic_load(&r.mon.lost);
		if (!err)
			err = local_release(r.s, o->key);
		if (err && !r.stop_sig) {
			/* The child ran to its end, but not all of it under the
			 * hold: say so as for any loss. */
			errorf("lost the hold on %s before the child finished: %s", o->key,
			       monitor_reason(err));
			r.lost = err;
		} else if (!err) {
			verbose(o, "released %s", o->key);
		}
	}
	session_free = monitor_join(&r.mon) == 0;
out_close:
	/* A monitor that did not end may still use the session: then leave
	 * it to the broker, which ends it when we exit. */
	if (session_free)
		local_session_close(r.s);
	job_close(&r.job);
	if (r.orphaned)
		goto out;
	if (r.stop_sig)
		die_by(r.stop_sig);
	if (r.lost)
		rc = EXIT_LOST;
	else if (started && r.job.exec_err)
		rc = exec_exit(r.job.exec_err);
	else if (started)
		rc = child_exit(o, status);
out:
	job_close(&r.job);
	close_fd(&r.sfd);
	close_fd(&r.ttl_tfd);
	close_fd(&r.lease_tfd);
	close_fd(&r.grace_tfd);
	close_fd(&r.parent_fd);
	return rc;
}
