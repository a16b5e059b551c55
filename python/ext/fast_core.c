// SPDX-License-Identifier: MIT
/*
 * Core: the glue between a Python Session and liblocal for lock(),
 * semaphore() and a Hold's release: the session's key handles (one per key
 * it takes, bounded, as the ctypes path keeps them), the fork and closed
 * checks, and the calls themselves.
 *
 * The GIL: an acquire first tries (timeout 0) with the GIL held, which is
 * all an uncontended lock needs, and which never waits for a holder; only
 * when the key is busy and the caller would wait does it call again with
 * the GIL released, as a call in flight that Session.close() waits for (the
 * Session's own list, so both paths count alike). A release never waits for
 * a holder either, and keeps the GIL. Letting the GIL go around those two
 * costs a fifth more instructions per pair (docs/performance.md). They may
 * still wait for another process inside the key's mutex: a try 100 ms at
 * most (API_TRY_LOCK_MS, then -EBUSY and the wait without the GIL), a
 * release until that process leaves it (the broker repairs the mutex of a
 * process that dies in it; one stopped there stops this interpreter's
 * threads too).
 *
 * Close: Session.close() marks the Core closed (close()) before it waits
 * for the calls in flight, then frees the handles (close_handles()) and
 * only then the session. A call that holds the GIL from its closed check
 * to its return cannot meet a close in between; one that lets the GIL go
 * is counted in flight first.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fast.h"

int fast_core_usable(fast_core *c)
{
	if (c->forks != fast_forks) {
		fast_raise(-LOCAL_EFORKED, NULL);
		return -1;
	}
	if (c->closed) {
		fast_raise(-LOCAL_ESESSION, NULL);
		return -1;
	}
	return 0;
}

int fast_core_release(fast_core *c, fast_key *k)
{
	if (k->kh)
		return local_key_release(k->kh);
	return local_release(c->s, PyBytes_AS_STRING(k->name));
}

/* Seconds to liblocal's timeout, as shmlock.session.timeout_ms(): None or
 * negative forever (-1), else milliseconds rounded up. */
static int timeout_ms(PyObject *t, int64_t *out)
{
	double d;

	*out = -1;
	if (t == Py_None)
		return 0;
	d = PyFloat_AsDouble(t);
	if (d == -1.0 && PyErr_Occurred())
		return -1;
	if (d < 0)
		return 0;
	d = ceil(d * 1000.0);
	if (isnan(d)) {
		PyErr_SetString(PyExc_ValueError, "cannot convert float NaN to integer");
		return -1;
	}
	if (d >= 9.2e18) {
		PyErr_SetString(PyExc_OverflowError, "timeout too large");
		return -1;
	}
	*out = (int64_t)d;
	return 0;
}

/* A lease in seconds to milliseconds (0: none), at least 1 when set. */
static int lease_ms(PyObject *l, uint32_t *out)
{
	double d;
	int set;

	*out = 0;
	if (l == Py_None)
		return 0;
	set = PyObject_IsTrue(l);
	if (set <= 0)
		return set;
	d = PyFloat_AsDouble(l);
	if (d == -1.0 && PyErr_Occurred())
		return -1;
	d = ceil(d * 1000.0);
	if (isnan(d)) {
		PyErr_SetString(PyExc_ValueError, "cannot convert float NaN to integer");
		return -1;
	}
	if (d > UINT32_MAX) {
		PyErr_SetString(PyExc_OverflowError, "lease too long");
		return -1;
	}
	*out = d < 1 ? 1 : (uint32_t)d;
	return 0;
}

/* A key (str, UTF-8, or bytes-like) as bytes liblocal takes: a new reference. */
static PyObject *encode_key(PyObject *key)
{
	PyObject *b;

	if (PyUnicode_Check(key))
		b = PyUnicode_AsUTF8String(key);
	else
		b = PyBytes_FromObject(key);
	if (!b)
		return NULL;
	if (memchr(PyBytes_AS_STRING(b), 0, (size_t)PyBytes_GET_SIZE(b))) {
		Py_DECREF(b);
		PyErr_SetString(PyExc_ValueError, "a key must not contain NUL");
		return NULL;
	}
	return b;
}

/* The Key for @key: the session's, with its handle, once opened; a new
 * reference. Keys beyond the bound, unhashable ones and keys liblocal
 * refuses to open get a Key without a handle: their calls go by name, which
 * then report why. No Python code runs between the open and the insert. */
