// SPDX-License-Identifier: MIT
/*
 * Optional TLS for the TCP protocol (--tcp-tls-cert, --tcp-tls-key), as
 * dflockd: with both, every connection is TLS from its first byte (no
 * STARTTLS, no plaintext fallback), at least TLS 1.2, no client
 * certificates. OpenSSL on non-blocking sockets: the handshake happens
 * inside the first reads (the SSL is in accept state), and a read or write
 * that needs the other direction waits for that event. Plaintext the
 * library has decrypted but we have not taken is read on the next turn of
 * the connection, never left behind waiting for a socket event.
 */
#include <errno.h>
#include <sys/socket.h>
#include <syslog.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tcp_int.h"

int tcp_tls_init(struct tcp *t)
{
	const struct tcp_opts *o = &t->b->opts.tcp;
	SSL_CTX *ctx;

	if (!o->tls_cert[0])
		return 0;
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx)
		return -ENOMEM;
	t->tls_ctx = ctx;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, o->tls_key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		char err[256];

		ERR_error_string_n(ERR_get_error(), err, sizeof(err));
		blog(LOG_ERR, "--tcp-tls-cert %s, --tcp-tls-key %s: %s", o->tls_cert, o->tls_key,
		     err);
		return -EINVAL;
	}
	return 0;
}

void tcp_tls_fini(struct tcp *t)
{
	SSL_CTX_free(t->tls_ctx);
	t->tls_ctx = NULL;
}

int tcp_tls_attach(struct tcp *t, struct tconn *c)
{
	SSL *ssl;

	if (!t->tls_ctx)
		return 0;
	ssl = SSL_new(t->tls_ctx);
	if (!ssl || SSL_set_fd(ssl, c->fd) != 1) {
		SSL_free(ssl);
		return -ENOMEM;
	}
	SSL_set_accept_state(ssl);
	c->ssl = ssl;
	return 0;
}

void tcp_tls_detach(struct tconn *c)
{
	if (!c->ssl)
		return;
	if (SSL_is_init_finished(c->ssl))
		SSL_shutdown(c->ssl); /* one close_notify, not waiting for the peer's */
	SSL_free(c->ssl);
	c->ssl = NULL;
}

/* The outcome of an SSL call that returned @r <= 0, as recv()/send() would
 * say it: 0 (closed), -EAGAIN, -EIO. */
static long tls_status(struct tconn *c, int r)
{
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_WRITE:
		c->tls_want_write = true;
		return -EAGAIN;
	case SSL_ERROR_WANT_READ:
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		ERR_clear_error();
		return -EIO;
	}
}

long tcp_io_recv(struct tconn *c, void *buf, size_t n)
{
	ssize_t r;
	int k;

	if (!c->ssl) {
		do
			r = recv(c->fd, buf, n, MSG_DONTWAIT);
		while (r < 0 && errno == EINTR);
		return r < 0 ? (errno == EAGAIN ? -EAGAIN : -EIO) : (long)r;
	}
	c->tls_want_write = false;
	k = SSL_read(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
	return k > 0 ? k : tls_status(c, k);
}

long tcp_io_send(struct tconn *c, const void *buf, size_t n)
{
	ssize_t r;
	int k;

	if (!c->ssl) {
		do
			r = send(c->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (r < 0 && errno == EINTR);
		return r < 0 ? (errno == EAGAIN ? -EAGAIN : -EIO) : (long)r;
	}
	c->tls_want_write = false;
	k = SSL_write(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
	return k > 0 ? k : tls_status(c, k);
}
