// SPDX-License-Identifier: MIT
/*
 * Help texts. docs/shmlock.1 says the same things in the same words: change
 * both together (tests/it_cli.c checks that every option here is there).
 * No tabs: they render differently everywhere.
 */
#include <errno.h>
#include <string.h>

#include "cli.h"

struct help {
	const char *name;
	const char *text;
};

static const char overview[] =
	"Usage: shmlock COMMAND [options] [ARGS]\n"
	"\n"
	"  Run a command under a lock or semaphore of shmlockd, the shmlock broker,\n"
	"  and inspect or administer the broker.\n"
	"\n"
	"Commands:\n"
	"\n"
	"  lock       Run a command while holding a lock or a semaphore slot\n"
	"  status     Show the broker's state, capacity and counters\n"
	"  keys       List the keys with their holders and waiters\n"
	"  info       Describe a key\n"
	"  leader     Print the value attached by the holder of a key\n"
	"  watch      Print the state of a key at every change\n"
	"  sessions   List the sessions\n"
	"  release    Take a key from its holders (operator action)\n"
	"  session    Destroy a session (operator action)\n"
	"  reset      Bring back a key quarantined as damaged (operator action)\n"
	"  version    Print the version\n"
	"  help       Show the help of a command\n"
	"\n"
	"  Every command takes -socket=PATH; status, keys, info, leader, watch and\n"
	"  sessions take -json. Without -socket or $SHMLOCK_SOCKET, the first\n"
	"  broker that answers: $XDG_RUNTIME_DIR/shmlock/shmlockd.sock (not for\n"
	"  root; /run/user/UID/... when unset), then /run/shmlock/shmlockd.sock.\n"
	"  Run 'shmlock help COMMAND' for the options of a\n"
	"  command. Keys, names and values are printed with control characters\n"
	"  and bytes that are not UTF-8 escaped (\\x1b, \\n, \\\\).\n"
	"\n"
	"Exit status:\n"
	"\n"
	"  0    success\n"
	"  1    timeout or busy key, or another failure; leader: no leader\n"
	"  2    lock: the child failed, with -child-exit-code\n"
	"  3    lock: the hold was lost and the child was stopped\n"
	"  64   usage error (bad option, missing or extra argument)\n"
	"  69   no broker found (every path tried is named), or the broker\n"
	"       refused us\n"
	"  126  lock: the child cannot be executed\n"
	"  127  lock: the child's program was not found\n";

