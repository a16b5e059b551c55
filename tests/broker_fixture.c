// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"

static int answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return r == 0;
}

void broker_spawn(struct broker_proc *b, const char *const *more)
{
	const char *bin = getenv("SHMLOCK_BROKER_BIN");
	const char *argv[40];
	int n = 0, i;

	if (!bin)
		FAIL_AT("SHMLOCK_BROKER_BIN is not set (run through 'make check')");
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = b->sock;
	argv[n++] = "--shm-name";
	argv[n++] = b->shm;
	argv[n++] = "--log-level";
	argv[n++] = getenv("SHMLOCK_TEST_BROKER_LOG") ? "debug" : "warning";
	for (i = 0; b->extra[i] && n < 31; i++)
		argv[n++] = b->extra[i];
	for (i = 0; more && more[i] && n < 39; i++)
		argv[n++] = more[i];
	argv[n] = NULL;
	fflush(NULL);
	b->pid = fork();
	if (b->pid < 0)
		FAIL_AT("fork: %s", strerror(errno));
	if (b->pid == 0) {
		int fd = open(b->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0 && !getenv("SHMLOCK_TEST_BROKER_LOG")) {
			dup2(fd, 2);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
}

void broker_wait_ready(struct broker_proc *b, int timeout_ms)
{
	int status;

	if (!WAIT_FOR(answers(b->sock) || waitpid(b->pid, &status, WNOHANG) == b->pid,
		      timeout_ms) ||
	    !answers(b->sock))
		FAIL_AT("broker did not come up on %s (log: %s)", b->sock, b->log);
}

/* A broker that exits ends the wait at once; one that comes up slowly (a
 * TSan build on a loaded machine, its segment to create or re-adopt) has
 * 15 s. */
static void launch_with(struct broker_proc *b, const char *const *more)
{
	broker_spawn(b, more);
	broker_wait_ready(b, 15000);
}

void broker_names(struct broker_proc *b, const char *tag)
{
	static int seq;

	memset(b, 0, sizeof(*b));
	/* Named after the test process, so the runner can remove what a
	 * killed test left behind (see sweep_leftovers() in main.c). */
	snprintf(b->dir, sizeof(b->dir), "/tmp/shmlock-test-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(b->dir))
		FAIL_AT("mkdtemp: %s", strerror(errno));
	snprintf(b->sock, sizeof(b->sock), "%s/sock", b->dir);
	snprintf(b->log, sizeof(b->log), "%s/broker.log", b->dir);
	snprintf(b->shm, sizeof(b->shm), "/shmlock-test-%d-%s%d", (int)getpid(), tag, seq++);
}

void broker_start(struct broker_proc *b, const char *const *extra)
{
	int i = 0;

	broker_names(b, "");
	for (; extra && extra[i] && i < 15; i++)
		b->extra[i] = extra[i];
	b->extra[i] = NULL;
	shm_unlink(b->shm);
	launch_with(b, NULL);
}

void broker_restart(struct broker_proc *b)
{
	launch_with(b, NULL);
}

int broker_refuses(struct broker_proc *b, const char *const *more, int timeout_ms)
{
	int status;

	broker_spawn(b, more);
	status = pid_wait(b->pid, timeout_ms);
	b->pid = 0;
	if (!WIFEXITED(status))
		FAIL_AT("broker did not exit but %s (log: %s)",
			WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "?", b->log);
	return WEXITSTATUS(status);
}

void broker_restart_with(struct broker_proc *b, const char *const *more)
{
	launch_with(b, more);
}

void broker_signal_wait(struct broker_proc *b, int sig)
{
	struct child c = { .pid = b->pid, .rd = -1, .wr = -1 };
	int status;

	kill(b->pid, sig);
	status = child_wait(&c, 10000);
	(void)status;
	b->pid = 0;
}

/* One exchange with the keeper (broker/core/keeper.c): @cmd, its answer. */
static int keeper_call(const struct broker_proc *b, char cmd, int *fd)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];

	if (fd)
		*fd = -1;
	if (keeper_path(b->sock, path, sizeof(path)))
		FAIL_AT("socket path too long for its keeper: %s", b->sock);
	return keeper_exchange(path, cmd, 5, fd);
}

int keeper_segment_fd(const struct broker_proc *b)
{
	int fd, err = keeper_call(b, KEEPER_GET, &fd);

	return err ? err : fd;
}

int keeper_end(const struct broker_proc *b)
{
	return keeper_call(b, KEEPER_QUIT, NULL);
}

void broker_stop(struct broker_proc *b)
{
	char cmd[160];

	if (b->pid > 0)
		broker_signal_wait(b, SIGTERM);
	keeper_end(b);
	shm_unlink(b->shm);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", b->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", b->dir);
}

local_session *open_session(const struct broker_proc *b, const char *name, int lock_delay_ms,
			    uint32_t ttl_ms)
{
	struct local_session_opts o;
	local_session *s = NULL;

	local_session_opts_init(&o);
	o.socket_path = b->sock;
	o.name = name;
	o.lock_delay_ms = lock_delay_ms;
	o.ttl_ms = ttl_ms;
	CHECK_OK(local_session_open(&o, &s));
	return s;
}

bool broker_log_has(const struct broker_proc *b, const char *what)
{
	FILE *f = fopen(b->log, "re");
	char *line = NULL;
	size_t size = 0;
	bool found = false;

	while (f && !found && getline(&line, &size, f) >= 0)
		found = strstr(line, what) != NULL;
	free(line);
	if (f)
		fclose(f);
	return found;
}

unsigned broker_log_count(const struct broker_proc *b, const char *what)
{
	FILE *f = fopen(b->log, "re");
	char *line = NULL;
	size_t size = 0;
	unsigned n = 0;

	while (f && getline(&line, &size, f) >= 0)
		n += strstr(line, what) != NULL;
	free(line);
	if (f)
		fclose(f);
	return n;
}

void broker_stop_clean(struct broker_proc *b)
{
	char cmd[200];
	int status;

	CHECK(b->pid > 0 && kill(b->pid, 0) == 0);
	kill(b->pid, SIGTERM);
	status = pid_wait(b->pid, 10000);
	b->pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		snprintf(cmd, sizeof(cmd), "cat '%s' >&2", b->log);
		if (system(cmd) != 0)
			fprintf(stderr, "    (no broker log)\n");
		FAIL_AT("broker ended with wait status 0x%x", status);
	}
	broker_stop(b);
}

int broker_check(const struct broker_proc *b, char *out, size_t size)
{
	char cmd[512];
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "'%s' --check --socket '%s' --shm-name '%s' 2>&1",
		 getenv("SHMLOCK_BROKER_BIN"), b->sock, b->shm);
	fflush(NULL);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	n = fread(out, 1, size - 1, p);
	out[n] = '\0';
	return WEXITSTATUS(pclose(p));
}
