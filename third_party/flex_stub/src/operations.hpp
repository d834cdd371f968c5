// Execution of a single operation on an engine (operations.cpp).
#pragma once

#include <string>

#include "op.hpp"
#include "scheduler.hpp"

namespace flex::detail {

// Runs `op`; on failure (an exception from user code) returns false with `error`
// set to the message. The only exception that passes is the forced unwind of a
// thread ending through pthread_exit().
bool executeOp(const Op& op, Scheduler& scheduler, std::string& error);

}  // namespace flex::detail
