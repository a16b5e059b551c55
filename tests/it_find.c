// SPDX-License-Identifier: MIT
/*
 * Issue 12, finding the broker and telling the operator what it does:
 * the lookup order and its errors (one code per outcome, every path named),
 * no fallback directory another user can plant, the CLI saying that it
 * waits, `shmlock status` showing the broker's own facts, the broker's
 * start-up and log hygiene, and a waiter told why a key is in lock-delay.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"
#include "net_fixture.h"
#include "segment.h"

#define NOBODY 65534u
#define OUT_MAX 65536

/* ---- helpers ---- */

static const char *bin(const char *env)
{
	const char *b = getenv(env);

	if (!b)
		FAIL_AT("%s is not set (run through 'make test')", env);
	return b;
}

/* Run @cmd with sh, stdout and stderr together in @out; the exit status. */
static int sh(const char *cmd, char *out, size_t size)
{
	FILE *f;
	size_t n;
	int st;

	fflush(NULL);
	f = popen(cmd, "r");
	if (!f)
		FAIL_AT("popen: %s", strerror(errno));
	n = fread(out, 1, size - 1, f);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

#define CHECK_HAS(text, want)                                        \
	do {                                                         \
		if (!strstr((text), (want)))                         \
			FAIL_AT("no \"%s\" in: %s", (want), (text)); \
	} while (0)

/* A SEQPACKET socket bound at @path and never listened on, then closed:
 * a file nobody answers on, as a broker that died leaves behind. */
static void stale_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path) >= (int)sizeof(sa.sun_path) ||
	    fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		FAIL_AT("bind %s: %s", path, strerror(errno));
	close(fd);
}

static int open_at(const char *path, int wait_ms)
{
	struct local_session_opts o;
	local_session *s;
	int rc;

	local_session_opts_init(&o);
	o.socket_path = path;
	o.broker_wait_ms = wait_ms;
	rc = local_session_open(&o, &s);
	if (!rc)
		local_session_close(s);
	return rc;
}

/*
 * In a child running as nobody with only @env (NULL-terminated "K=V"s) as
 * its environment: open a session with the defaults (no path given), and
 * write the lookup's report to @report. Returns the result's code, negated
 * (0: a session opened).
 */
static int open_as_nobody(const char *const *env, char *report, size_t size)
{
	int pfd[2], status;
	pid_t pid;
	ssize_t n;

	if (pipe(pfd))
		FAIL_AT("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		char text[1024] = "";
		local_session *s;
		int rc;

		close(pfd[0]);
		clearenv();
		for (; *env; env++)
			putenv((char *)*env);
		setenv("SHMLOCK_BROKER_WAIT_MS", "0", 1);
		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			_exit(255);
		rc = local_session_open(NULL, &s);
		if (!rc)
			local_session_close(s);
		broker_lookup_text(text, sizeof(text));
		if (write(pfd[1], text, strlen(text)) < 0)
			_exit(254);
		_exit(rc ? (rc == -LOCAL_ENOSOCKET  ? 1
			    : rc == -LOCAL_EREFUSED ? 2
			    : rc == -LOCAL_ENOTSOCK ? 3
			    : rc == -LOCAL_EACCESS  ? 4
			    : rc == -LOCAL_EUNSAFE  ? 5
						    : 6)
			 : 0);
	}
	close(pfd[1]);
	n = read(pfd[0], report, size - 1);
	report[n > 0 ? n : 0] = '\0';
	close(pfd[0]);
	status = pid_wait(pid, 10000);
	if (!WIFEXITED(status) || WEXITSTATUS(status) >= 254)
		FAIL_AT("child as nobody failed (status %#x)", status);
	return WEXITSTATUS(status);
}

/* Open @b's socket to nobody (the socket's group, a traversable dir). */
static void open_to_nobody(struct broker_proc *b)
{
	static const char *const group[] = { "--socket-group", "65534", NULL };

	broker_start(b, group);
	CHECK_OK(chmod(b->dir, 0755));
}

