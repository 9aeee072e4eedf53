#!/bin/sh
# Regenerate the committed golden bundles, byte for byte (golden/README.md says what each one
# covers). Usage: golden/regen.sh [path/to/mlaverify]   (default: build/mlaverify, or
# $MLAVERIFY). tests/test_golden.c reruns one of these lines and compares the bytes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mlav=${1:-${MLAVERIFY:-$here/../build/mlaverify}}
mlav=$(cd "$(dirname "$mlav")" && pwd)/$(basename "$mlav")
cd "$here"

"$mlav" gen --seed 101 --heads 8 --dtype bf16 --page-size 16 --req 1:0:chain --req 9:100:chain:full --req 33:700:chain:partial chain_h8_bf16_page16.safetensors
"$mlav" gen --seed 102 --heads 8 --dtype bf16 --page-size 1 --req 64:600:bushy:full tree64_bushy_h8_bf16_page1.safetensors
"$mlav" gen --seed 103 --heads 8 --dtype bf16 --page-size 64 --req 9:8300:deep:full --req 1:0:chain long8k_deep_h8_bf16_page64.safetensors
"$mlav" gen --seed 104 --heads 64 --dtype bf16 --page-size 1 --req 9:1100:deep:partial deep_h64_bf16_page1.safetensors
"$mlav" gen --seed 105 --heads 128 --dtype bf16 --page-size 16 --req 9:300:bushy:full bushy_h128_bf16_page16.safetensors
"$mlav" gen --seed 106 --heads 8 --dtype f32 --page-size 64 --req 1:0:chain --req 9:300:bushy:partial --req 33:70:deep:full --req 4:300:chain:none batch_h8_f32_page64.safetensors
"$mlav" gen --seed 107 --heads 16 --dtype f32 --page-size 1 --vocab 64 --req 9:0:deep:full --req 17:0:chain:partial --req 1:40:chain prefix0_h16_f32_page1.safetensors
"$mlav" gen --seed 108 --heads 8 --dtype f16 --page-size 16 --vocab 512 --req 9:200:deep:partial --req 3:50:bushy:full small_h8_f16_page16.safetensors
# FP8 (E4M3) caches with their kv_scale (default 1/224; the F32 one an arbitrary 0.0123)
"$mlav" gen --seed 109 --heads 8 --dtype bf16 --kv-dtype fp8 --page-size 64 --req 1:0:chain --req 9:300:chain:full --req 17:130:deep:partial --req 5:40:bushy:none fp8_batch_h8_bf16_page64.safetensors
"$mlav" gen --seed 110 --heads 64 --dtype bf16 --kv-dtype fp8 --page-size 1 --req 5:600:bushy:full fp8_bushy_h64_bf16_page1.safetensors
"$mlav" gen --seed 111 --heads 8 --dtype f32 --kv-dtype fp8 --kv-scale 0.0123 --page-size 16 --req 9:200:deep:full --req 1:0:chain fp8_deep_h8_f32_page16.safetensors