static fast_key *core_key(fast_core *c, PyObject *key)
{
	int cacheable = PyUnicode_CheckExact(key) || PyBytes_CheckExact(key);
	local_key *kh;
	PyObject *name;
	fast_key *k;

	if (cacheable) {
		k = (fast_key *)PyDict_GetItemWithError(c->handles, key);
		if (k) {
			Py_INCREF(k);
			return k;
		}
		if (PyErr_Occurred())
			return NULL;
	}
	name = encode_key(key);
	if (!name)
		return NULL;
	k = PyObject_New(fast_key, &fast_key_type);
	if (!k) {
		Py_DECREF(name);
		return NULL;
	}
	k->name = name;
	k->kh = NULL;
	if (!cacheable || PyDict_GET_SIZE(c->handles) >= c->handles_max || c->closed ||
	    c->forks != fast_forks)
		return k;
	if (local_key_open(c->s, PyBytes_AS_STRING(name), &kh) < 0)
		return k;
	k->kh = kh;
	if (PyDict_SetItem(c->handles, key, (PyObject *)k) < 0) {
		local_key_close(kh);
		k->kh = NULL;
		Py_DECREF(k);
		return NULL;
	}
	return k;
}

static int acquire(fast_core *c, fast_key *k, uint32_t limit, const struct local_acquire_opts *o,
		   uint64_t *tok)
{
	if (k->kh)
		return limit ? local_key_sem_acquire(k->kh, limit, o, tok)
			     : local_key_lock(k->kh, o, tok);
	return limit ? local_sem_acquire(c->s, PyBytes_AS_STRING(k->name), limit, o, tok)
		     : local_lock(c->s, PyBytes_AS_STRING(k->name), o, tok);
}

/* A call leaves: the last to leave a closed session wakes close(). */
static void core_leave(fast_core *c)
{
	Py_ssize_t n = PyList_GET_SIZE(c->inflight);
	PyObject *r;

	if (n > 0 && PyList_SetSlice(c->inflight, n - 1, n, NULL) < 0)
		PyErr_WriteUnraisable((PyObject *)c);
	if (!c->closed || PyList_GET_SIZE(c->inflight))
		return;
	r = PyObject_CallMethod(c->idle, "set", NULL);
	if (!r)
		PyErr_WriteUnraisable((PyObject *)c);
	Py_XDECREF(r);
}

/* The wait, with the GIL released, counted in flight (the Session's rule). */
static int acquire_waiting(fast_core *c, fast_key *k, uint32_t limit,
			   const struct local_acquire_opts *o, uint64_t *tok)
{
	PyThreadState *ts;
	int rc;

	if (PyList_Append(c->inflight, Py_None) < 0)
		return INT_MIN;
	if (c->closed) {
		core_leave(c);
		return -LOCAL_ESESSION;
	}
	ts = PyEval_SaveThread();
	rc = acquire(c, k, limit, o, tok);
	PyEval_RestoreThread(ts);
	core_leave(c);
	return rc;
}

static PyObject *take(fast_core *c, PyObject *session, PyObject *key, uint32_t limit,
		      PyObject *timeout, PyObject *lease, PyObject *value)
{
	struct local_acquire_opts o = { .sz = sizeof(o) };
	PyObject *val = NULL, *hold = NULL;
	fast_key *k = NULL;
	uint64_t tok = 0;
	int64_t ms;
	int rc;

	if (timeout_ms(timeout, &ms) < 0 || lease_ms(lease, &o.lease_ms) < 0)
		return NULL;
	if (value != Py_None) {
		val = PyUnicode_Check(value) ? PyUnicode_AsUTF8String(value)
					     : PyBytes_FromObject(value);
		if (!val)
			return NULL;
		o.value = PyBytes_AS_STRING(val);
		o.value_len = (size_t)PyBytes_GET_SIZE(val);
	}
	k = core_key(c, key);
	if (!k || fast_core_usable(c) < 0)
		goto out;
	/* From here to the call, no Python code runs (see the top). */
	o.timeout_ms = 0;
	rc = acquire(c, k, limit, &o, &tok);
	if (rc == -EBUSY && ms != 0) {
		o.timeout_ms = ms;
		rc = acquire_waiting(c, k, limit, &o, &tok);
		if (rc == INT_MIN)
			goto out;
	}
	if (rc < 0) {
		fast_raise(rc, limit ? "local_sem_acquire" : "local_lock");
		goto out;
	}
	hold = fast_hold_new(session, key, c, k, tok, limit);
out:
	Py_XDECREF(k);
	Py_XDECREF(val);
	return hold;
}

static PyObject *core_lock(fast_core *c, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 5) {
		PyErr_SetString(PyExc_TypeError, "lock(session, key, timeout, lease, value)");
		return NULL;
	}
	return take(c, args[0], args[1], 0, args[2], args[3], args[4]);
}

