"""Every registered solver usable from an inference engine: a vLLM EPLB policy class
(:mod:`solvers.engines.vllm`) and an SGLang EPLB algorithm in DeepSeek's signature
(:mod:`solvers.engines.sglang`). See docs/own-algorithm.md, "From an engine"."""
