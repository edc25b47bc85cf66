// tf32 is a compute-only format: asking for its storage is an error naming the rule.
// expect: compute_only_format_has_no_storage
#include <vramfit/dtype.hpp>

constexpr vramfit::bytes b = vramfit::storage_bytes<vramfit::tf32>(1024);