static const char lock_text[] =
	"Usage: shmlock lock [options] KEY CHILD...\n"
	"\n"
	"  Run CHILD while holding the lock KEY or, with -n=N above 1, one of the N\n"
	"  slots of the semaphore KEY. CHILD starts once the hold is granted, in its\n"
	"  own process group, with SHMLOCK_HELD=true, SHMLOCK_KEY, SHMLOCK_TOKEN (the\n"
	"  fencing token), SHMLOCK_SESSION and, as consul lock sets it,\n"
	"  CONSUL_LOCK_HELD=true in its environment. When CHILD exits,\n"
	"  shmlock stops what it left running (in its process group or out of it),\n"
	"  then releases the hold.\n"
	"\n"
	"  When the hold is lost (lease or TTL expiry, operator release, session\n"
	"  destroyed), or shmlock gets SIGTERM, SIGINT, SIGHUP or SIGQUIT, the\n"
	"  child's process group gets SIGTERM (after SIGINT, for SIGINT), then\n"
	"  SIGKILL once -kill-grace has passed. A second signal sends SIGKILL at\n"
	"  once. If shmlock itself is killed, even by SIGKILL, everything the child\n"
	"  started is killed before the hold is released.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -child-exit-code   Exit 2 if the child fails (non-zero exit status or\n"
	"                     killed by a signal). Default false: the child's\n"
	"                     failure does not change the exit status.\n"
	"  -kill-grace=D      Time between SIGTERM and SIGKILL when the child is\n"
	"                     stopped. Default 5s.\n"
	"  -lease=D           Give the hold a lease of D, renewed while the child\n"
	"                     runs. Default: no lease.\n"
	"  -lock-delay=D      The session's lock-delay, 0 to 60s: how long KEY stays\n"
	"                     unavailable after the hold is lost other than by a\n"
	"                     release. Default 15s.\n"
	"  -monitor-retry=N   Accepted for compatibility with consul lock (N >= 0).\n"
	"                     Holds live in shared memory: a broker restart never\n"
	"                     loses them. Here: how often a failed watch of the\n"
	"                     hold is retried, 1s apart, before the hold counts as\n"
	"                     lost. Default 3.\n"
	"  -n=N               Holder limit: 1 (default) for a lock, more for a\n"
	"                     semaphore. Every holder of KEY must use the same N.\n"
	"  -name=NAME         Session name, cut to 63 bytes. Default: made from\n"
	"                     the command and KEY.\n"
	"  -pass-stdin        Give the child shmlock's standard input. Default: the\n"
	"                     child reads /dev/null.\n"
	"  -shell             Run CHILD as $SHELL -c \"CHILD...\" (/bin/sh when SHELL\n"
	"                     is unset). Default true; -shell=false runs CHILD\n"
	"                     directly.\n"
	"  -socket=PATH       The broker's socket. Default: $SHMLOCK_SOCKET, else\n"
	"                     the user's own broker, then the system one.\n"
	"  -timeout=D         Give up after waiting D for the hold (exit 1).\n"
	"                     Default 0: wait as long as it takes, as consul\n"
	"                     lock does; -timeout=1ms gives up at once.\n"
	"  -try=D             The same as -timeout.\n"
	"  -ttl=D             Give the session a TTL of D, renewed automatically.\n"
	"                     Default: no TTL.\n"
	"  -value=STRING      Attach STRING to the hold: 'shmlock leader KEY' prints\n"
	"                     it.\n"
	"  -verbose           Report each step on standard error.\n"
	"\n"
	"  consul lock's API options (-http-addr, -token, -token-file, -datacenter,\n"
	"  -ca-file, -ca-path, -client-cert, -client-key, -tls-server-name,\n"
	"  -namespace, -partition, -stale) are accepted and ignored, so that its\n"
	"  command lines run unchanged: a local broker has no address, token or\n"
	"  datacenter. -verbose names each one given, and any CONSUL_HTTP_* variable.\n"
	"\n"
	"  D is a duration: a decimal number with a unit (ns, us, ms, s, m, h), as\n"
	"  in 500ms, 1.5s, 1m30s or 3h. Options go before KEY, written as\n"
	"  -name=value, -name value or --name=value.\n"
	"\n"
	"Exit status:\n"
	"\n"
	"  0    the child ran and exited (whatever its status, without\n"
	"       -child-exit-code)\n"
	"  1    timed out (or -timeout's key was busy), or another failure\n"
	"  2    the child failed, with -child-exit-code\n"
	"  3    the hold was lost and the child was stopped\n"
	"  64   usage error\n"
	"  69   no broker found (every path tried is named), or it refused us\n"
	"  126  the child cannot be executed (also the shell's 126)\n"
	"  127  the child's program was not found (also the shell's 127)\n"
	"  When a signal made shmlock stop the child, shmlock ends by that signal.\n";

static const char status_text[] =
	"Usage: shmlock status [options]\n"
	"\n"
	"  Show the broker's state: versions, listeners (HTTP, TCP, metrics,\n"
	"  Consul API), broker pid, uptime, sessions, keys, holds and waiters\n"
	"  against capacity, and counters.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -json          Print a JSON object.\n"
	"  -socket=PATH   The broker's socket.\n";

static const char keys_text[] =
	"Usage: shmlock keys [options] [PREFIX]\n"
	"\n"
	"  List the keys (those starting with PREFIX): kind, limit, holders (name\n"
	"  and pid), waiters, lock-delay remaining.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -json          Print a JSON array.\n"
	"  -quarantined   List only the keys quarantined as damaged.\n"
	"  -socket=PATH   The broker's socket.\n";