/* ---- the lookup and its errors ---- */

TEST(find, each_outcome_has_its_own_code, 30)
{
	struct broker_proc b;
	char path[200], report[1024];
	LOCAL_OPTS(local_stats, st);
	int fd;

	broker_start(&b, NULL);
	/* Missing, stale, not a socket: each its own code, and at once. */
	snprintf(path, sizeof(path), "%s/missing.sock", b.dir);
	CHECK_RC(open_at(path, 0), -LOCAL_ENOSOCKET);
	CHECK_OK(broker_lookup_text(report, sizeof(report)));
	CHECK_HAS(report, path);
	CHECK_HAS(report, "missing");
	CHECK_RC(local_admin_stats(path, &st, NULL), -LOCAL_ENOSOCKET);

	snprintf(path, sizeof(path), "%s/stale.sock", b.dir);
	stale_socket(path);
	CHECK_RC(open_at(path, 0), -LOCAL_EREFUSED);
	broker_lookup_text(report, sizeof(report));
	CHECK_HAS(report, "refused");

	snprintf(path, sizeof(path), "%s/file", b.dir);
	fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	close(fd);
	CHECK_RC(open_at(path, 0), -LOCAL_ENOTSOCK);
	broker_lookup_text(report, sizeof(report));
	CHECK_HAS(report, "not a socket");
	/* Not a broker that may yet come: no wait, whatever the wait asked
	 * (one no run reaches). */
	{
		uint64_t t0 = now_ms();

		CHECK_RC(open_at(path, NEVER_MS), -LOCAL_ENOTSOCK);
		CHECK_AT_ONCE(t0);
	}
	CHECK_OK(open_at(b.sock, 0));
	broker_stop(&b);
}

/* The lookup codes are for finding a broker: a session's broker that went
 * away is -LOCAL_EBROKER, as local_session_close() has always said. */
TEST(find, an_open_sessions_broker_gone_is_still_ebroker, 30)
{
	struct broker_proc b;
	local_session *s;

	broker_start(&b, NULL);
	s = open_session(&b, "orphan", 0, 0);
	broker_signal_wait(&b, SIGKILL); /* leaves its socket: refused */
	CHECK_RC(local_session_close(s), -LOCAL_EBROKER);
	broker_stop(&b);
}

TEST(find, socket_mode_refusal_is_not_the_brokers, 30)
{
	struct broker_proc b;
	char env[200], report[1024];
	const char *envp[] = { env, NULL };

	broker_start(&b, NULL); /* socket 0660 root:root */
	CHECK_OK(chmod(b.dir, 0755));
	snprintf(env, sizeof(env), "SHMLOCK_SOCKET=%s", b.sock);
	CHECK_EQ(open_as_nobody(envp, report, sizeof(report)), 4); /* LOCAL_EACCESS */
	CHECK_HAS(report, b.sock);
	CHECK_HAS(report, "permission denied (socket mode 0660");
	CHECK(strcmp(local_strerror(-LOCAL_EACCESS), local_strerror(-LOCAL_EDENIED)));
	broker_stop(&b);
}

/*
 * Cron: no XDG_RUNTIME_DIR. The old default, /tmp/shmlock-UID, is a name
 * any user can create first and serve a broker of their own in. A socket
 * planted there is never used, nor even tried.
 */
