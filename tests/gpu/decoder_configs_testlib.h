// Small decoder configs of every family the CUDA backend must train (the repository's configs/
// *-tiny.json, inline: the GPU test programs run from a pack, without the source tree), with the
// options that change which kernels run: Qwen's attention bias (bias_add), Mistral's sliding
// window, Gemma 3's GeGLU, offset norms, final-logit softcap and padding id.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hspmd/models/model.h"

namespace hspmd::testing {

struct DecoderConfig {
  std::string name;  // "llama-tiny"
  std::string json;
};
const std::vector<DecoderConfig>& decoder_configs();
std::shared_ptr<const models::Model> decoder_model(const DecoderConfig& config);

}  // namespace hspmd::testing
