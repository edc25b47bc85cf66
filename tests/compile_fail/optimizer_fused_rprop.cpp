// torch.optim has fused kernels for Adam(W), SGD and Adagrad only.
// expect: optimizer_must_offer_the_implementation
#include <vramfit/optimizer.hpp>

using namespace vramfit;
constexpr auto impl = rprop<optimizer_options{.impl = optimizer_impl::fused}>::value.options.impl;