TEST(find, no_tmp_fallback_another_user_can_plant, 30)
{
	struct broker_proc b;
	char dir[64], planted[128], report[1024];
	const char *envp[] = { "PATH=/usr/bin:/bin", NULL };
	bool made;

	open_to_nobody(&b);
	snprintf(dir, sizeof(dir), "/tmp/shmlock-%u", NOBODY);
	made = mkdir(dir, 0755) == 0;
	CHECK(made || errno == EEXIST);
	snprintf(planted, sizeof(planted), "%s/shmlockd.sock", dir);
	if (made)
		CHECK_OK(symlink(b.sock, planted));
	CHECK(open_as_nobody(envp, report, sizeof(report)) != 0);
	CHECK(!strstr(report, "/tmp/"));
	/* Where it looks instead: its runtime directory, then the system's. */
	CHECK_HAS(report, "/run/user/65534/shmlock/shmlockd.sock");
	CHECK_HAS(report, "/run/shmlock/shmlockd.sock");
	CHECK(strstr(report, "/run/user/65534/") < strstr(report, "/run/shmlock/"));
	if (made) {
		unlink(planted);
		rmdir(dir);
	}
	broker_stop(&b);
}

/* $XDG_RUNTIME_DIR/shmlock is used only while nobody else could have made
 * or changed it. */
TEST(find, runtime_dir_others_can_write_is_skipped, 30)
{
	static const char *const group[] = { "--socket-group", "65534", NULL };
	struct broker_proc b;
	char rt[100], sub[128], sock[128], env[160], report[1024];
	const char *envp[] = { env, NULL };

	broker_start(&b, group);
	CHECK_OK(chmod(b.dir, 0755));
	snprintf(rt, sizeof(rt), "%s/rt", b.dir);
	snprintf(sub, sizeof(sub), "%s/shmlock", rt);
	if (snprintf(sock, sizeof(sock), "%s/shmlockd.sock", sub) >= (int)sizeof(sock))
		FAIL_AT("path too long: %s", sub);
	CHECK_OK(mkdir(rt, 0755));
	CHECK_OK(mkdir(sub, 0755));
	broker_signal_wait(&b, SIGTERM);
	keeper_end(&b);
	strcpy(b.sock, sock);
	broker_restart(&b);
	snprintf(env, sizeof(env), "XDG_RUNTIME_DIR=%s", rt);
	CHECK_EQ(open_as_nobody(envp, report, sizeof(report)), 0);

	CHECK_OK(chmod(sub, 0777));
	CHECK_EQ(open_as_nobody(envp, report, sizeof(report)), 5); /* LOCAL_EUNSAFE */
	CHECK_HAS(report, "writable by other users");
	CHECK_OK(chmod(sub, 0755));
	CHECK_OK(chmod(rt, 0777));
	CHECK_EQ(open_as_nobody(envp, report, sizeof(report)), 5);
	CHECK_HAS(report, "parent directory is writable");
	CHECK_OK(chmod(rt, 0755));
	broker_stop(&b);
}

/* ---- the CLI ---- */

TEST(find, cli_names_every_path_and_says_it_waits, 30)
{
	static char out[OUT_MAX];
	struct broker_proc b;
	char cmd[1024], path[200];

	broker_start(&b, NULL);
	snprintf(path, sizeof(path), "%s/none.sock", b.dir);
	snprintf(cmd, sizeof(cmd), "SHMLOCK_BROKER_WAIT_MS=0 '%s' status -socket='%s' 2>&1",
		 bin("SHMLOCK_CLI_BIN"), path);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 69);
	CHECK_HAS(out, path);
	CHECK_HAS(out, "missing");
	/* No path given, none in the environment: every default is named. */
	snprintf(cmd, sizeof(cmd),
		 "env -u SHMLOCK_SOCKET XDG_RUNTIME_DIR='%s' SHMLOCK_BROKER_WAIT_MS=0 '%s' keys "
		 "2>&1",
		 b.dir, bin("SHMLOCK_CLI_BIN"));
	CHECK_EQ(sh(cmd, out, sizeof(out)), 69);
	CHECK_HAS(out, "/run/shmlock/shmlockd.sock");
	/* -verbose says that it waits, for how long, and for what. */
	snprintf(cmd, sizeof(cmd),
		 "SHMLOCK_BROKER_WAIT_MS=200 '%s' lock -verbose -socket='%s' k true 2>&1",
		 bin("SHMLOCK_CLI_BIN"), path);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 69);
	CHECK_HAS(out, "waiting up to 200 ms");
	CHECK_HAS(out, path);
	broker_stop(&b);
}

