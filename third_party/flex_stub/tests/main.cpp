// The test binary's main (see harness.hpp).
#define HARNESS_MAIN
#include "harness.hpp"