static PyObject *core_semaphore(fast_core *c, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long limit;

	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError,
				"semaphore(session, key, limit, timeout, lease, value)");
		return NULL;
	}
	limit = PyLong_AsUnsignedLong(args[2]);
	if (limit == (unsigned long)-1 && PyErr_Occurred())
		return NULL;
	if (limit < 1 || limit > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "a semaphore's limit is 1 to 2**32-1");
		return NULL;
	}
	return take(c, args[0], args[1], (uint32_t)limit, args[3], args[4], args[5]);
}

static PyObject *core_close(fast_core *c, PyObject *unused)
{
	(void)unused;
	c->closed = 1;
	Py_RETURN_NONE;
}

/* Free every handle: no call is in flight (Session.close() waited), and
 * the Core is closed, so no Hold reaches one again. In a child after
 * fork() this frees the child's copies. */
static PyObject *core_close_handles(fast_core *c, PyObject *unused)
{
	PyObject *handles = c->handles, *kobj;
	Py_ssize_t pos = 0;

	(void)unused;
	c->closed = 1;
	c->handles = PyDict_New();
	if (!c->handles) {
		c->handles = handles;
		return NULL;
	}
	while (PyDict_Next(handles, &pos, NULL, &kobj)) {
		fast_key *k = (fast_key *)kobj;

		if (k->kh)
			local_key_close(k->kh);
		k->kh = NULL;
	}
	Py_DECREF(handles);
	Py_RETURN_NONE;
}

static PyObject *core_handle_keys(fast_core *c, void *unused)
{
	(void)unused;
	return PyDict_Keys(c->handles);
}

static PyObject *core_forked(fast_core *c, void *unused)
{
	(void)unused;
	return PyBool_FromLong(c->forks != fast_forks);
}

static PyObject *core_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	PyObject *ptr, *inflight, *idle;
	Py_ssize_t handles_max;
	fast_core *c;
	void *s;

	if (kwds && PyDict_GET_SIZE(kwds)) {
		PyErr_SetString(PyExc_TypeError, "Core() takes no keyword arguments");
		return NULL;
	}
	if (!PyArg_ParseTuple(args, "OO!On:Core", &ptr, &PyList_Type, &inflight, &idle,
			      &handles_max))
		return NULL;
	s = PyLong_AsVoidPtr(ptr);
	if (!s) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "Core: a NULL session");
		return NULL;
	}
	c = (fast_core *)type->tp_alloc(type, 0);
	if (!c)
		return NULL;
	c->handles = PyDict_New();
	if (!c->handles) {
		Py_DECREF(c);
		return NULL;
	}
	c->s = s;
	c->forks = fast_forks;
	Py_INCREF(inflight);
	c->inflight = inflight;
	Py_INCREF(idle);
	c->idle = idle;
	c->handles_max = handles_max;
	return (PyObject *)c;
}

static int core_traverse(fast_core *c, visitproc visit, void *arg)
{
	Py_VISIT(c->inflight);
	Py_VISIT(c->idle);
	Py_VISIT(c->handles);
	return 0;
}

static int core_clear(fast_core *c)
{
	Py_CLEAR(c->inflight);
	Py_CLEAR(c->idle);
	Py_CLEAR(c->handles);
	return 0;
}

/* Handles left open (a Session that was never closed) are left alone: the
 * session they belong to may be gone, and closing one reads it. */
static void core_dealloc(fast_core *c)
{
	PyObject_GC_UnTrack(c);
	core_clear(c);
	Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef core_methods[] = {
	{ "lock", (PyCFunction)(void (*)(void))core_lock, METH_FASTCALL,
	  "lock(session, key, timeout, lease, value) -> Hold: local_lock() by the key's handle." },
	{ "semaphore", (PyCFunction)(void (*)(void))core_semaphore, METH_FASTCALL,
	  "semaphore(session, key, limit, timeout, lease, value) -> Hold." },
	{ "close", (PyCFunction)core_close, METH_NOARGS,
	  "Refuse every call from now on (Session.close() begins)." },
	{ "close_handles", (PyCFunction)core_close_handles, METH_NOARGS,
	  "Free the key handles (no call in flight; before local_session_close())." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef core_getset[] = {
	{ "handle_keys", (getter)core_handle_keys, NULL, "The keys the Core keeps a handle on.",
	  NULL },
	{ "forked", (getter)core_forked, NULL, "True in a child after fork().", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject fast_core_type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shmlock._fast.Core",
	.tp_basicsize = sizeof(fast_core),
	.tp_dealloc = (destructor)core_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "Core(session_ptr, inflight, idle, handles_max): a Session's liblocal glue.",
	.tp_traverse = (traverseproc)core_traverse,
	.tp_clear = (inquiry)core_clear,
	.tp_methods = core_methods,
	.tp_getset = core_getset,
	.tp_new = core_new,
};
