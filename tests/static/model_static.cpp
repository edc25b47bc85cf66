// Static tier: models as template arguments, presets in constant expressions, the rules.
#include <vramfit/presets.hpp>
#include <vramfit/tensors.hpp>

namespace {
using namespace vramfit;

static_assert(Model<models::llama_3_8b> && Model<models::deepseek_v3>);
static_assert(!Model<int> && !Model<model>);

// A custom model through the templated-type front.
using tiny = model_type<model{.name = "tiny",
                              .hidden = 64,
                              .layers = 2,
                              .heads = 4,
                              .kv_heads = 1,
                              .head_dim = 16,
                              .ffn = 128,
                              .vocab = 100}>;
static_assert(Model<tiny>);
// Embedding 100x64, per layer: 2 norms 128, q 64x64, k and v 16x64 each, o 64x64, SwiGLU
// 3 x 64 x 128; final norm 64; head 100x64.
static_assert(parameters(tensors(tiny::value)) ==
              6400 + 2 * (128 + 4096 + 2 * 1024 + 4096 + 3 * 8192) + 64 + 6400);

// Tying the embeddings removes the head, exactly.
constexpr model tied = [] {
  model m = tiny::value;
  m.tied_embeddings = true;
  return m;
}();
static_assert(parameters(tensors(tiny::value)) - parameters(tensors(tied)) == 6400);

// GPT-2: wte, wpe; per layer ln_1 (2), c_attn (2), c_proj (2), the mask state, ln_2 (2),
// c_fc (2), mlp c_proj (2); ln_f (2): 17 groups.
static_assert(tensors(models::gpt2::value).size() == 17);
static_assert(tensors(models::gpt2::value)[2].name[0] == 't');  // "transformer.h.{layer}.ln_1..."
}  // namespace
