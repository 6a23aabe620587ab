// CAF 0.17's OpenSSL module reads SSL_get_error() after SSL_read/SSL_write/SSL_accept/
// SSL_connect without clearing the thread's OpenSSL error queue first, which OpenSSL requires
// (SSL_get_error(3)). Its I/O runs on one multiplexer thread, so a peer that fails the
// handshake (a wrong certificate) leaves an error in that thread's queue, and the next
// SSL_read that merely wants more bytes on a healthy connection reads as a fatal error: every
// other node's connection dropped each time a stranger knocked (tests/e2e/test_cluster.py).
//
// These definitions interpose the four calls process-wide (the executable's symbols come first
// in the dynamic lookup) and clear the queue before handing on to libssl, as Boost.Asio's own
// TLS engine does.
#include <dlfcn.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto next = next_symbol<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return next(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto next = next_symbol<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return next(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static const auto next = next_symbol<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return next(ssl);
}

int SSL_connect(SSL* ssl) {
  static const auto next = next_symbol<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return next(ssl);
}

} // extern "C"