TEST(find, completion_asks_the_typed_socket_and_never_waits, 30)
{
	static char out[OUT_MAX];
	struct broker_proc b;
	local_session *s;
	char cmd[2048], dead[200];
	const char *src = getenv("SHMLOCK_SRCDIR");
	uint64_t t0;

	broker_start(&b, NULL);
	s = open_session(&b, "comp", 0, 0);
	CHECK_OK(local_lock(s, "comp/only-here", NULL, NULL));
	snprintf(dead, sizeof(dead), "%s/dead.sock", b.dir);
	stale_socket(dead); /* refused: the kind of miss liblocal waits on */
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && env -u SHMLOCK_SOCKET SHMLOCK_BROKER_WAIT_MS=%d PATH='%.*s':$PATH "
		 "bash -c 'source cli/shmlock.bash-completion; "
		 "COMP_WORDS=(shmlock keys -socket = %s \"\"); COMP_CWORD=5; _shmlock; "
		 "echo \"1:${COMPREPLY[*]}\"; "
		 "COMP_WORDS=(shmlock info -socket %s comp/); COMP_CWORD=4; _shmlock; "
		 "echo \"2:${COMPREPLY[*]}\"; "
		 "COMP_WORDS=(shmlock info -socket=%s \"\"); COMP_CWORD=3; _shmlock; "
		 "echo \"3:${COMPREPLY[*]}\"' 2>&1",
		 src ? src : ".", NEVER_MS,
		 (int)(strrchr(bin("SHMLOCK_CLI_BIN"), '/') - bin("SHMLOCK_CLI_BIN")),
		 bin("SHMLOCK_CLI_BIN"), b.sock, b.sock, dead);
	t0 = now_ms();
	CHECK_EQ(sh(cmd, out, sizeof(out)), 0);
	/* The caller's environment asks liblocal to wait longer than any run
	 * takes; the completion must not. */
	CHECK_AT_ONCE(t0);
	CHECK_HAS(out, "1:comp/only-here\n");
	CHECK_HAS(out, "2:comp/only-here\n");
	CHECK_HAS(out, "3:\n");
	local_session_close(s);
	broker_stop(&b);
}

/* ---- status ---- */

TEST(find, status_shows_the_brokers_own_facts, 30)
{
	static char out[OUT_MAX];
	char listen[32], cmd[1024];
	const char *flags[] = { "--http-listen", listen, "--http-insecure-no-auth", NULL };
	struct broker_proc b;
	json_error_t jerr;
	json_t *j, *br;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", free_port());
	broker_start(&b, flags);
	snprintf(cmd, sizeof(cmd), "'%s' status -json -socket='%s'", bin("SHMLOCK_CLI_BIN"),
		 b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 0);
	j = json_loads(out, 0, &jerr);
	if (!j)
		FAIL_AT("status -json: %s: %s", jerr.text, out);
	br = json_object_get(j, "broker");
	CHECK(json_is_object(br));
	CHECK_EQ(json_integer_value(json_object_get(br, "pid")), b.pid);
	CHECK(!strcmp(json_string_value(json_object_get(br, "socket")), b.sock));
	CHECK(!strcmp(json_string_value(json_object_get(br, "segment")), b.shm));
	CHECK_EQ(json_integer_value(json_object_get(br, "segment_abi")), SEG_ABI);
	CHECK(json_string_value(json_object_get(br, "version")));
	CHECK(!strcmp(json_string_value(json_object_get(json_object_get(br, "http"), "listen")),
		      listen));
	CHECK(json_is_null(json_object_get(json_object_get(br, "tcp"), "listen")));
	json_decref(j);

	snprintf(cmd, sizeof(cmd), "'%s' status -socket='%s'", bin("SHMLOCK_CLI_BIN"), b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 0);
	CHECK_HAS(out, "shmlockd ");
	CHECK_HAS(out, b.sock);
	CHECK_HAS(out, b.shm);
	CHECK_HAS(out, listen);
	CHECK_HAS(out, "segment ABI");
	broker_stop(&b);
}