static const char info_text[] =
	"Usage: shmlock info [options] KEY\n"
	"\n"
	"  Describe KEY: kind, limit, holders with their tokens and leases,\n"
	"  waiters, indexes, lock-delay remaining and value. A key that does not\n"
	"  exist has kind none.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -json          Print a JSON object.\n"
	"  -socket=PATH   The broker's socket.\n";

static const char leader_text[] =
	"Usage: shmlock leader [options] KEY\n"
	"\n"
	"  Print the value that the holder of the lock KEY attached (see 'shmlock\n"
	"  lock -value'), control characters escaped. Exit 1 when KEY has no\n"
	"  holder.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -json          Print a JSON object: key, session, name, pid, token and\n"
	"                 value (leader null when KEY has no holder).\n"
	"  -socket=PATH   The broker's socket.\n";

static const char watch_text[] =
	"Usage: shmlock watch [options] KEY\n"
	"\n"
	"  Print the state of KEY, then print it again at every change (grant,\n"
	"  release, value, holder lost), until interrupted or until -timeout.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -json          Print one JSON object per line.\n"
	"  -socket=PATH   The broker's socket.\n"
	"  -timeout=D     Stop after D (exit 0). Default: never.\n";

static const char sessions_text[] =
	"Usage: shmlock sessions [options]\n"
	"\n"
	"  List the sessions: id, name, pid, uid, TTL and time left, lock-delay,\n"
	"  behavior, holds and queued requests.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -json          Print a JSON array.\n"
	"  -socket=PATH   The broker's socket.\n";

static const char release_text[] =
	"Usage: shmlock release -force [options] KEY\n"
	"\n"
	"  Take KEY from its holders, as an operator. The holders lose it as if\n"
	"  it expired: the lock-delay of their session applies, and a 'shmlock\n"
	"  lock' that held it stops its child.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -force         Required: confirms the operator action.\n"
	"  -session=ID    Take KEY from session ID only.\n"
	"  -socket=PATH   The broker's socket.\n";

static const char session_text[] =
	"Usage: shmlock session destroy [options] ID\n"
	"\n"
	"  End session ID, as an operator: its holds are lost (its lock-delay\n"
	"  applies), its queued requests fail, and a 'shmlock lock' that used it\n"
	"  stops its child.\n"
	"\n"
	"Options:\n"
	"\n"
	"  -socket=PATH   The broker's socket.\n";

static const char reset_text[] =
	"Usage: shmlock reset [options] KEY\n"
	"\n"
	"  Bring KEY back into service after its entry was quarantined as\n"
	"  damaged: its holders lose it, its queued requests fail, and its next\n"
	"  use creates it afresh. No other key is touched.\n"
	"\n"
	"  A KEY that is not quarantined but stuck on its lock word, which\n"
	"  names a process that exited or never had a session (a forged\n"
	"  owner), is repaired instead: the word is broken and the key keeps\n"
	"  its holders. A live process of a session holding the word is named\n"
	"  in the broker's log (exit 1: try again).\n"
	"\n"
	"Options:\n"
	"\n"
	"  -socket=PATH   The broker's socket.\n";

static const char version_text[] = "Usage: shmlock version\n"
				   "\n"
				   "  Print the versions of shmlock and liblocal.\n";

static const char help_text[] = "Usage: shmlock help [COMMAND]\n"
				"\n"
				"  Show the help of COMMAND, or the list of commands.\n";

static const struct help helps[] = {
	{ "lock", lock_text },	       { "status", status_text },   { "keys", keys_text },
	{ "info", info_text },	       { "leader", leader_text },   { "watch", watch_text },
	{ "sessions", sessions_text }, { "release", release_text }, { "session", session_text },
	{ "reset", reset_text },       { "version", version_text }, { "help", help_text },
};

int help_print(const char *cmd, FILE *out)
{
	size_t i;

	if (!cmd) {
		fputs(overview, out);
		return 0;
	}
	for (i = 0; i < sizeof(helps) / sizeof(helps[0]); i++)
		if (!strcmp(helps[i].name, cmd)) {
			fputs(helps[i].text, out);
			return 0;
		}
	return -ENOENT;
}
