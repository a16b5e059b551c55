// SPDX-License-Identifier: MIT
/*
 * The module shmlock._fast: its types, the fork generation, the error
 * mapping handed over by the Python side (shmlock/_accel.py).
 */
#include <errno.h>
#include <pthread.h>

#include "fast.h"

volatile unsigned long fast_forks;
struct fast_conf fast_conf;

/* In the child of fork(): every Core made before is the parent's. A plain
 * increment: the child has one thread here. */
static void on_fork_child(void)
{
	fast_forks++;
}

PyObject *fast_raise(int rc, const char *call)
{
	PyObject *exc;

	if (!fast_conf.error_for) {
		PyErr_Format(PyExc_RuntimeError, "shmlock._fast: not configured (error %d)", rc);
		return NULL;
	}
	exc = call ? PyObject_CallFunction(fast_conf.error_for, "is", rc, call)
		   : PyObject_CallFunction(fast_conf.error_for, "i", rc);
	if (!exc)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

static PyObject *fast_configure(PyObject *mod, PyObject *args)
{
	PyObject *error_for, *shmlock_error, *hold_type;

	(void)mod;
	if (!PyArg_ParseTuple(args, "OOO!:configure", &error_for, &shmlock_error, &PyType_Type,
			      &hold_type))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)hold_type, &fast_hold_type)) {
		PyErr_SetString(PyExc_TypeError,
				"configure: the hold type must subclass _fast.Hold");
		return NULL;
	}
	Py_INCREF(error_for);
	Py_INCREF(shmlock_error);
	Py_INCREF(hold_type);
	Py_XSETREF(fast_conf.error_for, error_for);
	Py_XSETREF(fast_conf.shmlock_error, shmlock_error);
	Py_XSETREF(fast_conf.hold_type, (PyTypeObject *)hold_type);
	Py_RETURN_NONE;
}

static PyObject *fast_generation(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyLong_FromUnsignedLong(fast_forks);
}

/* ---- Key: a key's encoded name and the session's handle on it --------- */

static void key_dealloc(fast_key *k)
{
	/* The handle is closed by its Core (fast_core.c): never here, since
	 * a Hold may outlive its session's close. */
	Py_XDECREF(k->name);
	Py_TYPE(k)->tp_free((PyObject *)k);
}

PyTypeObject fast_key_type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shmlock._fast.Key",
	.tp_basicsize = sizeof(fast_key),
	.tp_dealloc = (destructor)key_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A key of one session, as liblocal takes it (internal).",
};

static PyMethodDef fast_methods[] = {
	{ "configure", fast_configure, METH_VARARGS,
	  "configure(error_for, ShmlockError, hold_type): what the module raises and returns." },
	{ "generation", fast_generation, METH_NOARGS,
	  "The fork generation: how many fork()s this process is a child of." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef fast_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "shmlock._fast",
	.m_doc = "The C accelerator of shmlock's Session.lock() and semaphore() (internal).",
	.m_size = -1,
	.m_methods = fast_methods,
};

/* PyModule_AddObjectRef() is 3.10's: this also builds on older ones. */
static int add_type(PyObject *m, const char *name, PyTypeObject *t)
{
	Py_INCREF(t);
	if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
		Py_DECREF(t);
		return -1;
	}
	return 0;
}

PyMODINIT_FUNC PyInit__fast(void);

PyMODINIT_FUNC PyInit__fast(void)
{
	static int registered;
	PyObject *m;

	if (PyType_Ready(&fast_key_type) < 0 || PyType_Ready(&fast_core_type) < 0 ||
	    PyType_Ready(&fast_hold_type) < 0)
		return NULL;
	/* Once per process: a module is never unloaded, nor its handler. */
	if (!registered) {
		int err = pthread_atfork(NULL, NULL, on_fork_child);

		if (err) {
			errno = err;
			return PyErr_SetFromErrno(PyExc_OSError);
		}
		registered = 1;
	}
	m = PyModule_Create(&fast_module);
	if (!m)
		return NULL;
	if (add_type(m, "Core", &fast_core_type) < 0 || add_type(m, "Hold", &fast_hold_type) < 0 ||
	    add_type(m, "Key", &fast_key_type) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
