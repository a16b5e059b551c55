// SPDX-License-Identifier: MIT
/*
 * The segment outlives the broker: at start-up we attach to the one already
 * there (holders keep their locks across a broker restart) and create a new
 * one only when none exists or the old one cannot be used.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"

/* Map and validate the segment behind @fd; consumes @fd. */
static int attach_fd(struct broker *b, int fd)
{
	struct stat st;
	void *mem;
	int err;

	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct seg_header)) {
		close(fd);
		return -LOCAL_ECORRUPT;
	}
	mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		err = -errno;
		close(fd);
		return err;
	}
	err = seg_bind(&b->seg, mem, (size_t)st.st_size);
	if (err) {
		munmap(mem, (size_t)st.st_size);
		close(fd);
		return err;
	}
	b->mem = mem;
	b->mem_size = (size_t)st.st_size;
	b->shm_fd = fd;
	return 0;
}

static int attach_existing(struct broker *b)
{
	int fd = shm_open(b->opts.shm_name, O_RDWR | O_CLOEXEC, 0);

	return fd < 0 ? -errno : attach_fd(b, fd);
}

/*
 * The segment a previous broker put in systemd's fd store: preferred over the
 * name, which an operator or a tmp cleaner may have unlinked or replaced
 * while the holders still use the stored one.
 */
static int attach_stored(struct broker *b)
{
	struct stat st_fd, st_name;
	int fd = notify_stored_fd("segment"), err;
	char path[300];

	if (fd < 0)
		return -ENOENT;
	err = attach_fd(b, fd);
	if (err) {
		blog(LOG_WARNING, "segment from the fd store unusable (%s); ignoring it",
		     local_strerror(err));
		return -ENOENT;
	}
	b->seg_from_store = true;
	snprintf(path, sizeof(path), "/dev/shm%s", b->opts.shm_name);
	if (fstat(b->shm_fd, &st_fd) == 0 &&
	    (stat(path, &st_name) < 0 || st_name.st_ino != st_fd.st_ino ||
	     st_name.st_dev != st_fd.st_dev))
		blog(LOG_WARNING, "%s no longer names the segment kept in the fd store; serving "
		     "the stored one", b->opts.shm_name);
	return 0;
}

static int create_new(struct broker *b)
{
	size_t size = seg_size_for(&b->opts.caps);
	void *mem;
	int fd, err;

	if (!size)
		return -EINVAL;
	fd = shm_open(b->opts.shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0660); /* the umask must not narrow what clients need */
	if (b->opts.have_group && fchown(fd, (uid_t)-1, b->opts.group) < 0)
		blog(LOG_WARNING, "cannot give segment %s to group %u: %s", b->opts.shm_name,
		     (unsigned)b->opts.group, strerror(errno));
	if (ftruncate(fd, (off_t)size) < 0) {
		err = -errno;
		goto fail;
	}
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	err = seg_format(mem, size, &b->opts.caps);
	if (!err)
		err = seg_bind(&b->seg, mem, size);
	if (err) {
		munmap(mem, size);
		goto fail;
	}
	b->mem = mem;
	b->mem_size = size;
	b->shm_fd = fd;
	return 0;
fail:
	close(fd);
	shm_unlink(b->opts.shm_name);
	return err;
}

/*
 * One broker per segment: an flock on the shm object, held for our life. It
 * is taken on a descriptor of its own, never the one passed to clients: their
 * mappings keep that open file description (and so any lock on it) alive
 * after we die. Opened through /proc so that it is the object we mapped, even
 * one from the fd store whose name is gone.
 */
static int claim(struct broker *b)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", b->shm_fd);
	b->lock_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (b->lock_fd < 0)
		return -errno;
	if (flock(b->lock_fd, LOCK_EX | LOCK_NB) == 0) {
		b->owns_segment = true;
		return 0;
	}
	blog(LOG_ERR, "segment %s is in use by another broker (pid %u)", b->opts.shm_name,
	     atomic_load(&b->seg.hdr->broker_pid));
	return -EBUSY;
}

int shm_setup(struct broker *b)
{
	int err = attach_stored(b);

	if (err)
		err = attach_existing(b);
	if (!err) {
		err = claim(b);
		if (err)
			return err;
		blog(LOG_NOTICE, "attached existing segment %s (%zu bytes%s)", b->opts.shm_name,
		     b->mem_size, b->seg_from_store ? ", from the fd store" : "");
		if (memcmp(&b->seg.caps, &b->opts.caps, sizeof(b->seg.caps)))
			blog(LOG_WARNING, "segment %s keeps its own capacities; restart with a "
			     "new --shm-name to change them", b->opts.shm_name);
		return 0;
	}
	if (err != -ENOENT) {
		/* Unusable (other ABI, damaged header): set it aside, never
		 * guess at its contents. */
		blog(LOG_WARNING, "segment %s unusable (%s); creating a new one",
		     b->opts.shm_name, local_strerror(err));
		shm_unlink(b->opts.shm_name);
	}
	err = create_new(b);
	if (!err)
		err = claim(b);
	if (err)
		blog(LOG_ERR, "cannot create segment %s: %s", b->opts.shm_name,
		     local_strerror(err));
	else
		blog(LOG_INFO, "created segment %s (%zu bytes)", b->opts.shm_name, b->mem_size);
	return err;
}

void shm_teardown(struct broker *b)
{
	if (b->mem)
		munmap(b->mem, b->mem_size);
	if (b->shm_fd >= 0)
		close(b->shm_fd);
	if (b->lock_fd >= 0)
		close(b->lock_fd);
	/* Only a broker that owned and served the segment may remove it. */
	if (b->opts.destroy_segment_on_exit && b->owns_segment && b->served)
		shm_unlink(b->opts.shm_name);
}
