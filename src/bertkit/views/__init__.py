"""What a learner looks at, beside the model: every head's attention drawn under the paper's input picture
(`attention_maps`, `bertkit attention`) and what pre-training's masking does to one input (`masking`,
`bertkit mask`). Attention itself is in bertkit.model, masking itself in bertkit.pretraining.
"""
