// Repro: fast_acquire() stores HOLDING over its claimed node with a plain
// store. If a sweep of its session (TTL expiry, operator destroy) freed the
// CLAIMED node and another session re-claimed it in between, the store
// clobbers the other session's hold, and the session check then frees it:
// the other session's lock is gone while it still holds it.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "broker_fixture.h"
#include "harness.h"
#include "keyops.h"

static int to_ctl[2], from_ctl[2];

uint32_t __real_node_claim_as(struct segment *seg, uint32_t state, uint32_t first, uint32_t count,
			      uint32_t session, uint32_t key, _Atomic uint32_t *hint);
uint32_t __wrap_node_claim_as(struct segment *seg, uint32_t state, uint32_t first, uint32_t count,
			      uint32_t session, uint32_t key, _Atomic uint32_t *hint)
{
	uint32_t n = __real_node_claim_as(seg, state, first, count, session, key, hint);
	char c;

	if (getenv("PAUSE_AFTER_CLAIM")) {
		unsetenv("PAUSE_AFTER_CLAIM");
		write(to_ctl[1], "c", 1); /* node CLAIMED, HOLDING not yet stored */
		read(from_ctl[0], &c, 1);
	}
	return n;
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *extra[] = { "--max-holds", "1", NULL };
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *op, *v, *z;
	char id[LOCAL_SESSION_ID_LEN + 1], c;
	int idpipe[2];
	pid_t a;
	int rc;

	broker_start(&b, extra);
	pipe(to_ctl);
	pipe(from_ctl);
	pipe(idpipe);
	a = fork();
	if (a == 0) {
		local_session *as = open_session(&b, "a", 0, 0);
		write(idpipe[1], local_session_id(as), LOCAL_SESSION_ID_LEN);
		read(from_ctl[0], &c, 1); /* k1 exists now */
		setenv("PAUSE_AFTER_CLAIM", "1", 1);
		rc = local_lock(as, "k1", NULL, NULL); /* key exists: fast path */
		printf("a: local_lock(k1) = %s\n", local_strerror(rc));
		_exit(0);
	}
	read(idpipe[0], id, LOCAL_SESSION_ID_LEN);
	id[LOCAL_SESSION_ID_LEN] = 0;
	op = open_session(&b, "operator", 0, 0);
	/* make k1 exist so that a's lock takes the fast path */
	CHECK_OK(local_lock(op, "k1", NULL, NULL));
	CHECK_OK(local_release(op, "k1"));
	write(from_ctl[1], "g", 1);
	/* (a was forked before; it now locks k1) -- wait for its claim */
	read(to_ctl[0], &c, 1);
	CHECK_OK(local_session_destroy(op, id)); /* the sweep frees a's CLAIMED node */
	v = open_session(&b, "v", 0, 0);
	rc = local_lock(v, "k2", &try, NULL); /* re-claims the only hold node */
	if (rc) {
		/* fixed: the sweep left a's FAST_CLAIMED node to its live thread */
		printf("v: lock k2 = %s: the swept session's in-flight claim was left alone "
		       "(fixed)\n",
		       local_strerror(rc));
		write(from_ctl[1], "g", 1);
		waitpid(a, NULL, 0);
		broker_stop(&b);
		return 0;
	}
	printf("v: holds k2\n");
	write(from_ctl[1], "g", 1); /* a stores HOLDING over v's node, then frees it */
	waitpid(a, NULL, 0);
	z = open_session(&b, "z", 0, 0);
	rc = local_lock(z, "k2", &try, NULL);
	printf("z: try-lock k2 while v holds it = %s\n", local_strerror(rc));
	rc = local_lock(z, "k2",
			&(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
						      .timeout_ms = 1000 },
			NULL);
	printf("z: lock k2 (1 s timeout) while v holds it = %s%s\n", local_strerror(rc),
	       rc == 0 ? "   <-- v and z both hold k2" : "");
	printf("v: local_held(k2) = %s\n", local_strerror(local_held(v, "k2", NULL)));
	broker_stop(&b);
	return 0;
}
