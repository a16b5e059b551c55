/* SPDX-License-Identifier: MIT */
/*
 * The keeper's protocol: the one description of it, used by the keeper
 * (broker/core/keeper.c), its client (keeper_call.c), the CLI's offline view
 * (cli/offline.c) and the tests.
 *
 * The keeper holds the segment's memfd while no broker runs. It listens on a
 * SOCK_SEQPACKET Unix socket beside the broker's control socket, at that
 * path + KEEPER_SUFFIX, and answers only its own user and root. One exchange
 * per connection: the peer sends one byte, KEEPER_GET or KEEPER_QUIT; the
 * keeper answers one byte, KEEPER_OK, with the segment's fd (SCM_RIGHTS) for
 * KEEPER_GET, and exits after answering KEEPER_QUIT. Anything else gets no
 * answer.
 */
#ifndef SHMLOCK_KEEPER_PROTO_H
#define SHMLOCK_KEEPER_PROTO_H

#include <stddef.h>

#define KEEPER_SUFFIX ".keep"
#define KEEPER_GET 'G'	/* the segment's fd, please */
#define KEEPER_QUIT 'Q' /* unlink your socket and exit */
#define KEEPER_OK 'K'	/* the answer to both */

/* The keeper's socket beside the control socket @socket_path, into @buf: 0,
 * or -ENAMETOOLONG when it would not fit @size or a sun_path. */
int keeper_path(const char *socket_path, char *buf, size_t size);

/*
 * One exchange with the keeper at @path: send @cmd (KEEPER_GET or
 * KEEPER_QUIT), wait @timeout_s for KEEPER_OK; for KEEPER_GET the segment's
 * fd in *@fd. 0, -errno of the connection (-ENOENT, -ECONNREFUSED: no
 * keeper), or -EPROTO.
 */
int keeper_exchange(const char *path, char cmd, int timeout_s, int *fd);

#endif
