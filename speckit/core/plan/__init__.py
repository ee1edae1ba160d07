"""Pure deployment math: memory, step costs, schedules."""
