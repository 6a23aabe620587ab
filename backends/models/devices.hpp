#pragma once

namespace arbiter::backends::models {

/// CUDA devices libtorch sees (0 on a CPU-only build or machine).
int cuda_device_count();

} // namespace arbiter::backends::models
