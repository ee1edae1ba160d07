"""Training drafts on the target's own answers: `speckit train eagle3` (speckit.train.eagle3)
and `speckit train dflash` (speckit.train.dflash), over shared stages in the modules here
(common, answers, selection, data, loop, model, export, accept, prompts, vocab, launch)."""
