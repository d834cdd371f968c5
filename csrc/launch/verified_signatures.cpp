#include "launch/verified_signatures.h"

namespace spyre::launch {

VerifiedSignatures& verifiedSignatures() {
  static auto* signatures = new VerifiedSignatures();  // leaked: used at exit
  return *signatures;
}

}  // namespace spyre::launch
