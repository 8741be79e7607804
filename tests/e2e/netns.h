// The multi-node fixture of the e2e tests (test_interop.cpp, test_elastic.cpp).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

#include "proc.h"

namespace ddptrain::e2e {

// Two "nodes" as network namespaces joined by a veth pair: one launcher per node, Gloo bound
// to the veth interface by GLOO_SOCKET_IFNAME, the TCPStore on node 0's address.
class MultiNode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root (CI runs as root)";
    tag_ = std::to_string(::getpid() % 100000);
    ns_[0] = "ddpt" + tag_ + "a";
    ns_[1] = "ddpt" + tag_ + "b";
    const std::string v0 = "dv" + tag_ + "a", v1 = "dv" + tag_ + "b";
    ifname_[0] = v0;
    ifname_[1] = v1;
    for (const std::string& cmd :
         {"ip netns add " + ns_[0], "ip netns add " + ns_[1],
          "ip link add " + v0 + " type veth peer name " + v1, "ip link set " + v0 + " netns " + ns_[0],
          "ip link set " + v1 + " netns " + ns_[1], "ip -n " + ns_[0] + " addr add 10.213.0.1/24 dev " + v0,
          "ip -n " + ns_[1] + " addr add 10.213.0.2/24 dev " + v1,
          "ip -n " + ns_[0] + " link set " + v0 + " up", "ip -n " + ns_[1] + " link set " + v1 + " up",
          "ip -n " + ns_[0] + " link set lo up", "ip -n " + ns_[1] + " link set lo up"}) {
      ProcResult r = run({"/bin/sh", "-c", cmd}, {}, 30);
      ASSERT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    }
  }
  void TearDown() override {
    for (const auto& ns : ns_)
      if (!ns.empty()) run({"/bin/sh", "-c", "ip netns del " + ns + " 2>/dev/null"}, {}, 30);
  }
  std::string tag_, ns_[2], ifname_[2];
};

}  // namespace ddptrain::e2e
