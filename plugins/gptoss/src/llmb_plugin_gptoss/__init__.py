"""GPT-OSS (120B, and the MLPerf 20B) for llmb: the hooks live in ``plugin``, the data in
``workload.yaml``, the torch model in ``model`` (imported only when a model is built)."""