/* The broker down, its segment kept: status, keys and info read it, and
 * the holds in it go on working. */
TEST(find, inspection_works_read_only_while_the_broker_is_down, 40)
{
	static char out[OUT_MAX];
	struct broker_proc b;
	local_session *s;
	char cmd[1024];

	broker_start(&b, NULL);
	s = open_session(&b, "keeps", 0, 0);
	CHECK_OK(local_lock(s, "ro/k", NULL, NULL));
	broker_signal_wait(&b, SIGTERM);
	snprintf(cmd, sizeof(cmd), "SHMLOCK_BROKER_WAIT_MS=0 '%s' keys -socket='%s' 2>&1",
		 bin("SHMLOCK_CLI_BIN"), b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 0);
	CHECK_HAS(out, "read-only view");
	CHECK_HAS(out, "ro/k");
	CHECK_HAS(out, "keeps");
	snprintf(cmd, sizeof(cmd), "SHMLOCK_BROKER_WAIT_MS=0 '%s' info -socket='%s' ro/k 2>&1",
		 bin("SHMLOCK_CLI_BIN"), b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 0);
	CHECK_HAS(out, "keeps");
	snprintf(cmd, sizeof(cmd), "SHMLOCK_BROKER_WAIT_MS=0 '%s' status -json -socket='%s'",
		 bin("SHMLOCK_CLI_BIN"), b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 0);
	CHECK_HAS(out, "\"broker\": null");
	CHECK_HAS(out, "\"broker_pid\": 0");
	/* Nothing was changed: the hold is still ours to release. */
	CHECK_OK(local_release(s, "ro/k"));
	CHECK_OK(local_lock(s, "ro/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL));
	local_session_close(s);
	broker_stop(&b);
}

/* ---- the broker: start-up and logs ---- */

TEST(find, socket_dirs_are_made_only_under_the_runtime_dir, 30)
{
	struct broker_proc b;
	char made[160];
	struct stat st;

	broker_start(&b, NULL);
	broker_signal_wait(&b, SIGTERM);
	keeper_end(&b);
	snprintf(made, sizeof(made), "%s/new", b.dir);
	snprintf(b.sock, sizeof(b.sock), "%s/new/deeper/sock", b.dir);
	unsetenv("XDG_RUNTIME_DIR");
	CHECK(broker_refuses(&b, NULL, 10000) != 0);
	CHECK_EQ(stat(made, &st), -1);
	CHECK(broker_log_has(&b, "created only below the runtime directory"));
	/* Under the runtime directory: made, 0755 and ours. */
	setenv("XDG_RUNTIME_DIR", b.dir, 1);
	broker_restart(&b);
	CHECK_OK(stat(made, &st));
	CHECK_EQ(st.st_mode & 07777, 0755);
	unsetenv("XDG_RUNTIME_DIR");
	broker_stop(&b);
}

/* Does any process hold a memfd labelled @label (fd or mapping)? */
static bool memfd_alive(const char *label)
{
	char want[128], link[PATH_MAX], path[600];
	struct dirent *p, *f;
	DIR *proc = opendir("/proc"), *fds;
	bool found = false;

	snprintf(want, sizeof(want), "/memfd:%s (deleted)", label);
	while (proc && !found && (p = readdir(proc))) {
		if (p->d_name[0] < '0' || p->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", p->d_name);
		fds = opendir(path);
		while (fds && !found && (f = readdir(fds))) {
			ssize_t n;

			snprintf(path, sizeof(path), "/proc/%s/fd/%s", p->d_name, f->d_name);
			n = readlink(path, link, sizeof(link) - 1);
			if (n > 0) {
				link[n] = '\0';
				found = !strcmp(link, want);
			}
		}
		if (fds)
			closedir(fds);
	}
	if (proc)
		closedir(proc);
	return found;
}

TEST(find, failed_start_leaves_no_segment, 30)
{
	struct broker_proc b;
	int fd;

	broker_start(&b, NULL);
	broker_signal_wait(&b, SIGTERM);
	CHECK_OK(keeper_end(&b));
	CHECK(WAIT_FOR(!memfd_alive(b.shm + 1), 5000));
	/* Another server on the socket: the broker must not start... */
	fd = unix_listener(b.sock, SOCK_SEQPACKET, 4);
	CHECK(broker_refuses(&b, NULL, 10000) != 0);
	CHECK(broker_log_has(&b, "another server is listening"));
	/* ... and must not leave its new segment (and keeper) behind. */
	CHECK(WAIT_FOR(!memfd_alive(b.shm + 1), 5000));
	CHECK(keeper_end(&b) < 0);
	close(fd);
	unlink(b.sock);
	broker_stop(&b);
}

TEST(find, log_lines_are_stamped_outside_the_journal, 30)
{
	static const char *const info[] = { "--log-level", "info", NULL };
	static char out[OUT_MAX];
	struct broker_proc b;
	char cmd[1024], logf[160];
	struct stat st;
	FILE *f;

	broker_start(&b, info);
	f = fopen(b.log, "re");
	CHECK(f && fgets(out, sizeof(out), f));
	fclose(f);
	/* 2026-11-25T19:36:15.959Z shmlockd: info: ... */
	CHECK(strlen(out) > 25 && out[4] == '-' && out[10] == 'T' && out[19] == '.' &&
	      out[23] == 'Z');
	CHECK_HAS(out, "Z shmlockd: ");
	broker_stop(&b);

	/* stderr is the journal (JOURNAL_STREAM names it): priorities, no stamp. */
	broker_start(&b, NULL);
	snprintf(logf, sizeof(logf), "%s/j.log", b.dir);
	f = fopen(logf, "we");
	CHECK(f);
	fclose(f);
	CHECK_OK(stat(logf, &st));
	snprintf(cmd, sizeof(cmd),
		 "unset XDG_RUNTIME_DIR; "
		 "JOURNAL_STREAM=%llu:%llu '%s' --socket '%s/x/y/s' --shm-name /j2-never 2>>'%s'; "
		 "JOURNAL_STREAM=1:1 '%s' --socket '%s/x/y/s' --shm-name /j2-never 2>&1",
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
		 bin("SHMLOCK_BROKER_BIN"), b.dir, logf, bin("SHMLOCK_BROKER_BIN"), b.dir);
	sh(cmd, out, sizeof(out));
	CHECK(strlen(out) > 25 && out[10] == 'T'); /* another stream: stamped */
	f = fopen(logf, "re");
	CHECK(f && fgets(out, sizeof(out), f));
	fclose(f);
	CHECK(out[0] == '<' && out[2] == '>');
	broker_stop(&b);
}

TEST(find, operator_actions_are_logged_with_uid_and_pid, 30)
{
	static const char *const info[] = { "--log-level", "info", NULL };
	struct broker_proc b;
	local_session *s, *v;
	char want[200];

	broker_start(&b, info);
	s = open_session(&b, "victim", 0, 0);
	v = open_session(&b, "victim2", 0, 0);
	CHECK_OK(local_lock(s, "op/k", NULL, NULL));
	CHECK_OK(local_admin_force_release(b.sock, "op/k", NULL));
	snprintf(want, sizeof(want), "operator request to force-release op/k from uid %u, pid %d",
		 (unsigned)geteuid(), (int)getpid());
	CHECK(WAIT_FOR(broker_log_has(&b, want), 5000));
	CHECK_OK(local_admin_session_destroy(b.sock, local_session_id(v)));
	snprintf(want, sizeof(want), "operator request to destroy session %s from uid %u, pid %d",
		 local_session_id(v), (unsigned)geteuid(), (int)getpid());
	CHECK(WAIT_FOR(broker_log_has(&b, want), 5000));
	local_session_close(s);
	local_session_close(v);
	broker_stop(&b);
}

TEST(find, no_auth_listener_off_loopback_is_warned_about, 30)
{
	char any[32], lo[32];
	const char *open_flags[] = { "--tcp-listen", any, "--tcp-insecure-no-auth", NULL };
	const char *lo_flags[] = { "--tcp-listen", lo, "--tcp-insecure-no-auth", NULL };
	struct broker_proc b;

	snprintf(any, sizeof(any), "0.0.0.0:%d", free_port());
	broker_start(&b, open_flags);
	CHECK(broker_log_has(&b, "is not a loopback address"));
	broker_stop(&b);
	snprintf(lo, sizeof(lo), "127.0.0.1:%d", free_port());
	broker_start(&b, lo_flags);
	CHECK(!broker_log_has(&b, "is not a loopback address"));
	broker_stop(&b);
}

/* ---- lock-delay ---- */

/* A child holds @key in a session with a lock-delay of 30 s, and dies. */
static pid_t hold_and_die(const struct broker_proc *b, const char *key)
{
	int pfd[2];
	char c;
	pid_t pid;

	if (pipe(pfd))
		FAIL_AT("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		local_session *s = open_session(b, "doomed", 30000, 0);

		close(pfd[0]);
		if (local_lock(s, key, NULL, NULL) || write(pfd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	if (read(pfd[0], &c, 1) != 1)
		FAIL_AT("the holder did not take %s", key);
	close(pfd[0]);
	kill(pid, SIGKILL);
	pid_wait(pid, 5000);
	return pid;
}

static bool in_delay(local_session *s, const char *key)
{
	struct local_key_info *ki = malloc(sizeof(*ki));
	bool r = ki && !local_info(s, key, ki) && !ki->holders && ki->lock_delay_remaining_ms;

	free(ki);
	return r;
}

TEST(find, waiter_is_told_of_the_lock_delay_and_whose, 40)
{
	static char out[OUT_MAX];
	struct broker_proc b;
	local_session *s;
	char cmd[1024], want[128];
	pid_t dead;

	broker_start(&b, NULL);
	s = open_session(&b, "watcher", 0, 0);
	dead = hold_and_die(&b, "ld/k");
	CHECK(WAIT_FOR(in_delay(s, "ld/k"), 5000));
	snprintf(want, sizeof(want), "after holder pid %d (doomed) died", (int)dead);

	snprintf(cmd, sizeof(cmd), "'%s' lock -verbose -timeout=300ms -socket='%s' ld/k true 2>&1",
		 bin("SHMLOCK_CLI_BIN"), b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 1);
	CHECK_HAS(out, "waiting for ld/k (in lock-delay for ");
	CHECK_HAS(out, want);
	CHECK_HAS(out, "timed out after 300ms waiting for ld/k (in lock-delay for ");
	/* Without -verbose, the timeout says it too. */
	snprintf(cmd, sizeof(cmd), "'%s' lock -timeout=100ms -socket='%s' ld/k true 2>&1",
		 bin("SHMLOCK_CLI_BIN"), b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 1);
	CHECK_HAS(out, want);
	/* A key in no lock-delay: nothing of the kind. */
	CHECK_OK(local_lock(s, "ld/other", NULL, NULL));
	snprintf(cmd, sizeof(cmd), "'%s' lock -timeout=100ms -socket='%s' ld/other true 2>&1",
		 bin("SHMLOCK_CLI_BIN"), b.sock);
	CHECK_EQ(sh(cmd, out, sizeof(out)), 1);
	CHECK(!strstr(out, "lock-delay"));
	local_session_close(s);
	broker_stop(&b);
}
