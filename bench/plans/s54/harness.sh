#!/usr/bin/env bash
# Session 54 (HEAD, on an H200 first): FlashMLA side by side at the 120 shapes with the
# tree, page1, fp8, fp8keys and fp8legal variants (session 47's protocol: --order abba, 150 ms
# warm-up), the keys kernel's tiles by bulk copies (7b7e8d2). Session 53's run of 3fc5103 on the
# H200: FlashMLA / ours 1.114, FP8 / BF16 speed at B 16, q_len 1, 131k 1.49x (H 8) and 1.21x
# (H 16). Predicted from 7b7e8d2's A/B (0.849x and 0.815x the keys kernel's time there): ~1.76x
# and ~1.49x; BF16 shapes as session 53's (1.11-1.12). Its table replaces session 53's as the one
# README cites.
# The steps are session 53's (its calls 1 and 4: FlashMLA and the C tree built, then the harness
# with HB s of budget, default 560), kept as they ran.
exec bash bench/results/2026-12-05-h200-s53/call3.sh
