// SPDX-License-Identifier: MIT
/* The soak's broker: $SHMLOCK_BROKER_BIN on the run's socket and segment. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "soak.h"

bool soak_broker_answers(const char *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return r == 0;
}

int soak_broker_start(const struct soak_config *cfg, pid_t *pid)
{
	const char *argv[] = { cfg->broker_bin, "--socket", cfg->sock,	 "--shm-name", cfg->shm,
			       "--log-level",	"notice",   "--gc-idle", "1",	       NULL };
	uint64_t end = soak_now_ns() + 10000000000ull;
	int status;
	pid_t p;

	fflush(NULL);
	p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		int fd = open(cfg->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0 && !cfg->verbose)
			dup2(fd, 2);
		execv(cfg->broker_bin, (char *const *)argv);
		_exit(127);
	}
	*pid = p;
	while (soak_now_ns() < end) {
		if (soak_broker_answers(cfg->sock))
			return 0;
		if (waitpid(p, &status, WNOHANG) == p) {
			fprintf(stderr, "soak: broker exited at start (status 0x%x); log %s\n",
				status, cfg->log);
			*pid = 0;
			return -1;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	fprintf(stderr, "soak: broker did not answer on %s within 10 s\n", cfg->sock);
	return -1;
}
