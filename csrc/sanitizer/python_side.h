// What the sanitizer needs from Python: the user's frames of a launch, and
// the report raised as torch.spyre.sanitizer.UnsynchronizedAccessError.
#pragma once

#include <string>

namespace spyre::sanitizer {

// "    file.py:12 in f\n" per user frame (innermost last; frames inside torch
// and torch_spyre left out); empty when the thread runs no Python.
std::string pythonStack();

// Raises UnsynchronizedAccessError(message) through torch's error handling
// (the Python error travels inside a python_error, restored at the binding).
[[noreturn]] void raiseUnsynchronizedAccess(const std::string& message);

}  // namespace spyre::sanitizer
