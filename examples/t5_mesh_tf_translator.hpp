// examples/t5_mesh_tf_translator.hpp — the names of a Mesh TensorFlow T5 checkpoint as t5x's
// checkpoint_importer maps them into a t5x train state (t5x/checkpoint_importer.py).
//
//   encoder/block_003/layer_000/SelfAttention/q  -> target.encoder.layers_3.attention.query.kernel
//   decoder/block_000/layer_001/EncDecAttention/o -> target.decoder.layers_0.encoder_decoder_attention.out.kernel
//   decoder/block_000/layer_002/rms_norm/scale   -> target.decoder.layers_0.pre_mlp_layer_norm.scale
//   shared/embedding_slot_v                      -> state.param_states.token_embedder.embedding.v
//   global_step                                  -> state.step
// Adafactor's slots (_slot_v, _slot_vr, _slot_vc) become param_states .v, .v_row, .v_col.
// A callable rather than a rule table: block and layer numbers lose their zero padding
// and the layer-norm names depend on the layer's position, which regex replacements
// cannot compute.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <string_view>

#include <ckpt/formats.hpp>  // ckpt::tensorflow::convert and its rules

namespace t5_example {

inline ckpt::tensorflow::Translator t5_mesh_tf_translator() {
  return [](std::string_view tf_name) -> std::optional<std::string> {
    std::string name(tf_name);
    if (name == "global_step") return "state.step";
    std::string slot;  // Adafactor's factored second moments
    for (const auto& [suffix, leaf] : {std::pair{"_slot_vr", "v_row"}, std::pair{"_slot_vc", "v_col"}, std::pair{"_slot_v", "v"}}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        name.resize(name.size() - s.size());
        slot = leaf;
        break;
      }
    }
    static const std::regex attention(R"((encoder|decoder)/block_(\d+)/layer_(\d+)/(SelfAttention|EncDecAttention)/(q|k|v|o))");
    static const std::regex relpos(R"((encoder|decoder)/block_000/layer_000/SelfAttention/relative_attention_bias)");
    static const std::regex mlp(R"((encoder|decoder)/block_(\d+)/layer_(\d+)/DenseReluDense/(wi|wi_0|wi_1|wo)/kernel)");
    static const std::regex norm(R"((encoder|decoder)/block_(\d+)/layer_(\d+)/rms_norm/scale)");
    static const std::regex final_norm(R"((encoder|decoder)/rms_norm/scale)");
    std::smatch m;
    std::string path;  // under target
    auto block = [&](int i) { return std::string(m[1]) + ".layers_" + std::to_string(std::stoi(m[i])); };
    if (std::regex_match(name, m, attention)) {
      const std::string kind = m[4] == "EncDecAttention" ? "encoder_decoder_attention"
                               : m[1] == "decoder"       ? "self_attention"
                                                         : "attention";
      const std::string proj = m[5] == "q" ? "query" : m[5] == "k" ? "key" : m[5] == "v" ? "value" : "out";
      path = block(2) + "." + kind + "." + proj + ".kernel";
    } else if (std::regex_match(name, m, relpos)) {
      path = std::string(m[1]) + ".relpos_bias.rel_embedding";
    } else if (std::regex_match(name, m, mlp)) {
      path = block(2) + ".mlp." + std::string(m[4]) + ".kernel";
    } else if (std::regex_match(name, m, norm)) {
      const int layer = std::stoi(m[3]);
      const char* enc[] = {"pre_attention_layer_norm", "pre_mlp_layer_norm"};
      const char* dec[] = {"pre_self_attention_layer_norm", "pre_cross_attention_layer_norm", "pre_mlp_layer_norm"};
      if (m[1] == "encoder" && layer < 2) path = block(2) + "." + enc[layer] + ".scale";
      else if (m[1] == "decoder" && layer < 3) path = block(2) + "." + dec[layer] + ".scale";
      else return std::nullopt;
    } else if (std::regex_match(name, m, final_norm)) {
      path = std::string(m[1]) + "." + std::string(m[1]) + "_norm.scale";
    } else if (name == "decoder/logits/kernel") {
      path = "decoder.logits_dense.kernel";
    } else if (name == "shared/embedding") {
      path = "token_embedder.embedding";
    } else {
      return std::nullopt;
    }
    if (!slot.empty()) return "state.param_states." + path + "." + slot;
    return "target." + path;
  };
}

}  // namespace t5_example
