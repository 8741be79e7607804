// A TCP port on loopback that was free a moment ago (the kernel's pick for port 0), shared
// by the in-process multi-rank tests and the end-to-end tests; and a port held by a program
// that accepts connections and never answers.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddptrain::testing_common {

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Listens on a loopback port of the kernel's pick while it lives: connections are accepted (by
/// the kernel's backlog) and never answered, as by another program at a job's MASTER_PORT.
class SilentListener {
 public:
  SilentListener() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && ::listen(fd_, 16) == 0;
    socklen_t len = sizeof(a);
    ok_ = ok_ && ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  bool ok() const { return ok_; }
  int port() const { return port_; }

 private:
  int fd_;
  bool ok_ = false;
  int port_ = 0;
};

}  // namespace ddptrain::testing_common
