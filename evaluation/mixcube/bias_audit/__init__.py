"""The multilingual CLIP bias audit of Al Sahili, Patras and Purver (*Breaking Language
Barriers or Reinforcing Bias?*), run on a MixCuBe release (`culturebench evaluate mixcube RELEASE --task audit`): the
five groups of a quintet (the original and its four ethnicity swaps) take the place of the paper's protected groups.
`audit.py` runs it and writes the `audit/` part of the result folder; `metrics.py` holds the formulas (s_G, Skew,
MaxSkew, the harm rates, our paired reading); `readings.py` which reading of the paper each key follows;
`prompts.py` the App. B prompt sets and the interface that drafts missing languages, `drafts_gemini.py` its Gemini
backend.

Belongs here: the audit's protocol, metrics, tables and card section. Not here: the encoders it scores
(`evaluation/models/encoders/`), the prompt sets as a reference pack holds them (`data/bias_audit_prompt_sets.py`,
`data/reference/audit_prompts.json`), the rules audit of a 3XCM file, which is another audit
(`curation/rule_audit.py`), and, for readers, the sentence each key follows (docs/seed-protocols.md)."""
