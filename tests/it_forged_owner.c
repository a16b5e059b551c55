// SPDX-License-Identifier: MIT
/*
 * A forged owner in a lock word. Any admitted client can write a key's lock
 * word, or the key table's, and name there a process that will never let go
 * (pid 1, or any long-lived process that is not a client). The broker knows
 * who may hold a word: its own process and the live processes of the
 * sessions it admitted (from the kernel: SO_PEERCRED and pidfds, never from
 * the segment). A word naming anyone else is broken within a second and
 * repaired as if its owner had died there; the keys behind it keep working,
 * a holder keeps its hold, and operators keep their tools.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"
#include "invariants.h"
#include "lockword.h"
#include "word_fixture.h"

static const char *const small_caps[] = {
	"--max-keys", "64", "--max-holds", "16", "--max-waiters", "16", "--max-sessions", "16", NULL
};

/* What a forger writes: pid 1 (it never exits), with the waiter bit that a
 * real owner's word would have once someone queued on it. */
#define FORGED_OWNER (LW_WAITERS | 1u)

/* ---- the CLI, as a process of its own ---------------------------------- */

struct cli {
	pid_t pid;
	int out; /* its stdout (and its child's) */
	int err; /* its stderr */
};

static void cli_start(struct cli *c, const struct broker_proc *b, const char *cmd, ...)
{
	const char *argv[24], *bin = getenv("SHMLOCK_CLI_BIN");
	int out[2], err[2], n = 0;
	va_list ap;

	if (!bin)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	argv[n++] = bin;
	argv[n++] = cmd;
	argv[n++] = "-socket";
	argv[n++] = b->sock;
	va_start(ap, cmd);
	while (n < 23 && (argv[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	CHECK_OK(pipe2(out, O_CLOEXEC));
	CHECK_OK(pipe2(err, O_CLOEXEC));
	fflush(NULL);
	c->pid = fork();
	CHECK(c->pid >= 0);
	if (c->pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	c->out = out[0];
	c->err = err[0];
}

/* Wait for a line from the CLI's stdout containing @want. */
static void cli_expect(struct cli *c, const char *want, int timeout_ms)
{
	char buf[512];
	size_t n = 0;
	uint64_t end = now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		struct pollfd p = { .fd = c->out, .events = POLLIN };
		int64_t left = (int64_t)(end - now_ms());
		ssize_t r;

		if (left <= 0 || poll(&p, 1, (int)left) != 1)
			FAIL_AT("no \"%s\" from shmlock in %d ms (so far: \"%.*s\")", want,
				timeout_ms, (int)n, buf);
		r = read(c->out, buf + n, sizeof(buf) - 1 - n);
		if (r <= 0)
			FAIL_AT("shmlock closed its output before \"%s\"", want);
		n += (size_t)r;
		buf[n] = '\0';
		if (strstr(buf, want))
			return;
		if (n == sizeof(buf) - 1)
			n = 0;
	}
}

/* The CLI's exit code (within @timeout_ms, else the test fails); its
 * stderr goes into the failure message when it is not @want. */
static int cli_exit(struct cli *c, int timeout_ms, char *err, size_t size)
{
	int st = pid_wait(c->pid, timeout_ms);
	ssize_t n = read(c->err, err, size - 1);

	err[n > 0 ? n : 0] = '\0';
	close(c->out);
	close(c->err);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void cli_end(struct cli *c, int want, int timeout_ms)
{
	char err[2048];
	int code = cli_exit(c, timeout_ms, err, sizeof(err));

	if (code != want)
		FAIL_AT("shmlock exited %d, expected %d; stderr: %s", code, want, err);
}

/* ---- the tests ----------------------------------------------------------- */

/*
 * Two `shmlock lock` calls contend for a key whose word names pid 1: the
 * broker breaks the word, the first taker repairs the key, and both get
 * their turn.
 */
TEST(forged_owner, two_contending_lock_calls_both_succeed, 90)
{
	struct broker_proc b;
	struct cli one, two;
	local_session *s;

	broker_start(&b, small_caps);
	s = open_session(&b, "attacker", 0, 0);
	make_key(s, "f/k");
	stall_key(entry_of(s, "f/k"), FORGED_OWNER);
	cli_start(&one, &b, "lock", "-timeout=30s", "f/k", "sleep 0.2", NULL);
	cli_start(&two, &b, "lock", "-timeout=30s", "f/k", "sleep 0.2", NULL);
	cli_end(&one, 0, 40000);
	cli_end(&two, 0, 40000);
	CHECK(LW_OWNER(atomic_load(&entry_of(s, "f/k")->lock)) != 1);
	CHECK_EQ(segment_violations(s), 0);
	CHECK(broker_log_has(&b, "forged"));
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}

/*
 * A `shmlock lock` holds the key when another client sits on its word:
 * its hold is not lost (exit 0, not 3), and a contender gets the key once
 * it is released.
 */
TEST(forged_owner, a_holder_keeps_its_hold, 90)
{
	struct broker_proc b;
	struct cli holder, next;
	local_session *s;

	broker_start(&b, small_caps);
	s = open_session(&b, "attacker", 0, 0);
	cli_start(&holder, &b, "lock", "f/h", "echo held; sleep 3", NULL);
	cli_expect(&holder, "held", 20000);
	cli_start(&next, &b, "lock", "-timeout=40s", "f/h", "echo next", NULL);
	stall_key(entry_of(s, "f/h"), FORGED_OWNER);
	cli_end(&holder, 0, 40000);
	cli_expect(&next, "next", 40000);
	cli_end(&next, 0, 40000);
	CHECK_EQ(segment_violations(s), 0);
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}

/* The key table's word names pid 1: new keys are still created. */
TEST(forged_owner, new_keys_are_created_under_a_forged_table_word, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc b;
	local_session *s, *v;
	struct cli c;

	broker_start(&b, small_caps);
	s = open_session(&b, "attacker", 0, 0);
	v = open_session(&b, "victim", 0, 0);
	atomic_store(&s->seg->hdr->table_lock, FORGED_OWNER);
	CHECK_OK(local_lock(v, "t/new", &o, NULL));
	CHECK_OK(local_release(v, "t/new"));
	atomic_store(&s->seg->hdr->table_lock, FORGED_OWNER);
	cli_start(&c, &b, "lock", "-timeout=30s", "t/cli", "true", NULL);
	cli_end(&c, 0, 40000);
	CHECK_EQ(segment_violations(v), 0);
	CHECK_OK(local_session_close(s));
	CHECK_OK(local_session_close(v));
	broker_stop_clean(&b);
}

/* Words forged while no broker runs do not outlive its restart. */
TEST(forged_owner, a_restarted_broker_breaks_forged_words, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc b;
	local_session *s, *v;

	broker_start(&b, small_caps);
	s = open_session(&b, "attacker", 0, 0);
	make_key(s, "r/k");
	broker_signal_wait(&b, SIGKILL);
	stall_key(entry_of(s, "r/k"), FORGED_OWNER);
	atomic_store(&s->seg->hdr->table_lock, FORGED_OWNER);
	broker_restart(&b);
	v = open_session(&b, "victim", 0, 0);
	CHECK_OK(local_lock(v, "r/k", &o, NULL));
	CHECK_OK(local_release(v, "r/k"));
	CHECK_OK(local_lock(v, "r/new", &o, NULL));
	CHECK_OK(local_release(v, "r/new"));
	CHECK_EQ(segment_violations(v), 0);
	CHECK_OK(local_session_close(v));
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}

/* An operator's release and reset go through a forged word. */
TEST(forged_owner, operator_release_and_reset_work, 90)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc b;
	local_session *s, *h;
	int round, code;
	bool reset = false;
	char err[2048];
	struct cli c;

	broker_start(&b, small_caps);
	s = open_session(&b, "attacker", 0, 0);
	h = open_session(&b, "holder", 0, 0);
	CHECK_OK(local_lock(h, "o/k", &o, NULL));
	stall_key(entry_of(s, "o/k"), FORGED_OWNER);
	cli_start(&c, &b, "release", "-force", "o/k", NULL);
	cli_end(&c, 0, 20000);
	CHECK_RC(local_release(h, "o/k"), -LOCAL_ENOTHELD);

	/* The broker's periodic scan may break the word first (then there is
	 * nothing left to reset): a few rounds, one of which the reset wins. */
	make_key(s, "o/r");
	for (round = 0; round < 10 && !reset; round++) {
		stall_key(entry_of(s, "o/r"), FORGED_OWNER);
		cli_start(&c, &b, "reset", "o/r", NULL);
		code = cli_exit(&c, 20000, err, sizeof(err));
		reset = code == 0;
		if (!reset && !strstr(err, "not quarantined"))
			FAIL_AT("shmlock reset exited %d: %s", code, err);
	}
	CHECK(reset);
	CHECK_OK(local_lock(s, "o/r", &o, NULL));
	CHECK_OK(local_release(s, "o/r"));
	CHECK_EQ(segment_violations(s), 0);
	CHECK_OK(local_session_close(s));
	CHECK_OK(local_session_close(h));
	broker_stop_clean(&b);
}

/* A child with a session that names another process as its creator in its
 * slot, then exits. */
static void impostor(void *arg, int in, int out)
{
	local_session *s = open_session(arg, "impostor", 0, 0);
	char line[32];

	hear(in, line, sizeof(line));
	s->seg->sessions[s->who.slot].creator_pid = atoi(line);
	say(out, "%u", s->who.slot);
	hear(in, line, sizeof(line));
	_exit(0);
}

/*
 * The process a session slot names is client-writable: a dying client that
 * wrote a live process's pid there must not make the broker break that
 * live process's lock words. Here the victim sits (stopped) in a key's word;
 * after the impostor's death the key must still be the victim's.
 */
TEST(forged_owner, a_dying_client_cannot_break_a_live_owner_s_word, 60)
{
	LOCAL_OPTS(local_acquire_opts, brief, .timeout_ms = 1500);
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc b;
	struct child victim, imp;
	local_session *s;
	char line[32];
	uint32_t slot;
	pid_t vpid;

	broker_start(&b, small_caps);
	s = open_session(&b, "observer", 0, 0);
	make_key(s, "i/k");
	vpid = sitter_start(&victim, &b);
	/* As it would be had it stopped inside the key's critical section. */
	stall_key(entry_of(s, "i/k"), (uint32_t)vpid);
	child_spawn(&imp, impostor, &b);
	say(imp.wr, "%d", (int)vpid);
	CHECK_OK(child_read(&imp, line, sizeof(line), 10000));
	slot = (uint32_t)atoi(line);
	child_send(&imp, "exit");
	child_wait(&imp, 10000);
	/* The broker has seen the impostor's death when its slot is free. */
	CHECK(WAIT_FOR(SESS_STATE(atomic_load(&s->seg->sessions[slot].state_gen)) == SESS_FREE,
		       10000));
	CHECK_RC(local_lock(s, "i/k", &brief, NULL), -ETIMEDOUT);
	CHECK_EQ(LW_OWNER(atomic_load(&entry_of(s, "i/k")->lock)), (uint32_t)vpid);
	child_kill(&victim);
	CHECK_OK(local_lock(s, "i/k", &o, NULL));
	CHECK_OK(local_release(s, "i/k"));
	CHECK_EQ(segment_violations(s), 0);
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}

/* --check names a forged owner (the broker, stopped here, has not broken
 * it yet), and says healthy once the broker has. */
TEST(forged_owner, check_reports_a_forged_owner, 60)
{
	static char out[65536];
	struct broker_proc b;
	local_session *s;
	struct seg_key *k;

	broker_start(&b, small_caps);
	s = open_session(&b, "attacker", 0, 0);
	make_key(s, "c/k");
	k = entry_of(s, "c/k");
	CHECK_OK(kill(b.pid, SIGSTOP));
	stall_key(k, FORGED_OWNER);
	if (broker_check(&b, out, sizeof(out)) != 2)
		FAIL_AT("--check did not report the forged owner: %s", out);
	CHECK(strstr(out, "c/k") && strstr(out, "forged"));
	CHECK_OK(kill(b.pid, SIGCONT));
	CHECK(WAIT_FOR((atomic_load(&k->lock) & LW_DIED) || LW_OWNER(atomic_load(&k->lock)) != 1,
		       10000));
	CHECK_EQ(broker_check(&b, out, sizeof(out)), 0);
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}
