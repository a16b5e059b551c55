// SPDX-License-Identifier: MIT
/*
 * Hold: what Core.lock() and Core.semaphore() return, the C half of the
 * accelerated shmlock.Hold (the Python subclass in shmlock/_accel.py adds
 * renew(), check(), held, kind and repr). Its release, __enter__ and
 * __exit__ answer as the ctypes Hold's (shmlock/session.py), error for
 * error: in a child after fork() __exit__ does nothing and release() raises
 * Forked; a hold lost meanwhile makes __exit__ raise unless another
 * exception is on its way.
 */
#include "fast.h"

#include <structmember.h>

PyObject *fast_hold_new(PyObject *session, PyObject *key, fast_core *c, fast_key *k,
			unsigned long long token, unsigned int limit)
{
	PyTypeObject *type = fast_conf.hold_type ? fast_conf.hold_type : &fast_hold_type;
	fast_hold *h = (fast_hold *)type->tp_alloc(type, 0);

	if (!h)
		return NULL;
	Py_INCREF(session);
	h->session = session;
	Py_INCREF(key);
	h->key = key;
	Py_INCREF(c);
	h->core = c;
	Py_INCREF(k);
	h->fkey = k;
	h->token = token;
	h->limit = limit;
	return (PyObject *)h;
}

/* 0, or -1 with the exception set (and the hold marked released unless
 * the error was the fork's, as the ctypes Hold does). */
static int hold_release(fast_hold *h)
{
	int rc;

	if (h->released)
		return 0;
	if (h->core->forks != fast_forks) {
		fast_raise(-LOCAL_EFORKED, NULL);
		return -1;
	}
	if (h->core->closed) {
		h->released = 1;
		fast_raise(-LOCAL_ESESSION, NULL);
		return -1;
	}
	rc = fast_core_release(h->core, h->fkey);
	if (rc < 0) {
		if (rc != -LOCAL_EFORKED)
			h->released = 1;
		fast_raise(rc, "local_release");
		return -1;
	}
	h->released = 1;
	return 0;
}

static PyObject *hold_release_m(fast_hold *h, PyObject *unused)
{
	(void)unused;
	if (hold_release(h) < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *hold_enter(PyObject *h, PyObject *unused)
{
	(void)unused;
	Py_INCREF(h);
	return h;
}

static PyObject *hold_exit(fast_hold *h, PyObject *const *args, Py_ssize_t nargs)
{
	if (h->released || h->core->forks != fast_forks)
		Py_RETURN_NONE;
	if (hold_release(h) < 0) {
		/* Another exception on its way wins over the hold's loss. */
		if (nargs > 0 && args[0] != Py_None && fast_conf.shmlock_error &&
		    PyErr_ExceptionMatches(fast_conf.shmlock_error)) {
			PyErr_Clear();
			Py_RETURN_NONE;
		}
		return NULL;
	}
	Py_RETURN_NONE;
}

static int hold_traverse(fast_hold *h, visitproc visit, void *arg)
{
	Py_VISIT(h->session);
	Py_VISIT(h->key);
	Py_VISIT(h->core);
	Py_VISIT(h->fkey);
	return 0;
}

static int hold_clear(fast_hold *h)
{
	Py_CLEAR(h->session);
	Py_CLEAR(h->key);
	Py_CLEAR(h->core);
	Py_CLEAR(h->fkey);
	return 0;
}

static void hold_dealloc(fast_hold *h)
{
	PyObject_GC_UnTrack(h);
	hold_clear(h);
	Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyMethodDef hold_methods[] = {
	{ "release", (PyCFunction)hold_release_m, METH_NOARGS,
	  "Release the hold and hand the key to the next waiter (local_release())." },
	{ "__enter__", (PyCFunction)hold_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)(void (*)(void))hold_exit, METH_FASTCALL, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyMemberDef hold_members[] = {
	{ "session", T_OBJECT_EX, offsetof(fast_hold, session), READONLY, "The Session." },
	{ "key", T_OBJECT_EX, offsetof(fast_hold, key), READONLY, "The key, as given." },
	{ "token", T_ULONGLONG, offsetof(fast_hold, token), READONLY, "The fencing token." },
	{ "limit", T_UINT, offsetof(fast_hold, limit), READONLY,
	  "0: a lock; >= 1: a semaphore of that limit." },
	{ "released", T_BOOL, offsetof(fast_hold, released), READONLY,
	  "Released (or lost and reported)." },
	{ NULL, 0, 0, 0, NULL },
};

PyTypeObject fast_hold_type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shmlock._fast.Hold",
	.tp_basicsize = sizeof(fast_hold),
	.tp_dealloc = (destructor)hold_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
	.tp_doc = "A held lock or semaphore slot (made by Core; see shmlock.Hold).",
	.tp_traverse = (traverseproc)hold_traverse,
	.tp_clear = (inquiry)hold_clear,
	.tp_methods = hold_methods,
	.tp_members = hold_members,
};
