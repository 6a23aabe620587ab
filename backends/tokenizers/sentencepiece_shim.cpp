// libarbiter_sentencepiece.so: the only code linked against libsentencepiece (see
// sentencepiece_api.hpp for why it is a separate module opened at run time).

#include <sentencepiece_processor.h>

#include "backends/tokenizers/sentencepiece_api.hpp"

namespace {

using processor = sentencepiece::SentencePieceProcessor;
using arbiter::backends::tokenizers::sentencepiece_api;

const processor& model(const void* p) {
  return *static_cast<const processor*>(p);
}

sentencepiece_api make_api() {
  sentencepiece_api api;
  api.version = arbiter::backends::tokenizers::sentencepiece_api_version;
  api.load = [](const std::string& path, std::string* error) -> void* {
    auto* p = new processor;
    if (const auto status = p->Load(path); !status.ok()) {
      *error = status.ToString();
      delete p;
      return nullptr;
    }
    return p;
  };
  api.destroy = [](void* p) { delete static_cast<processor*>(p); };
  api.encode = [](const void* p, const std::string& text, std::vector<int>* ids,
                  std::string* error) {
    const auto status = model(p).Encode(text, ids);
    if (!status.ok()) {
      *error = status.ToString();
    }
    return status.ok();
  };
  api.decode = [](const void* p, const std::vector<int>& ids, std::string* text) {
    return model(p).Decode(ids, text).ok();
  };
  api.piece_size = [](const void* p) { return model(p).GetPieceSize(); };
  api.piece_to_id = [](const void* p, const std::string& piece) {
    return model(p).PieceToId(piece);
  };
  api.id_to_piece = [](const void* p, int id, std::string* piece) {
    *piece = model(p).IdToPiece(id);
  };
  api.is_control = [](const void* p, int id) { return model(p).IsControl(id); };
  api.is_unknown = [](const void* p, int id) { return model(p).IsUnknown(id); };
  return api;
}

} // namespace

extern "C" __attribute__((visibility("default"))) const sentencepiece_api*
arbiter_sentencepiece_api() {
  static const sentencepiece_api api = make_api();
  return &api;
}
