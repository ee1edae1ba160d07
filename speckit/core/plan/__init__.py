"""Pure deployment math: step costs of target and draft passes, and the k schedule they imply."""
