#pragma once

#include <string>

namespace arbiter::backends::models {

/// CUDA devices libtorch sees (0 on a CPU-only build or machine).
int cuda_device_count();

/// An error's message without the C++ backtrace libtorch appends to it ("\nException raised
/// from ..." and its frames).
std::string without_backtrace(const char* what);

} // namespace arbiter::backends::models
