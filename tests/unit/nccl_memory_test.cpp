// Unit tier: NCCL's memory per communicator (nccl_memory.hpp), derived by hand from NCCL's
// constants (NVIDIA/nccl v2.27.3-1; docs/sources.md#nccl-memory).
#include <doctest/doctest.h>

#include <string>

#include <vramfit/fit.hpp>
#include <vramfit/nccl_memory.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
using namespace vramfit::literals;

namespace {
// The hand derivation, written out once:
//   LL 8 lines x 512 threads x 8 steps x 16 B = 524,288; LL128 120 x 640 x 8 x 8 B = 4,915,200;
//   Simple 4,194,304; + the 4096 B ncclRecvMem = 9,637,888 -> 2 MiB granules: 10 MiB received,
//   the 4096 B ncclSendMem -> 2 MiB sent: 12 MiB per ring channel.
//   Ring of 24 channels: 288 MiB. initChannel: 32 channels (pow2Up 24) x 3 x 2 MiB = 192 MiB.
//   NVLS on Hopper, 2.22+: 16 channels x 2 x 1 MiB x heads, + one 2 MiB granule of credits;
//   2.21: 16 x 2 x (1 MiB + 2 MiB) x heads.
//   Pipeline neighbours: peers x 32 channels x 12 MiB + 32 x 6 MiB.
constexpr bytes ring_and_channels = (288 + 192) * MiB;          // 480 MiB, any collective group
constexpr bytes nvls_8 = (16 * 2 * 8 + 2) * MiB;                // 258 MiB, 8 GPUs of a node
constexpr bytes nvls_4 = (16 * 2 * 4 + 2) * MiB;                // 130 MiB, 4 GPUs of a node
constexpr bytes one_neighbour = (32 * 12 + 32 * 6) * MiB;       // 576 MiB
constexpr bytes two_neighbours = (2 * 32 * 12 + 32 * 6) * MiB;  // 960 MiB

bytes nccl_total(const layout& l, const gpu& g = gpus::h100_80gb::value,
                 const runtime_overheads& o = {}) {
  bytes sum{};
  for (const memory_entry& e : overheads(o, g, bytes{0}, l))
    if (std::string(e.name).starts_with("NCCL")) sum += e.size;
  return sum;
}

bytes entry(const memory_ledger& ledger, const std::string& name) {
  for (const memory_entry& e : ledger)
    if (name == e.name) return e.size;
  return bytes{-1};
}
}  // namespace

