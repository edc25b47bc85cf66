// SPDX-License-Identifier: MIT
// What every vramfit tag is (bf16, adamw<>, models::llama_3_8b, parallel<fsdp<8>>, ...): a type
// whose static member `value` is one value of the library's type for it.
#pragma once

#include <concepts>
#include <type_traits>

namespace vramfit::detail {

/// T names a value of type V as T::value (the concepts Dtype, Model, Optimizer, ... say which V).
template <class T, class V>
concept tag_of = std::same_as<std::remove_cvref_t<decltype(T::value)>, V>;

}  // namespace vramfit::detail
