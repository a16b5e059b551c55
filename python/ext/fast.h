/* SPDX-License-Identifier: MIT */
/*
 * shmlock._fast: what `with session.lock(key):` needs, in C, so that a lock
 * and its release cost a few calls of liblocal instead of ctypes' argument
 * conversion and the Python wrappers around it (docs/python.md,
 * "The accelerator"). The Python Session keeps everything else (opening,
 * closing, watches, admin calls) through ctypes; it hands its liblocal
 * session to a Core, which keeps the key handles and takes and releases
 * locks and semaphore slots, and returns Holds whose __enter__/__exit__ are
 * C.
 */
#ifndef SHMLOCK_FAST_H
#define SHMLOCK_FAST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <liblocal.h>

/* Bumped by a pthread_atfork() child handler: a Core made before the last
 * fork() belongs to the parent. One load to check, no getpid(). */
extern volatile unsigned long fast_forks;

/* What the Python side hands over once (_fast.configure()). */
struct fast_conf {
	PyObject *error_for;	 /* shmlock.errors.error_for(rc, call) */
	PyObject *shmlock_error; /* shmlock.errors.ShmlockError */
	PyTypeObject *hold_type; /* the Python subclass of _fast.Hold to return */
};
extern struct fast_conf fast_conf;

/* A key as liblocal takes it, with the session's handle on it (NULL: the
 * session keeps as many as it may; the calls go by name). */
typedef struct {
	PyObject_HEAD PyObject *name; /* bytes, NUL-free */
	local_key *kh;
} fast_key;

/* The glue of one Python Session: its liblocal session and key handles. */
typedef struct {
	PyObject_HEAD local_session *s;
	unsigned long forks; /* fast_forks when made */
	int closed;
	PyObject *inflight; /* the Session's list of calls in flight */
	PyObject *idle;	    /* the Session's threading.Event: set when closed and idle */
	PyObject *handles;  /* dict: key as given (str or bytes) -> fast_key */
	Py_ssize_t handles_max;
} fast_core;

/* A held lock or semaphore slot; a context manager that releases it. */
typedef struct {
	PyObject_HEAD PyObject *session; /* the Python Session */
	PyObject *key;			 /* as given */
	fast_core *core;
	fast_key *fkey;
	unsigned long long token;
	unsigned int limit; /* 0: a lock */
	char released;
} fast_hold;

extern PyTypeObject fast_core_type;
extern PyTypeObject fast_key_type;
extern PyTypeObject fast_hold_type;

/* Set the exception for liblocal's code @rc (error_for(rc, call)); NULL. */
PyObject *fast_raise(int rc, const char *call);
/* Is @c usable here: not forked, not closed? 0, or -1 with the exception set. */
int fast_core_usable(fast_core *c);
/* local_release() of @k through @c's session: with the GIL, it never waits
 * for holders. 0 or a negative code. */
int fast_core_release(fast_core *c, fast_key *k);
/* A new Hold (of the configured type); NULL with an exception. */
PyObject *fast_hold_new(PyObject *session, PyObject *key, fast_core *c, fast_key *k,
			unsigned long long token, unsigned int limit);

#endif