TEST_CASE("NCCL's protocol buffers and one connection, from its defaults") {
  CHECK(nccl::ll_buffer == 524'288);
  CHECK(nccl::ll128_buffer == 4'915'200);
  CHECK(nccl::receiver == 10'485'760);  // the ALLOC log of NVIDIA/nccl#1685
  CHECK(nccl::sender == 2'097'152);
}

TEST_CASE("communicators of a layout: TP 8 x DP 4 on 8-GPU nodes") {
  const auto cs = communicators_of({.data = 4, .tensor = 8}, 8);
  REQUIRE(cs.size() == 2);
  CHECK(cs[0].kind == communicator_kind::tensor);  // ranks 0-7: one node
  CHECK(cs[0].ranks == 8);
  CHECK(cs[0].within_node);
  CHECK(cs[0].local_ranks == 8);
  CHECK(cs[1].kind == communicator_kind::data_parallel);  // ranks 0, 8, 16, 24: four nodes
  CHECK(cs[1].ranks == 4);
  CHECK_FALSE(cs[1].within_node);
  CHECK(cs[1].local_ranks == 1);
  // Per rank on H100: the tensor group with NVLS, the data group's ring across nodes.
  const memory_ledger o = overheads({}, gpus::h100_80gb::value, bytes{0}, {.data = 4, .tensor = 8});
  CHECK(entry(o, "NCCL: tensor-parallel communicator, within a node") ==
        ring_and_channels + nvls_8);
  CHECK(entry(o, "NCCL: data-parallel communicator, across nodes") == ring_and_channels);
  CHECK(nccl_total({.data = 4, .tensor = 8}) == 1218 * MiB);
}

TEST_CASE("NCCL per layout: FSDP x 8, TP 2 x DP 4, PP, HSDP, CP, EP, one rank") {
  // FSDP on one H100 node: one data-parallel communicator of 8 with NVLS: 738 MiB (was 512).
  CHECK(nccl_total(
            {.data = 8, .zero = sharding::zero3, .implementation = shard_implementation::fsdp}) ==
        738 * MiB);
  // The same on A100s: no NVLS before Hopper.
  CHECK(nccl_total({.data = 8}, gpus::a100_80gb::value) == ring_and_channels);
  // NCCL 2.21: NVLS with 2 MiB credits per buffer: 16 x 2 x 3 MiB x 8 = 768 MiB.
  CHECK(nccl_total({.data = 8}, gpus::h100_80gb::value,
                   {.nccl = {.version = nccl_version::v2_21}}) == ring_and_channels + 768 * MiB);
  // TP 2 x DP 4: TP pairs have no NVLS (two GPUs); DP ranks 0, 2, 4, 6 share a node (4 heads).
  CHECK(nccl_total({.data = 4, .tensor = 2}) == ring_and_channels + ring_and_channels + nvls_4);
  // 405B-style TP 8 x PP 8 x DP 8: TP in a node, DP across, a middle stage's two neighbours
  // 64 ranks away (across nodes).
  CHECK(nccl_total({.data = 8, .tensor = 8, .pipeline = 8}) ==
        ring_and_channels + nvls_8 + ring_and_channels + two_neighbours);
  // Two stages: one neighbour; TP 4 x PP 2 puts both stages in one node.
  const memory_ledger pp2 =
      overheads({}, gpus::h100_80gb::value, bytes{0}, {.tensor = 4, .pipeline = 2});
  CHECK(entry(pp2, "NCCL: pipeline neighbours, within a node") == one_neighbour);
  // HSDP: shard in a node of 8, replicate over 2 nodes.
  CHECK(nccl_total({.data = 16,
                    .zero = sharding::zero3,
                    .implementation = shard_implementation::fsdp,
                    .shard_group = 8}) == ring_and_channels + nvls_8 + ring_and_channels);
  // TP 2 x CP 2 x DP 2: TP and CP pairs, the data group spans dp x cp = 4 ranks 2 apart.
  CHECK(nccl_total({.data = 2, .tensor = 2, .context = 2}) == 3 * ring_and_channels + nvls_4);
  // EP 8 within DP 8: a second communicator of the same 8 GPUs.
  CHECK(nccl_total({.data = 8, .expert = 8}) == 2 * (ring_and_channels + nvls_8));
  // 4-GPU nodes: a TP 8 group spans two nodes.
  CHECK(nccl_total({.tensor = 8}, gpus::h100_80gb::value, {.nccl = {.gpus_per_node = 4}}) ==
        ring_and_channels);
  // One GPU: no communicator at all.
  CHECK(nccl_total({}) == bytes{0});
  CHECK(communicators_of({}, 8).empty());
}

TEST_CASE(
    "NCCL's pipeline neighbours: one at either end of 1F1B, two in the middle or interleaved") {
  const layout pp4{.tensor = 8, .pipeline = 4};
  CHECK(pipeline_neighbours(pp4, 0, false) == 1);
  CHECK(pipeline_neighbours(pp4, 1, false) == 2);
  CHECK(pipeline_neighbours(pp4, 3, false) == 1);
  CHECK(pipeline_neighbours(pp4, 0, true) == 2);  // the last stage's chunk feeds the first's next
  CHECK(pipeline_neighbours({.pipeline = 2}, 0, true) == 1);
  CHECK(pipeline_neighbours({}, 0, false) == 0);
  // A plan's overheads take its most loaded stage's: Llama-3-8B on TP 8 x PP 4 (stages across
  // nodes), 1F1B, whose first stage (the embedding's) holds the most: one neighbour.
  const training_plan_value one_f_one_b{
      training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
               pp4},
      activation_options{.micro_batch = 1, .sequence = 2048, .micro_batches = 8}};
  const training_estimate e = estimate(one_f_one_b, gpus::h100_80gb::value);
  REQUIRE(e.stage == 0);
  CHECK(entry(e.ledger.entries, "NCCL: pipeline neighbours, across nodes") == one_neighbour);
  training_plan_value interleaved = one_f_one_b;
  interleaved.batch.schedule = pipeline_schedule::interleaved;
  interleaved.batch.virtual_stages = 2;
  CHECK(entry(estimate(interleaved, gpus::h100_80gb::value).ledger.entries,
              "NCCL: pipeline neighbours, across nodes") == two_neighbours);
}

TEST_CASE("the cluster's channels and the user's override") {
  // 16 ring channels: 16 x 12 MiB + 16 x 6 MiB, NVLS unchanged.
  CHECK(nccl_total({.data = 8}, gpus::h100_80gb::value, {.nccl = {.channels = 16}}) ==
        (16 * 12 + 16 * 6) * MiB + nvls_8);
  // NVLS turned off (NCCL_NVLS_ENABLE=0).
  CHECK(nccl_total({.data = 8}, gpus::h100_80gb::value, {.nccl = {.nvls = false}}) ==
        ring_and_channels);
  // nccl_buffers given: one entry of that size whatever the layout, none on one GPU.
  const memory_ledger given = overheads({.nccl_buffers = 100 * MiB.size}, gpus::h100_80gb::value,
                                        bytes{0}, {.data = 4, .tensor = 8});
  CHECK(entry(given, "NCCL buffers") == 100 * MiB);
  CHECK(nccl_total({.data = 4, .tensor = 8}, gpus::h100_80gb::value,
                   {.nccl_buffers = 100 * MiB.size}) == 100 * MiB);
  CHECK(nccl_total({}, gpus::h100_80gb::value, {.nccl_buffers = 100 * MiB.size}) == bytes{0});
}

TEST_CASE("NCCL's cluster refuses what no cluster is") {
  CHECK_THROWS_WITH_AS(communicators_of({.data = 2}, 0),
                       "vramfit: GPUs per node parallel degree must be positive, got 0",
                       vramfit::error);
  const communicator pair{.ranks = 2};
  CHECK_THROWS_AS(nccl_bytes(pair, {.channels = 0}, 16), vramfit::error);
  CHECK(nccl_bytes(pair, {.channels = 1}, 0) == (12 + 6) * MiB);  // one channel, no NVLS
}
