"""Pure deployment math: memory, KV blocks and overheads, step costs, k schedules and their fit."""
