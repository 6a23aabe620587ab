#include "backends/models/model_options.hpp"

#include <ATen/Context.h>

namespace arbiter::backends::models {

bool cudnn_attention_allowed() {
  return at::globalContext().userEnabledCuDNNSDP();
}

void allow_cudnn_attention(bool allowed) {
  at::globalContext().setSDPUseCuDNN(allowed);
}

} // namespace arbiter::backends::models
