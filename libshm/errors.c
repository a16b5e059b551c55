// SPDX-License-Identifier: MIT
#include <string.h>

#include "liblocal.h"

static const char *const local_texts[LOCAL_ELAST - LOCAL_EBASE] = {
	[LOCAL_ENOTHELD - LOCAL_EBASE] = "key not held by this session",
	[LOCAL_ESESSION - LOCAL_EBASE] = "session closed, expired or destroyed",
	[LOCAL_EBROKER - LOCAL_EBASE] = "broker unavailable",
	[LOCAL_EVERSION - LOCAL_EBASE] = "broker or segment of an incompatible version",
	[LOCAL_EPROTO - LOCAL_EBASE] = "malformed message from the broker",
	[LOCAL_EMAXKEYS - LOCAL_EBASE] = "key table full (--max-keys)",
	[LOCAL_EMAXSESSIONS - LOCAL_EBASE] = "session table full (--max-sessions)",
	[LOCAL_EMAXWAITERS - LOCAL_EBASE] = "waiter table full (--max-waiters)",
	[LOCAL_EMAXHOLDS - LOCAL_EBASE] = "hold table full (--max-holds)",
	[LOCAL_EVALUESIZE - LOCAL_EBASE] = "value larger than the broker's --max-value",
	[LOCAL_EKIND - LOCAL_EBASE] = "key is of the other kind (lock vs semaphore)",
	[LOCAL_ELIMIT - LOCAL_EBASE] = "semaphore limit conflicts with the key's limit",
	[LOCAL_ECORRUPT - LOCAL_EBASE] = "segment entry damaged and quarantined",
	[LOCAL_EFORKED - LOCAL_EBASE] = "session used in a child process after fork()",
	[LOCAL_EDENIED - LOCAL_EBASE] = "permission denied by the broker",
	[LOCAL_EEXPIRED - LOCAL_EBASE] = "the hold's lease expired",
	[LOCAL_ESTALE - LOCAL_EBASE] = "token is not a current hold of the key (stale)",
	[LOCAL_EENQUEUED - LOCAL_EBASE] = "already queued or holding on this key",
	[LOCAL_ENOTENQUEUED - LOCAL_EBASE] = "not queued on this key (wait without enqueue)",
	[LOCAL_ENOSOCKET - LOCAL_EBASE] = "no broker: no socket at the paths tried",
	[LOCAL_EREFUSED - LOCAL_EBASE] = "no broker listening on its socket (stale socket)",
	[LOCAL_ENOTSOCK - LOCAL_EBASE] = "the broker's socket path is not a socket",
	[LOCAL_EACCESS - LOCAL_EBASE] = "no permission to connect to the broker's socket",
	[LOCAL_EUNSAFE - LOCAL_EBASE] = "broker socket in a directory other users could change",
	[LOCAL_ECLUSTER - LOCAL_EBASE] =
		"this host lost the cluster key's lock (etcd lease not renewed in time)",
};

const char *local_strerror(int err)
{
	const char *t;

	if (err < 0)
		err = -err;
	if (err == 0)
		return "success";
	if (err >= LOCAL_EBASE && err < LOCAL_ELAST)
		return local_texts[err - LOCAL_EBASE];
	t = strerrordesc_np(err); /* thread-safe, unlike strerror() */
	return t ? t : "unknown error";
}
