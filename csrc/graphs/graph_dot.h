// debug_dump's picture of a captured graph: Graphviz dot.
#pragma once

#include <string>
#include <vector>

#include "runtime/capture.h"

namespace spyre {

// One box per captured operation ("3: aten::add.out", its bytes), grouped by
// stream ("stream id=1"), and an arrow per dependency (stream order, events).
std::string graphDot(const std::vector<capture::Node>& nodes);

}  // namespace spyre
