#!/bin/sh
# written by speckit validate
# cannot tell whether speculation pays on this machine (1): 1.04x (0.94-1.15, 16 prompts) (k=3 at concurrency 1, run eagle3-k3) span 1; more prompts (--num-prompts) or a quieter machine would decide; serve the target without --speculative-config here
# (spec-config.not-recommended.json holds the measured config)
vllm serve /root/.cache/speckit/targets/smollm2-135m-instruct
