// Execution of a single operation on an engine (operations.cpp).
#pragma once

#include <string>

#include "op.hpp"
#include "scheduler.hpp"

namespace flex::detail {

// Runs `op`; on failure (an exception from user code) returns false with `error`
// set to the message. Never throws.
bool executeOp(Op& op, Scheduler& scheduler, std::string& error) noexcept;

}  // namespace flex::detail
