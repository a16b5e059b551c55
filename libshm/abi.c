// SPDX-License-Identifier: MIT
/*
 * Growable structs (liblocal.h, "Growable structs"): every public struct
 * starts with its size as the caller's header knows it. Options are copied
 * into a struct of the size this library knows, fields the caller's struct
 * lacks taking their defaults; a caller's struct larger than ours must be
 * zero past what we know (an option we cannot honour is refused, not
 * ignored); a struct we fill is filled no further than either size.
 */
#include <errno.h>
#include <string.h>

#include "abi.h"

const char *local_version(void)
{
	return SHMLOCK_VERSION;
}

int abi_size(const void *p, size_t ours, size_t *n)
{
	size_t sz;

	memcpy(&sz, p, sizeof(sz));
	if (sz < sizeof(sz))
		return -EINVAL;
	*n = sz < ours ? sz : ours;
	return 0;
}

int abi_opts_in(const void *in, void *copy, size_t ours)
{
	const unsigned char *tail = in;
	size_t sz, n, i;
	int err;

	err = abi_size(in, ours, &n);
	if (err)
		return err;
	memcpy(&sz, in, sizeof(sz));
	for (i = ours; i < sz; i++)
		if (tail[i])
			return -E2BIG;
	/* @copy holds the defaults; a field cut by @n (an odd sz) is not
	 * taken, so that no option is half read. */
	memcpy(copy, in, n);
	memcpy(copy, &n, sizeof(n));
	return 0;
}

/* A field of @opts lies within its caller's size. */
#define HAS(opts, n, field) ((n) >= offsetof(__typeof__(*(opts)), field) + sizeof((opts)->field))

void local_session_opts_init_sz(struct local_session_opts *o, size_t sz)
{
	struct local_session_opts d;

	memset(&d, 0, sizeof(d));
	d.sz = sizeof(d);
	d.lock_delay_ms = -1;
	d.behavior = LOCAL_BEHAVIOR_RELEASE;
	d.broker_wait_ms = -1;
	if (sz < sizeof(size_t))
		return;
	/* A caller built with a newer header: its fields past ours are zero. */
	if (sz > sizeof(d))
		memset((char *)o + sizeof(d), 0, sz - sizeof(d));
	memcpy(o, &d, sz < sizeof(d) ? sz : sizeof(d));
	o->sz = sz;
}

int abi_session_opts(const struct local_session_opts **opts, struct local_session_opts *copy)
{
	const struct local_session_opts *in = *opts;
	size_t n;
	int err;

	local_session_opts_init_sz(copy, sizeof(*copy));
	*opts = copy;
	if (!in)
		return 0;
	err = abi_opts_in(in, copy, sizeof(*copy));
	if (err)
		return err;
	n = copy->sz;
	/* Fields past the caller's size keep their defaults; one cut in two
	 * by an odd size is reset to it. */
	if (!HAS(copy, n, socket_path))
		copy->socket_path = NULL;
	if (!HAS(copy, n, name))
		copy->name = NULL;
	if (!HAS(copy, n, ttl_ms))
		copy->ttl_ms = 0;
	if (!HAS(copy, n, lock_delay_ms))
		copy->lock_delay_ms = -1;
	if (!HAS(copy, n, behavior))
		copy->behavior = LOCAL_BEHAVIOR_RELEASE;
	if (!HAS(copy, n, flags))
		copy->flags = 0;
	if (!HAS(copy, n, broker_wait_ms))
		copy->broker_wait_ms = -1;
	return 0;
}

int abi_acquire_opts(const struct local_acquire_opts **opts, struct local_acquire_opts *copy)
{
	const struct local_acquire_opts *in = *opts;
	size_t n;
	int err;

	if (!in)
		return 0;
	/* A caller built with this header (the lock path's common case): its
	 * struct is ours, used as it is, without a copy. */
	if (in->sz == sizeof(*in))
		return in->value_len && !in->value ? -EINVAL : 0;
	memset(copy, 0, sizeof(*copy));
	copy->timeout_ms = -1;
	err = abi_opts_in(in, copy, sizeof(*copy));
	if (err)
		return err;
	n = copy->sz;
	if (!HAS(copy, n, timeout_ms))
		copy->timeout_ms = -1;
	if (!HAS(copy, n, lease_ms))
		copy->lease_ms = 0;
	if (!HAS(copy, n, value) || !HAS(copy, n, value_len)) {
		copy->value = NULL;
		copy->value_len = 0;
	}
	if (copy->value_len && !copy->value)
		return -EINVAL;
	*opts = copy;
	return 0;
}

int abi_key_info_in(const struct local_key_info *out, struct local_key_info *full)
{
	size_t n;
	int err;

	memset(full, 0, sizeof(*full));
	err = abi_size(out, sizeof(*full), &n);
	if (err)
		return err;
	full->sz = n;
	if (HAS(out, n, value_buf) && HAS(out, n, value_buf_size) && out->value_buf) {
		full->value_buf = out->value_buf;
		full->value_buf_size = out->value_buf_size;
	}
	return 0;
}

void abi_key_info_out(struct local_key_info *out, const struct local_key_info *full)
{
	/* full->sz: what both the caller and we know. The value went straight
	 * to the caller's buffer. */
	memcpy(out, full, full->sz);
}
