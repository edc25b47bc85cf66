"""The package against the tool: for each configuration, vramfit.<command>(**keywords) gives
the JSON that `vramfit <command> ... --format json` prints, byte for byte."""

import unittest

import vramfit
from support import as_keywords, run_cli

# CLI commands (long options only); the test turns each into keywords itself (support.py). Most
# take the fixed-share reserve: the simulated allocator, replayed by the train JSON's solvers,
# would make this test a minute long in a Debug build; the first ones and a few more keep it.
CONFIGURATIONS = [
    # train: precisions, optimizers, fine-tuning
    "train --model llama-3-8b --gpu h100",
    "train --model llama-3-8b --precision amp-bf16 --seq-len 4096 --reserve share",
    "train --model qwen2.5-0.5b --precision fp32 --optimizer adagrad --micro-batch 2 "
    "--seq-len 1024 --attention eager --reserve share",
    "train --model qwen2.5-7b --precision bf16 --optimizer lion --reserve share",
    "train --model llama-3-8b --precision fp8 --optimizer adamw-fused --reserve share",
    "train --model gpt2 --precision amp-fp16 --optimizer sgd --momentum 0.9 --dropout 0.1 "
    "--reserve share",
    "train --model gpt2-medium --optimizer rmsprop --centered --momentum 0.5 --reserve share",
    "train --model mistral-7b --optimizer adam --amsgrad --optimizer-impl for-loop --reserve "
    "share",
    "train --model qwen3-8b --optimizer adafactor --reserve share",
    "train --model qwen3-0.6b --optimizer muon --grad-dtype bf16 --reserve share",
    "train --model llama-2-7b --optimizer paged-adamw-8bit --recompute selective --reserve share",
    "train --model llama-3-8b --lora-rank 16 --lora-targets all-linear --reserve share",
    "train --model qwen2.5-7b --qlora --gpu a100-40gb --reserve share",
    "train --model llama-3-8b --qlora --lora-rank 64 --lora-dtype bf16 --gpu rtx-4090 "
    "--reserve share",
    "train --model mixtral-8x7b --trainable router --dp 8 --zero 3",
    "train --model qwen3-30b-a3b --trainable expert:0-5:0-1 --trainable router --ep 8 --dp 8 "
    "--reserve share",
    # train: parallelism and sharding
    "train --model llama-3-70b --fsdp full --dp 8",
    "train --model llama-3-8b --zero 3 --dp 8 --optimizer adamw-8bit --reserve share",
    "train --model llama-3-8b --zero 2 --dp 4 --offload optimizer --reserve share",
    "train --model llama-3-8b --zero 3 --dp 16 --offload all --offload-to nvme --reserve share",
    "train --model llama-3-70b --tp 8 --sp --pp 4 --dp 2 --zero 1 --grad-accum 8 --reserve share",
    "train --model llama-3.1-405b --tp 8 --pp 16 --schedule interleaved --virtual-stages 2 "
    "--dp 4 --zero 1 --zero-impl megatron --recompute full --grad-accum 16 --reserve share",
    "train --model llama-3-8b --pp 4 --pp-stages 10,8,8,6 --grad-accum 8 --schedule gpipe "
    "--reserve share",
    "train --model mixtral-8x7b --ep 8 --dp 8 --zero 1 --reserve share",
    "train --model llama-3-70b --fsdp hybrid --fsdp-group 8 --dp 32 --reserve share",
    "train --model llama-3-8b --fsdp full --fsdp-version 2 --reshard-after-forward false --dp "
    "8 --reserve share",
    "train --model llama-3-8b --cp 4 --seq-len 32768 --dp 2 --fsdp full --recompute full "
    "--reserve share",
    "train --model llama-3-8b --recompute full --recompute-layers 8 --micro-batch 4 --reserve "
    "share",
    # train: frameworks, allocator, views
    "train --model llama-3-8b --framework torchtitan --fsdp full --dp 8",
    "train --model llama-3-8b --framework torchtune --lora-rank 8 --reserve share",
    "train --model llama-3-8b --framework deepspeed --zero 3 --dp 16 --reserve share",
    "train --model llama-3-70b --framework megatron --tp 4 --pp 2 --dp 4 --reserve share",
    "train --model llama-3-8b --expandable-segments --gpu 96GiB",
    "train --model llama-3-8b --alloc-conf max_split_size_mb:512 --reserve simulated",
    "train --model gemma-2-2b --reserve share --fragmentation-percent 3 --loss fused-chunked",
    "train --model llama-3-8b --activation-offload cpu --non-reentrant --recompute full "
    "--reserve share",
    "train --model llama-3-8b --timeline",
    "train --model qwen2.5-0.5b --sweep micro-batch --sweep-max 8 --reserve share",
    "train --model llama-3-8b --explain --recompute selective --reserve share",
    "train --params 7e9 --dp 8 --zero 3",
    "train --model tests/data/hf/qwen2.5-7b.json --lora-rank 16",
    "train --model tests/data/hf/gpt-oss-20b.json --lora-rank 8 --lora-targets q_proj,v_proj "
    "--reserve share",
    # infer
    "infer --model llama-3-8b",
    "infer --model llama-3-70b --weights nf4 --batch 8 --context 8192 --kv-dtype fp8",
    "infer --model deepseek-v3 --tp 8 --weights fp8 --gpu h200",
    "infer --model qwen2.5-7b --weights awq --beams 4 --generate 512",
    "infer --model llama-3-8b --utilization 90",
    "infer --model llama-3-8b --logits all --batch 8",
    "infer --params 70e9 --weights gptq",
    "infer --model tests/data/hf/mixtral-8x7b.json --tp 2 --block 16 --framework vllm",
    # plan, min-gpus, load
    "plan --model llama-3-8b --gpus 8",
    "plan --model llama-3-70b --gpus 64 --top 3 --sharding any",
    "plan --model mixtral-8x7b --gpus 16 --global-batch 32",
    "plan --model llama-3-70b --gpus 1 --no-offload",
    "min-gpus --model llama-3-70b --zero 3",
    "min-gpus --model llama-3-8b --fsdp full --tp 2",
    "load --model llama-3-70b --weights nf4",
    "load --model llama-3-8b --init device --tp 2",
]


class Agreement(unittest.TestCase):
    def test_configurations(self):
        self.assertGreaterEqual(len(CONFIGURATIONS), 50)
        for command in CONFIGURATIONS:
            with self.subTest(command=command):
                subcommand, keywords = as_keywords(command)
                status, expected, errors = run_cli([*command.split(), "--format", "json"])
                self.assertEqual(status, 0, errors)
                function = getattr(vramfit, subcommand.replace("-", "_"))
                result = function(**keywords)
                self.assertEqual(result.to_json(), expected)
                if isinstance(result, vramfit.Estimate):
                    self.assertEqual(result.peak, result["memory"]["total"])


if __name__ == "__main__":
    unittest.main()
