// The kernel and dtype signatures whose first call ran (and succeeded) on a
// host thread over scratch data (launch/launch.h, step 4): later calls of a
// verified signature may run on an engine, where an error would reach the
// stream instead of the caller.
#pragma once

#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_set>

namespace spyre::launch {

class VerifiedSignatures {
 public:
  bool contains(const std::string& signature) {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return signatures_.count(signature) != 0;
  }
  void add(const std::string& signature) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    signatures_.insert(signature);
  }

 private:
  std::shared_mutex mutex_;
  std::unordered_set<std::string> signatures_;
};

VerifiedSignatures& verifiedSignatures();

}  // namespace spyre::launch
